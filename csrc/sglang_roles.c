/*
 * sglang_roles.c: the C SGLang rank in the roles of a disaggregated deployment, the
 * destination-first handoff (FEATURES.md section 8; engine/sglang_roles.py's
 * SglangPrefillRank and SglangDecodeRank are the twins, and the functions here follow their
 * methods one for one; engine/sglang_native_roles.py drives them).
 *
 * Prefill role: a copy that completes keeps its KV where it is (locked, its prompt not yet on
 * the tree) and its slot, HELD, until aisim_sglang_release_source caches it as a finished
 * request would.
 *
 * Decode role: destinations wait in the pending FIFO (PENDING); a retry tries the head only,
 * once per capacity generation, and reserves the page-rounded prompt (RESERVED); activation
 * puts the transferred prompt on the tree and queues the request in the prebuilt FIFO
 * (PREBUILT); each pass starts by moving prebuilt requests into the running batch. While a
 * destination waits, the waiting queue forms no prefill batch (may_prefill, sglang_rank.h).
 *
 * What happens between two passes (a reservation, an activation, a release) is stamped after
 * the last pass's completions and before the next pass's matches: phase 3 of the previous
 * pass, counted by k3, which is never reset.
 */
#include "sglang_rank.h"

#define SAME_TIME_RETRIES 1024   /* the reference's same-time retry limit */

/* _BetweenPasses._between_stamp; by products, not shifts: before the first pass the pass
 * index is -1 (the same value as the twin's shifts of a negative number) */
static int64_t between_stamp(aisim_sglang_rank *r)
{
    int64_t p = r->view.pass_index - 1;
    return (p * 4 + 3) * ((int64_t)1 << PHASE_BITS) + ++r->k3;
}

/* ------------------------------------------------------------------ FIFOs of slots */

static int fifo_push(i32s *f, size_t *head, int32_t s)
{
    if (*head && *head * 2 >= f->len) {
        /* the taken heads go once they are half the array: amortized O(1) */
        size_t live = f->len - *head;
        memmove(f->v, f->v + *head, live * sizeof(int32_t));
        f->len = live;
        *head = 0;
    }
    return sgl_i32_push(f, s);
}

static int32_t fifo_pop(i32s *f, size_t *head)
{
    int32_t s = f->v[(*head)++];
    if (*head == f->len)
        f->len = *head = 0;
    return s;
}

/* ------------------------------------------------------------------ the pass's gates */

/* SglangPrefillRank._stalled / SglangDecodeRank._stalled: a held source's release or a
 * reserved destination's KV frees or brings KV later, so nothing is stuck yet */
int sgl_may_stall(const aisim_sglang_rank *r)
{
    const aisim_sglang_view *v = &r->view;
    if (r->cfg.role == AISIM_SG_PREFILL)
        return !v->held_sources;
    if (r->cfg.role == AISIM_SG_DECODE)
        return !v->holds && !v->n_pending && !v->n_prebuilt;
    return 1;
}

/* SglangPrefillRank._finish_kv at a pass: the completed copy holds its KV (the source) */
int sgl_hold(aisim_sglang_rank *r, int32_t s)
{
    r->reqs[s].place = HELD;
    return AISIM_OK;
}

/* SglangDecodeRank._promote: prebuilt requests join the running batch while slots remain
 * (reuse 0); one with nothing to generate completes with this pass, without a token */
int sgl_promote(aisim_sglang_rank *r)
{
    aisim_sglang_view *v = &r->view;
    while (v->n_prebuilt && (int64_t)r->run.len < r->cfg.max_running) {
        int32_t s = fifo_pop(&r->prebuilt, &r->b_head);
        v->n_prebuilt--;
        sg_req *q = &r->reqs[s];
        q->place = IN_QUEUES;
        q->status = RUNNING;
        int readmit = q->admissions > 0;
        q->admissions++;
        TRY(sgl_event(r, AISIM_SG_ADMITTED, s, 0, readmit, 0));
        v->promoted = 1;
        if (q->generated >= q->out_limit) {
            q->open_start = NONE;
            TRY(sgl_complete_req(r, s));
            continue;
        }
        TRY(sgl_batch_join(r, s, ++r->join_seq));
    }
    return AISIM_OK;
}

/* SglangDecodeRank.extend's cut: a pass end the handoff needs (a retry there may reserve the
 * head; the next pass start promotes a prebuilt request) */
void sgl_role_view(aisim_sglang_rank *r)
{
    aisim_sglang_view *v = &r->view;
    int due = 0;
    if (v->n_pending)
        due = r->reqs[r->pending.v[r->p_head]].last_attempt != v->generation;
    if (v->n_prebuilt && (int64_t)r->run.len < r->cfg.max_running)
        due = 1;
    v->retry_due = due;
}

void sgl_role_free(aisim_sglang_rank *r)
{
    free(r->pending.v);
    free(r->prebuilt.v);
}

/* ------------------------------------------------------------------ public */

static int live_slot(const aisim_sglang_rank *r, int32_t slot, int role, int place)
{
    return r->cfg.role == role && slot >= 0 && (size_t)slot < r->n_reqs && r->reqs[slot].live
        && r->reqs[slot].place == place;
}

/* SglangDecodeRank._reserve_head */
static int reserve_head(aisim_sglang_rank *r, int32_t *slot, int64_t *fresh_tokens,
                        int64_t *node_out)
{
    aisim_sglang_view *v = &r->view;
    if (!v->n_pending)
        return AISIM_OK;
    int32_t s = r->pending.v[r->p_head];
    sg_req *q = &r->reqs[s];
    if (q->last_attempt == v->generation)
        return AISIM_OK;
    q->last_attempt = v->generation;
    int64_t prompt = q->prompt_len, prefix = 0, node = ROOT;
    if (r->cfg.caching && prompt) {
        int64_t out[2];
        TRY(sgl_ensure_tokens(q, prompt));
        TRY(aisim_radix_match_and_lock(r->cache, q->tok, (size_t)q->n_tok, prompt,
                                       between_stamp(r), out));
        prefix = out[0];
        node = out[1];
    }
    int64_t allocated = pages(r, prompt), fresh = allocated - prefix, free_ = available(r);
    if (fresh > free_ + evictable(r)) {
        if (node != ROOT)
            TRY(aisim_radix_unlock(r->cache, node));
        return AISIM_OK;
    }
    if (fresh > free_)
        TRY(sgl_evict(r, fresh - free_));
    if (aisim_radix_allocate(r->cache, fresh) != AISIM_OK) {
        if (node != ROOT)
            TRY(aisim_radix_unlock(r->cache, node));
        return AISIM_OK;
    }
    fifo_pop(&r->pending, &r->p_head);
    v->n_pending--;
    q->place = RESERVED;
    q->seq = node;
    q->committed = prefix;
    q->held = allocated;
    q->computed = 0;
    v->holds++;
    *slot = s;
    *fresh_tokens = fresh;
    *node_out = node;
    return AISIM_OK;
}

int aisim_sglang_retry(aisim_sglang_rank *r, int32_t idle_pass, int32_t *slot,
                       int64_t *fresh_tokens, int64_t *node)
{
    if (!r || !slot || !fresh_tokens || !node || r->cfg.role != AISIM_SG_DECODE)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    *slot = -1;
    *fresh_tokens = 0;
    *node = -1;
    int status = reserve_head(r, slot, fresh_tokens, node);
    if (status == AISIM_OK && idle_pass && *slot < 0) {
        /* at the end of a zero-time pass that changed nothing and reserved nothing either,
         * the reference runs the same pass again at once for as long as it moves the
         * admission ratio: the ratio goes to its floor */
        for (int i = 0; i < SAME_TIME_RETRIES && !ratio_settled(r); i++)
            ratio_decay(r);
    }
    return sgl_guard(r, status);
}

/* SglangDecodeRank.activate */
static int activate(aisim_sglang_rank *r, int32_t s)
{
    aisim_sglang_view *v = &r->view;
    sg_req *q = &r->reqs[s];
    v->holds--;
    int64_t before = available(r);
    if (r->cfg.caching) {
        int64_t aligned = q->prompt_len - q->prompt_len % r->cfg.page_size;
        if (aligned > q->committed)
            TRY(sgl_insert_own(r, s, aligned, between_stamp(r)));
    }
    if (available(r) > before)
        v->generation++;         /* its copies of pages already on the tree were freed */
    q = &r->reqs[s];
    q->computed = q->prompt_len;
    q->status = WAITING;
    q->place = PREBUILT;
    TRY(fifo_push(&r->prebuilt, &r->b_head, s));
    v->n_prebuilt++;
    return AISIM_OK;
}

int aisim_sglang_activate(aisim_sglang_rank *r, int32_t slot)
{
    if (!r || !live_slot(r, slot, AISIM_SG_DECODE, RESERVED))
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    return sgl_guard(r, activate(r, slot));
}

/* SglangDecodeRank.cancel */
static int cancel(aisim_sglang_rank *r, int32_t s)
{
    sg_req *q = &r->reqs[s];
    r->view.holds--;
    aisim_radix_release(r->cache, q->held - q->committed);
    if (q->seq != NONE && q->seq != ROOT)
        TRY(aisim_radix_unlock(r->cache, q->seq));
    r->view.generation++;
    sgl_free_slot(r, s);
    return AISIM_OK;
}

int aisim_sglang_cancel(aisim_sglang_rank *r, int32_t slot)
{
    if (!r || !live_slot(r, slot, AISIM_SG_DECODE, RESERVED))
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    return sgl_guard(r, cancel(r, slot));
}

/* SglangPrefillRank.release_source */
static int release_source(aisim_sglang_rank *r, int32_t s)
{
    int64_t access = between_stamp(r);
    r->view.held_sources--;
    TRY(sgl_finish_kv(r, s, &access));
    sgl_free_slot(r, s);
    return AISIM_OK;
}

int aisim_sglang_release_source(aisim_sglang_rank *r, int32_t slot)
{
    if (!r || !live_slot(r, slot, AISIM_SG_PREFILL, HELD))
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    return sgl_guard(r, release_source(r, slot));
}

int aisim_sglang_off_queue_tokens(const aisim_sglang_rank *r, int64_t *out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    int64_t total = 0;
    for (size_t i = 0; i < r->n_reqs; i++) {
        const sg_req *q = &r->reqs[i];
        if (q->live && q->place >= RESERVED)
            total += q->held - q->committed;
    }
    *out = total;
    return AISIM_OK;
}
