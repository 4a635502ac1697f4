/*
 * sglang_batch.c: the C SGLang rank's bookkeeping (sglang_rank.h): growable arrays, a
 * request's tokens and emission stretches, the running batch kept arithmetically as
 * engine/sglang_running.py's RunningBatch (a member's counts follow from the decode counter D;
 * per decode pass only sums change), and the waiting queue (a deque over one array).
 */
#include "sglang_rank.h"

int sgl_i64_push(i64s *a, int64_t x)
{
    if (a->len == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        int64_t *v = realloc(a->v, cap * sizeof(int64_t));
        if (!v)
            return AISIM_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->len++] = x;
    return AISIM_OK;
}

int sgl_i64_reserve(i64s *a, size_t n)
{
    if (n <= a->cap)
        return AISIM_OK;
    size_t cap = a->cap ? a->cap : 16;
    while (cap < n)
        cap *= 2;
    int64_t *v = realloc(a->v, cap * sizeof(int64_t));
    if (!v)
        return AISIM_ENOMEM;
    a->v = v;
    a->cap = cap;
    return AISIM_OK;
}

int sgl_i32_reserve(i32s *a, size_t n)
{
    if (n <= a->cap)
        return AISIM_OK;
    size_t cap = a->cap ? a->cap : 16;
    while (cap < n)
        cap *= 2;
    int32_t *v = realloc(a->v, cap * sizeof(int32_t));
    if (!v)
        return AISIM_ENOMEM;
    a->v = v;
    a->cap = cap;
    return AISIM_OK;
}

int sgl_i32_push(i32s *a, int32_t x)
{
    TRY(sgl_i32_reserve(a, a->len + 1));
    a->v[a->len++] = x;
    return AISIM_OK;
}

/* RankBase._emit: one token in pass P, extending the last stretch when contiguous */
int sgl_emit(sg_req *q, int64_t P)
{
    i64s *s = &q->stretches;
    if (s->len && s->v[s->len - 1] == P - 1) {
        s->v[s->len - 1] = P;
        return AISIM_OK;
    }
    TRY(sgl_i64_push(s, P));
    return sgl_i64_push(s, P);
}

/* ------------------------------------------------------------------ tokens */

/* sglang_tokens.ensure_tokens: the request's tokens cover at least `depth` */
int sgl_ensure_tokens(sg_req *q, int64_t depth)
{
    if (depth <= q->n_tok)
        return AISIM_OK;
    if (depth > q->cap_tok) {
        int64_t cap = q->cap_tok ? q->cap_tok : 16;
        while (cap < depth)
            cap *= 2;
        uint32_t *tok = realloc(q->tok, (size_t)cap * sizeof(uint32_t));
        if (!tok)
            return AISIM_ENOMEM;
        q->tok = tok;
        q->cap_tok = cap;
    }
    for (int64_t i = q->n_tok; i < depth; i++) {
        int64_t out = i - q->prompt_len;
        if (q->authored) {
            if (out >= q->n_authored)
                return AISIM_EINVAL;        /* past the authored outputs */
            q->tok[i] = q->authored[out];
        } else {
            q->tok[i] = q->out_tag;
        }
    }
    q->n_tok = depth;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ running batch */

void sgl_sync(const aisim_sglang_rank *r, sg_req *q)
{
    q->generated = q->base_gen + r->D - q->open_start;
    q->computed = q->prompt_len + q->generated;
    q->held = pages(r, q->computed);
}

int sgl_batch_join(aisim_sglang_rank *r, int32_t s, int64_t number)
{
    TRY(sgl_i32_push(&r->run, s));
    sg_req *q = &r->reqs[s];
    int64_t D = r->D;
    q->join = number;
    q->open_start = D;
    q->base_gen = q->generated;
    q->in_stretch = 1;
    int64_t length = q->prompt_len + q->generated;
    r->sum_len += length;
    q->key = mod(length - D, r->cfg.page_size);
    r->crossings[q->key]++;
    int64_t remaining = q->out_limit - q->generated;
    q->last_at = D + remaining - 1;
    if (remaining > r->cfg.clip) {
        r->n_big++;
        q->big = 1;
        q->unclip_at = D + remaining - r->cfg.clip - 1;
    } else {
        q->big = 0;
        q->unclip_at = NONE;
        r->n_small++;
        r->sum_small += remaining;
    }
    r->view.n_running = (int64_t)r->run.len;
    return AISIM_OK;
}

int sgl_add_stretch(i64s *s, int64_t a, int64_t b)
{
    if (s->len && s->v[s->len - 1] == a - 1) {
        s->v[s->len - 1] = b;
        return AISIM_OK;
    }
    TRY(sgl_i64_push(s, a));
    return sgl_i64_push(s, b);
}

/* the first index of breaks >= x */
size_t sgl_bisect_left(const i64s *a, int64_t x)
{
    size_t lo = 0, hi = a->len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* RunningBatch._close_stretches */
int sgl_close_stretches(aisim_sglang_rank *r, sg_req *q, int64_t first, int64_t last)
{
    const int64_t *dp = r->dec_pass.v;
    size_t lo = sgl_bisect_left(&r->breaks, first), hi = sgl_bisect_left(&r->breaks, last);
    if (lo == hi)
        return sgl_add_stretch(&q->stretches, dp[first], dp[last]);
    int64_t start = dp[first];
    int merge = 1;
    for (size_t j = lo; j < hi; j++) {
        int64_t c = r->breaks.v[j];
        if (merge)
            TRY(sgl_add_stretch(&q->stretches, start, dp[c]));
        else {
            TRY(sgl_i64_push(&q->stretches, start));
            TRY(sgl_i64_push(&q->stretches, dp[c]));
        }
        merge = 0;
        start = dp[c + 1];
    }
    TRY(sgl_i64_push(&q->stretches, start));
    return sgl_i64_push(&q->stretches, dp[last]);
}

/* RunningBatch.leave: remove member s (synced); its decode emissions become stretches */
int sgl_batch_leave(aisim_sglang_rank *r, int32_t s)
{
    sg_req *q = &r->reqs[s];
    sgl_sync(r, q);
    int64_t D = r->D;
    size_t i = 0;
    while (i < r->run.len && r->run.v[i] != s)
        i++;
    if (i == r->run.len)
        return AISIM_ECORRUPT;
    memmove(r->run.v + i, r->run.v + i + 1, (r->run.len - i - 1) * sizeof(int32_t));
    r->run.len--;
    r->view.n_running = (int64_t)r->run.len;
    r->sum_len -= q->prompt_len + q->generated;
    r->crossings[q->key]--;
    int64_t remaining = q->out_limit - q->generated;
    if (remaining > r->cfg.clip) {
        r->n_big--;
    } else {
        r->n_small--;
        r->sum_small -= remaining;
    }
    q->big = 0;
    q->in_stretch = 0;
    if (D > q->open_start) {
        int64_t before = (int64_t)q->stretches.len / 2;
        int64_t prev_last = before ? q->stretches.v[q->stretches.len - 1] : -1;
        TRY(sgl_close_stretches(r, q, q->open_start, D - 1));
        q->has_span = 1;
        q->span_first = q->open_start;
        q->span_last = D - 1;
        q->span_before = before;
        q->span_prev_last = prev_last;
        q->span_after = (int64_t)q->stretches.len / 2;
    } else {
        q->has_span = 0;
    }
    return AISIM_OK;
}

int64_t sgl_growth(const aisim_sglang_rank *r)
{
    int64_t ps = r->cfg.page_size;
    if (ps == 1)
        return (int64_t)r->run.len;
    return ps * r->crossings[mod(-r->D, ps)];
}

int64_t sgl_clipped_remaining(const aisim_sglang_rank *r)
{
    return r->sum_small + r->cfg.clip * r->n_big;
}

/* RunningBatch.record_decode: every member emitted a token in pass P; `done` gets those that
 * emitted their last, in running order */
int sgl_record_decode(aisim_sglang_rank *r, int64_t P, i32s *done)
{
    int64_t d = r->D;
    if (d && r->dec_pass.v[d - 1] != P - 1)
        TRY(sgl_i64_push(&r->breaks, d - 1));
    TRY(sgl_i64_push(&r->dec_pass, P));
    TRY(sgl_i64_push(&r->cover, 0));
    r->D = d + 1;
    r->view.decodes = r->D;
    r->sum_len += (int64_t)r->run.len;
    r->sum_small -= r->n_small;
    done->len = 0;
    int64_t k = 0;
    for (size_t i = 0; i < r->run.len; i++) {
        sg_req *q = &r->reqs[r->run.v[i]];
        if (q->big && q->unclip_at == d) {
            q->big = 0;
            k++;
        }
        if (q->last_at == d)
            TRY(sgl_i32_push(done, r->run.v[i]));
    }
    r->n_big -= k;
    r->n_small += k;
    r->sum_small += k * r->cfg.clip;
    return AISIM_OK;
}

/* RunningBatch.record_decodes: count decode passes from first_pass, none with a last token */
int sgl_record_decodes(aisim_sglang_rank *r, int64_t first_pass, int64_t count)
{
    if (count <= 0)
        return AISIM_OK;
    int64_t d = r->D;
    if (d && r->dec_pass.v[d - 1] != first_pass - 1)
        TRY(sgl_i64_push(&r->breaks, d - 1));
    TRY(sgl_i64_reserve(&r->dec_pass, r->dec_pass.len + (size_t)count));
    TRY(sgl_i64_reserve(&r->cover, r->cover.len + (size_t)count));
    for (int64_t i = 0; i < count; i++) {
        r->dec_pass.v[r->dec_pass.len++] = first_pass + i;
        r->cover.v[r->cover.len++] = 0;
    }
    int64_t end = d + count;
    r->D = end;
    r->view.decodes = end;
    r->sum_len += (int64_t)r->run.len * count;
    int64_t decrement = r->n_small * count;
    for (size_t i = 0; i < r->run.len; i++) {
        sg_req *q = &r->reqs[r->run.v[i]];
        if (q->big && d <= q->unclip_at && q->unclip_at < end) {
            q->big = 0;
            r->n_big--;
            r->n_small++;
            r->sum_small += r->cfg.clip;
            decrement += end - 1 - q->unclip_at;
        }
    }
    r->sum_small -= decrement;
    return AISIM_OK;
}

/* RunningBatch.next_finish: NONE when nobody runs */
int64_t sgl_next_finish(const aisim_sglang_rank *r)
{
    int64_t best = NONE;
    for (size_t i = 0; i < r->run.len; i++) {
        int64_t at = r->reqs[r->run.v[i]].last_at;
        if (best == NONE || at < best)
            best = at;
    }
    return best;
}

/* ------------------------------------------------------------------ the waiting queue */

int32_t sgl_w_at(const aisim_sglang_rank *r, size_t i)
{
    return r->wq.v[r->w_head + i];
}

void sgl_w_popleft(aisim_sglang_rank *r)
{
    r->w_head++;
    r->view.n_waiting--;
    if (!r->view.n_waiting)
        r->w_head = 0;
}

int sgl_w_append(aisim_sglang_rank *r, int32_t s)
{
    size_t end = r->w_head + (size_t)r->view.n_waiting;
    if (end == r->wq.cap && r->w_head) {
        memmove(r->wq.v, r->wq.v + r->w_head, (size_t)r->view.n_waiting * sizeof(int32_t));
        r->w_head = 0;
        end = (size_t)r->view.n_waiting;
    }
    TRY(sgl_i32_reserve(&r->wq, end + 1));
    r->wq.v[end] = s;
    r->view.n_waiting++;
    return AISIM_OK;
}

int sgl_w_appendleft(aisim_sglang_rank *r, int32_t s)
{
    if (r->w_head == 0) {
        size_t n = (size_t)r->view.n_waiting, gap = n + 8;
        TRY(sgl_i32_reserve(&r->wq, n + gap));
        memmove(r->wq.v + gap, r->wq.v, n * sizeof(int32_t));
        r->w_head = gap;
    }
    r->wq.v[--r->w_head] = s;
    r->view.n_waiting++;
    return AISIM_OK;
}
