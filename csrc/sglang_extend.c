/*
 * sglang_extend.c: the decode-only passes that follow an SGLang pass, run as one event
 * (engine/sglang.py's SglangRank.extend and sglang_budget.refused_passes): whether the pass
 * just formed may be lengthened, by how many passes, and the start of decode_run.c's loop
 * over the rank's own state.
 */
#include "sglang_rank.h"

/* ------------------------------------------------------------------ decode-only runs */

/* SglangRank._eviction_unseen */
static int eviction_unseen(aisim_sglang_rank *r, int *unseen)
{
    *unseen = 1;
    /* (a queue a decode role keeps shut prices nobody while the run lasts) */
    if (!r->view.n_waiting || !r->cfg.caching || !may_prefill(r))
        return AISIM_OK;
    if (sgl_lpm_sorts(r)) {
        *unseen = 0;
        return AISIM_OK;
    }
    if ((int64_t)r->run.len >= r->cfg.max_running)
        return AISIM_OK;
    int32_t head = sgl_w_at(r, 0);
    sg_req *q = &r->reqs[head];
    if (q->computed)
        return AISIM_OK;
    int64_t cached, node, f[6];
    TRY(sgl_head_match(r, head, q->prompt_len + q->generated, &cached, &node));
    if (cached == 0)
        return AISIM_OK;
    TRY(aisim_radix_node(r->cache, node, f));
    *unseen = f[3] > 0;
    return AISIM_OK;
}

/* SglangRank._head_cost: *cost NONE when the head can join no pass to come */
static int head_cost(aisim_sglang_rank *r, int64_t *cost)
{
    *cost = NONE;
    /* a queue shut by a waiting destination admits nothing while the run lasts (the
     * destination stays pending and the prebuilt ones wait for a slot until it ends) */
    if (!r->view.n_waiting || (int64_t)r->run.len >= r->cfg.max_running || !may_prefill(r))
        return AISIM_OK;
    double rem_chunk = (double)r->cfg.chunk_size;
    priced p;
    int ok;
    TRY(sgl_price_chunk(r, sgl_w_at(r, 0), rem_chunk, &p, &ok));
    if (!ok)
        return AISIM_OK;
    if ((double)p.charged > (double)r->cfg.max_prefill || (double)p.charged > rem_chunk)
        return AISIM_OK;
    *cost = p.charged + p.reserve;
    return AISIM_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* sglang_budget.refused_passes */
static int refused_passes(aisim_sglang_rank *r, int64_t passes, int64_t room, int64_t capacity,
                          int64_t cost, int64_t rounds_left, int64_t *out)
{
    int64_t n = (int64_t)r->run.len, ps = r->cfg.page_size, clip = r->cfg.clip;
    int64_t n_small = r->n_small, sum_small = r->sum_small, n_big = r->n_big, d = r->D;
    double value = r->view.ratio, step = r->view.ratio_step, floor_ = r->view.ratio_min;
    /* the big members' unclip indices, ascending */
    r->unclips.len = 0;
    for (size_t i = 0; i < r->run.len; i++) {
        const sg_req *q = &r->reqs[r->run.v[i]];
        if (q->big)
            TRY(sgl_i64_push(&r->unclips, q->unclip_at));
    }
    if (r->unclips.len > 1)
        qsort(r->unclips.v, r->unclips.len, sizeof(int64_t), cmp_i64);
    size_t u = 0;
    while (u < r->unclips.len && r->unclips.v[u] < d)
        u++;
    for (int64_t k = 0; k < passes; k++) {
        int64_t need = ps == 1 ? n : ps * r->crossings[mod(-d, ps)];
        if (need > room) {
            *out = k;
            return AISIM_OK;
        }
        if (rounds_left) {
            rounds_left--;
        } else {
            double rem_total = (double)capacity - (double)(sum_small + clip * n_big) * value;
            if ((double)cost < rem_total || fabs(rem_total - (double)cost) < 1e-3) {
                *out = k;
                return AISIM_OK;
            }
        }
        room -= need;
        capacity -= need;
        sum_small -= n_small;
        int64_t moved = 0;
        while (u < r->unclips.len && r->unclips.v[u] == d) {
            moved++;
            u++;
        }
        if (moved) {
            n_big -= moved;
            n_small += moved;
            sum_small += moved * clip;
        }
        d++;
        double decayed = value - step;
        value = decayed > floor_ ? decayed : floor_;
    }
    *out = passes;
    return AISIM_OK;
}

/* SglangRank.extend up to the run (the decode loop's inputs into run, or run->n_ends 1) */
int sgl_start_extension(aisim_sglang_rank *r, double end_ms, double horizon_ms,
                           double cutoff_ms, int64_t max_passes, double *ends,
                           aisim_decode_run *run)
{
    aisim_sglang_view *v = &r->view;
    memset(run, 0, sizeof *run);
    ends[0] = end_ms;
    run->n_ends = 1;
    run->end_ms = end_ms;
    if (!v->extendable || end_ms >= horizon_ms)
        return AISIM_OK;
    v->extendable = 0;
    if (sgl_lpm_sorts(r)) {
        int32_t order[LPM_MAX_WAITING];
        TRY(sgl_lpm_ranked(r, order));
        if (memcmp(order, r->wq.v + r->w_head, (size_t)v->n_waiting * sizeof(int32_t)))
            return AISIM_OK;             /* the next pass reorders the queue */
    }
    int64_t finish = sgl_next_finish(r);
    if (finish == NONE)
        return AISIM_OK;
    int64_t passes = finish - r->D + 1;
    if (passes > max_passes - 1)
        passes = max_passes - 1;
    int64_t capacity = available(r) + evictable(r);
    int unseen;
    TRY(eviction_unseen(r, &unseen));
    int64_t room = unseen ? capacity : available(r);
    int64_t cost = NONE;
    if (v->rounds_left < passes)
        TRY(head_cost(r, &cost));
    if (cost != NONE) {
        TRY(refused_passes(r, passes, room, capacity, cost, v->rounds_left, &passes));
        if (!passes)
            return AISIM_OK;
    }
    /* SglangRank._plain_run */
    int64_t n = (int64_t)r->run.len, ps = r->cfg.page_size;
    int64_t first = v->pass_index + 1;
    int64_t base = r->sum_len - n * first;
    int64_t last = first - 1 + passes + 1;
    if (!(-EXACT_INT < base && base < EXACT_INT) || last >= EXACT_INT / (n ? n : 1)
        || room >= EXACT_INT)
        return AISIM_OK;                 /* beyond the C loop's integers: no extension */
    r->keys.len = r->counts.len = 0;
    if (ps == 1) {
        TRY(sgl_i64_push(&r->keys, 0));
        TRY(sgl_i64_push(&r->counts, n));
    } else {
        int64_t shift = first - r->D;
        for (int64_t residue = 0; residue < ps; residue++) {
            int64_t count = r->crossings[mod(shift - residue, ps)];
            if (count) {
                TRY(sgl_i64_push(&r->keys, residue));
                TRY(sgl_i64_push(&r->counts, ps * count));
            }
        }
    }
    run->block_size = ps;
    run->batch = n;
    run->base = base;
    run->stop_pass = first + passes - 1;
    run->last_pass = last;
    run->horizon_ms = horizon_ms;
    run->cutoff_ms = cutoff_ms;
    run->crossing_keys = r->keys.v;
    run->crossing_counts = r->counts.v;
    run->n_crossing = r->keys.len;
    run->pass_ = first;
    run->room = room;
    r->run_finish = finish;
    r->run_cap = (size_t)(passes + 1);
    return aisim_decode_extend(r->timing, run, ends, r->run_cap);
}
