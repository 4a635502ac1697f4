/*
 * sglang_rank.c: one SGLang rank in C (engine/sglang.py's SglangRank is the twin; the
 * functions here follow its methods one for one, in the same order, so that the same request
 * stream gives the same passes, stamps, tree and counts).
 *
 * This file forms a pass (admission, chunked prefill, first tokens, decode steps, retraction)
 * and completes it (ITL counting), and holds the public calls; sglang_batch.c keeps the
 * running batch (arithmetically, as sglang_running.py's RunningBatch: a member's counts
 * follow from the decode counter D, and only sums change per decode pass; members are an
 * array in join order, the twin's per-decode-index buckets each member's own index, found by
 * a scan) and the waiting queue; sglang_extend.c decides the decode-only runs (sglang_rank.h).
 */
#include "sglang_rank.h"

/* output tokens a request's token buffer has room for from its submission (at most) */
#define TOKEN_ROOM 4096

/* ------------------------------------------------------------------ small helpers */

static int64_t stamp0(aisim_sglang_rank *r)
{
    return stamp(r->view.pass_index, 0, ++r->k0);
}

static int64_t stamp2(aisim_sglang_rank *r)
{
    return stamp(r->view.pass_index, 2, ++r->k2);
}

int sgl_evict(aisim_sglang_rank *r, int64_t tokens)
{
    int64_t out;
    return aisim_radix_evict(r->cache, tokens, &out);
}

int sgl_event(aisim_sglang_rank *r, int64_t kind, int32_t slot, int64_t a, int64_t b,
              int64_t c)
{
    TRY(sgl_i64_reserve(&r->events, r->events.len + AISIM_SG_EVENT_WIDTH));
    int64_t *e = r->events.v + r->events.len;
    e[0] = kind;
    e[1] = slot;
    e[2] = a;
    e[3] = b;
    e[4] = c;
    r->events.len += AISIM_SG_EVENT_WIDTH;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ KV (sglang_kv.py) */

int sgl_head_match(aisim_sglang_rank *r, int32_t s, int64_t length, int64_t *cached,
                      int64_t *node)
{
    sg_req *q = &r->reqs[s];
    int64_t limit = q->out_limit == 0 ? length : length - 1;
    if (r->memo_serial == q->serial && r->memo_limit == limit
        && aisim_radix_still_matches(r->cache, r->memo_matched, r->memo_node,
                                     r->memo_inserts) == 1) {
        *cached = r->memo_matched;
        *node = r->memo_node;
        return AISIM_OK;
    }
    int64_t inserts = r->cv->inserts, out[2];
    TRY(sgl_ensure_tokens(q, length));
    TRY(aisim_radix_match(r->cache, q->tok, (size_t)q->n_tok, limit, out));
    r->memo_serial = q->serial;
    r->memo_limit = limit;
    r->memo_matched = out[0];
    r->memo_node = out[1];
    r->memo_inserts = inserts;
    *cached = out[0];
    *node = out[1];
    return AISIM_OK;
}

/* SglangKv._make_room: 1 when the pool holds `need` free tokens (evicting for them) */
static int make_room(aisim_sglang_rank *r, int64_t need, int *ok)
{
    int64_t free_ = available(r);
    *ok = 0;
    if (need > free_ + evictable(r))
        return AISIM_OK;
    if (need > free_)
        TRY(sgl_evict(r, need - free_));
    *ok = available(r) >= need;
    return AISIM_OK;
}

/* SglangKv._allocate_fresh: *prefix NONE when refused */
static int allocate_fresh(aisim_sglang_rank *r, int32_t s, int64_t cap, int64_t chunk_end,
                          int64_t *prefix)
{
    sg_req *q = &r->reqs[s];
    int64_t matched = 0, node = ROOT;
    if (r->cfg.caching) {
        int64_t out[2];
        TRY(sgl_ensure_tokens(q, chunk_end));
        TRY(aisim_radix_match_and_lock(r->cache, q->tok, (size_t)q->n_tok, cap, stamp0(r),
                                       out));
        matched = out[0];
        node = out[1];
    }
    int64_t need = pages(r, chunk_end) - matched;
    int ok;
    TRY(make_room(r, need, &ok));
    if (!ok) {
        if (node != ROOT)
            TRY(aisim_radix_unlock(r->cache, node));
        *prefix = NONE;
        return AISIM_OK;
    }
    aisim_radix_allocate(r->cache, need);
    q->seq = node;
    q->committed = matched;
    q->open_start = NONE;
    *prefix = matched;
    return AISIM_OK;
}

static int extend_allocation(aisim_sglang_rank *r, int32_t s, int64_t chunk_end,
                             int64_t *prefix)
{
    sg_req *q = &r->reqs[s];
    int64_t need = pages(r, chunk_end) - q->held;
    if (need > 0) {
        int ok;
        TRY(make_room(r, need, &ok));
        if (!ok) {
            *prefix = NONE;
            return AISIM_OK;
        }
        aisim_radix_allocate(r->cache, need);
    }
    *prefix = q->computed;
    return AISIM_OK;
}

/* SglangKv._insert_own */
int sgl_insert_own(aisim_sglang_rank *r, int32_t s, int64_t upto, int64_t access)
{
    sg_req *q = &r->reqs[s];
    int64_t old = q->seq, out[2];
    TRY(sgl_ensure_tokens(q, upto));
    TRY(aisim_radix_insert(r->cache, old, q->tok, (size_t)q->n_tok, q->committed, upto, access,
                           access, 1, out));
    if (out[0] != old) {
        TRY(aisim_radix_lock(r->cache, out[0]));
        if (old != ROOT)
            TRY(aisim_radix_unlock(r->cache, old));
    }
    if (out[1])
        aisim_radix_release(r->cache, out[1]);
    q->seq = out[0];
    q->committed = upto;
    return AISIM_OK;
}

static int cache_materialized(aisim_sglang_rank *r, int32_t s, int64_t access)
{
    if (!r->cfg.caching)
        return AISIM_OK;
    sg_req *q = &r->reqs[s];
    int64_t aligned = q->computed - q->computed % r->cfg.page_size;
    if (aligned <= q->committed)
        return AISIM_OK;
    return sgl_insert_own(r, s, aligned, access);
}

static int flush_deferred(aisim_sglang_rank *r, int32_t s, int final_uncached)
{
    sg_req *q = &r->reqs[s];
    if (!r->cfg.caching || q->seq == NONE)
        return AISIM_OK;
    int64_t emitted = r->D - q->open_start - (final_uncached ? 1 : 0);
    if (emitted <= 0)
        return AISIM_OK;
    int64_t ps = r->cfg.page_size;
    int64_t start_len = q->prompt_len + q->base_gen;
    int64_t materialized = start_len + emitted;
    int64_t aligned = materialized - materialized % ps;
    if (aligned <= q->committed)
        return AISIM_OK;
    int64_t step = aligned > start_len ? aligned - start_len : 1;
    int64_t pass_index = r->dec_pass.v[q->open_start + step - 1];
    return sgl_insert_own(r, s, aligned, stamp(pass_index, 1, q->join));
}

/* SglangKv._release: a retraction frees the pages off the tree and unlocks the path */
static int release(aisim_sglang_rank *r, int32_t s)
{
    TRY(flush_deferred(r, s, 0));
    sg_req *q = &r->reqs[s];
    if (q->seq == NONE)
        return AISIM_OK;
    int64_t owned = q->held - q->committed;
    if (owned)
        aisim_radix_release(r->cache, owned);
    if (q->seq != ROOT)
        TRY(aisim_radix_unlock(r->cache, q->seq));
    q->seq = NONE;
    q->held = 0;
    q->committed = 0;
    q->computed = 0;
    return AISIM_OK;
}

/* SglangKv._finish_kv: a finished request leaves its whole pages on the tree, unlocked
 * (stamped *access, or by default the next completion stamp of the pass) */
int sgl_finish_kv(aisim_sglang_rank *r, int32_t s, const int64_t *access)
{
    sg_req *q = &r->reqs[s];
    if (q->seq == NONE)
        return AISIM_OK;
    int64_t ps = r->cfg.page_size;
    if (!r->cfg.caching) {
        aisim_radix_release(r->cache, q->held);
        q->seq = NONE;
        return AISIM_OK;
    }
    if (q->open_start != NONE)
        TRY(flush_deferred(r, s, 1));
    q = &r->reqs[s];
    int64_t node = q->seq;
    int64_t length = q->prompt_len + q->generated;
    int64_t upto = length < q->computed ? length : q->computed;
    upto -= upto % ps;
    aisim_radix_release(r->cache, q->held - upto);
    if (upto > q->committed) {
        int64_t out[2], at;
        TRY(sgl_ensure_tokens(q, upto));
        at = access ? *access : stamp2(r);
        TRY(aisim_radix_insert(r->cache, node, q->tok, (size_t)q->n_tok, q->committed, upto,
                               at, at, 1, out));
        if (out[1])
            aisim_radix_release(r->cache, out[1]);
    }
    if (node != ROOT)
        TRY(aisim_radix_unlock(r->cache, node));
    q->seq = NONE;
    q->held = 0;
    free(q->tok);                 /* the tree keeps its own copies */
    q->tok = NULL;
    q->n_tok = q->cap_tok = 0;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ LPM order */

typedef struct lpm_item {
    int32_t behind;
    int64_t matched;
    size_t index;
    int32_t slot;
} lpm_item;

static int lpm_less(const lpm_item *a, const lpm_item *b)
{
    if (a->behind != b->behind)
        return a->behind < b->behind;
    if (a->matched != b->matched)
        return a->matched > b->matched;
    return a->index < b->index;
}

/* sglang_tokens.lpm_ranked into out (n_waiting slots) */
int sgl_lpm_ranked(aisim_sglang_rank *r, int32_t *out)
{
    size_t n = (size_t)r->view.n_waiting;
    int64_t ps = r->cfg.page_size;
    int64_t dup_len = ((DUPLICATE_CHECK_TOKENS + ps - 1) / ps) * ps;
    lpm_item items[LPM_MAX_WAITING];
    if (n > LPM_MAX_WAITING)
        return AISIM_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int32_t s = sgl_w_at(r, i);
        sg_req *q = &r->reqs[s];
        int64_t length = q->prompt_len + q->generated, m[2];
        TRY(sgl_ensure_tokens(q, length));
        TRY(aisim_radix_match(r->cache, q->tok, (size_t)q->n_tok, length, m));
        int32_t behind = 0;
        if (m[0] <= DUPLICATE_CHECK_TOKENS && length >= dup_len) {
            /* a repeat of an earlier waiting request's first pages (the twin's `seen` set:
             * keys of earlier requests that passed the same test) */
            for (size_t j = 0; j < i && !behind; j++) {
                if (!items[j].behind && items[j].matched <= DUPLICATE_CHECK_TOKENS) {
                    const sg_req *p = &r->reqs[items[j].slot];
                    if (p->prompt_len + p->generated >= dup_len
                        && memcmp(p->tok, q->tok, (size_t)dup_len * sizeof(uint32_t)) == 0)
                        behind = 1;
                }
            }
        }
        items[i].behind = behind;
        items[i].matched = m[0];
        items[i].index = i;
        items[i].slot = s;
    }
    /* insertion sort: stable, at most 128 entries */
    for (size_t i = 1; i < n; i++) {
        lpm_item x = items[i];
        size_t j = i;
        while (j > 0 && lpm_less(&x, &items[j - 1])) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = x;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = items[i].slot;
    return AISIM_OK;
}

int sgl_lpm_sorts(const aisim_sglang_rank *r)
{
    return r->cfg.lpm && r->cfg.caching && r->view.n_waiting > 0
        && r->view.n_waiting <= LPM_MAX_WAITING;
}

/* ------------------------------------------------------------------ admission */

static int64_t output_reserve(const aisim_sglang_rank *r, const sg_req *q)
{
    int64_t remaining = q->out_limit - q->generated;
    if (remaining < 0)
        remaining = 0;
    return remaining < r->cfg.clip ? remaining : r->cfg.clip;
}

/* SglangRank._price_chunk: *ok 0 when the reference stops before pricing it */
int sgl_price_chunk(aisim_sglang_rank *r, int32_t s, double rem_chunk, priced *p, int *ok)
{
    sg_req *q = &r->reqs[s];
    int64_t ps = r->cfg.page_size;
    int64_t length = q->prompt_len + q->generated;
    int fresh = q->computed == 0;
    int64_t cached = 0, node;
    *ok = 0;
    if (fresh && r->cfg.caching)
        TRY(sgl_head_match(r, s, length, &cached, &node));
    q = &r->reqs[s];
    int64_t start = q->computed > cached ? q->computed : cached;
    int64_t extend = length - start;
    if (extend == 0 && !fresh)
        return AISIM_OK;
    int64_t chunk;
    if ((double)pages(r, extend) <= rem_chunk) {
        chunk = extend;
    } else {
        chunk = ((int64_t)rem_chunk / ps) * ps;
        if (chunk == 0)
            return AISIM_OK;
        if (chunk > extend)
            chunk = extend;
    }
    p->start = start;
    p->chunk = chunk;
    p->charged = pages(r, chunk);
    p->reserve = chunk < extend ? 0 : output_reserve(r, q);
    *ok = 1;
    return AISIM_OK;
}

/* PrefillBudget.reserved_exact */
static double reserved_exact(const aisim_sglang_rank *r, double ratio)
{
    double reserved = 0.0;
    for (size_t i = 0; i < r->run.len; i++) {
        const sg_req *q = &r->reqs[r->run.v[i]];
        int64_t remaining = q->out_limit - q->base_gen - r->D + q->open_start;
        if (remaining > r->cfg.clip)
            remaining = r->cfg.clip;
        reserved += (double)remaining * ratio;
    }
    return reserved;
}

/* SglangRank._prefill_batch into can_run */
static int prefill_batch(aisim_sglang_rank *r, double now_ms, int64_t *sum_isl,
                         int64_t *sum_prefix, int64_t *computed)
{
    int64_t slots = r->cfg.max_running - (int64_t)r->run.len;
    double ratio = r->view.ratio;
    /* TotalRoom */
    int64_t capacity = available(r) + evictable(r);
    double value = (double)capacity - (double)sgl_clipped_remaining(r) * ratio;
    int exact = 0;
    r->charges.len = 0;
    double rem_input = (double)r->cfg.max_prefill;
    double rem_chunk = (double)r->cfg.chunk_size;
    r->can_run.len = 0;
    *sum_isl = *sum_prefix = *computed = 0;
    while ((int64_t)r->can_run.len < slots && r->view.n_waiting) {
        int32_t s = sgl_w_at(r, 0);
        priced p;
        int ok;
        TRY(sgl_price_chunk(r, s, rem_chunk, &p, &ok));
        if (!ok)
            break;
        sg_req *q = &r->reqs[s];
        int fresh = q->computed == 0;
        int64_t cost = p.charged + p.reserve;
        if (!exact && fabs(value - (double)cost) < 1e-3) {
            value = (double)capacity - reserved_exact(r, ratio);
            for (size_t i = 0; i < r->charges.len; i++)
                value -= (double)r->charges.v[i];
            exact = 1;
        }
        if (!((double)cost < value))
            break;
        if ((double)p.charged > rem_input || (double)p.charged > rem_chunk)
            break;
        int64_t chunk_end = p.start + p.chunk, prefix;
        if (fresh)
            TRY(allocate_fresh(r, s, p.start, chunk_end, &prefix));
        else
            TRY(extend_allocation(r, s, chunk_end, &prefix));
        if (prefix == NONE)
            break;
        sgl_w_popleft(r);
        q = &r->reqs[s];
        q->computed = chunk_end;
        q->held = pages(r, chunk_end);
        if (fresh) {
            int readmit = q->admissions > 0;
            q->admissions++;
            TRY(sgl_event(r, AISIM_SG_ADMITTED, s, prefix, readmit, 0));
            q->status = RUNNING;
        }
        TRY(sgl_i32_push(&r->can_run, s));
        *sum_isl += chunk_end;
        *sum_prefix += prefix;
        *computed += chunk_end - prefix;
        value -= (double)cost;
        TRY(sgl_i64_push(&r->charges, cost));
        rem_input -= (double)p.charged;
        rem_chunk -= (double)p.charged;
        if (rem_chunk <= 0.0)
            break;
    }
    (void)now_ms;
    r->pass_committed = *computed;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ tokens of a pass */

int sgl_complete_req(aisim_sglang_rank *r, int32_t s)
{
    r->reqs[s].status = FINISHED;
    if (r->cfg.role == AISIM_SG_DECODE)
        r->view.generation++;    /* its pages free at the pass end: a refused head may fit */
    TRY(sgl_i32_push(&r->finishing, s));
    return sgl_i32_push(&r->done, s);
}

/* SglangRank._first_tokens over r->fresh */
static int first_tokens(aisim_sglang_rank *r)
{
    int64_t P = r->view.pass_index, ps = r->cfg.page_size;
    i32s *fresh = &r->fresh;
    for (size_t i = 0; i < fresh->len; i++)
        r->reqs[fresh->v[i]].join = ++r->join_seq;
    for (size_t i = 0; i < fresh->len; i++) {
        sg_req *q = &r->reqs[fresh->v[i]];
        if (q->generated >= q->out_limit)
            TRY(sgl_complete_req(r, fresh->v[i]));
    }
    r->growing.len = 0;
    int64_t need = 0;
    for (size_t i = 0; i < fresh->len; i++) {
        int32_t s = fresh->v[i];
        sg_req *q = &r->reqs[s];
        int64_t remaining = q->out_limit - q->generated;
        if (remaining <= 0)
            continue;
        if (remaining == 1) {
            q->generated++;
            TRY(sgl_emit(q, P));
            r->emitted_any = 1;
            TRY(sgl_complete_req(r, s));
        } else {
            TRY(sgl_i32_push(&r->growing, s));
            if ((q->prompt_len + q->generated) % ps == 0)
                need += ps;
        }
    }
    if (!r->growing.len)
        return AISIM_OK;
    if (available(r) < need)
        TRY(sgl_evict(r, need - available(r)));
    if (aisim_radix_allocate(r->cache, need) == AISIM_OK) {
        for (size_t i = 0; i < r->growing.len; i++) {
            int32_t s = r->growing.v[i];
            sg_req *q = &r->reqs[s];
            if (q->prompt_len + q->generated + 1 > q->held)
                q->held += ps;
            q->generated++;
            q->computed++;
            TRY(sgl_emit(q, P));
            TRY(cache_materialized(r, s, stamp(P, 1, q->join)));
        }
        r->emitted_any = 1;
    } else {
        for (size_t i = 0; i < r->growing.len; i++)
            TRY(sgl_i32_push(&r->catch_up, r->growing.v[i]));
    }
    for (size_t i = 0; i < r->growing.len; i++) {
        int32_t s = r->growing.v[i];
        TRY(sgl_batch_join(r, s, r->reqs[s].join));
    }
    return AISIM_OK;
}

static int32_t shortest_output(aisim_sglang_rank *r)
{
    int32_t best = NONE;
    for (size_t i = 0; i < r->run.len; i++) {
        sg_req *q = &r->reqs[r->run.v[i]];
        sgl_sync(r, q);
        if (best == NONE || q->generated < r->reqs[best].generated)
            best = r->run.v[i];
    }
    return best;
}

static int retract(aisim_sglang_rank *r, int32_t s)
{
    TRY(sgl_batch_leave(r, s));
    TRY(release(r, s));
    sg_req *q = &r->reqs[s];
    q->status = PREEMPTED;
    q->retractions++;
    r->view.retractions++;
    if (r->cfg.role == AISIM_SG_DECODE)
        r->view.generation++;
    TRY(sgl_event(r, AISIM_SG_RETRACTED, s, q->retractions, 0, 0));
    return sgl_i32_push(&r->retracted, s);
}

/* SglangRank._cache_caught_up (done: the members that emitted their last token) */
static int cache_caught_up(aisim_sglang_rank *r, const i32s *done)
{
    int64_t P = r->view.pass_index;
    for (size_t i = 0; i < r->catch_up.len; i++) {
        int32_t s = r->catch_up.v[i];
        sg_req *q = &r->reqs[s];
        int in_done = 0;
        for (size_t j = 0; j < done->len; j++)
            in_done |= done->v[j] == s;
        if (q->in_stretch && !in_done) {
            sgl_sync(r, q);
            TRY(cache_materialized(r, s, stamp(P, 1, q->join)));
        }
    }
    r->catch_up.len = 0;
    return AISIM_OK;
}

/* SglangRank._decode_step: *retraction NAN when none; the forward's keys into the view */
static int decode_step(aisim_sglang_rank *r, double *retraction)
{
    aisim_sglang_view *v = &r->view;
    *retraction = NAN;
    v->dec_batch = v->dec_active = 0;
    if (!r->run.len)
        return AISIM_OK;
    int retracted = 0;
    int64_t need = sgl_growth(r);
    while (available(r) + evictable(r) < need && r->run.len > 1) {
        TRY(retract(r, shortest_output(r)));
        need = sgl_growth(r);
        retracted = 1;
    }
    int64_t evictable_before = evictable(r);
    if (available(r) < need)
        TRY(sgl_evict(r, need - available(r)));
    if (retracted) {
        int64_t decoded = 0, limit = 0;
        for (size_t i = 0; i < r->run.len; i++) {
            sg_req *q = &r->reqs[r->run.v[i]];
            sgl_sync(r, q);
            decoded += q->generated;
            limit += q->out_limit;
        }
        double estimate = ((double)decoded + RETRACT_DECODE_STEPS * (double)r->run.len)
            / ((double)limit + 1.0);
        *retraction = estimate < 1.0 ? estimate : 1.0;
    }
    if (!r->run.len)
        return AISIM_OK;
    if (aisim_radix_allocate(r->cache, need) != AISIM_OK) {
        r->starved = !retracted && evictable_before == 0;
        return AISIM_OK;
    }
    v->dec_batch = (int64_t)r->run.len;
    v->dec_active = r->sum_len;
    r->emitted_any = 1;
    i32s *done = &r->dec_done;
    TRY(sgl_record_decode(r, v->pass_index, done));
    if (r->catch_up.len)
        TRY(cache_caught_up(r, done));
    for (size_t i = 0; i < done->len; i++) {
        TRY(sgl_batch_leave(r, done->v[i]));
        TRY(sgl_complete_req(r, done->v[i]));
    }
    return AISIM_OK;
}

static void finish_round(aisim_sglang_rank *r, int any_prefilled, int any_ran_model)
{
    if (r->interval_idle && !any_ran_model)
        r->view.ratio = r->view.ratio_init;
    if (any_prefilled)
        r->view.rounds_left = r->cfg.interval;
    else if (r->view.rounds_left)
        r->view.rounds_left--;
    r->interval_idle = 0;
}

static int finish_pending(aisim_sglang_rank *r)
{
    for (size_t i = 0; i < r->finishing.len; i++) {
        if (r->cfg.role == AISIM_SG_PREFILL)
            TRY(sgl_hold(r, r->finishing.v[i]));   /* its KV is the source */
        else
            TRY(sgl_finish_kv(r, r->finishing.v[i], NULL));
    }
    r->finishing.len = 0;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ schedule */

/* SglangRank._reject_too_long: a prompt of max_model_len tokens or more is terminal (the
 * queue keeps its order; the terminals go into done, so the pass's tests see them there) */
static int reject_too_long(aisim_sglang_rank *r)
{
    int64_t limit = r->cfg.max_model_len;
    size_t n = (size_t)r->view.n_waiting, kept = 0;
    int32_t *queue = r->wq.v + r->w_head;
    for (size_t i = 0; i < n; i++) {
        int32_t s = queue[i];
        sg_req *q = &r->reqs[s];
        if (q->prompt_len < limit) {
            queue[kept++] = s;
            continue;
        }
        q->status = FINISHED;
        q->rejected = 1;
        TRY(sgl_i32_push(&r->done, s));
    }
    r->view.n_waiting = (int64_t)kept;
    if (!kept)
        r->w_head = 0;
    return AISIM_OK;
}

static int schedule(aisim_sglang_rank *r, double now_ms)
{
    aisim_sglang_view *v = &r->view;
    v->prefill_in_pass = v->model_work_in_pass = 0;
    r->interval_idle = 0;
    v->stuck = 0;
    v->formed = 0;
    v->pf_count = v->pf_isl = v->pf_prefix = 0;
    v->dec_batch = v->dec_active = 0;
    v->decode_known = 0;
    v->extendable = 0;
    v->promoted = 0;
    if (r->cfg.role == AISIM_SG_DECODE && v->n_prebuilt)
        TRY(sgl_promote(r));
    if (!r->run.len && !v->n_waiting && !v->rounds_left) {
        if (r->done.len) {
            /* only activations with nothing to generate: a zero-time pass completes them */
            v->formed = 1;
            v->pass_effect = 1;
            return finish_pending(r);
        }
        return AISIM_OK;
    }
    if (v->pass_index >= MAX_PASS)
        return AISIM_EINVAL;
    v->formed = 1;
    r->k0 = r->k2 = 0;
    r->pass_committed = 0;
    int defer = v->rounds_left > 0;
    if (r->cfg.max_model_len >= 0 && v->n_waiting)
        TRY(reject_too_long(r));
    if (sgl_lpm_sorts(r)) {
        int32_t order[LPM_MAX_WAITING];
        TRY(sgl_lpm_ranked(r, order));
        memcpy(r->wq.v + r->w_head, order, (size_t)v->n_waiting * sizeof(int32_t));
    }
    int64_t batch = 0, sum_isl = 0, sum_prefix = 0, computed = 0;
    if (v->n_waiting && !defer && may_prefill(r)) {
        TRY(prefill_batch(r, now_ms, &sum_isl, &sum_prefix, &computed));
        batch = (int64_t)r->can_run.len;
    }
    v->prefill_in_pass = batch > 0 && computed > 0;
    v->model_work_in_pass = v->prefill_in_pass;
    double retraction = NAN;
    if (batch) {
        v->pf_count = batch;
        v->pf_isl = sum_isl;
        v->pf_prefix = sum_prefix;
        r->fresh.len = 0;
        for (size_t i = 0; i < r->can_run.len; i++) {
            int32_t s = r->can_run.v[i];
            sg_req *q = &r->reqs[s];
            if (q->computed < q->prompt_len + q->generated) {
                TRY(cache_materialized(r, s, stamp0(r)));
                TRY(sgl_w_appendleft(r, s));
            } else {
                TRY(sgl_i32_push(&r->fresh, s));
            }
        }
        r->interval_idle = 0;
        TRY(first_tokens(r));
    } else {
        r->interval_idle = defer && !r->run.len;
        int settled = ratio_settled(r);
        TRY(decode_step(r, &retraction));
        if (r->emitted_any)
            v->model_work_in_pass = 1;
        if (!r->run.len && !r->emitted_any && !r->done.len && v->n_waiting && !defer
            && isnan(retraction) && may_prefill(r) && sgl_may_stall(r))
            return AISIM_SG_STALLED;
        if (r->starved) {
            r->starved = 0;
            v->stuck = settled && !defer && !r->done.len && isnan(retraction);
        }
    }
    v->pass_effect = batch || r->emitted_any || r->done.len || defer || !isnan(retraction);
    r->emitted_any = 0;
    TRY(finish_pending(r));
    for (size_t i = 0; i < r->retracted.len; i++)
        TRY(sgl_w_append(r, r->retracted.v[i]));
    r->retracted.len = 0;
    if (!isnan(retraction))
        v->ratio = retraction;
    else if (!batch && !r->interval_idle)
        ratio_decay(r);
    finish_round(r, v->prefill_in_pass, v->model_work_in_pass);
    v->extendable = r->cfg.extension && v->pass_effect && r->run.len && !r->done.len
        && !r->catch_up.len;
    if (v->dec_batch && r->timing)
        v->decode_known = aisim_decode_timing_eval(r->timing, v->dec_batch, v->dec_active,
                                                   &v->decode_ms) == AISIM_OK;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ completion */

static int grow_pages(aisim_sglang_rank *r, int64_t steps)
{
    int64_t ps = r->cfg.page_size, total = 0;
    if (ps == 1) {
        total = (int64_t)r->run.len * steps;
    } else {
        for (int64_t d = r->D; d < r->D + steps; d++)
            total += r->crossings[mod(-d, ps)];
        total *= ps;
    }
    int64_t free_ = available(r);
    if (free_ < total)
        TRY(sgl_evict(r, total - free_));
    if (aisim_radix_allocate(r->cache, total) != AISIM_OK)
        return AISIM_ECORRUPT;           /* the run's plan counted on that room */
    return AISIM_OK;
}

static int finishing_decode(aisim_sglang_rank *r)
{
    double retraction;
    r->k0 = r->k2 = 0;
    TRY(decode_step(r, &retraction));
    r->emitted_any = 0;
    TRY(finish_pending(r));
    ratio_decay(r);
    r->interval_idle = 0;
    finish_round(r, 0, 1);
    return AISIM_OK;
}

static int complete_extension(aisim_sglang_rank *r, int64_t extra, int finishing)
{
    aisim_sglang_view *v = &r->view;
    int64_t plain = finishing ? extra - 1 : extra;
    int64_t first = v->pass_index + 1;
    TRY(sgl_i64_reserve(&r->itl_diff, r->itl_diff.len + (size_t)extra));
    for (int64_t i = 0; i < extra; i++)
        r->itl_diff.v[r->itl_diff.len++] = 0;
    v->pass_index += extra;
    if (plain > 0) {
        TRY(grow_pages(r, plain));
        TRY(sgl_record_decodes(r, first, plain));
        for (int64_t i = 0; i < plain; i++) {
            double value = v->ratio;
            ratio_decay(r);
            if (v->ratio == value)
                break;                   /* at its floor */
        }
        v->rounds_left = v->rounds_left > plain ? v->rounds_left - plain : 0;
    }
    if (finishing)
        TRY(finishing_decode(r));
    return AISIM_OK;
}

static int break_gap(aisim_sglang_rank *r, int64_t a, int64_t b, int64_t n)
{
    TRY(sgl_i64_reserve(&r->break_gaps, r->break_gaps.len + 3));
    int64_t *t = r->break_gaps.v + r->break_gaps.len;
    t[0] = a;
    t[1] = b;
    t[2] = n;
    r->break_gaps.len += 3;
    return AISIM_OK;
}

/* RankBase._add_stretch_gaps over stretch pairs [0, n) */
static int add_stretch_gaps(aisim_sglang_rank *r, const int64_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t first = s[2 * i], last = s[2 * i + 1];
        if (last > first) {
            r->itl_diff.v[first]++;
            r->itl_diff.v[last]--;
        }
        if (i)
            TRY(break_gap(r, s[2 * i - 1], first, 1));
    }
    return AISIM_OK;
}

/* SglangRank._record_itl */
static int record_itl(aisim_sglang_rank *r, sg_req *q)
{
    size_t n = q->stretches.len / 2;
    if (!q->has_span || (int64_t)n != q->span_after)
        return add_stretch_gaps(r, q->stretches.v, n);
    size_t before = (size_t)q->span_before;
    if (before) {
        /* the stretches before the run, the last as it was before the run merged into it */
        int64_t *head = malloc(2 * before * sizeof(int64_t));
        if (!head)
            return AISIM_ENOMEM;
        memcpy(head, q->stretches.v, 2 * before * sizeof(int64_t));
        head[2 * before - 1] = q->span_prev_last;
        int status = add_stretch_gaps(r, head, before);
        free(head);
        TRY(status);
        int64_t start = r->dec_pass.v[q->span_first], prev_last = q->span_prev_last;
        if (start == prev_last + 1) {
            r->itl_diff.v[prev_last]++;
            r->itl_diff.v[start]--;
        } else {
            TRY(break_gap(r, prev_last, start, 1));
        }
    }
    /* RunningBatch.count_span */
    if (q->span_last > q->span_first) {
        r->cover.v[q->span_first]++;
        r->cover.v[q->span_last]--;
    }
    return AISIM_OK;
}

static void free_slot_state(sg_req *q)
{
    free(q->stretches.v);
    free(q->tok);
    free(q->authored);
    memset(q, 0, sizeof *q);
}

/* a request's slot goes free (its events are out) */
void sgl_free_slot(aisim_sglang_rank *r, int32_t s)
{
    free_slot_state(&r->reqs[s]);
    /* (room for every slot was reserved when it was made) */
    r->free_slots.v[r->free_slots.len++] = s;
}

static int complete(aisim_sglang_rank *r, int64_t extra, int finishing)
{
    aisim_sglang_view *v = &r->view;
    if (extra > 0)
        TRY(complete_extension(r, extra, finishing));
    /* RankBase._pass_done */
    TRY(sgl_i64_push(&r->itl_diff, 0));
    v->pass_index++;
    v->committed_prefill_tokens += r->pass_committed;
    r->pass_committed = 0;
    for (size_t i = 0; i < r->done.len; i++) {
        int32_t s = r->done.v[i];
        sg_req *q = &r->reqs[s];
        if (q->rejected) {
            TRY(sgl_event(r, AISIM_SG_REJECTED, s, 0, 0, 0));
            continue;
        }
        TRY(record_itl(r, q));
        int64_t at = (int64_t)r->stretch_out.len / 2, count = (int64_t)q->stretches.len / 2;
        if (q->stretches.len) {
            TRY(sgl_i64_reserve(&r->stretch_out, r->stretch_out.len + q->stretches.len));
            memcpy(r->stretch_out.v + r->stretch_out.len, q->stretches.v,
                   q->stretches.len * sizeof(int64_t));
            r->stretch_out.len += q->stretches.len;
        }
        if (q->place == HELD) {
            /* a prefill role's copy: its source is held from this pass end on */
            r->view.held_sources++;
            TRY(sgl_event(r, AISIM_SG_HELD, s, at, count, q->generated));
        } else {
            TRY(sgl_event(r, AISIM_SG_FINISHED, s, at, count, q->generated));
        }
    }
    /* every event is out: the slots go free (a held source's at its release) */
    for (size_t i = 0; i < r->done.len; i++) {
        int32_t s = r->done.v[i];
        if (r->reqs[s].place != HELD)
            sgl_free_slot(r, s);
    }
    r->done.len = 0;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ public */

static void refresh_view(aisim_sglang_rank *r)
{
    aisim_sglang_view *v = &r->view;
    v->events = r->events.v;
    v->n_events = r->events.len / AISIM_SG_EVENT_WIDTH;
    v->stretches = r->stretch_out.v;
    v->n_stretch_values = r->stretch_out.len;
    v->itl_diff = r->itl_diff.v;
    v->n_itl_diff = r->itl_diff.len;
    v->break_gaps = r->break_gaps.v;
    v->n_break_gaps = r->break_gaps.len / 3;
    if (r->cfg.role == AISIM_SG_DECODE)
        sgl_role_view(r);
}

/* a failure part way through a pass leaves the rank inconsistent: it refuses every call after */
int sgl_guard(aisim_sglang_rank *r, int status)
{
    if (status < 0)
        r->broken = 1;
    refresh_view(r);
    return status;
}

int aisim_sglang_new(aisim_sglang_rank **out, const aisim_sglang_config *config)
{
    if (!out || !config || config->page_size < 1 || config->page_size > 65536
        || config->total_kv_tokens < 0 || config->total_kv_tokens >= EXACT_INT
        || config->max_running < 0 || config->chunk_size < 0 || config->max_prefill < 0
        || config->clip < 0 || config->interval < 0 || config->max_model_len < -1
        || config->role < AISIM_SG_AGGREGATED || config->role > AISIM_SG_DECODE)
        return AISIM_EINVAL;
    aisim_sglang_rank *r = calloc(1, sizeof(*r));
    if (!r)
        return AISIM_ENOMEM;
    r->cfg = *config;
    r->crossings = calloc((size_t)config->page_size, sizeof(int64_t));
    int status = r->crossings ? aisim_radix_new(&r->cache, config->total_kv_tokens,
                                                config->page_size, 1) : AISIM_ENOMEM;
    if (status) {
        free(r->crossings);
        free(r);
        return status;
    }
    aisim_radix_view_of(r->cache, &r->cv);
    r->view.ratio_init = INIT_RATIO * config->conservativeness;
    r->view.ratio_min = r->view.ratio_init * MIN_RATIO_FACTOR;
    r->view.ratio_step = (r->view.ratio_init - r->view.ratio_min) / DECAY_STEPS;
    r->view.ratio = r->view.ratio_init;
    r->memo_serial = NONE;
    refresh_view(r);
    *out = r;
    return AISIM_OK;
}

int aisim_sglang_free(aisim_sglang_rank *r)
{
    if (!r)
        return AISIM_OK;
    for (size_t i = 0; i < r->n_reqs; i++)
        free_slot_state(&r->reqs[i]);
    free(r->reqs);
    sgl_role_free(r);
    aisim_radix_free(r->cache);
    free(r->crossings);
    i32s *i32[] = {&r->free_slots, &r->wq, &r->run, &r->done, &r->finishing, &r->retracted,
                   &r->catch_up, &r->can_run, &r->fresh, &r->growing, &r->dec_done};
    for (size_t i = 0; i < sizeof i32 / sizeof i32[0]; i++)
        free(i32[i]->v);
    i64s *i64[] = {&r->dec_pass, &r->breaks, &r->cover, &r->events, &r->stretch_out,
                   &r->itl_diff, &r->break_gaps, &r->keys, &r->counts, &r->unclips,
                   &r->charges};
    for (size_t i = 0; i < sizeof i64 / sizeof i64[0]; i++)
        free(i64[i]->v);
    free(r);
    return AISIM_OK;
}

int aisim_sglang_view_of(const aisim_sglang_rank *r, const aisim_sglang_view **out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    *out = &r->view;
    return AISIM_OK;
}

int aisim_sglang_cache(const aisim_sglang_rank *r, aisim_radix **out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    *out = r->cache;
    return AISIM_OK;
}

int aisim_sglang_set_decode_timing(aisim_sglang_rank *r, const aisim_decode_timing *timing)
{
    if (!r)
        return AISIM_EINVAL;
    r->timing = timing;
    return AISIM_OK;
}

int aisim_sglang_set_ratio(aisim_sglang_rank *r, double init, double min, double step,
                           double value)
{
    if (!r)
        return AISIM_EINVAL;
    r->view.ratio_init = init;
    r->view.ratio_min = min;
    r->view.ratio_step = step;
    r->view.ratio = value;
    return AISIM_OK;
}

/* The prompt's tokens: runs of values[i] repeated lengths[i] times, or (ranges) the ids
 * values[i] .. values[i] + lengths[i] - 1 each repeated `block` times, cut at the length. */
typedef struct prompt_form {
    const uint32_t *values, *lengths;
    size_t n;
    int64_t block;               /* 0: runs */
} prompt_form;

static int form_length(const prompt_form *f, int64_t prompt_len, int64_t *total)
{
    *total = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (f->block && (uint64_t)f->values[i] + f->lengths[i] > (uint64_t)UINT32_MAX + 1)
            return AISIM_EINVAL;         /* ids past u32 */
        *total += f->block ? (int64_t)f->lengths[i] * f->block : (int64_t)f->lengths[i];
    }
    if (f->block && *total >= prompt_len)
        *total = prompt_len;             /* the last block may be partial */
    return AISIM_OK;
}

/* n copies of id, eight stores at a time (the compiler makes them vector stores at -O2): a
 * prompt's tokens are filled at every submission, a block of identical ids at a time */
static void fill_id(uint32_t *restrict out, uint32_t id, int64_t n)
{
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        out[k] = id; out[k + 1] = id; out[k + 2] = id; out[k + 3] = id;
        out[k + 4] = id; out[k + 5] = id; out[k + 6] = id; out[k + 7] = id;
    }
    for (; k < n; k++)
        out[k] = id;
}

static void form_fill(const prompt_form *f, uint32_t *tok, int64_t prompt_len)
{
    int64_t at = 0;
    for (size_t i = 0; i < f->n && at < prompt_len; i++) {
        const uint32_t first = f->values[i], count = f->lengths[i];
        if (!f->block) {
            fill_id(tok + at, first, count);
            at += count;
            continue;
        }
        for (uint32_t k = 0; k < count && at < prompt_len; k++) {
            int64_t n = prompt_len - at < f->block ? prompt_len - at : f->block;
            fill_id(tok + at, first + k, n);
            at += n;
        }
    }
}

/* A new request into the waiting queue, or (pending) a decode role's destination into the
 * pending FIFO. */
static int submit(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                  const prompt_form *form, const uint32_t *authored, size_t n_authored,
                  uint32_t out_tag, int pending)
{
    if (!r || prompt_len < 0 || out_limit < 0 || (form->n && (!form->values || !form->lengths))
        || (n_authored && !authored) || form->block < 0)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    int64_t total;
    TRY(form_length(form, prompt_len, &total));
    if (r->cfg.caching && total != prompt_len)
        return AISIM_EINVAL;
    r->events.len = 0;
    r->stretch_out.len = 0;
    int32_t s;
    if (r->free_slots.len) {
        s = r->free_slots.v[--r->free_slots.len];
    } else {
        if (r->n_reqs == r->cap_reqs) {
            size_t cap = r->cap_reqs ? 2 * r->cap_reqs : 64;
            if (cap > 0x7FFFFFFF)
                return AISIM_ENOMEM;
            sg_req *reqs = realloc(r->reqs, cap * sizeof(sg_req));
            if (!reqs)
                return AISIM_ENOMEM;
            r->reqs = reqs;
            r->cap_reqs = cap;
        }
        /* every slot has room in the free list (sgl_free_slot cannot fail) */
        if (sgl_i32_reserve(&r->free_slots, r->n_reqs + 1))
            return AISIM_ENOMEM;
        s = (int32_t)r->n_reqs;
        memset(&r->reqs[s], 0, sizeof(sg_req));
        r->n_reqs++;
    }
    sg_req *q = &r->reqs[s];
    memset(q, 0, sizeof *q);
    q->prompt_len = prompt_len;
    q->out_limit = out_limit;
    q->seq = NONE;
    q->open_start = NONE;
    q->unclip_at = NONE;
    q->last_at = NONE;
    q->serial = ++r->serials;
    q->last_attempt = -1;
    q->live = 1;
    q->out_tag = out_tag;
    int status = AISIM_OK;
    if (r->cfg.caching && prompt_len) {
        /* room for the outputs too (up to a bound): a finished request's tokens then go on
         * the tree without a reallocation that copies its prompt (sgl_ensure_tokens) */
        int64_t room = out_limit > 0 ? (out_limit < TOKEN_ROOM ? out_limit : TOKEN_ROOM) : 0;
        int64_t cap = prompt_len + room;
        q->tok = malloc((size_t)cap * sizeof(uint32_t));
        status = q->tok ? AISIM_OK : AISIM_ENOMEM;
        if (q->tok) {
            form_fill(form, q->tok, prompt_len);
            q->n_tok = prompt_len;
            q->cap_tok = cap;
        }
    }
    if (status == AISIM_OK && n_authored) {
        q->authored = malloc(n_authored * sizeof(uint32_t));
        if (q->authored) {
            memcpy(q->authored, authored, n_authored * sizeof(uint32_t));
            q->n_authored = (int64_t)n_authored;
        } else {
            status = AISIM_ENOMEM;
        }
    }
    if (status == AISIM_OK)
        status = pending ? sgl_i32_push(&r->pending, s) : sgl_w_append(r, s);
    if (status) {
        sgl_free_slot(r, s);
        refresh_view(r);
        return status;
    }
    if (pending) {
        q->place = PENDING;
        r->view.n_pending++;
    }
    refresh_view(r);
    return s;
}

int aisim_sglang_submit(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                        const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                        const uint32_t *authored, size_t n_authored, uint32_t out_tag)
{
    prompt_form form = {values, lengths, n_runs, 0};
    return submit(r, prompt_len, out_limit, &form, authored, n_authored, out_tag, 0);
}

int aisim_sglang_submit_ranges(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                               const uint32_t *firsts, const uint32_t *counts, size_t n_ranges,
                               int64_t block, const uint32_t *authored, size_t n_authored,
                               uint32_t out_tag)
{
    if (block < 1)
        return AISIM_EINVAL;
    prompt_form form = {firsts, counts, n_ranges, block};
    return submit(r, prompt_len, out_limit, &form, authored, n_authored, out_tag, 0);
}

int aisim_sglang_accept(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                        const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                        const uint32_t *authored, size_t n_authored, uint32_t out_tag)
{
    if (!r || r->cfg.role != AISIM_SG_DECODE)
        return AISIM_EINVAL;
    prompt_form form = {values, lengths, n_runs, 0};
    return submit(r, prompt_len, out_limit, &form, authored, n_authored, out_tag, 1);
}

int aisim_sglang_accept_ranges(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                               const uint32_t *firsts, const uint32_t *counts, size_t n_ranges,
                               int64_t block, const uint32_t *authored, size_t n_authored,
                               uint32_t out_tag)
{
    if (!r || r->cfg.role != AISIM_SG_DECODE || block < 1)
        return AISIM_EINVAL;
    prompt_form form = {firsts, counts, n_ranges, block};
    return submit(r, prompt_len, out_limit, &form, authored, n_authored, out_tag, 1);
}

int aisim_sglang_schedule(aisim_sglang_rank *r, double now_ms)
{
    if (!r)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    r->events.len = 0;
    r->stretch_out.len = 0;
    int status = schedule(r, now_ms);
    return sgl_guard(r, status);
}

int aisim_sglang_extend(aisim_sglang_rank *r, double end_ms, double horizon_ms,
                        double cutoff_ms, int64_t max_passes, double *ends, size_t cap,
                        aisim_decode_run *run, int32_t resume, int32_t *finishing)
{
    if (!r || !ends || !run || !finishing || max_passes < 1 || (uint64_t)max_passes > cap)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    if (!r->timing)
        return AISIM_EINVAL;
    int status;
    if (resume)
        status = r->run_cap <= cap ? aisim_decode_extend(r->timing, run, ends, r->run_cap)
                                   : AISIM_EINVAL;
    else
        status = sgl_start_extension(r, end_ms, horizon_ms, cutoff_ms, max_passes, ends, run);
    if (status == AISIM_OK && run->n_ends > 1)
        *finishing = (int64_t)run->n_ends - 1 == r->run_finish - r->D + 1;
    else
        *finishing = 0;
    if (status == AISIM_DECODE_MISS)
        return status;
    return sgl_guard(r, status);
}

int aisim_sglang_set_start_buffers(aisim_sglang_rank *r, double *ends, size_t cap,
                                   aisim_decode_run *run, int32_t *finishing)
{
    if (!r || !ends || !run || !finishing || cap < 1 || cap > (size_t)INT64_MAX)
        return AISIM_EINVAL;
    r->start_ends = ends;
    r->start_cap = cap;
    r->start_run = run;
    r->start_finishing = finishing;
    return AISIM_OK;
}

int aisim_sglang_start(aisim_sglang_rank *r, double now_ms, double horizon_ms, double cutoff_ms,
                       int32_t charges_prefill)
{
    if (!r)
        return AISIM_EINVAL;
    aisim_sglang_view *v = &r->view;
    v->start_timed = 0;
    int status = aisim_sglang_schedule(r, now_ms);
    if (status != AISIM_OK || !v->formed)
        return status;
    /* the pass's time as SglangRank.schedule takes it, when C knows it */
    double took;
    if (v->pf_count) {
        if (charges_prefill)
            return AISIM_OK;
        took = 0.0;
    } else if (!v->dec_batch) {
        took = 0.0;
    } else if (v->decode_known) {
        took = v->decode_ms;
    } else {
        return AISIM_OK;
    }
    double end_ms = now_ms + took;
    v->start_end_ms = end_ms;
    v->start_timed = 1;
    /* SglangRank.extend's own test (a decode role's retry_due pass end is never extended) */
    if (!v->extendable || v->retry_due || !(end_ms < horizon_ms) || !r->start_ends)
        return AISIM_OK;
    v->start_timed = 2;
    return aisim_sglang_extend(r, end_ms, horizon_ms, cutoff_ms, (int64_t)r->start_cap,
                               r->start_ends, r->start_cap, r->start_run, 0,
                               r->start_finishing);
}

int aisim_sglang_complete(aisim_sglang_rank *r, int64_t extra_passes, int32_t finishing)
{
    if (!r || extra_passes < 0)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    r->events.len = 0;
    r->stretch_out.len = 0;
    return sgl_guard(r, complete(r, extra_passes, finishing && extra_passes > 0));
}

int aisim_sglang_fold(aisim_sglang_rank *r)
{
    if (!r)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    const int64_t *dp = r->dec_pass.v;
    size_t b = 0;
    int64_t n = 0;
    int status = AISIM_OK;
    for (int64_t d = 0; d + 1 < r->D && status == AISIM_OK; d++) {
        n += r->cover.v[d];
        while (b < r->breaks.len && r->breaks.v[b] < d)
            b++;
        if (n <= 0)
            continue;
        if (b < r->breaks.len && r->breaks.v[b] == d) {
            status = break_gap(r, dp[d], dp[d + 1], n);
        } else {
            r->itl_diff.v[dp[d]] += n;
            r->itl_diff.v[dp[d + 1]] -= n;
        }
    }
    if (status == AISIM_OK && r->cover.len)
        memset(r->cover.v, 0, r->cover.len * sizeof(int64_t));
    return sgl_guard(r, status);
}

int aisim_sglang_queue(const aisim_sglang_rank *r, int32_t which, int32_t *out, size_t cap)
{
    if (!r || (which != 0 && which != 1))
        return AISIM_EINVAL;
    size_t n = which == 0 ? r->run.len : (size_t)r->view.n_waiting;
    if (cap < n || (n && !out))
        return AISIM_EINVAL;
    for (size_t i = 0; i < n; i++)
        out[i] = which == 0 ? r->run.v[i] : sgl_w_at(r, i);
    return (int)n;
}

int aisim_sglang_request(const aisim_sglang_rank *r, int32_t slot, int64_t *out)
{
    if (!r || !out || slot < 0 || (size_t)slot >= r->n_reqs || !r->reqs[slot].live)
        return AISIM_EINVAL;
    sg_req q = r->reqs[slot];
    if (q.in_stretch)
        sgl_sync(r, &q);
    out[0] = q.generated;
    out[1] = q.computed;
    out[2] = q.held;
    out[3] = q.committed;
    out[4] = q.seq;
    out[5] = q.open_start;
    out[6] = q.base_gen;
    out[7] = q.join;
    out[8] = q.out_limit;
    return AISIM_OK;
}

int aisim_sglang_pending_prefill_tokens(const aisim_sglang_rank *r, int64_t *out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    int64_t total = 0;
    for (int64_t i = 0; i < r->view.n_waiting; i++) {
        const sg_req *q = &r->reqs[sgl_w_at(r, (size_t)i)];
        if (q->computed < q->prompt_len)
            total += q->prompt_len - q->computed;
    }
    *out = total;
    return AISIM_OK;
}
