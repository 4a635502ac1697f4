/*
 * kv_router.c: one pool's kv_router (CLUSTER.md §2), step for step as its Python twin
 * plugins/placement/aisimulate_placement/kv_router.py (KvRouter), which is the specification:
 * the same overlaps, the same float arithmetic in the same order (built without contraction),
 * the first lowest cost, the same booking, the same pending queue and release order.
 *
 * Engine-index mode (no event lag, C vLLM ranks): a candidate's overlap is what an index fed
 * by its rank's KV events would hold, read from the rank as VllmRank.indexed_prefix does:
 * the pool's resident prefix, minus blocks the pass in flight committed, plus blocks evicted
 * since the rank's latest pass report (their removal events come at the pass end).
 */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"
#include "hash_counts.cdef.h"
#include "vllm_rank.cdef.h"
#include "kv_router.cdef.h"

static uint64_t hc_len(const aisim_hash_counts *m)
{
    const aisim_hc_view *v;
    aisim_hc_view_of(m, &v);
    return v->len;
}

#define TRY(expr)                      \
    do {                               \
        int try_status_ = (expr);      \
        if (try_status_ < 0)           \
            return try_status_;        \
    } while (0)

typedef struct kvr_state {
    int64_t worker_id, dp_rank;
    int removed;
    int64_t prefill_tokens, fresh_blocks, requests;
    aisim_hash_counts *active;    /* the placed chains, refcounted (router_assume_kv_reuse) */
    aisim_hash_counts *cached;    /* own index: stored and not removed, as the events came */
    /* engine index: the rank's view and pool, and the pass in flight as last seen */
    const aisim_vllm_view *rank;
    aisim_kv_pool *pool;
    const aisim_kv_view *kv;
    int64_t flight_pass;
    uint64_t *evicted;
    size_t n_evicted, evicted_cap;
    aisim_hash_counts *stored_set, *gone_set;
    size_t stored_in_set, gone_in_set;
} kvr_state;

typedef struct kvr_placed {
    int32_t state;
    int32_t kind;                 /* 0: no blocks held, 1: a count, 2: a chain */
    int64_t share, blocks;
    uint64_t *chain;
    size_t n_chain;
} kvr_placed;

typedef struct kvr_queued {
    int64_t uuid, isl, strict, seq;
    double score;
    uint64_t *hashes;
    size_t n;
    int32_t *ov_states;           /* the overlaps at arrival: (state, blocks) pairs */
    int64_t *ov_values;
    size_t n_ov;
    int live;                     /* held (not withdrawn, not released) */
} kvr_queued;

typedef struct kvr_event {
    double due;
    int64_t worker_id, dp_rank;
    int32_t stored;
    uint64_t *hashes;
    size_t n;
} kvr_event;

struct aisim_kvr {
    aisim_kvr_config cfg;
    aisim_kvr_view view;
    kvr_state *states;
    size_t n_states, states_cap;
    int32_t *cand;                /* candidate -> state */
    size_t n_cand, cand_cap;
    /* per decision */
    int64_t *ovs;
    double *logits;
    int64_t *cost_keys;
    size_t scratch_cap;
    /* placements */
    aisim_hash_counts *placed_of; /* uuid -> placed index */
    kvr_placed *placed;
    size_t n_placed, placed_cap;
    int32_t *placed_free;
    size_t n_placed_free, placed_free_cap;
    /* the pending queue: a heap of entry indices */
    aisim_hash_counts *held_of;   /* uuid -> entry index */
    kvr_queued *entries;
    size_t n_entries, entries_cap;
    int32_t *entries_free;
    size_t n_entries_free, entries_free_cap;
    int32_t *heap;
    size_t heap_len, heap_cap;
    int64_t sequence;
    /* lagged events, oldest first from head */
    kvr_event *events;
    size_t events_head, events_len, events_cap;
    /* a prompt hashed here (aisim_kvr_place_runs) */
    uint64_t *prompt;
    size_t prompt_cap;
    /* releases of the latest call */
    int64_t *released;
    size_t n_released, released_cap;
    /* the decision log */
    int logging;
    int64_t *log_ints;
    double *log_doubles, *log_costs;
    int64_t *log_keys;
    size_t n_log, log_ints_cap, log_doubles_cap, n_log_costs, log_costs_cap, log_keys_cap;
};

/* a copy of n hashes into *out (NULL for none) */
static int copy_hashes(uint64_t **out, const uint64_t *h, size_t n)
{
    *out = NULL;
    if (!n)
        return AISIM_OK;
    *out = malloc(n * sizeof **out);
    if (!*out)
        return AISIM_ENOMEM;
    memcpy(*out, h, n * sizeof **out);
    return AISIM_OK;
}

static void refresh_view(aisim_kvr *r)
{
    aisim_kvr_view *v = &r->view;
    v->released = r->released;
    v->n_released = r->n_released / 5;
    v->queued = r->held_of ? hc_len(r->held_of) : 0;
    v->n_candidates = r->n_cand;
    v->log_ints = r->log_ints;
    v->log_doubles = r->log_doubles;
    v->n_log = r->n_log;
    v->log_costs = r->log_costs;
    v->log_keys = r->log_keys;
}

/* ------------------------------------------------------------ states */

static void free_state(kvr_state *s)
{
    aisim_hc_free(s->active);
    aisim_hc_free(s->cached);
    aisim_hc_free(s->stored_set);
    aisim_hc_free(s->gone_set);
    free(s->evicted);
}

static int find_state(const aisim_kvr *r, int64_t worker_id, int64_t dp_rank)
{
    size_t i;
    for (i = r->n_states; i-- > 0;)
        if (!r->states[i].removed && r->states[i].worker_id == worker_id &&
            r->states[i].dp_rank == dp_rank)
            return (int)i;
    return -1;
}

/* the state of (worker_id, dp_rank), made when there is none (KvRouter._state) */
static int state_of(aisim_kvr *r, int64_t worker_id, int64_t dp_rank)
{
    int found = find_state(r, worker_id, dp_rank);
    kvr_state *s;
    if (found >= 0)
        return found;
    TRY(aisim_grow((void **)&r->states, &r->states_cap, r->n_states + 1, sizeof *r->states));
    s = &r->states[r->n_states];
    memset(s, 0, sizeof *s);
    s->worker_id = worker_id;
    s->dp_rank = dp_rank;
    s->flight_pass = -1;
    if (aisim_hc_new(&s->active) != AISIM_OK || aisim_hc_new(&s->cached) != AISIM_OK ||
        aisim_hc_new(&s->stored_set) != AISIM_OK || aisim_hc_new(&s->gone_set) != AISIM_OK) {
        free_state(s);
        return AISIM_ENOMEM;
    }
    return (int)r->n_states++;
}

/* ------------------------------------------------------------ overlaps */

static int present(const aisim_hash_counts *m, uint64_t h)
{
    int64_t count;
    return aisim_hc_get(m, h, &count) == 1;
}

/* VllmRank.indexed_prefix on a C rank */
static int engine_overlap(kvr_state *s, const uint64_t *h, size_t n, int64_t *out)
{
    const aisim_vllm_view *v = s->rank;
    size_t held, count, run, runs;
    int has_stored, has_gone;
    int matched = aisim_kv_match(s->pool, h, n);
    if (matched < 0)
        return matched;
    held = (size_t)matched;
    if (s->flight_pass != v->pass_index) {
        /* the rank reported a pass since: a new pass in flight, a new eviction log */
        s->flight_pass = v->pass_index;
        s->n_evicted = 0;
        s->stored_in_set = s->gone_in_set = 0;
        TRY(aisim_hc_clear(s->stored_set));
        TRY(aisim_hc_clear(s->gone_set));
    }
    if (s->kv->logged) {
        int taken;
        TRY(aisim_grow((void **)&s->evicted, &s->evicted_cap, s->n_evicted + s->kv->logged,
                 sizeof *s->evicted));
        taken = aisim_kv_take_evicted(s->pool, 0, s->evicted + s->n_evicted,
                                      s->evicted_cap - s->n_evicted);
        if (taken < 0)
            return taken;
        s->n_evicted += (size_t)taken;
    }
    runs = v->n_stored_runs;
    if (!s->n_evicted && (!held || !runs)) {
        *out = (int64_t)held;   /* nothing of the pass in flight can change the answer */
        return AISIM_OK;
    }
    has_stored = runs > 0;
    has_gone = s->n_evicted > 0;
    if (has_stored) {
        size_t total = (size_t)v->stored_ends[runs - 1];
        if (total > s->stored_in_set) {
            TRY(aisim_hc_insert_all(s->stored_set, v->stored + s->stored_in_set,
                                    total - s->stored_in_set));
            s->stored_in_set = total;
        }
    }
    if (s->n_evicted > s->gone_in_set) {
        TRY(aisim_hc_insert_all(s->gone_set, s->evicted + s->gone_in_set,
                                s->n_evicted - s->gone_in_set));
        s->gone_in_set = s->n_evicted;
    }
    /* resident blocks are indexed unless this pass stored them; gone ones until it ends,
     * unless it had stored them in the first place */
    count = has_stored ? (size_t)aisim_hc_leading_absent(s->stored_set, h, held) : held;
    if (count < held && has_gone)
        while (count < held && (present(s->gone_set, h[count]) ||
                                !present(s->stored_set, h[count])))
            count++;
    if (count < held) {
        *out = (int64_t)count;
        return AISIM_OK;
    }
    run = has_gone ? (size_t)aisim_hc_leading(s->gone_set, h + held, n - held) : 0;
    if (run && has_stored)
        run = (size_t)aisim_hc_leading_absent(s->stored_set, h + held, run);
    *out = (int64_t)(held + run);
    return AISIM_OK;
}

/* the overlap of every candidate into r->ovs (KvRouter._overlaps) */
static int overlaps(aisim_kvr *r, const uint64_t *h, size_t n, const int64_t *given)
{
    size_t i;
    for (i = 0; i < r->n_cand; i++) {
        kvr_state *s = &r->states[r->cand[i]];
        r->ovs[i] = 0;
        if (!r->cfg.uses_index || !n)
            continue;
        if (given)
            r->ovs[i] = given[i];
        else if (r->cfg.engine_index && s->rank)
            TRY(engine_overlap(s, h, n, &r->ovs[i]));
        else if (r->cfg.engine_index)
            return AISIM_EINVAL;   /* a rank without a C index: the caller gives overlaps */
        else if (hc_len(s->cached))
            r->ovs[i] = aisim_hc_leading(s->cached, h, n);
    }
    return AISIM_OK;
}

/* ------------------------------------------------------------ decisions */

static int log_decision(aisim_kvr *r, int64_t uuid, double now, size_t chosen)
{
    size_t i, n = r->n_cand;
    TRY(aisim_grow((void **)&r->log_ints, &r->log_ints_cap, 6 * (r->n_log + 1), sizeof(int64_t)));
    TRY(aisim_grow((void **)&r->log_doubles, &r->log_doubles_cap, 2 * (r->n_log + 1), sizeof(double)));
    TRY(aisim_grow((void **)&r->log_costs, &r->log_costs_cap, r->n_log_costs + n, sizeof(double)));
    TRY(aisim_grow((void **)&r->log_keys, &r->log_keys_cap, 2 * (r->n_log_costs + n), sizeof(int64_t)));
    int64_t *ints = r->log_ints + 6 * r->n_log;
    ints[0] = uuid;
    ints[1] = r->view.worker_id;
    ints[2] = r->view.dp_rank;
    ints[3] = r->ovs[chosen];
    ints[4] = (int64_t)n;
    ints[5] = (int64_t)r->n_log_costs;
    r->log_doubles[2 * r->n_log] = now;
    r->log_doubles[2 * r->n_log + 1] = r->logits[chosen];
    for (i = 0; i < n; i++) {
        r->log_costs[r->n_log_costs + i] = r->logits[i];
        r->log_keys[2 * (r->n_log_costs + i)] = r->cost_keys[2 * i];
        r->log_keys[2 * (r->n_log_costs + i) + 1] = r->cost_keys[2 * i + 1];
    }
    r->n_log_costs += n;
    r->n_log++;
    return AISIM_OK;
}

/* KvRouter._admit: costs over the candidates (overlaps in r->ovs), the first lowest, booked */
static int admit(aisim_kvr *r, int64_t uuid, int64_t isl, const uint64_t *h, size_t n,
                 double now)
{
    const aisim_kvr_config *c = &r->cfg;
    int64_t bs = c->block_size, request_blocks, full_blocks, least = 0;
    double decay_rate = c->track_prefill ? c->decay : 0.0;
    size_t i, chosen = 0, m = r->n_cand;
    int64_t best = 0;
    kvr_state *s;
    kvr_placed *p;
    int found;
    int64_t index;
    request_blocks = (isl + bs - 1) / bs;
    if (decay_rate > 0 && request_blocks) {
        for (i = 0; i < m; i++) {
            int64_t tokens = r->states[r->cand[i]].prefill_tokens;
            if (i == 0 || tokens < least)
                least = tokens;
        }
    } else {
        decay_rate = 0.0;
    }
    full_blocks = isl / bs;
    for (i = 0; i < m; i++) {
        double prefill = 0.0, logit;
        int64_t blocks = 0;
        s = &r->states[r->cand[i]];
        if (c->track_prefill) {
            double decay = 1.0;
            if (decay_rate != 0.0) {
                double excess = (double)(s->prefill_tokens - least) / (double)bs;
                decay = 1.0 / (1.0 + decay_rate * (excess / (double)request_blocks));
            }
            prefill = (double)(s->prefill_tokens + isl) / (double)bs -
                      c->credit * decay * (double)r->ovs[i];
            if (!(prefill > 0.0))
                prefill = 0.0;
        }
        if (c->track_blocks) {
            if (c->reuse) {
                int64_t shared = aisim_hc_held_prefix(s->active, h, n);
                if (shared < 0)
                    return (int)shared;
                blocks = (int64_t)hc_len(s->active) + ((int64_t)n - shared);
            } else {
                blocks = s->fresh_blocks + full_blocks;
            }
        }
        logit = c->scale * prefill + (double)blocks;
        logit = logit + c->weight * (double)s->requests;
        r->logits[i] = logit;
        r->cost_keys[2 * i] = s->worker_id;
        r->cost_keys[2 * i + 1] = s->dp_rank;
        if (logit < r->logits[chosen])
            chosen = i;
        if (r->ovs[i] > best || i == 0)
            best = r->ovs[i];
    }
    s = &r->states[r->cand[chosen]];
    /* book */
    found = aisim_hc_get(r->placed_of, (uint64_t)uuid, &index);
    if (found == 1) {
        p = &r->placed[index];
        free(p->chain);
    } else {
        if (r->n_placed_free) {
            index = r->placed_free[--r->n_placed_free];
        } else {
            TRY(aisim_grow((void **)&r->placed, &r->placed_cap, r->n_placed + 1, sizeof *r->placed));
            index = (int64_t)r->n_placed++;
        }
        TRY(aisim_hc_set(r->placed_of, (uint64_t)uuid, index));
        p = &r->placed[index];
    }
    memset(p, 0, sizeof *p);
    p->state = r->cand[chosen];
    if (c->track_prefill) {
        int64_t cached = r->ovs[chosen] * bs;
        p->share = isl - (isl < cached ? isl : cached);
        s->prefill_tokens += p->share;
    }
    if (c->track_blocks) {
        if (c->reuse) {
            TRY(aisim_hc_add_chain(s->active, h, n));
            p->kind = 2;
            TRY(copy_hashes(&p->chain, h, n));
            p->n_chain = n;
        } else {
            p->kind = 1;
            p->blocks = full_blocks;
            s->fresh_blocks += full_blocks;
        }
    }
    s->requests += 1;
    r->view.worker_id = s->worker_id;
    r->view.dp_rank = s->dp_rank;
    r->view.overlap = r->ovs[chosen];
    r->view.best_overlap = best;
    r->view.logit = r->logits[chosen];
    r->view.cost_keys = r->cost_keys;
    r->view.costs = r->logits;
    r->view.n_costs = m;
    if (r->logging)
        TRY(log_decision(r, uuid, now, chosen));
    return AISIM_OK;
}

/* ------------------------------------------------------------ the pending queue */

static int busy(const aisim_kvr *r)
{
    size_t i;
    for (i = 0; i < r->n_cand; i++)
        if ((double)r->states[r->cand[i]].prefill_tokens <= r->cfg.queue_limit)
            return 0;
    return 1;
}

static int before(const kvr_queued *a, const kvr_queued *b)
{
    if (a->strict != b->strict)
        return a->strict > b->strict;
    if (a->score != b->score)
        return a->score > b->score;
    return a->seq < b->seq;
}

static void sift_up(aisim_kvr *r, size_t i)
{
    int32_t e = r->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&r->entries[e], &r->entries[r->heap[parent]]))
            break;
        r->heap[i] = r->heap[parent];
        i = parent;
    }
    r->heap[i] = e;
}

static void sift_down(aisim_kvr *r, size_t i)
{
    int32_t e = r->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= r->heap_len)
            break;
        if (child + 1 < r->heap_len &&
            before(&r->entries[r->heap[child + 1]], &r->entries[r->heap[child]]))
            child++;
        if (!before(&r->entries[r->heap[child]], &r->entries[e]))
            break;
        r->heap[i] = r->heap[child];
        i = child;
    }
    r->heap[i] = e;
}

static void free_entry(aisim_kvr *r, int32_t e)
{
    kvr_queued *q = &r->entries[e];
    free(q->hashes);
    free(q->ov_states);
    free(q->ov_values);
    memset(q, 0, sizeof *q);
    r->entries_free[r->n_entries_free++] = e;   /* (room kept by push) */
}

static int push(aisim_kvr *r, int64_t uuid, int64_t isl, const uint64_t *h, size_t n,
                double now, int64_t priority, int64_t strict)
{
    size_t i, k;
    int64_t best = 0, uncached, cached, positive = priority > 0 ? priority : 0;
    double arrival = now > 0.0 ? now : 0.0;
    int32_t e;
    kvr_queued *q;
    if (r->n_entries_free) {
        e = r->entries_free[--r->n_entries_free];
    } else {
        TRY(aisim_grow((void **)&r->entries, &r->entries_cap, r->n_entries + 1, sizeof *r->entries));
        TRY(aisim_grow((void **)&r->entries_free, &r->entries_free_cap, r->n_entries + 1,
                 sizeof *r->entries_free));
        e = (int32_t)r->n_entries++;
        memset(&r->entries[e], 0, sizeof r->entries[e]);
    }
    TRY(aisim_grow((void **)&r->heap, &r->heap_cap, r->heap_len + 1, sizeof *r->heap));
    q = &r->entries[e];
    q->uuid = uuid;
    q->isl = isl;
    q->strict = strict;
    q->seq = r->sequence++;
    q->live = 1;
    TRY(copy_hashes(&q->hashes, h, n));
    q->n = n;
    for (i = k = 0; i < r->n_cand; i++)
        if (r->ovs[i])
            k++;
    if (k) {
        q->ov_states = malloc(k * sizeof *q->ov_states);
        q->ov_values = malloc(k * sizeof *q->ov_values);
        if (!q->ov_states || !q->ov_values)
            return AISIM_ENOMEM;
    }
    for (i = k = 0; i < r->n_cand; i++) {
        if (r->ovs[i]) {
            q->ov_states[k] = r->cand[i];
            q->ov_values[k++] = r->ovs[i];
            if (r->ovs[i] > best)
                best = r->ovs[i];
        }
    }
    q->n_ov = k;
    cached = best * r->cfg.block_size;
    uncached = isl - (isl < cached ? isl : cached);
    switch (r->cfg.queue_policy) {
    case AISIM_KVR_FCFS:
        q->score = (double)positive - arrival / 1000.0;
        break;
    case AISIM_KVR_LCFS:
        q->score = (double)positive + arrival / 1000.0;
        break;
    default:
        q->score = (double)(1 + positive) / (double)(uncached > 1 ? uncached : 1);
        break;
    }
    TRY(aisim_hc_set(r->held_of, (uint64_t)uuid, e));
    r->heap[r->heap_len++] = e;
    sift_up(r, r->heap_len - 1);
    return AISIM_OK;
}

/* the most urgent held entry, off the heap (withdrawn ones on the way are freed) */
static int32_t pop(aisim_kvr *r)
{
    for (;;) {
        int32_t e = r->heap[0];
        r->heap[0] = r->heap[--r->heap_len];
        if (r->heap_len)
            sift_down(r, 0);
        if (r->entries[e].live)
            return e;
        free_entry(r, e);
    }
}

static int release(aisim_kvr *r, int64_t uuid)
{
    int64_t *out;
    TRY(aisim_grow((void **)&r->released, &r->released_cap, r->n_released + 5, sizeof *r->released));
    out = r->released + r->n_released;
    out[0] = uuid;
    out[1] = r->view.worker_id;
    out[2] = r->view.dp_rank;
    out[3] = r->view.overlap;
    out[4] = r->view.best_overlap;
    r->n_released += 5;
    return AISIM_OK;
}

/* KvRouter._drain */
static int drain(aisim_kvr *r, double now)
{
    while (hc_len(r->held_of) && !busy(r)) {
        int32_t e = pop(r);
        kvr_queued *q = &r->entries[e];
        size_t i, k;
        q->live = 0;
        aisim_hc_remove(r->held_of, (uint64_t)q->uuid);
        for (i = 0; i < r->n_cand; i++) {
            r->ovs[i] = 0;
            for (k = 0; k < q->n_ov; k++)
                if (q->ov_states[k] == r->cand[i])
                    r->ovs[i] = q->ov_values[k];
        }
        TRY(admit(r, q->uuid, q->isl, q->hashes, q->n, now));
        TRY(release(r, q->uuid));
        free_entry(r, e);
    }
    return AISIM_OK;
}

/* ------------------------------------------------------------ lagged events */

static int apply_event(aisim_kvr *r, int64_t worker_id, int64_t dp_rank, int32_t stored,
                       const uint64_t *h, size_t n)
{
    int index = state_of(r, worker_id, dp_rank);
    if (index < 0)
        return index;
    if (stored)
        return aisim_hc_insert_all(r->states[index].cached, h, n);
    return aisim_hc_remove_all(r->states[index].cached, h, n);
}

static int apply_due(aisim_kvr *r, double now)
{
    while (r->events_len && r->events[r->events_head].due <= now) {
        kvr_event *ev = &r->events[r->events_head];
        int status = apply_event(r, ev->worker_id, ev->dp_rank, ev->stored, ev->hashes, ev->n);
        free(ev->hashes);
        ev->hashes = NULL;
        r->events_head++;
        r->events_len--;
        if (status < 0)
            return status;
    }
    if (!r->events_len)
        r->events_head = 0;
    return AISIM_OK;
}

/* ------------------------------------------------------------ the API */

int aisim_kvr_new(aisim_kvr **out, const aisim_kvr_config *config)
{
    aisim_kvr *r;
    if (!out || !config || config->block_size < 1 || config->queue_policy < 0 ||
        config->queue_policy > AISIM_KVR_WSPT)
        return AISIM_EINVAL;
    r = calloc(1, sizeof *r);
    if (!r)
        return AISIM_ENOMEM;
    r->cfg = *config;
    if (aisim_hc_new(&r->placed_of) != AISIM_OK || aisim_hc_new(&r->held_of) != AISIM_OK) {
        aisim_kvr_free(r);
        return AISIM_ENOMEM;
    }
    refresh_view(r);
    *out = r;
    return AISIM_OK;
}

int aisim_kvr_free(aisim_kvr *r)
{
    size_t i;
    if (!r)
        return AISIM_OK;
    for (i = 0; i < r->n_states; i++)
        free_state(&r->states[i]);
    for (i = 0; i < r->n_placed; i++)
        free(r->placed[i].chain);
    for (i = 0; i < r->n_entries; i++) {
        free(r->entries[i].hashes);
        free(r->entries[i].ov_states);
        free(r->entries[i].ov_values);
    }
    for (i = 0; i < r->events_len; i++)
        free(r->events[r->events_head + i].hashes);
    aisim_hc_free(r->placed_of);
    aisim_hc_free(r->held_of);
    free(r->states);
    free(r->cand);
    free(r->ovs);
    free(r->logits);
    free(r->cost_keys);
    free(r->placed);
    free(r->placed_free);
    free(r->entries);
    free(r->entries_free);
    free(r->heap);
    free(r->events);
    free(r->released);
    free(r->prompt);
    free(r->log_ints);
    free(r->log_doubles);
    free(r->log_costs);
    free(r->log_keys);
    free(r);
    return AISIM_OK;
}

int aisim_kvr_view_of(const aisim_kvr *r, const aisim_kvr_view **out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    *out = &r->view;
    return AISIM_OK;
}

int aisim_kvr_log_decisions(aisim_kvr *r, int32_t on)
{
    if (!r)
        return AISIM_EINVAL;
    r->logging = on != 0;
    r->n_log = r->n_log_costs = 0;
    refresh_view(r);
    return AISIM_OK;
}

int aisim_kvr_set_candidates(aisim_kvr *r, const int64_t *worker_ids, const int64_t *dp_ranks,
                             const void *const *rank_views, aisim_kv_pool *const *pools,
                             size_t n)
{
    size_t i;
    if (!r || (n && (!worker_ids || !dp_ranks)) || (!rank_views != !pools))
        return AISIM_EINVAL;
    TRY(aisim_grow((void **)&r->cand, &r->cand_cap, n, sizeof *r->cand));
    if (n > r->scratch_cap) {   /* the per-candidate scratch arrays share one capacity */
        size_t fresh = r->scratch_cap ? r->scratch_cap : 8;
        int64_t *o, *k;
        double *l;
        while (fresh < n)
            fresh *= 2;
        o = realloc(r->ovs, fresh * sizeof *o);
        if (!o)
            return AISIM_ENOMEM;
        r->ovs = o;
        l = realloc(r->logits, fresh * sizeof *l);
        if (!l)
            return AISIM_ENOMEM;
        r->logits = l;
        k = realloc(r->cost_keys, 2 * fresh * sizeof *k);
        if (!k)
            return AISIM_ENOMEM;
        r->cost_keys = k;
        r->scratch_cap = fresh;
        r->view.cost_keys = r->cost_keys;
        r->view.costs = r->logits;
    }
    for (i = 0; i < n; i++) {
        int index = state_of(r, worker_ids[i], dp_ranks[i]);
        kvr_state *s;
        if (index < 0)
            return index;
        s = &r->states[index];
        if (r->cfg.engine_index && rank_views) {
            const aisim_kv_view *kv;
            if (!rank_views[i] || !pools[i])
                return AISIM_EINVAL;
            TRY(aisim_kv_view_of(pools[i], &kv));
            s->rank = (const aisim_vllm_view *)rank_views[i];
            s->pool = pools[i];
            s->kv = kv;
        }
        r->cand[i] = index;
    }
    r->n_cand = n;
    refresh_view(r);
    return AISIM_OK;
}

int aisim_kvr_place(aisim_kvr *r, int64_t uuid, int64_t isl, const uint64_t *hashes, size_t n,
                    double now_ms, int64_t priority, int64_t strict_priority,
                    const int64_t *given)
{
    int status;
    if (!r || (n && !hashes) || isl < 0 || uuid < 0)
        return AISIM_EINVAL;
    r->n_released = 0;
    if (r->events_len)
        TRY(apply_due(r, now_ms));
    TRY(overlaps(r, hashes, n, given));
    if (r->cfg.queue_policy != AISIM_KVR_NO_QUEUE) {
        if (hc_len(r->held_of) || busy(r)) {
            TRY(push(r, uuid, isl, hashes, n, now_ms, priority, strict_priority));
            refresh_view(r);
            return AISIM_KVR_QUEUED;
        }
    } else if (!r->n_cand) {
        return AISIM_KVR_NO_ENDPOINTS;
    }
    status = admit(r, uuid, isl, hashes, n, now_ms);
    refresh_view(r);
    return status < 0 ? status : AISIM_KVR_PLACED;
}

int aisim_kvr_place_runs(aisim_kvr *r, int64_t uuid, int64_t isl, const uint32_t *values,
                         const uint32_t *lengths, size_t n_runs, double now_ms,
                         int64_t priority, int64_t strict_priority)
{
    uint64_t total = 0;
    size_t i, blocks;
    int written;
    if (!r || ((!values || !lengths) && n_runs) || isl < 0 || r->cfg.block_size > UINT32_MAX)
        return AISIM_EINVAL;
    for (i = 0; i < n_runs; i++)
        total += lengths[i];
    blocks = (size_t)(total / (uint64_t)r->cfg.block_size);
    TRY(aisim_grow((void **)&r->prompt, &r->prompt_cap, blocks ? blocks : 1, sizeof *r->prompt));
    written = aisim_hash_block_runs(values, lengths, n_runs, (uint32_t)r->cfg.block_size, 0, 0,
                                    r->prompt, blocks);
    if (written < 0)
        return written;
    /* the prompt's full blocks (runtime/router.py's _hashes: the first isl / block_size) */
    blocks = (size_t)written;
    if ((int64_t)blocks > isl / r->cfg.block_size)
        blocks = (size_t)(isl / r->cfg.block_size);
    return aisim_kvr_place(r, uuid, isl, r->prompt, blocks, now_ms, priority, strict_priority,
                           NULL);
}

int aisim_kvr_kv_event(aisim_kvr *r, int64_t worker_id, int64_t dp_rank, int32_t stored,
                       const uint64_t *hashes, size_t n, double now_ms)
{
    kvr_event *ev;
    if (!r || (n && !hashes))
        return AISIM_EINVAL;
    if (!r->cfg.uses_index)
        return AISIM_OK;
    if (r->cfg.lag_ms <= 0)
        return apply_event(r, worker_id, dp_rank, stored, hashes, n);
    if (r->events_head && r->events_head + r->events_len == r->events_cap) {
        memmove(r->events, r->events + r->events_head, r->events_len * sizeof *r->events);
        r->events_head = 0;
    }
    TRY(aisim_grow((void **)&r->events, &r->events_cap, r->events_head + r->events_len + 1,
             sizeof *r->events));
    ev = &r->events[r->events_head + r->events_len];
    ev->due = now_ms + r->cfg.lag_ms;
    ev->worker_id = worker_id;
    ev->dp_rank = dp_rank;
    ev->stored = stored != 0;
    ev->n = n;
    TRY(copy_hashes(&ev->hashes, hashes, n));
    r->events_len++;
    return AISIM_OK;
}

int aisim_kvr_prefill_done(aisim_kvr *r, int64_t uuid, double now_ms)
{
    int64_t index;
    if (!r)
        return AISIM_EINVAL;
    r->n_released = 0;
    if (uuid >= 0 && aisim_hc_get(r->placed_of, (uint64_t)uuid, &index) == 1) {
        kvr_placed *p = &r->placed[index];
        if (p->share) {
            r->states[p->state].prefill_tokens -= p->share;
            p->share = 0;
        }
    }
    TRY(drain(r, now_ms));
    refresh_view(r);
    return (int)r->view.n_released;
}

int aisim_kvr_terminal(aisim_kvr *r, int64_t uuid, double now_ms)
{
    int64_t index;
    if (!r)
        return AISIM_EINVAL;
    r->n_released = 0;
    if (uuid >= 0 && aisim_hc_get(r->placed_of, (uint64_t)uuid, &index) == 1) {
        kvr_placed *p = &r->placed[index];
        kvr_state *s = &r->states[p->state];
        s->prefill_tokens -= p->share;
        if (p->kind == 1)
            s->fresh_blocks -= p->blocks;
        else if (p->kind == 2)
            TRY(aisim_hc_drop_chain(s->active, p->chain, p->n_chain));
        s->requests -= 1;
        free(p->chain);
        memset(p, 0, sizeof *p);
        aisim_hc_remove(r->placed_of, (uint64_t)uuid);
        TRY(aisim_grow((void **)&r->placed_free, &r->placed_free_cap, r->n_placed_free + 1,
                 sizeof *r->placed_free));
        r->placed_free[r->n_placed_free++] = (int32_t)index;
    } else if (uuid >= 0 && aisim_hc_get(r->held_of, (uint64_t)uuid, &index) == 1) {
        /* cut off while queued: it will never be placed */
        r->entries[index].live = 0;
        aisim_hc_remove(r->held_of, (uint64_t)uuid);
    }
    TRY(drain(r, now_ms));
    refresh_view(r);
    return (int)r->view.n_released;
}

int aisim_kvr_drain(aisim_kvr *r, double now_ms)
{
    if (!r)
        return AISIM_EINVAL;
    r->n_released = 0;
    TRY(drain(r, now_ms));
    refresh_view(r);
    return (int)r->view.n_released;
}

int aisim_kvr_worker_removed(aisim_kvr *r, int64_t worker_id, int64_t dp_size, double now_ms)
{
    size_t i, kept;
    int64_t rank;
    if (!r)
        return AISIM_EINVAL;
    r->n_released = 0;
    for (rank = 0; rank < dp_size; rank++) {
        int index = find_state(r, worker_id, rank);
        if (index >= 0)
            r->states[index].removed = 1;
    }
    /* the held events of removed schedulers go */
    for (i = kept = 0; i < r->events_len; i++) {
        kvr_event *ev = &r->events[r->events_head + i];
        if (ev->worker_id == worker_id && ev->dp_rank >= 0 && ev->dp_rank < dp_size)
            free(ev->hashes);
        else
            r->events[r->events_head + kept++] = *ev;
    }
    r->events_len = kept;
    TRY(drain(r, now_ms));
    refresh_view(r);
    return (int)r->view.n_released;
}

int aisim_kvr_queued_uuids(const aisim_kvr *r, int64_t *out, size_t cap)
{
    size_t i, j, n = 0;
    int32_t *order;
    if (!r || (!out && cap))
        return AISIM_EINVAL;
    order = malloc((r->heap_len ? r->heap_len : 1) * sizeof *order);
    if (!order)
        return AISIM_ENOMEM;
    for (i = 0; i < r->heap_len; i++)
        if (r->entries[r->heap[i]].live)
            order[n++] = r->heap[i];
    /* insertion sort: diagnostics only */
    for (i = 1; i < n; i++) {
        int32_t e = order[i];
        for (j = i; j > 0 && before(&r->entries[e], &r->entries[order[j - 1]]); j--)
            order[j] = order[j - 1];
        order[j] = e;
    }
    for (i = 0; i < n && i < cap; i++)
        out[i] = r->entries[order[i]].uuid;
    free(order);
    return (int)n;
}

int aisim_kvr_state(const aisim_kvr *r, int64_t worker_id, int64_t dp_rank, int64_t *counters,
                    uint64_t *cached, size_t cap)
{
    int index, got;
    const kvr_state *s;
    int64_t *counts;
    if (!r || !counters || (!cached && cap))
        return AISIM_EINVAL;
    index = find_state(r, worker_id, dp_rank);
    if (index < 0)
        return AISIM_EBADSEQ;   /* no state for that scheduler */
    s = &r->states[index];
    counters[0] = s->prefill_tokens;
    counters[1] = s->fresh_blocks;
    counters[2] = s->requests;
    counters[3] = (int64_t)hc_len(s->active);
    counters[4] = (int64_t)hc_len(s->cached);
    if (!cap)
        return 0;
    counts = malloc(cap * sizeof *counts);
    if (!counts)
        return AISIM_ENOMEM;
    got = aisim_hc_items(s->cached, cached, counts, cap);
    free(counts);
    return got;
}
