/*
 * vllm_rank.c: a vLLM rank's pass in C, step for step as engine/vllm.py's
 * VllmRank (its twin and specification: read the two side by side, the
 * function names match), TensorRT-LLM's GUARANTEED_NO_EVICT admission
 * included.
 *
 * Requests are slots of struct-of-arrays; the waiting queue is a ring of
 * slots, the running order and the partial list are arrays of slots in
 * order. An open stretch (a request decoding one token per pass) is not
 * touched per pass: its length follows from the pass counter, and the
 * decoders that need a new KV block in the same pass share a bucket keyed
 * by the pass offset modulo the block size (one allocate_each per bucket).
 * The finishing passes of open stretches sit in a min-heap; an entry whose
 * request left its stretch (or whose slot was reused: the generation tells)
 * is skipped when its pass completes, as the twin skips stale entries.
 *
 * Python learns what a call did from its events (admitted, preempted,
 * rejected, finished with its emission stretches), read once per call.
 * schedule() leaves the pass's timing keys in the view, and its decode time
 * when the rank's decode timing (decode_run.c: the built-in models, or the
 * memo Python fills) knows it; prefill times are Python's (the StepTimer's
 * memo). The decode-only extension runs decode_run.c's loop over the rank's
 * own buckets. The ITL difference array and telemetry's in-flight gauges
 * (finishing_gauges) are kept here too.
 *
 * The disaggregated roles (engine/vllm_roles.py, their twins) are the same
 * rank with cfg.role set: a prefill rank's retirement holds the copy's KV
 * (hold_source; the slot lives until aisim_vllm_release_source), a decode
 * rank keeps a pending FIFO of accepted destinations, reserves its head
 * (retry, gated by the capacity generation every release bumps), activates
 * it into the waiting queue in acceptance order and starts activated
 * requests with no lookup (admit_waiting_decode).
 *
 * MTP bursts (aisim_vllm_set_mtp; engine/mtp.py's MtpBursts is the twin):
 * every request stays outside open stretches; each pass reserves its
 * bursts' KV (preempting by the preemption mode while it does not fit),
 * draws them from the rank's StdRng (csrc/rng.c) in running order and
 * stamps them at its end as one-pass stretches (zero gaps). A decode-only
 * run draws its passes' bursts ahead from a copy of the generator
 * (aisim_vllm_mtp_extend) and complete() replays the passes it kept.
 *
 * Errors: a bad argument gives AISIM_EINVAL with nothing changed. A failure
 * inside a pass (out of memory, a pool call refused that the twin assumes
 * succeeds) leaves the pass half formed: the rank then answers every call
 * with AISIM_ECORRUPT.
 */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"
#include "vllm_rank.cdef.h"
#include "rng.cdef.h"

/* (a destination between its reservation and its activation is RESERVED, a source held
 * until its release HELD: the role functions check that they get one) */
enum { ST_WAITING = 0, ST_RUNNING = 1, ST_PREEMPTED = 2, ST_FINISHED = 3, ST_RESERVED = 4,
       ST_HELD = 5 };

#define MAX_BLOCK_SIZE 65536

/* Per-request state, one array per field (X-macro: the list grows them all). */
#define REQ_FIELDS(X)                                                            \
    X(int64_t, prompt_len)                                                       \
    X(int64_t, out_limit)                                                        \
    X(int64_t, max_output)                                                       \
    X(int64_t, generated)                                                        \
    X(int64_t, computed)                                                         \
    X(int64_t, held_blocks)                                                      \
    X(int64_t, committed_blocks)                                                 \
    X(int64_t, base_pass)                                                        \
    X(int64_t, base_gen)                                                         \
    X(int64_t, base_len)                                                         \
    X(int64_t, bucket_key)                                                       \
    X(int64_t, grown_mark)                                                       \
    X(int64_t, chunk_tokens)                                                     \
    X(int64_t, chunk_isl)      /* -1: the chunk computed no prompt token */      \
    X(int64_t, chunk_prefix)                                                     \
    X(int64_t, sched_mark)     /* the pass whose walk scheduled it */            \
    X(int64_t, footprint_blocks) /* no_evict: blocks reserved through completion */ \
    X(int64_t, gauge_stamp)    /* finishing_gauges' mark of the requests finishing */ \
    X(int64_t, waiting_order)  /* decode role: acceptance order */                \
    X(int64_t, last_attempt)   /* decode role: the generation it was last tried at */ \
    X(int64_t, burst)          /* MTP: the tokens it emits with the pass in flight */ \
    X(int64_t, sampled)        /* MTP: the tokens its burst accepted before the clip */ \
    X(int64_t, st_computed)    /* state_cache: the tokens its working state covers */ \
    X(int64_t, st_snap_step)   /* state_cache: the step its latest checkpoint was made */ \
    X(uint64_t, st_snap_hash)  /* state_cache: the prefix of its latest checkpoint */   \
    X(int32_t, st_work)        /* state_cache: pool sequence of the working state (-1) */ \
    X(int32_t, st_snap_seq)    /* state_cache: a preserved checkpoint copy it owns (-1) */ \
    X(int32_t, st_published)   /* state_cache: the working blocks are the checkpoint */ \
    X(int32_t, st_has)         /* state_cache: it has a RequestState */                \
    X(int32_t, st_n_snap)      /* state_cache: blocks of st_snap (0 or state_blocks) */ \
    X(int32_t *, st_snap)      /* state_cache: the latest checkpoint's blocks */       \
    X(int32_t, seq)                                                              \
    X(int32_t, status)                                                           \
    X(int32_t, in_stretch)                                                       \
    X(int32_t, live)                                                             \
    X(int32_t, authored)                                                         \
    X(int32_t, admissions)                                                       \
    X(int32_t, preemptions)                                                      \
    X(uint32_t, generation)                                                      \
    X(uint64_t, salt)                                                            \
    X(uint64_t *, hashes)                                                        \
    X(size_t, n_hashes)                                                          \
    X(size_t, hash_cap)                                                          \
    X(size_t, n_prompt_hashes)                                                   \
    X(int64_t *, stretches)    /* (first, last) pairs */                         \
    X(size_t, n_stretch)       /* values, two per stretch */                     \
    X(size_t, stretch_cap)

typedef struct bucket {
    int32_t *slots;
    int32_t *seqs;
    size_t len, cap, seq_cap;
    int64_t grown;   /* blocks granted to every member since the bucket opened */
    int64_t pos;     /* index in active_keys while not empty */
} bucket;

typedef struct fin_entry {
    int64_t pass;
    int32_t slot;
    uint32_t generation;
} fin_entry;

typedef struct slot_list {
    int32_t *v;
    size_t len, cap;
} slot_list;

struct aisim_vllm_rank {
    aisim_vllm_config cfg;
    aisim_kv_pool *pool;
    const aisim_decode_timing *decode_timing;
    int64_t completion_total;   /* no_evict: to-completion blocks over running requests */
    int64_t gauge_stamps;       /* finishing_gauges calls so far */
    const aisim_kv_view *kv;
    int broken;
    /* requests */
    size_t n_slots, slot_cap;
#define X(type, name) type *name;
    REQ_FIELDS(X)
#undef X
    slot_list free_slots;
    /* queues */
    int32_t *wait_ring;
    size_t wait_head, wait_len, wait_cap;   /* wait_cap: a power of two */
    slot_list running, partial, ready, rejected, done;
    /* decode role: accepted destinations waiting for their reservation (from pending_head),
     * how many were accepted, and the activated requests a pass may start */
    slot_list pending, activated;
    size_t pending_head;
    int64_t accepted;
    /* the pass just formed leaves nothing outside an open stretch but requests it readies
     * (VllmRank._plain_after_ready) */
    int plain_after_ready;
    /* open stretches */
    bucket *buckets;                        /* block_size of them */
    int64_t *active_keys;
    size_t n_active_keys;
    fin_entry *heap;
    size_t heap_len, heap_cap;
    /* the head that last had to wait: its slot, generation, the cache version, active blocks */
    int32_t blocked_slot;
    uint32_t blocked_generation;
    int64_t blocked_version;
    int64_t blocked_active;
    /* scratch */
    int64_t *key_scratch;
    int64_t *count_scratch;
    int64_t *events;          /* AISIM_VLLM_EVENT_WIDTH values each */
    size_t n_events, events_cap;   /* events_cap: values */
    int64_t *stretch_out;
    size_t n_stretch_out, stretch_out_cap;
    int64_t *itl_diff;
    size_t n_itl_diff, itl_diff_cap;
    uint32_t *run_values, *run_lengths;     /* aisim_vllm_submit_ranges' runs */
    size_t run_values_cap, run_lengths_cap;
    /* a router's observer (aisim_vllm_observe) */
    int observed;
    uint64_t *stored, *report_stored, *report_evicted;
    size_t n_stored, stored_cap, report_stored_cap, n_report_evicted, report_evicted_cap;
    int64_t *stored_ends, *report_ends, *report_order;
    size_t n_stored_runs, stored_ends_cap, n_report_runs, report_ends_cap, n_report_order,
        report_order_cap;
    slot_list report_prefilled;
    /* MTP bursts (aisim_vllm_set_mtp, engine/mtp.py's MtpBursts): the rank's generator, the
     * conditional acceptance thresholds (always: a rate of 1, accepted without a draw), the
     * longest burst and the requests emitting with the pass in flight, in running order */
    int mtp;
    int mtp_draws;
    int64_t max_burst;
    size_t n_rates;
    uint64_t mtp_limit[AISIM_VLLM_MAX_NEXTN];
    int32_t mtp_always[AISIM_VLLM_MAX_NEXTN];
    aisim_rng *rng;
    const aisim_rng_view *rng_view;
    slot_list emit;
    /* an MTP decode-only run's look-ahead (aisim_vllm_mtp_extend): the generator's copy and
     * each emitter's length and tokens left */
    aisim_rng *sim_rng;
    const aisim_rng_view *sim_view;
    int64_t *sim_len, *sim_left;
    size_t sim_len_cap, sim_left_cap;
    /* a state_cache decode-only run's look-ahead: each decoder's KV blocks and whether its
     * working state is published */
    int64_t *sim_held, *sim_pub;
    size_t sim_held_cap, sim_pub_cap;
    int64_t *mtp_breaks;              /* view.mtp_breaks' triples */
    size_t n_mtp_breaks, mtp_breaks_cap;   /* values */
    /* state_cache (aisim_vllm_set_state, engine/vllm_state_cache.py's StateCache): the
     * working-state blocks of a request, the step (passes formed), the prefixes published
     * during the pass being formed, a checkpoint's keys, the request being preempted */
    int state;
    int64_t state_blocks;
    int64_t step;
    uint64_t *published_now;
    size_t n_published, published_cap;
    uint64_t *state_keys;
    int32_t *state_table;
    int32_t preempting;
    /* prefill_schedule_interval's gate (aisim_vllm_set_psi, engine/vllm_psi.py), borrowed */
    aisim_vllm_psi *psi;
    /* forward-pass metrics (aisim_vllm_set_fpm) of the pass just formed */
    int fpm;
    int64_t *fpm_chunks, *fpm_contexts, *fpm_queued;
    size_t n_fpm_chunks, fpm_chunks_cap, n_fpm_contexts, fpm_contexts_cap, n_fpm_queued,
        fpm_queued_cap;
    aisim_vllm_view view;
};

/* ------------------------------------------------------------ helpers */

/* Python's floor division and modulo (b > 0). */
static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t pymod(int64_t a, int64_t b)
{
    int64_t m = a % b;
    return m < 0 ? m + b : m;
}

static int64_t ceildiv(int64_t a, int64_t b)
{
    return -floordiv(-a, b);
}

static int list_push(slot_list *l, int32_t s)
{
    if (aisim_grow((void **)&l->v, &l->cap, l->len + 1, sizeof *l->v))
        return AISIM_ENOMEM;
    l->v[l->len++] = s;
    return AISIM_OK;
}

static int64_t list_index(const slot_list *l, int32_t s)
{
    size_t i;
    for (i = 0; i < l->len; i++)
        if (l->v[i] == s)
            return (int64_t)i;
    return -1;
}

static void list_remove_at(slot_list *l, size_t i)
{
    memmove(l->v + i, l->v + i + 1, (l->len - i - 1) * sizeof *l->v);
    l->len--;
}

static int list_remove(slot_list *l, int32_t s)
{
    int64_t i = list_index(l, s);
    if (i < 0)
        return AISIM_ECORRUPT;
    list_remove_at(l, (size_t)i);
    return AISIM_OK;
}

static int64_t allocatable(const aisim_vllm_rank *r)
{
    uint64_t n = r->kv->free + r->kv->inactive;
    return n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
}

static int push_event(aisim_vllm_rank *r, int32_t kind, int32_t slot, int64_t a, int64_t b,
                      int64_t c)
{
    int64_t *e;
    size_t at = r->n_events * AISIM_VLLM_EVENT_WIDTH;
    if (aisim_grow((void **)&r->events, &r->events_cap, at + AISIM_VLLM_EVENT_WIDTH, sizeof *r->events))
        return AISIM_ENOMEM;
    e = r->events + at;
    e[0] = kind;
    e[1] = slot;
    e[2] = a;
    e[3] = b;
    e[4] = c;
    r->n_events++;
    return AISIM_OK;
}

static void refresh_view(aisim_vllm_rank *r)
{
    aisim_vllm_view *v = &r->view;
    v->n_running = (int64_t)r->running.len;
    v->n_waiting = (int64_t)r->wait_len;
    v->n_partial = (int64_t)r->partial.len;
    v->n_ready = (int64_t)r->ready.len;
    v->n_rejected = (int64_t)r->rejected.len;
    v->events = r->events;
    v->n_events = r->n_events;
    v->stretches = r->stretch_out;
    v->n_stretch_values = r->n_stretch_out;
    v->itl_diff = r->itl_diff;
    v->n_itl_diff = r->n_itl_diff;
    v->stored = r->stored;
    v->stored_ends = r->stored_ends;
    v->n_stored_runs = r->n_stored_runs;
    v->report_stored = r->report_stored;
    v->report_ends = r->report_ends;
    v->n_report_runs = r->n_report_runs;
    v->report_evicted = r->report_evicted;
    v->n_report_evicted = r->n_report_evicted;
    v->report_order = r->report_order;
    v->n_report_order = r->n_report_order / 2;
    v->report_prefilled = r->report_prefilled.v;
    v->n_report_prefilled = r->report_prefilled.len;
    v->fpm_chunks = r->fpm_chunks;
    v->n_fpm_chunks = r->n_fpm_chunks / 2;
    v->fpm_contexts = r->fpm_contexts;
    v->n_fpm_contexts = r->n_fpm_contexts;
    v->mtp_breaks = r->mtp_breaks;
    v->n_mtp_breaks = r->n_mtp_breaks / 3;
    v->fpm_queued = r->fpm_queued;
    v->n_fpm_queued = r->n_fpm_queued / 2;
    v->n_pending = (int64_t)(r->pending.len - r->pending_head);
    v->retry_due = 0;
    if (v->n_pending) {
        int32_t head = r->pending.v[r->pending_head];
        v->retry_due = r->last_attempt[head] != v->generation &&
                       (int64_t)r->running.len < r->cfg.max_seqs;
    }
}

/* A failure mid-pass: the rank is unusable from now on. */
static int fail(aisim_vllm_rank *r, int status)
{
    r->broken = 1;
    refresh_view(r);
    return status;
}

#define TRY(expr)                         \
    do {                                  \
        int status_ = (expr);             \
        if (status_ < 0)                  \
            return status_;               \
        if (status_ == AISIM_NOSPACE)     \
            return AISIM_ECORRUPT;        \
    } while (0)

/* ------------------------------------------------------------ waiting ring */

static int wait_reserve(aisim_vllm_rank *r)
{
    size_t cap, i;
    int32_t *ring;
    if (r->wait_len < r->wait_cap)
        return AISIM_OK;
    cap = r->wait_cap ? r->wait_cap * 2 : 64;
    ring = malloc(cap * sizeof *ring);
    if (!ring)
        return AISIM_ENOMEM;
    for (i = 0; i < r->wait_len; i++)
        ring[i] = r->wait_ring[(r->wait_head + i) & (r->wait_cap - 1)];
    free(r->wait_ring);
    r->wait_ring = ring;
    r->wait_cap = cap;
    r->wait_head = 0;
    return AISIM_OK;
}

static int32_t wait_front(const aisim_vllm_rank *r)
{
    return r->wait_ring[r->wait_head];
}

static void wait_pop_front(aisim_vllm_rank *r)
{
    r->wait_head = (r->wait_head + 1) & (r->wait_cap - 1);
    r->wait_len--;
}

static int wait_push_back(aisim_vllm_rank *r, int32_t s)
{
    TRY(wait_reserve(r));
    r->wait_ring[(r->wait_head + r->wait_len) & (r->wait_cap - 1)] = s;
    r->wait_len++;
    return AISIM_OK;
}

static int wait_push_front(aisim_vllm_rank *r, int32_t s)
{
    TRY(wait_reserve(r));
    r->wait_head = (r->wait_head + r->wait_cap - 1) & (r->wait_cap - 1);
    r->wait_ring[r->wait_head] = s;
    r->wait_len++;
    return AISIM_OK;
}

/* ------------------------------------------------------------ finishing heap */

static int fin_less(const fin_entry *a, const fin_entry *b)
{
    return a->pass < b->pass;
}

static int heap_push(aisim_vllm_rank *r, int64_t pass, int32_t slot)
{
    size_t i;
    if (aisim_grow((void **)&r->heap, &r->heap_cap, r->heap_len + 1, sizeof *r->heap))
        return AISIM_ENOMEM;
    i = r->heap_len++;
    r->heap[i].pass = pass;
    r->heap[i].slot = slot;
    r->heap[i].generation = r->generation[slot];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        fin_entry tmp;
        if (!fin_less(&r->heap[i], &r->heap[parent]))
            break;
        tmp = r->heap[i];
        r->heap[i] = r->heap[parent];
        r->heap[parent] = tmp;
        i = parent;
    }
    return AISIM_OK;
}

static fin_entry heap_pop(aisim_vllm_rank *r)
{
    fin_entry top = r->heap[0];
    size_t i = 0;
    r->heap[0] = r->heap[--r->heap_len];
    for (;;) {
        size_t left = 2 * i + 1, right = left + 1, least = i;
        fin_entry tmp;
        if (left < r->heap_len && fin_less(&r->heap[left], &r->heap[least]))
            least = left;
        if (right < r->heap_len && fin_less(&r->heap[right], &r->heap[least]))
            least = right;
        if (least == i)
            break;
        tmp = r->heap[i];
        r->heap[i] = r->heap[least];
        r->heap[least] = tmp;
        i = least;
    }
    return top;
}

/* The smallest pass in the heap above `after` (-1: none): entries at `after`
 * or below sit at the top, and a subtree under a larger entry need not be
 * visited. */
static int64_t heap_min_above(const aisim_vllm_rank *r, size_t i, int64_t after)
{
    int64_t best = -1, sub;
    size_t child;
    if (i >= r->heap_len)
        return -1;
    if (r->heap[i].pass > after)
        return r->heap[i].pass;
    for (child = 2 * i + 1; child <= 2 * i + 2; child++) {
        sub = heap_min_above(r, child, after);
        if (sub >= 0 && (best < 0 || sub < best))
            best = sub;
    }
    return best;
}

/* ------------------------------------------------------------ lifecycle */

static void destroy(aisim_vllm_rank *r)
{
    size_t i;
    if (!r)
        return;
    for (i = 0; i < r->n_slots; i++) {
        free(r->hashes[i]);
        free(r->stretches[i]);
        free(r->st_snap[i]);
    }
#define X(type, name) free(r->name);
    REQ_FIELDS(X)
#undef X
    free(r->free_slots.v);
    free(r->wait_ring);
    free(r->running.v);
    free(r->partial.v);
    free(r->ready.v);
    free(r->rejected.v);
    free(r->done.v);
    free(r->pending.v);
    free(r->activated.v);
    if (r->buckets)
        for (i = 0; i < (size_t)r->cfg.block_size; i++) {
            free(r->buckets[i].slots);
            free(r->buckets[i].seqs);
        }
    free(r->buckets);
    free(r->active_keys);
    free(r->key_scratch);
    free(r->count_scratch);
    free(r->heap);
    free(r->events);
    free(r->stretch_out);
    free(r->itl_diff);
    free(r->run_values);
    free(r->run_lengths);
    free(r->stored);
    free(r->report_stored);
    free(r->report_evicted);
    free(r->stored_ends);
    free(r->report_ends);
    free(r->report_order);
    free(r->report_prefilled.v);
    free(r->fpm_chunks);
    free(r->fpm_contexts);
    free(r->fpm_queued);
    free(r->emit.v);
    if (r->rng)
        aisim_rng_free(r->rng);
    if (r->sim_rng)
        aisim_rng_free(r->sim_rng);
    free(r->sim_len);
    free(r->sim_left);
    free(r->sim_held);
    free(r->sim_pub);
    free(r->mtp_breaks);
    free(r->published_now);
    free(r->state_keys);
    free(r->state_table);
    free(r);
}

int aisim_vllm_new(aisim_vllm_rank **out, const aisim_vllm_config *config, aisim_kv_pool *pool)
{
    aisim_vllm_rank *r;
    const aisim_kv_view *kv;
    if (!out || !config || !pool)
        return AISIM_EINVAL;
    if (config->block_size < 1 || config->block_size > MAX_BLOCK_SIZE || config->num_blocks < 1 ||
        config->max_batched < 0 || config->max_seqs < 0 || config->max_model_len < -1 ||
        config->role < AISIM_VLLM_AGGREGATED || config->role > AISIM_VLLM_DECODE)
        return AISIM_EINVAL;
    if (aisim_kv_view_of(pool, &kv))
        return AISIM_EINVAL;
    r = calloc(1, sizeof *r);
    if (!r)
        return AISIM_ENOMEM;
    r->cfg = *config;
    r->pool = pool;
    r->kv = kv;
    r->blocked_slot = -1;
    r->preempting = -1;
    refresh_view(r);
    *out = r;
    return AISIM_OK;
}

int aisim_vllm_free(aisim_vllm_rank *r)
{
    destroy(r);
    return AISIM_OK;
}

int aisim_vllm_view_of(const aisim_vllm_rank *r, const aisim_vllm_view **out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    *out = &r->view;
    return AISIM_OK;
}

static int new_slot(aisim_vllm_rank *r, int32_t *out)
{
    if (r->free_slots.len) {
        *out = r->free_slots.v[--r->free_slots.len];
        return AISIM_OK;
    }
    if (r->n_slots >= (size_t)INT32_MAX)
        return AISIM_ENOMEM;
    if (r->n_slots == r->slot_cap) {
        size_t cap = r->slot_cap ? r->slot_cap * 2 : 64;
#define X(type, name)                                                        \
        {                                                                    \
            type *grown = realloc(r->name, cap * sizeof *grown);             \
            if (!grown)                                                      \
                return AISIM_ENOMEM;                                         \
            r->name = grown;                                                 \
        }
        REQ_FIELDS(X)
#undef X
        /* freeing a slot never allocates: the free list has room for every slot */
        if (aisim_grow((void **)&r->free_slots.v, &r->free_slots.cap, cap, sizeof *r->free_slots.v))
            return AISIM_ENOMEM;
        r->slot_cap = cap;
    }
    *out = (int32_t)r->n_slots;
    r->hashes[r->n_slots] = NULL;
    r->stretches[r->n_slots] = NULL;
    r->st_snap[r->n_slots] = NULL;
    r->hash_cap[r->n_slots] = 0;
    r->stretch_cap[r->n_slots] = 0;
    r->generation[r->n_slots] = 0;
    r->n_slots++;
    return AISIM_OK;
}

/* A request without a RequestState (state_cache: none until it is admitted). */
static void state_clear(aisim_vllm_rank *r, int32_t s)
{
    r->st_has[s] = 0;
    r->st_work[s] = r->st_snap_seq[s] = -1;
    r->st_published[s] = 0;
    r->st_n_snap[s] = 0;
    r->st_computed[s] = 0;
    r->st_snap_step[s] = -1;
    r->st_snap_hash[s] = 0;
}

int aisim_vllm_set_decode_timing(aisim_vllm_rank *r, const aisim_decode_timing *timing)
{
    if (!r)
        return AISIM_EINVAL;
    r->decode_timing = timing;
    return AISIM_OK;
}

/* A new request's slot (aisim_vllm_submit's arguments), in no queue yet: the caller puts
 * it in one (room for it reserved here). */
static int add_request(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                       int64_t out_limit, const uint64_t *hashes, size_t n_hashes,
                       const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                       int32_t authored, uint64_t salt, int32_t *out)
{
    int32_t s;
    size_t i;
    uint64_t total = 0;
    if (!r || (!hashes && n_hashes) || (n_runs && (!values || !lengths || n_hashes)) ||
        prompt_len < 0 || max_output < 0 || out_limit < 0 || prompt_len > INT64_MAX / 4 ||
        max_output > INT64_MAX / 4)
        return AISIM_EINVAL;
    for (i = 0; i < n_runs; i++)
        total += lengths[i];
    if (n_runs && total != (uint64_t)prompt_len)
        return AISIM_EINVAL;   /* the runs are the prompt */
    if (n_runs)
        n_hashes = (size_t)(total / (uint64_t)r->cfg.block_size);
    if (r->broken)
        return AISIM_ECORRUPT;
    /* the events of the latest schedule/complete stay readable: a terminal's callback may
     * submit while Python still reads them */
    TRY(wait_reserve(r));
    TRY(new_slot(r, &s));
    if (aisim_grow((void **)&r->hashes[s], &r->hash_cap[s], n_hashes, sizeof **r->hashes)) {
        r->free_slots.v[r->free_slots.len++] = s;   /* give it back */
        return AISIM_ENOMEM;
    }
    if (n_runs) {
        int written = aisim_hash_block_runs(values, lengths, n_runs,
                                            (uint32_t)r->cfg.block_size, 0, 0, r->hashes[s],
                                            n_hashes);
        if (written != (int)n_hashes) {
            r->free_slots.v[r->free_slots.len++] = s;
            return written < 0 ? written : AISIM_EINVAL;
        }
    } else if (n_hashes) {
        memcpy(r->hashes[s], hashes, n_hashes * sizeof *hashes);
    }
    r->n_hashes[s] = r->n_prompt_hashes[s] = n_hashes;
    r->prompt_len[s] = prompt_len;
    r->max_output[s] = max_output;
    r->out_limit[s] = out_limit;
    r->generated[s] = r->computed[s] = r->held_blocks[s] = r->committed_blocks[s] = 0;
    r->base_pass[s] = r->base_gen[s] = r->base_len[s] = r->grown_mark[s] = 0;
    r->bucket_key[s] = -1;
    r->chunk_tokens[s] = 0;
    r->chunk_isl[s] = r->chunk_prefix[s] = -1;
    r->sched_mark[s] = -1;
    r->footprint_blocks[s] = 0;
    r->gauge_stamp[s] = 0;
    r->seq[s] = -1;
    r->status[s] = ST_WAITING;
    r->in_stretch[s] = 0;
    r->live[s] = 1;
    r->authored[s] = authored != 0;
    r->admissions[s] = r->preemptions[s] = 0;
    r->generation[s]++;
    r->salt[s] = salt;
    r->n_stretch[s] = 0;
    r->waiting_order[s] = 0;
    r->last_attempt[s] = -1;
    state_clear(r, s);
    *out = s;
    return AISIM_OK;
}

int aisim_vllm_submit(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                      int64_t out_limit, const uint64_t *hashes, size_t n_hashes,
                      const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                      int32_t authored, uint64_t salt)
{
    int32_t s;
    int status = add_request(r, prompt_len, max_output, out_limit, hashes, n_hashes, values,
                             lengths, n_runs, authored, salt, &s);
    if (status < 0)
        return status;
    wait_push_back(r, s);   /* room reserved by add_request */
    refresh_view(r);
    return s;
}

/* aisim_runs_from_ranges into r->run_values / run_lengths (ranges shorter than the prompt
 * are AISIM_EINVAL: the caller's runs say why) */
static int runs_from_ranges(aisim_vllm_rank *r, int64_t prompt_len, const uint32_t *ranges,
                            size_t n_ranges, int64_t block, size_t *n_runs)
{
    if (!r)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    return aisim_runs_from_ranges(prompt_len, ranges, n_ranges, block, &r->run_values,
                                  &r->run_values_cap, &r->run_lengths, &r->run_lengths_cap,
                                  n_runs);
}

int aisim_vllm_submit_ranges(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                             int64_t out_limit, const uint32_t *ranges, size_t n_ranges,
                             int64_t block, uint64_t salt)
{
    size_t n;
    int status = runs_from_ranges(r, prompt_len, ranges, n_ranges, block, &n);
    if (status < 0)
        return status;
    return aisim_vllm_submit(r, prompt_len, max_output, out_limit, NULL, 0, r->run_values,
                             r->run_lengths, n, 0, salt);
}

/* ------------------------------------------------------------ KV helpers */

/* Hashes of the first n blocks of prompt + generated tokens (VllmRank._lookup_hashes): blocks
 * past the prompt's are a chain of blocks of zeros whose first parent is salted with the
 * request's uuid (workload/prompt.py extended_hashes), unless the outputs were authored,
 * whose hashes came with the prompt's. */
static int lookup_hashes(aisim_vllm_rank *r, int32_t s, size_t n)
{
    size_t have = r->n_hashes[s];
    uint32_t bs = (uint32_t)r->cfg.block_size;
    if (n <= have)
        return AISIM_OK;
    if (r->authored[s])
        return AISIM_EINVAL;   /* the twin fails too: fewer authored tokens than blocks */
    TRY(aisim_grow((void **)&r->hashes[s], &r->hash_cap[s], n, sizeof **r->hashes));
    while (have < n) {
        uint64_t *h = r->hashes[s];
        size_t prompt = r->n_prompt_hashes[s];
        uint64_t parent = have == prompt ? ((prompt ? h[prompt - 1] : 0) ^ r->salt[s])
                                         : h[have - 1];
        size_t k = n - have, most = UINT32_MAX / bs;
        uint32_t zero = 0, length;
        int written;
        if (k > most)
            k = most;
        length = (uint32_t)(k * bs);
        written = aisim_hash_block_runs(&zero, &length, 1, bs, 1, parent, h + have, k);
        if (written != (int)k)
            return written < 0 ? written : AISIM_ECORRUPT;
        have += k;
    }
    r->n_hashes[s] = have;
    return AISIM_OK;
}

static int commit_full_blocks(aisim_vllm_rank *r, int32_t s, int64_t full)
{
    int64_t done = r->committed_blocks[s];
    if (full > done) {
        size_t count = (size_t)(full - done), kept = count, i;
        TRY(lookup_hashes(r, s, (size_t)full));
        if (r->observed) {   /* the router hears of them when the pass ends */
            TRY(aisim_grow((void **)&r->stored, &r->stored_cap, r->n_stored + count,
                     sizeof *r->stored));
            TRY(aisim_grow((void **)&r->stored_ends, &r->stored_ends_cap, r->n_stored_runs + 1,
                     sizeof *r->stored_ends));
            memcpy(r->stored + r->n_stored, r->hashes[s] + done, count * sizeof *r->stored);
            if (r->mtp || r->state) {
                /* VllmRank.stores_new_only (an MTP or state_cache rank): a block whose hash another copy
                 * caches already makes no store event (the reference's cache_private) */
                kept = 0;
                for (i = 0; i < count; i++) {
                    int resident = aisim_kv_match(r->pool, r->hashes[s] + done + i, 1);
                    if (resident < 0)
                        return resident;
                    if (!resident)
                        r->stored[r->n_stored + kept++] = r->hashes[s][done + i];
                }
            }
        }
        TRY(aisim_kv_commit(r->pool, r->seq[s], r->hashes[s] + done, (uint32_t)done,
                            (uint32_t)(full - done)));
        r->view.kv_version++;
        r->committed_blocks[s] = full;
        if (r->observed) {
            r->n_stored += kept;
            r->stored_ends[r->n_stored_runs++] = (int64_t)r->n_stored;
            r->view.stored_commits++;
        }
    }
    return AISIM_OK;
}

/* ------------------------------------------------------------ state_cache */

/* engine/vllm_state_cache.py (the twin and specification, function for function): a running
 * request's working state is state_blocks blocks of the same pool; a state computed to the end
 * of the known sequence on a block boundary is published as the checkpoint of that prefix
 * (its blocks cached under state_key(prefix hash, i)); before it is written next, a copy
 * preserving the checkpoint is allocated, and released (cached) once the write is done; the
 * next checkpoint discards the previous one. */

static uint64_t state_key(uint64_t prefix, int64_t slot)
{
    uint64_t z = prefix ^ ((uint64_t)(slot + 1) * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const uint64_t *state_keys(aisim_vllm_rank *r, uint64_t prefix)
{
    int64_t i;
    for (i = 0; i < r->state_blocks; i++)
        r->state_keys[i] = state_key(prefix, i);
    return r->state_keys;
}

static int published_now(const aisim_vllm_rank *r, uint64_t prefix)
{
    size_t i;
    for (i = 0; i < r->n_published; i++)
        if (r->published_now[i] == prefix)
            return 1;
    return 0;
}

static int publish(aisim_vllm_rank *r, uint64_t prefix)
{
    if (published_now(r, prefix))
        return AISIM_OK;
    TRY(aisim_grow((void **)&r->published_now, &r->published_cap, r->n_published + 1,
             sizeof *r->published_now));
    r->published_now[r->n_published++] = prefix;
    return AISIM_OK;
}

/* StateCache.has_checkpoint: every key of the prefix's checkpoint is resident, and it was not
 * published during the pass being formed. */
static int has_checkpoint(aisim_vllm_rank *r, uint64_t prefix)
{
    int64_t i;
    if (published_now(r, prefix))
        return 0;
    for (i = 0; i < r->state_blocks; i++)
        if (aisim_kv_key_refs(r->pool, state_key(prefix, i)) < 0)
            return 0;
    return 1;
}

/* The longest prefix of at most `cached` tokens with a checkpoint (its hashes looked up). */
static int64_t state_restorable(aisim_vllm_rank *r, int32_t s, int64_t cached)
{
    int64_t bs = r->cfg.block_size;
    while (cached > 0 && !has_checkpoint(r, r->hashes[s][cached / bs - 1]))
        cached -= bs;
    return cached;
}

static int64_t preserve_need(const aisim_vllm_rank *r, int32_t s, int64_t target)
{
    if (r->st_has[s] && r->st_work[s] >= 0 && target > r->st_computed[s] && r->st_published[s])
        return r->state_blocks;
    return 0;
}

static int64_t write_need(const aisim_vllm_rank *r, int32_t s, int64_t target)
{
    if (!r->st_has[s] || r->st_work[s] < 0)
        return r->state_blocks;
    return preserve_need(r, s, target);
}

/* StateCacheRank._never_fits: computing s to `end` tokens needs more than the whole pool. */
static int never_fits(const aisim_vllm_rank *r, int32_t s, int64_t end)
{
    return ceildiv(end, r->cfg.block_size) + r->state_blocks + preserve_need(r, s, end) >
           r->cfg.num_blocks;
}

/* StateCache.source_need: the cached state blocks no request holds of the checkpoint a
 * restore from `cached` tokens reads (pinned while it is read). */
static int64_t source_need(aisim_vllm_rank *r, int32_t s, int64_t cached)
{
    int64_t i, count = 0;
    uint64_t prefix;
    if (!cached)
        return 0;
    prefix = r->hashes[s][cached / r->cfg.block_size - 1];
    for (i = 0; i < r->state_blocks; i++)
        count += aisim_kv_key_refs(r->pool, state_key(prefix, i)) == 0;
    return count;
}

static int snap_blocks(aisim_vllm_rank *r, int32_t s, int32_t seq)
{
    int n;
    if (!r->st_snap[s]) {
        r->st_snap[s] = malloc((size_t)r->state_blocks * sizeof **r->st_snap);
        if (!r->st_snap[s])
            return AISIM_ENOMEM;
    }
    n = aisim_kv_seq_blocks(r->pool, seq, r->st_snap[s], (size_t)r->state_blocks);
    if (n < 0)
        return n;
    if (n != r->state_blocks)
        return AISIM_ECORRUPT;
    r->st_n_snap[s] = n;
    return AISIM_OK;
}

/* The latest checkpoint's blocks go unless evicted or reused since (StatePool.discard). */
static int discard_snap(aisim_vllm_rank *r, int32_t s)
{
    int32_t i;
    if (!r->st_n_snap[s])
        return AISIM_OK;
    state_keys(r, r->st_snap_hash[s]);
    for (i = 0; i < r->st_n_snap[s]; i++) {
        int freed = aisim_kv_discard(r->pool, r->st_snap[s][i], r->state_keys[i]);
        if (freed < 0)   /* (1: freed, 0: evicted or reused since) */
            return freed;
    }
    return AISIM_OK;
}

/* StateCache.prepare: before computing s up to `target`, its working blocks (a restored
 * request's read from its checkpoint, pinned meanwhile: *pin the pool sequence to release
 * once the pass's blocks are taken), or the copy preserving its published checkpoint. */
static int state_prepare(aisim_vllm_rank *r, int32_t s, int64_t target, int32_t *pin)
{
    int32_t blocks = (int32_t)r->state_blocks;
    int seq;
    *pin = -1;
    if (!r->st_has[s]) {
        state_clear(r, s);
        r->st_has[s] = 1;
    }
    if (r->st_work[s] < 0) {
        if (r->st_computed[s]) {
            const uint64_t *keys =
                state_keys(r, r->hashes[s][r->st_computed[s] / r->cfg.block_size - 1]);
            seq = aisim_kv_new_seq(r->pool);
            if (seq < 0)
                return seq;
            *pin = seq;
            TRY(aisim_kv_acquire(r->pool, seq, keys, (size_t)blocks));
        }
        seq = aisim_kv_new_seq(r->pool);
        if (seq < 0)
            return seq;
        r->st_work[s] = seq;
        TRY(aisim_kv_allocate(r->pool, seq, (uint32_t)blocks));
    } else if (target > r->st_computed[s] && r->st_published[s]) {
        seq = aisim_kv_new_seq(r->pool);
        if (seq < 0)
            return seq;
        r->st_snap_seq[s] = seq;
        TRY(aisim_kv_allocate(r->pool, seq, (uint32_t)blocks));
        TRY(aisim_kv_commit(r->pool, seq, state_keys(r, r->st_snap_hash[s]), 0,
                            (uint32_t)blocks));
        TRY(aisim_kv_uncache(r->pool, r->st_work[s]));
        r->st_published[s] = 0;
        TRY(snap_blocks(r, s, seq));
        r->st_snap_step[s] = r->step;
        TRY(publish(r, r->st_snap_hash[s]));
    }
    return AISIM_OK;
}

/* StateCache.commit: s's state now covers `computed` tokens; with has_cp, published as the
 * checkpoint of prefix `cp`. */
static int state_commit(aisim_vllm_rank *r, int32_t s, int64_t computed, int has_cp,
                        uint64_t cp)
{
    uint32_t blocks = (uint32_t)r->state_blocks;
    if (computed == r->st_computed[s] || r->st_work[s] < 0)
        return AISIM_OK;
    if (r->st_snap_seq[s] >= 0) {
        TRY(aisim_kv_release(r->pool, r->st_snap_seq[s]));
        r->st_snap_seq[s] = -1;
    }
    r->st_computed[s] = computed;
    if (!has_cp)
        return AISIM_OK;
    TRY(discard_snap(r, s));
    TRY(aisim_kv_commit(r->pool, r->st_work[s], state_keys(r, cp), 0, blocks));
    r->st_published[s] = 1;
    TRY(snap_blocks(r, s, r->st_work[s]));
    r->st_snap_hash[s] = cp;
    r->st_snap_step[s] = r->step;
    return publish(r, cp);
}

/* StateCache.release (*had: s had a state), and with `preempted` StateCache.preempt: a
 * preemption also discards a checkpoint the retracted pass published. */
static int state_release(aisim_vllm_rank *r, int32_t s, int preempted)
{
    if (!r->st_has[s])
        return AISIM_OK;
    r->st_has[s] = 0;
    if (r->st_snap_seq[s] >= 0)
        TRY(aisim_kv_release(r->pool, r->st_snap_seq[s]));
    if (r->st_work[s] >= 0)
        TRY(aisim_kv_release(r->pool, r->st_work[s]));
    if (preempted && r->st_snap_step[s] == r->step)
        TRY(discard_snap(r, s));
    state_clear(r, s);
    return AISIM_OK;
}

int aisim_vllm_set_state(aisim_vllm_rank *r, int64_t state_blocks)
{
    if (!r || state_blocks < 1 || state_blocks > r->cfg.num_blocks || r->n_slots || r->state ||
        r->mtp || r->cfg.role != AISIM_VLLM_AGGREGATED || r->cfg.no_evict)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    r->state_keys = malloc((size_t)state_blocks * sizeof *r->state_keys);
    if (!r->state_keys)
        return AISIM_ENOMEM;
    r->state_blocks = state_blocks;
    r->state = 1;
    return AISIM_OK;
}

static int release(aisim_vllm_rank *r, int32_t s)
{
    r->view.generation++;   /* the decode role's capacity generation: a failed head may fit */
    if (r->seq[s] < 0)
        return AISIM_OK;
    /* a request's state goes back before its KV (StateCacheRank._release) */
    if (r->state)
        TRY(state_release(r, s, r->preempting == s));
    if (r->cfg.caching)
        TRY(commit_full_blocks(r, s, r->computed[s] / r->cfg.block_size));
    TRY(aisim_kv_release(r->pool, r->seq[s]));
    r->view.kv_version++;
    r->seq[s] = -1;
    r->view.held_total -= r->held_blocks[s];
    r->held_blocks[s] = 0;
    if (r->cfg.no_evict)
        r->completion_total -= r->footprint_blocks[s];
    r->committed_blocks[s] = 0;
    return AISIM_OK;
}

static int take_blocks(aisim_vllm_rank *r, int32_t s, int64_t hits, int64_t footprint)
{
    int seq = aisim_kv_new_seq(r->pool);
    if (seq < 0)
        return seq;
    r->seq[s] = seq;
    if (hits)
        TRY(aisim_kv_acquire(r->pool, seq, r->hashes[s], (size_t)hits));
    r->held_blocks[s] = hits;
    r->committed_blocks[s] = hits;
    r->view.held_total += hits;
    if (r->cfg.no_evict) {
        r->footprint_blocks[s] = footprint;
        r->completion_total += footprint;
    }
    return AISIM_OK;
}

/* ------------------------------------------------------------ stretches */

/* The buckets (one per pass offset) and their key lists, made with the first open stretch:
 * a rank that never decodes (a DP group's idle ranks, 65,536 of them at most) costs no
 * block_size-sized memory. */
static int ensure_buckets(aisim_vllm_rank *r)
{
    size_t bs = (size_t)r->cfg.block_size;
    if (r->buckets)
        return AISIM_OK;
    r->active_keys = malloc(bs * sizeof *r->active_keys);
    r->key_scratch = malloc(bs * sizeof *r->key_scratch);
    r->count_scratch = malloc(bs * sizeof *r->count_scratch);
    if (r->active_keys && r->key_scratch && r->count_scratch)
        r->buckets = calloc(bs, sizeof *r->buckets);   /* last: it marks success */
    return r->buckets ? AISIM_OK : AISIM_ENOMEM;
}

static int open_stretch(aisim_vllm_rank *r, int32_t s, int64_t P)
{
    int64_t bs = r->cfg.block_size, key, last;
    bucket *b;
    r->in_stretch[s] = 1;
    r->base_pass[s] = P;
    r->base_gen[s] = r->generated[s];
    r->base_len[s] = r->prompt_len[s] + r->generated[s];
    TRY(ensure_buckets(r));
    key = pymod(P + 1 - r->base_len[s], bs);
    r->bucket_key[s] = key;
    b = &r->buckets[key];
    TRY(aisim_grow((void **)&b->slots, &b->cap, b->len + 1, sizeof *b->slots));
    TRY(aisim_grow((void **)&b->seqs, &b->seq_cap, b->len + 1, sizeof *b->seqs));
    if (b->len == 0) {   /* a bucket opens */
        b->grown = 0;
        b->pos = (int64_t)r->n_active_keys;
        r->active_keys[r->n_active_keys++] = key;
    }
    r->grown_mark[s] = b->grown;
    b->slots[b->len] = s;
    b->seqs[b->len] = r->seq[s];
    b->len++;
    r->view.n_dec++;
    r->view.sum_base += r->base_len[s] - P;
    last = P + r->out_limit[s] - r->generated[s] - 1;
    if (last <= P)
        return AISIM_OK;   /* finishes with this very token; complete() retires it */
    return heap_push(r, last, s);
}

static int close_stretch(aisim_vllm_rank *r, int32_t s, int64_t last_pass)
{
    int64_t key = r->bucket_key[s], emitted;
    bucket *b = &r->buckets[key];
    size_t i;
    r->in_stretch[s] = 0;
    r->held_blocks[s] += b->grown - r->grown_mark[s];
    for (i = 0; i < b->len && b->slots[i] != s; i++)
        ;
    if (i == b->len)
        return AISIM_ECORRUPT;
    memmove(b->slots + i, b->slots + i + 1, (b->len - i - 1) * sizeof *b->slots);
    memmove(b->seqs + i, b->seqs + i + 1, (b->len - i - 1) * sizeof *b->seqs);
    b->len--;
    if (b->len == 0) {
        /* out of the active keys, which stay in opening order (the twin's dict order, which
         * forward-pass metrics sum in) */
        size_t k;
        for (k = (size_t)b->pos; k + 1 < r->n_active_keys; k++) {
            r->active_keys[k] = r->active_keys[k + 1];
            r->buckets[r->active_keys[k]].pos = (int64_t)k;
        }
        r->n_active_keys--;
        b->grown = 0;
    }
    r->view.n_dec--;
    r->view.sum_base -= r->base_len[s] - r->base_pass[s];
    emitted = last_pass - r->base_pass[s] + 1;
    if (emitted > 0) {
        size_t n = r->n_stretch[s];
        TRY(aisim_grow((void **)&r->stretches[s], &r->stretch_cap[s], n + 2, sizeof **r->stretches));
        r->stretches[s][n] = r->base_pass[s];
        r->stretches[s][n + 1] = last_pass;
        r->n_stretch[s] = n + 2;
    }
    r->generated[s] = r->base_gen[s] + emitted;
    r->computed[s] = r->prompt_len[s] + r->generated[s] - 1;
    return AISIM_OK;
}

static int break_stretch(aisim_vllm_rank *r, int32_t s, int64_t P)
{
    TRY(close_stretch(r, s, P - 1));
    return list_push(&r->partial, s);
}

static void free_slot(aisim_vllm_rank *r, int32_t s)
{
    r->live[s] = 0;
    r->status[s] = ST_FINISHED;
    r->generation[s]++;   /* stale finishing entries and memos no longer match it */
    r->free_slots.v[r->free_slots.len++] = s;   /* room made in new_slot */
}

/* A finished request's inter-token gaps (RankBase._record_itl): each stretch's via the
 * difference array; the gaps across breaks between stretches Python counts from the event. */
static void record_itl(aisim_vllm_rank *r, int32_t s)
{
    size_t i;
    for (i = 0; i < r->n_stretch[s]; i += 2) {
        int64_t first = r->stretches[s][i], last = r->stretches[s][i + 1];
        if (last > first) {
            r->itl_diff[first]++;
            r->itl_diff[last]--;
        }
    }
}

/* An MTP request's break gaps (engine/mtp.py record_burst_itl): the break after each stretch,
 * (its last pass, the next one's first), (0, 0) for one of zero length, into the rank's
 * triples (consecutive equal ones merged: the same counts in the same first-seen order). */
static int mtp_count_breaks(aisim_vllm_rank *r, int32_t s)
{
    size_t i, n = r->n_stretch[s];
    const int64_t *st = r->stretches[s];
    for (i = 2; i < n; i += 2) {
        int64_t before = st[i - 1], after = st[i], *last;
        if (before == after)
            before = after = 0;
        last = r->n_mtp_breaks ? r->mtp_breaks + r->n_mtp_breaks - 3 : NULL;
        if (last && last[0] == before && last[1] == after) {
            last[2]++;
            continue;
        }
        TRY(aisim_grow((void **)&r->mtp_breaks, &r->mtp_breaks_cap, r->n_mtp_breaks + 3,
                 sizeof *r->mtp_breaks));
        r->mtp_breaks[r->n_mtp_breaks++] = before;
        r->mtp_breaks[r->n_mtp_breaks++] = after;
        r->mtp_breaks[r->n_mtp_breaks++] = 1;
    }
    return AISIM_OK;
}

/* The prefill role's retirement (VllmPrefillRank._retire): the copy leaves the batch but
 * keeps its KV, referenced until aisim_vllm_release_source (its slot stays live). */
static int hold_source(aisim_vllm_rank *r, int32_t s)
{
    r->status[s] = ST_HELD;
    r->view.held_total -= r->held_blocks[s];
    r->held_blocks[s] = 0;
    if (r->cfg.no_evict) {
        r->completion_total -= r->footprint_blocks[s];
        r->footprint_blocks[s] = 0;
        r->view.kv_version++;   /* its output room is free: a waiting head may fit now */
    }
    r->view.held_sources++;
    return AISIM_OK;
}

/* ``s`` has generated its last token (or had none to generate): it leaves the rank. The
 * event carries its stretches (copied out) and the slot is freed, or on a prefill rank
 * held. */
/* A terminal's (or held source's) event with its stretches copied out. */
static int push_terminal(aisim_vllm_rank *r, int32_t kind, int32_t s)
{
    size_t n = r->n_stretch[s];
    TRY(aisim_grow((void **)&r->stretch_out, &r->stretch_out_cap, r->n_stretch_out + n,
             sizeof *r->stretch_out));
    TRY(push_event(r, kind, s, (int64_t)(r->n_stretch_out / 2), (int64_t)(n / 2),
                   r->generated[s]));
    if (n)
        memcpy(r->stretch_out + r->n_stretch_out, r->stretches[s], n * sizeof *r->stretch_out);
    r->n_stretch_out += n;
    return AISIM_OK;
}

static int retire(aisim_vllm_rank *r, int32_t s)
{
    int held = r->cfg.role == AISIM_VLLM_PREFILL;
    TRY(list_remove(&r->running, s));
    TRY(held ? hold_source(r, s) : release(r, s));
    TRY(push_terminal(r, held ? AISIM_VLLM_HELD : AISIM_VLLM_FINISHED, s));
    if (!held)
        free_slot(r, s);
    return AISIM_OK;
}

static int preempt(aisim_vllm_rank *r, int32_t s, int64_t P)
{
    if (r->in_stretch[s])
        TRY(close_stretch(r, s, P - 1));
    else
        TRY(list_remove(&r->partial, s));
    TRY(list_remove(&r->running, s));
    r->preempting = s;
    TRY(release(r, s));
    r->preempting = -1;
    r->computed[s] = 0;
    r->status[s] = ST_PREEMPTED;
    r->preemptions[s]++;
    r->view.preemptions++;
    TRY(wait_push_front(r, s));
    return push_event(r, AISIM_VLLM_PREEMPTED, s, r->preemptions[s], 0, r->generated[s]);
}

/* ------------------------------------------------------------ scheduling */

/* Compute `tokens` more known tokens of a request outside an open stretch (its KV). */
static int chunk_kv(aisim_vllm_rank *r, int32_t s, int64_t tokens)
{
    int64_t bs = r->cfg.block_size, start = r->computed[s], end = start + tokens, need;
    int64_t prompt = r->prompt_len[s], prompt_start, prompt_end;
    aisim_vllm_view *v = &r->view;
    need = ceildiv(end, bs) - r->held_blocks[s];
    if (need > 0) {
        if (need > UINT32_MAX)
            return AISIM_ECORRUPT;
        TRY(aisim_kv_allocate(r->pool, r->seq[s], (uint32_t)need));
        r->held_blocks[s] += need;
        v->held_total += need;
    }
    r->computed[s] = end;
    v->chunked_pass = 1;
    prompt_start = start < prompt ? start : prompt;
    prompt_end = end < prompt ? end : prompt;
    r->chunk_tokens[s] = tokens;
    if (prompt_end > prompt_start) {
        v->pf_count++;
        v->pf_isl += prompt_end;
        v->pf_prefix += prompt_start;
        v->pf_tokens += tokens;
        r->chunk_isl[s] = prompt_end;
        r->chunk_prefix[s] = prompt_start;
        if (r->fpm) {
            TRY(aisim_grow((void **)&r->fpm_chunks, &r->fpm_chunks_cap, r->n_fpm_chunks + 2,
                     sizeof *r->fpm_chunks));
            r->fpm_chunks[r->n_fpm_chunks++] = prompt;
            r->fpm_chunks[r->n_fpm_chunks++] = prompt_start;
        }
    } else {
        r->chunk_isl[s] = r->chunk_prefix[s] = -1;
    }
    if (r->cfg.caching)
        TRY(commit_full_blocks(r, s, end / bs));
    return AISIM_OK;
}

/* chunk_kv, and on a state_cache rank its state's write around it (StateCacheRank._run_chunk):
 * a checkpoint where the computed tokens end the known sequence on a block boundary. */
static int run_chunk(aisim_vllm_rank *r, int32_t s, int64_t tokens)
{
    int64_t bs = r->cfg.block_size, end = r->computed[s] + tokens;
    uint64_t cp = 0;
    int32_t pin;
    int has_cp = 0;
    if (!r->state)
        return chunk_kv(r, s, tokens);
    TRY(state_prepare(r, s, end, &pin));
    TRY(chunk_kv(r, s, tokens));
    if (pin >= 0)
        TRY(aisim_kv_release(r->pool, pin));
    if (end == r->prompt_len[s] + r->generated[s] && r->cfg.caching && end % bs == 0) {
        TRY(lookup_hashes(r, s, (size_t)(end / bs)));
        cp = r->hashes[s][end / bs - 1];
        has_cp = 1;
    }
    return state_commit(r, s, end, has_cp, cp);
}

/* A running request whose next step can never fit the pool is rejected (state_cache). */
static int reject_running(aisim_vllm_rank *r, int32_t s)
{
    TRY(list_remove(&r->partial, s));
    TRY(list_remove(&r->running, s));
    TRY(release(r, s));
    r->status[s] = ST_FINISHED;
    return list_push(&r->rejected, s);
}

static int grow_decoders(aisim_vllm_rank *r, int64_t P)
{
    bucket *b = &r->buckets[pymod(P, r->cfg.block_size)];
    if (b->len) {
        TRY(aisim_kv_allocate_each(r->pool, b->seqs, b->len, 1));
        b->grown++;
        r->view.held_total += (int64_t)b->len;
    }
    return AISIM_OK;
}

/* Undo this pass's work of an already scheduled victim; returns the refunded budget. */
static int64_t roll_back(aisim_vllm_rank *r, int32_t s)
{
    aisim_vllm_view *v = &r->view;
    if (r->in_stretch[s])
        return 1;
    if (r->chunk_isl[s] >= 0) {
        v->pf_count--;
        v->pf_isl -= r->chunk_isl[s];
        v->pf_prefix -= r->chunk_prefix[s];
        v->pf_tokens -= r->chunk_tokens[s];
    }
    return r->chunk_tokens[s];
}

/* Exact walk over the running queue in order: budget, blocking and preemption (`defer`:
 * requests still computing their prompt are skipped, engine/vllm_psi.py). */
static int running_walk(aisim_vllm_rank *r, int64_t P, int64_t *budget, int *preempted,
                        int defer)
{
    int64_t bs = r->cfg.block_size;
    size_t i = 0;
    while (i < r->running.len && *budget > 0) {
        int32_t s = r->running.v[i];
        int64_t tokens, need;
        int dropped = 0;
        if (r->in_stretch[s]) {
            int64_t length = r->base_len[s] + P - r->base_pass[s];
            tokens = 1;
            need = pymod(length - 1, bs) == 0 ? 1 : 0;
        } else if (defer && r->computed[s] < r->prompt_len[s]) {
            i++;
            continue;
        } else {
            int64_t remaining = r->prompt_len[s] + r->generated[s] - r->computed[s];
            int64_t prompt_left = r->prompt_len[s] - r->computed[s];
            if (!r->cfg.chunked && 0 < prompt_left && prompt_left > *budget)
                break;
            tokens = remaining < *budget ? remaining : *budget;
            need = ceildiv(r->computed[s] + tokens, bs) - r->held_blocks[s];
            if (r->state) {
                int64_t end = r->computed[s] + tokens;
                if (never_fits(r, s, end)) {
                    TRY(reject_running(r, s));
                    continue;
                }
                need += write_need(r, s, end);
            }
        }
        if (r->cfg.no_evict && need > allocatable(r))
            break;   /* the reservation under-counted: TRT-LLM declines to preempt */
        while (need > allocatable(r)) {
            int32_t victim = r->cfg.lifo ? r->running.v[r->running.len - 1] : r->running.v[0];
            if (r->sched_mark[victim] == P)
                *budget += roll_back(r, victim);
            TRY(preempt(r, victim, P));
            *preempted = 1;
            if (victim == s) {
                dropped = 1;
                break;
            }
            /* the reference does not move its cursor when an earlier request leaves */
        }
        if (dropped)
            continue;
        if (r->in_stretch[s]) {
            if (need) {
                TRY(aisim_kv_allocate(r->pool, r->seq[s], 1));
                r->held_blocks[s] += 1;
                r->view.held_total += 1;
            }
        } else {
            TRY(run_chunk(r, s, tokens));
        }
        r->sched_mark[s] = P;
        *budget -= tokens;
        i++;
    }
    /* requests the walk did not reach (or skipped) get nothing this pass */
    for (i = 0; i < r->running.len; i++) {
        int32_t s = r->running.v[i];
        if (r->in_stretch[s] && r->sched_mark[s] != P)
            TRY(break_stretch(r, s, P));
    }
    return AISIM_OK;
}

static int reject_head(aisim_vllm_rank *r)
{
    int32_t s = wait_front(r);
    wait_pop_front(r);
    r->status[s] = ST_FINISHED;
    return list_push(&r->rejected, s);
}

/* How many of the first n blocks of s are cached (pool.match_counts): *hits in all, *active
 * those in use. */
static int match_prefix(aisim_vllm_rank *r, int32_t s, size_t n, int64_t *hits,
                        int64_t *active_hits)
{
    int matched;
    TRY(lookup_hashes(r, s, n));
    if (n > r->n_hashes[s])
        n = r->n_hashes[s];
    if (n > INT32_MAX)
        return AISIM_ECORRUPT;
    matched = aisim_kv_match(r->pool, r->hashes[s], n);
    if (matched < 0)
        return matched;
    *hits = matched;
    *active_hits = (int64_t)r->kv->match_active;
    return AISIM_OK;
}

/* Admit or reject the head of the queue: *budget is what is left, *waits set when the head
 * has to wait (and nothing behind it may start). */
static int admit_head(aisim_vllm_rank *r, double now_ms, int64_t *budget, int *waits)
{
    int64_t bs = r->cfg.block_size, length, hit_blocks = 0, active_hits = 0, cached,
            active_cached, available, needed, remaining, prompt_left, tokens, footprint = 0;
    int no_evict = r->cfg.no_evict;
    int32_t s = wait_front(r);
    int64_t state_blocks = r->state ? r->state_blocks : 0;
    int fresh;
    (void)now_ms;
    *waits = 0;
    if (r->blocked_slot == s && r->blocked_generation == r->generation[s] &&
        r->blocked_version == r->view.kv_version && (int64_t)r->kv->active >= r->blocked_active) {
        *waits = 1;
        return AISIM_OK;
    }
    fresh = r->admissions[s] == 0;
    length = r->prompt_len[s] + r->generated[s];
    if (r->cfg.max_model_len >= 0 && r->prompt_len[s] >= r->cfg.max_model_len)
        return reject_head(r);
    if (no_evict)
        footprint = ceildiv(r->prompt_len[s] + r->out_limit[s], bs);
    /* a request's working state takes blocks of the same pool (state_cache) */
    if (fresh && (no_evict ? footprint : ceildiv(length, bs) + state_blocks) > r->cfg.num_blocks)
        return reject_head(r);
    if (no_evict && r->prompt_len[s] >= r->cfg.num_blocks * bs)
        return reject_head(r);
    if (r->cfg.caching)
        TRY(match_prefix(r, s, (size_t)(length / bs), &hit_blocks, &active_hits));
    cached = hit_blocks * bs;
    active_cached = active_hits * bs;
    if (cached > length)
        cached = length;
    if (active_cached > length)
        active_cached = length;
    if (r->generated[s] < r->max_output[s] && !no_evict) {
        /* the last block is recomputed to get logits (TensorRT-LLM reuses all of it) */
        int64_t cap = floordiv(length - 1, bs) * bs;
        if (cached > cap)
            cached = cap;
        if (active_cached > cap)
            active_cached = cap;
        if (r->mtp && cached >= bs) {
            /* engine/mtp.py mtp_prefix_hit: the drafter needs the last hit block's states */
            cached -= bs;
            if (active_cached > cached)
                active_cached = cached;
        }
    }
    if (r->state && cached && r->cfg.caching) {
        cached = state_restorable(r, s, cached);
        if (active_cached > cached)
            active_cached = cached;
    }
    available = r->cfg.num_blocks - (int64_t)r->kv->active;
    if (no_evict) {
        needed = footprint - floordiv(active_cached, bs);
        available -= r->completion_total - r->view.held_total;
    } else {
        needed = ceildiv(length, bs) - floordiv(active_cached, bs) + state_blocks;
        if (state_blocks)
            needed += source_need(r, s, cached);
    }
    if (needed > available) {
        r->blocked_slot = s;
        r->blocked_generation = r->generation[s];
        r->blocked_version = r->view.kv_version;
        r->blocked_active = (int64_t)r->kv->active;
        *waits = 1;
        return AISIM_OK;
    }
    remaining = length - cached;
    prompt_left = r->prompt_len[s] - cached;
    if (prompt_left > 1 && r->psi && r->psi->defer) {
        *waits = 1;   /* a deferring pass admits only what needs at most one prompt token */
        return AISIM_OK;
    }
    if (!r->cfg.chunked && 0 < prompt_left && prompt_left > *budget) {
        *waits = 1;
        return AISIM_OK;
    }
    tokens = remaining < *budget ? remaining : *budget;
    if (tokens == 0 && remaining > 0) {
        *waits = 1;
        return AISIM_OK;
    }
    TRY(list_push(&r->running, s));
    TRY(list_push(&r->partial, s));
    wait_pop_front(r);
    TRY(take_blocks(r, s, floordiv(cached, bs), footprint));
    r->computed[s] = cached;
    r->status[s] = ST_RUNNING;
    if (r->state) {   /* StateCacheRank._admitted */
        state_clear(r, s);
        r->st_has[s] = 1;
        r->st_computed[s] = cached;
    }
    TRY(run_chunk(r, s, tokens));
    r->admissions[s]++;
    TRY(push_event(r, AISIM_VLLM_ADMITTED, s, cached, !fresh, 0));
    *budget -= tokens;
    return AISIM_OK;
}

/* The waiting ring's position i (0: the front). */
static int32_t *wait_at(aisim_vllm_rank *r, size_t i)
{
    return &r->wait_ring[(r->wait_head + i) & (r->wait_cap - 1)];
}

static void wait_remove_at(aisim_vllm_rank *r, size_t i)
{
    size_t j;
    if (i == 0) {
        wait_pop_front(r);
        return;
    }
    for (j = i; j + 1 < r->wait_len; j++)
        *wait_at(r, j) = *wait_at(r, j + 1);
    r->wait_len--;
}

/* Decode role (VllmDecodeRank._admit_activated): start activated request s, at waiting
 * position i, with no lookup, no capacity check and zero tokens to compute; *started 0 when
 * max_model_len rejects it instead. */
static int admit_activated(aisim_vllm_rank *r, int32_t s, size_t i, int *started)
{
    wait_remove_at(r, i);
    if (r->cfg.max_model_len >= 0 && r->prompt_len[s] >= r->cfg.max_model_len) {
        TRY(release(r, s));
        r->status[s] = ST_FINISHED;
        *started = 0;
        return list_push(&r->rejected, s);
    }
    r->status[s] = ST_RUNNING;
    r->chunk_tokens[s] = 0;
    r->chunk_isl[s] = r->chunk_prefix[s] = -1;
    TRY(list_push(&r->running, s));
    TRY(list_push(&r->partial, s));
    r->admissions[s]++;
    *started = 1;
    return push_event(r, AISIM_VLLM_ADMITTED, s, 0, 0, 0);
}

static int64_t wait_index(aisim_vllm_rank *r, int32_t s)
{
    size_t i;
    for (i = 0; i < r->wait_len; i++)
        if (*wait_at(r, i) == s)
            return (int64_t)i;
    return -1;
}

/* Decode role (VllmDecodeRank._admit_waiting): while a destination waits for room, only
 * activated requests (those with a KV table) may start. */
static int admit_waiting_decode(aisim_vllm_rank *r, double now_ms, int64_t budget)
{
    int started;
    if (r->pending.len > r->pending_head) {
        size_t i;
        r->activated.len = 0;
        for (i = 0; i < r->wait_len; i++)
            if (r->seq[*wait_at(r, i)] >= 0)
                TRY(list_push(&r->activated, *wait_at(r, i)));
        for (i = 0; i < r->activated.len; i++) {
            int32_t s = r->activated.v[i];
            int64_t at;
            if ((int64_t)r->running.len >= r->cfg.max_seqs)
                break;
            at = wait_index(r, s);
            if (at < 0)
                return AISIM_ECORRUPT;
            TRY(admit_activated(r, s, (size_t)at, &started));
            if (started && budget == 0)
                break;
        }
        return AISIM_OK;
    }
    while (r->wait_len && (int64_t)r->running.len < r->cfg.max_seqs) {
        int32_t s = wait_front(r);
        if (r->seq[s] >= 0) {
            TRY(admit_activated(r, s, 0, &started));
            if (started && budget == 0)
                break;
        } else {
            int waits;
            TRY(admit_head(r, now_ms, &budget, &waits));
            if (waits)
                break;
        }
    }
    return AISIM_OK;
}

static int admit_waiting(aisim_vllm_rank *r, double now_ms, int64_t budget, int64_t *admitted)
{
    size_t before = r->running.len;
    if (r->cfg.role == AISIM_VLLM_DECODE) {
        TRY(admit_waiting_decode(r, now_ms, budget));
    } else {
        while (r->wait_len && (int64_t)r->running.len < r->cfg.max_seqs) {
            int waits;
            TRY(admit_head(r, now_ms, &budget, &waits));
            if (waits)
                break;
        }
    }
    *admitted = (int64_t)(r->running.len - before);
    return AISIM_OK;
}

static int push_value(int64_t **array, size_t *n, size_t *cap, int64_t value)
{
    TRY(aisim_grow((void **)array, cap, *n + 1, sizeof **array));
    (*array)[(*n)++] = value;
    return AISIM_OK;
}

/* What forward-pass metrics read of the pass just formed (engine/fpm.py pass_row and
 * queue_stats), in the twin's order: each open stretch's context (buckets in opening
 * order, members in joining order), then each ready request's step after no prompt work;
 * the queue as (resumes after a preemption: 1, 0) and length pairs. */
static int fpm_pass(aisim_vllm_rank *r, int64_t P)
{
    size_t i, j;
    r->n_fpm_contexts = r->n_fpm_queued = 0;
    for (i = 0; i < r->n_active_keys; i++) {
        const bucket *b = &r->buckets[r->active_keys[i]];
        for (j = 0; j < b->len; j++) {
            int32_t s = b->slots[j];
            TRY(push_value(&r->fpm_contexts, &r->n_fpm_contexts, &r->fpm_contexts_cap,
                           r->base_len[s] - r->base_pass[s] + P));
        }
    }
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        /* (an MTP rank has no open stretches: its decoders are the requests stepped without
         * prompt work, before their tokens; else a decode-role activation's step) */
        if (r->chunk_isl[s] < 0 && (r->mtp || r->state
                                        ? r->generated[s] < r->out_limit[s]
                                        : r->out_limit[s] > 0 && !r->generated[s]))
            TRY(push_value(&r->fpm_contexts, &r->n_fpm_contexts, &r->fpm_contexts_cap,
                           r->prompt_len[s] + r->generated[s]));
    }
    for (i = 0; i < r->wait_len; i++) {
        int32_t s = r->wait_ring[(r->wait_head + i) & (r->wait_cap - 1)];
        int resumes = r->generated[s] != 0;
        TRY(push_value(&r->fpm_queued, &r->n_fpm_queued, &r->fpm_queued_cap, resumes));
        TRY(push_value(&r->fpm_queued, &r->n_fpm_queued, &r->fpm_queued_cap,
                       resumes ? r->prompt_len[s] + r->generated[s] : r->prompt_len[s]));
    }
    return AISIM_OK;
}

int aisim_vllm_set_fpm(aisim_vllm_rank *r, int32_t on)
{
    if (!r)
        return AISIM_EINVAL;
    r->fpm = on != 0;
    return AISIM_OK;
}

/* ------------------------------------------------------------ MTP bursts (engine/mtp.py) */

int aisim_vllm_set_mtp(aisim_vllm_rank *r, int32_t nextn, const uint64_t *limits,
                       const int32_t *always, uint64_t seed, int32_t draws)
{
    int32_t i;
    if (!r || nextn < 1 || nextn > AISIM_VLLM_MAX_NEXTN || !limits || !always || r->n_slots ||
        r->mtp)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    if (aisim_rng_new(&r->rng))
        return AISIM_ENOMEM;
    aisim_rng_seed_u64(r->rng, seed);
    aisim_rng_view_of(r->rng, &r->rng_view);
    for (i = 0; i < nextn; i++) {
        r->mtp_limit[i] = limits[i];
        r->mtp_always[i] = always[i] != 0;
    }
    r->n_rates = (size_t)nextn;
    r->mtp_draws = draws != 0;
    r->max_burst = r->mtp_draws ? nextn + 1 : 1;
    r->mtp = 1;
    return AISIM_OK;
}

/* One burst's accepted tokens (MtpBursts.draw, StdRng.accepted_tokens): draft i is accepted
 * when its rate is 1 (no draw) or one u64 is below its limit; the first refusal stops. */
static int64_t mtp_draw(const aisim_vllm_rank *r, aisim_rng *rng, const aisim_rng_view *view)
{
    int64_t tokens = 1;
    size_t i;
    if (!r->mtp_draws)
        return 1;   /* a prefill-role copy: its one token, no draw */
    for (i = 0; i < r->n_rates; i++) {
        if (!r->mtp_always[i]) {
            aisim_rng_next_u64(rng);
            if (view->last_u64 >= r->mtp_limit[i])
                break;
        }
        tokens++;
    }
    return tokens;
}

/* Blocks the bursts of the emitters may take beyond what they hold (MtpBursts._need). */
static int64_t mtp_need(const aisim_vllm_rank *r)
{
    int64_t bs = r->cfg.block_size, need = 0;
    size_t i;
    for (i = 0; i < r->emit.len; i++) {
        int32_t s = r->emit.v[i];
        int64_t length = r->prompt_len[s] + r->generated[s];
        int64_t left = r->out_limit[s] - r->generated[s];
        int64_t burst = r->max_burst < left ? r->max_burst : left;
        need += ceildiv(length + burst, bs) - ceildiv(length, bs);
    }
    return need;
}

/* The partial requests whose last known token is computed and that have tokens left. */
static int mtp_emitters(aisim_vllm_rank *r)
{
    size_t i;
    r->emit.len = 0;
    for (i = 0; i < r->partial.len; i++) {
        int32_t s = r->partial.v[i];
        if (r->generated[s] < r->out_limit[s] &&
            r->computed[s] >= r->prompt_len[s] + r->generated[s])
            TRY(list_push(&r->emit, s));
    }
    return AISIM_OK;
}

/* MtpBursts.reserve: the bursts' KV over the ready requests (preempting by the preemption
 * mode while it does not fit), their bursts sampled in running order and their tokens'
 * blocks allocated; the ready list becomes those ready with nothing left, then the emitters. */
static int mtp_reserve(aisim_vllm_rank *r, int64_t P, int *preempted)
{
    int64_t bs = r->cfg.block_size, need;
    size_t i, k = 0;
    /* (the ready requests are the partial ones computed through: the same order) */
    TRY(mtp_emitters(r));
    for (i = 0; i < r->ready.len; i++)
        if (r->generated[r->ready.v[i]] >= r->out_limit[r->ready.v[i]])
            r->ready.v[k++] = r->ready.v[i];
    r->ready.len = k;
    if (!r->emit.len)
        return AISIM_OK;
    need = mtp_need(r);
    while (need > allocatable(r)) {
        /* requests whose generation is complete already leave at this pass end */
        int32_t victim = -1;
        for (i = 0; i < r->running.len; i++) {
            int32_t s = r->running.v[r->cfg.lifo ? r->running.len - 1 - i : i];
            if (r->generated[s] < r->out_limit[s]) {
                victim = s;
                break;
            }
        }
        if (victim < 0 || r->cfg.no_evict) {
            /* (TensorRT-LLM never preempts; nothing runs: nothing to emit) */
            r->emit.len = 0;
            break;
        }
        TRY(preempt(r, victim, P));
        *preempted = 1;
        TRY(mtp_emitters(r));
        if (!r->emit.len)
            break;
        need = mtp_need(r);
    }
    if (!r->emit.len)
        return AISIM_OK;
    if (need > 0 && (uint64_t)need > r->kv->free) {
        /* the reservation takes its blocks at once: the cached blocks it evicts stay evicted
         * even when the bursts turn out shorter */
        int seq = aisim_kv_new_seq(r->pool);
        if (seq < 0)
            return seq;
        if (need > UINT32_MAX)
            return AISIM_ECORRUPT;
        TRY(aisim_kv_allocate(r->pool, seq, (uint32_t)need));
        TRY(aisim_kv_release(r->pool, seq));
    }
    for (i = 0; i < r->emit.len; i++) {
        int32_t s = r->emit.v[i];
        int64_t left = r->out_limit[s] - r->generated[s];
        int64_t tokens = mtp_draw(r, r->rng, r->rng_view);
        int64_t burst = tokens < left ? tokens : left, length, more;
        r->burst[s] = burst;
        r->sampled[s] = tokens;
        length = r->prompt_len[s] + r->generated[s] + burst;
        more = ceildiv(length, bs) - r->held_blocks[s];
        if (more > 0) {
            if (more > UINT32_MAX)
                return AISIM_ECORRUPT;
            TRY(aisim_kv_allocate(r->pool, r->seq[s], (uint32_t)more));
            r->held_blocks[s] += more;
            r->view.held_total += more;
        }
        if (r->cfg.caching && floordiv(length - 1, bs) > r->committed_blocks[s])
            TRY(commit_full_blocks(r, s, floordiv(length - 1, bs)));
        TRY(list_push(&r->ready, s));
    }
    return AISIM_OK;
}

/* The decode steps of the pass formed: the bursts past a request's first token without prompt
 * work, each counted as sampled (MtpBursts.decode_steps). */
static void mtp_pass_steps(aisim_vllm_rank *r)
{
    size_t i;
    r->view.pass_steps = r->view.pass_tokens = 0;
    for (i = 0; i < r->emit.len; i++) {
        int32_t s = r->emit.v[i];
        if (r->generated[s] && r->chunk_isl[s] < 0) {
            r->view.pass_steps++;
            r->view.pass_tokens += r->sampled[s];
        }
    }
}

/* Whether the passes after the one just formed would only decode: every running request
 * emits in it without finishing (so each next pass computes one known token of each, within
 * the budget), and nothing waiting could start (the queue is empty or every seat taken: no
 * request finishes, so none frees). The KV growth of each next pass is checked as it is
 * drawn (aisim_vllm_mtp_extend). */
static int mtp_decodes_on(const aisim_vllm_rank *r)
{
    size_t i;
    if (!r->emit.len || r->emit.len != r->running.len || r->ready.len != r->emit.len ||
        r->partial.len != r->running.len || (int64_t)r->emit.len > r->cfg.max_batched ||
        (r->wait_len && (int64_t)r->running.len < r->cfg.max_seqs))
        return 0;
    for (i = 0; i < r->emit.len; i++) {
        int32_t s = r->emit.v[i];
        if (r->generated[s] + r->burst[s] >= r->out_limit[s])
            return 0;
    }
    return 1;
}

/* A state_cache rank: whether the passes after the one just formed would only decode, as
 * mtp_decodes_on (every running request steps its one known token in it without finishing,
 * nothing waiting could start); their KV and checkpoint copies are checked pass by pass by
 * the look-ahead (state_extend). */
static int state_decodes_on(const aisim_vllm_rank *r)
{
    size_t i;
    if (!r->ready.len || r->ready.len != r->running.len || r->partial.len != r->running.len ||
        (int64_t)r->running.len > r->cfg.max_batched ||
        (r->wait_len && (int64_t)r->running.len < r->cfg.max_seqs))
        return 0;
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        if (r->generated[s] + 1 >= r->out_limit[s])
            return 0;
    }
    return 1;
}

/* The emitters of a state_cache rank's pass: the ready requests with tokens left, one each. */
static int state_emitters(aisim_vllm_rank *r)
{
    size_t i;
    r->emit.len = 0;
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        if (r->generated[s] < r->out_limit[s]) {
            r->burst[s] = 1;
            TRY(list_push(&r->emit, s));
        }
    }
    return AISIM_OK;
}

/* Forms the next pass of an MTP decode-only run (as schedule would: each running request
 * computes its one known token, the bursts are reserved, drawn and allocated) after its
 * look-ahead found that it fits. */
static int mtp_form_decode_pass(aisim_vllm_rank *r, int64_t P)
{
    aisim_vllm_view *v = &r->view;
    size_t i;
    int preempted = 0;
    v->pf_count = v->pf_tokens = v->pf_isl = v->pf_prefix = 0;
    r->ready.len = 0;
    for (i = 0; i < r->partial.len; i++) {
        int32_t s = r->partial.v[i];
        int64_t tokens = r->prompt_len[s] + r->generated[s] - r->computed[s];
        if (tokens != 1)
            return AISIM_ECORRUPT;
        TRY(run_chunk(r, s, tokens));
        TRY(list_push(&r->ready, s));
    }
    TRY(mtp_reserve(r, P, &preempted));
    if (preempted || v->pf_count || r->emit.len != r->partial.len)
        return AISIM_ECORRUPT;   /* the look-ahead said it fits and only decodes */
    mtp_pass_steps(r);
    return AISIM_OK;
}

/* The pass end of an MTP rank (engine/mtp.py stamp_tokens): requests ready with nothing left
 * leave without a token, then each emitter's burst is stamped with pass P (its first token
 * continues its stretch, the others are one-pass stretches: zero gaps) and those whose last
 * token came leave, in running order. */
static int mtp_stamp(aisim_vllm_rank *r, int64_t P)
{
    size_t i;
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        if (r->generated[s] >= r->out_limit[s]) {
            TRY(list_remove(&r->partial, s));
            TRY(retire(r, s));
        }
    }
    r->done.len = 0;
    for (i = 0; i < r->emit.len; i++) {
        int32_t s = r->emit.v[i];
        int64_t burst = r->burst[s], k;
        size_t n = r->n_stretch[s];
        r->generated[s] += burst;
        r->computed[s] = r->prompt_len[s] + r->generated[s] - 1;
        TRY(aisim_grow((void **)&r->stretches[s], &r->stretch_cap[s], n + 2 * (size_t)burst,
                 sizeof **r->stretches));
        if (n && r->stretches[s][n - 1] == P - 1) {
            r->stretches[s][n - 1] = P;   /* RankBase._emit: contiguous, the stretch goes on */
        } else {
            r->stretches[s][n++] = P;
            r->stretches[s][n++] = P;
        }
        for (k = 1; k < burst; k++) {
            r->stretches[s][n++] = P;
            r->stretches[s][n++] = P;
        }
        r->n_stretch[s] = n;
        if (r->generated[s] >= r->out_limit[s])
            TRY(list_push(&r->done, s));
    }
    r->emit.len = 0;
    for (i = 0; i < r->done.len; i++) {
        int32_t s = r->done.v[i];
        TRY(list_remove(&r->partial, s));
        record_itl(r, s);
        if (r->mtp)   /* (a state_cache rank's breaks Python counts, from the event) */
            TRY(mtp_count_breaks(r, s));
        TRY(retire(r, s));
    }
    r->done.len = 0;
    r->ready.len = 0;
    return AISIM_OK;
}

/* PrefillCadence.begin: whether the pass starting now defers prefills (the worker's wave is
 * not a multiple of the interval, no capacity bound, and a decoder runs here). */
static int psi_begin(aisim_vllm_rank *r)
{
    size_t i;
    int defer = 0;
    if (!r->psi)
        return 0;
    if (pymod(r->psi->wave, r->psi->interval) && !r->psi->capacity_bound)
        for (i = 0; i < r->running.len && !defer; i++) {
            int32_t s = r->running.v[i];
            defer = r->in_stretch[s] || r->computed[s] >= r->prompt_len[s];
        }
    r->psi->defer = defer;
    return defer;
}

int aisim_vllm_set_psi(aisim_vllm_rank *r, aisim_vllm_psi *psi)
{
    if (!r || !psi || psi->interval < 2 || r->psi)
        return AISIM_EINVAL;
    r->psi = psi;
    return AISIM_OK;
}

/* Forms one pass at now_ms; `admit` 0: no waiting request may start (a state_cache decode-only
 * run's replayed pass, which started before what waits arrived). */
static int schedule(aisim_vllm_rank *r, double now_ms, int admit)
{
    aisim_vllm_view *v = &r->view;
    int64_t P = v->pass_index, bs = r->cfg.block_size, budget = r->cfg.max_batched;
    int64_t demand = v->n_dec, need, admitted = 0, n, active, steps;
    static const bucket no_bucket;
    const bucket *crossing = r->buckets ? &r->buckets[pymod(P, bs)] : &no_bucket;
    int fast, defer, preempted = 0;
    size_t i;
    v->formed = 0;
    if (!r->running.len && !r->wait_len)
        return AISIM_OK;
    v->formed = 1;
    if (r->state) {
        /* StateCache.begin_step; checkpoints published in the previous pass are restorable
         * now: a queue head that had to wait must be asked again */
        r->n_published = 0;
        r->step++;
        v->kv_version++;
    }
    for (i = 0; i < r->partial.len; i++) {
        int32_t s = r->partial.v[i];
        demand += r->prompt_len[s] + r->generated[s] - r->computed[s];
    }
    defer = psi_begin(r);
    fast = demand <= budget && !defer && !r->state;
    if (fast) {
        need = (int64_t)crossing->len;
        for (i = 0; i < r->partial.len; i++) {
            int32_t s = r->partial.v[i];
            need += ceildiv(r->prompt_len[s] + r->generated[s], bs) - r->held_blocks[s];
        }
        fast = need <= allocatable(r);
    }
    v->pf_count = v->pf_tokens = v->pf_isl = v->pf_prefix = 0;
    v->chunked_pass = 0;
    r->n_fpm_chunks = 0;
    if (fast) {
        size_t count = r->partial.len;
        if (crossing->len)
            TRY(grow_decoders(r, P));
        for (i = 0; i < count; i++) {
            int32_t s = r->partial.v[i];
            TRY(run_chunk(r, s, r->prompt_len[s] + r->generated[s] - r->computed[s]));
        }
        budget -= demand;
    } else {
        TRY(running_walk(r, P, &budget, &preempted, defer));
    }
    if (!preempted && admit)
        TRY(admit_waiting(r, now_ms, budget, &admitted));
    if (r->psi && !r->psi->defer && !preempted)   /* PrefillCadence.end_admission */
        r->psi->capacity_bound = r->wait_len > 0;
    r->ready.len = 0;
    for (i = 0; i < r->partial.len; i++) {
        int32_t s = r->partial.v[i];
        if (r->computed[s] >= r->prompt_len[s] + r->generated[s])
            TRY(list_push(&r->ready, s));
    }
    if (r->mtp)   /* the bursts' KV is reserved (preempting while it does not fit), sampled */
        TRY(mtp_reserve(r, P, &preempted));
    r->plain_after_ready = !r->mtp && fast && !r->rejected.len && !v->pf_count &&
                           !(r->heap_len && r->heap[0].pass == P) &&
                           r->ready.len == r->partial.len;
    v->plain_decode = r->plain_after_ready && !r->partial.len;
    n = v->n_dec;
    v->pass_effect = preempted || admitted || r->ready.len || n || r->rejected.len;
    active = v->sum_base + n * P;
    steps = 0;
    v->pass_tokens = 0;
    v->mtp_plain = 0;
    if (r->mtp) {
        /* every emitter pays decode time, a prompt just finished included */
        for (i = 0; i < r->emit.len; i++) {
            int32_t s = r->emit.v[i];
            n++;
            active += r->prompt_len[s] + r->generated[s];
        }
        mtp_pass_steps(r);
        v->mtp_plain = fast && !preempted && !admitted && !r->rejected.len && !v->pf_count &&
                       mtp_decodes_on(r);
    } else {
        for (i = 0; i < r->ready.len; i++) {
            int32_t s = r->ready.v[i];
            if (r->generated[s] > 0 || (r->chunk_isl[s] < 0 && r->out_limit[s] > 0)) {
                n++;
                active += r->prompt_len[s] + r->generated[s];
            }
            /* a token after a preempted request's recompute comes from a prefill forward */
            if (r->generated[s] > 0 && r->chunk_isl[s] >= 0)
                steps++;
        }
        v->pass_steps = n - steps;
        v->pass_tokens = v->pass_steps;
        if (r->state)
            v->mtp_plain = !preempted && !admitted && !r->rejected.len && !v->pf_count &&
                           state_decodes_on(r);
    }
    v->dec_batch = n;
    v->dec_active = active;
    if (r->fpm)
        TRY(fpm_pass(r, P));
    v->decode_known = 0;
    if (n && r->decode_timing)
        v->decode_known = aisim_decode_timing_eval(r->decode_timing, n, active,
                                                   &v->decode_ms) == AISIM_OK;
    return AISIM_OK;
}

int aisim_vllm_schedule(aisim_vllm_rank *r, double now_ms)
{
    int status;
    if (!r)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    r->n_events = 0;
    r->n_stretch_out = 0;
    status = schedule(r, now_ms, 1);
    if (status < 0)
        return fail(r, status);
    refresh_view(r);
    return AISIM_OK;
}

/* The offsets of the open buckets, ascending, into keys (room for block_size). */
static int key_order(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sorted_keys(const aisim_vllm_rank *r, int64_t *keys)
{
    if (r->n_active_keys) {
        memcpy(keys, r->active_keys, r->n_active_keys * sizeof *keys);
        qsort(keys, r->n_active_keys, sizeof *keys, key_order);
    }
}

int aisim_vllm_extension_input(const aisim_vllm_rank *r, int64_t *keys, int64_t *counts,
                               size_t cap, int64_t *stop_pass)
{
    size_t i, n;
    if (!r || !stop_pass || (!keys && cap) || (!counts && cap))
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    n = r->n_active_keys;
    if (cap < n)
        return AISIM_EINVAL;
    sorted_keys(r, keys);
    for (i = 0; i < n; i++)
        counts[i] = (int64_t)r->buckets[keys[i]].len;
    *stop_pass = heap_min_above(r, 0, r->view.pass_index);
    return (int)n;
}

#define EXACT_INT ((int64_t)1 << 62)   /* engine/decode_run.py's _EXACT */

int aisim_vllm_extend(aisim_vllm_rank *r, double end_ms, double horizon_ms, double cutoff_ms,
                      int64_t max_passes, double *ends, size_t cap, aisim_decode_run *run,
                      int32_t resume)
{
    const aisim_vllm_view *v;
    size_t i;
    int64_t last, room;
    if (!r || !ends || !run || max_passes < 1 || (uint64_t)max_passes > cap)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    if (!r->decode_timing || r->view.n_dec <= 0)
        return AISIM_EINVAL;
    if (resume)
        return aisim_decode_extend(r->decode_timing, run, ends, (size_t)max_passes);
    v = &r->view;
    last = v->pass_index + max_passes;   /* first_pass - 1 + max_passes */
    room = allocatable(r);
    /* the ranges the C loop computes as Python's integers would (CDecodeRun's test) */
    if (!(-EXACT_INT < v->sum_base && v->sum_base < EXACT_INT) || last >= EXACT_INT / v->n_dec ||
        room >= EXACT_INT)
        return AISIM_VLLM_EXTEND_IN_PYTHON;
    sorted_keys(r, r->key_scratch);
    for (i = 0; i < r->n_active_keys; i++)
        r->count_scratch[i] = (int64_t)r->buckets[r->key_scratch[i]].len;
    memset(run, 0, sizeof *run);
    run->block_size = r->cfg.block_size;
    run->batch = v->n_dec;
    run->base = v->sum_base;
    run->stop_pass = heap_min_above(r, 0, v->pass_index);
    run->last_pass = last;
    run->horizon_ms = horizon_ms;
    run->cutoff_ms = cutoff_ms;
    run->crossing_keys = r->key_scratch;
    run->crossing_counts = r->count_scratch;
    run->n_crossing = r->n_active_keys;
    run->pass_ = v->pass_index + 1;
    run->room = room;
    run->end_ms = end_ms;
    ends[0] = end_ms;
    run->n_ends = 1;
    return aisim_decode_extend(r->decode_timing, run, ends, (size_t)max_passes);
}

/* A look-ahead's next pass of n decoders over `active` tokens ends at *end plus its decode time:
 * 0 (nothing changed) when that time is one only Python knows (the pass is formed there) or
 * the pass would end after cutoff_ms. */
static int look_ahead_end(const aisim_vllm_rank *r, int64_t n, int64_t active, double cutoff_ms,
                          double *end)
{
    double decode;
    if (aisim_decode_timing_eval(r->decode_timing, n, active, &decode) != AISIM_OK ||
        *end + decode > cutoff_ms)
        return 0;
    *end += decode;
    return 1;
}

/* aisim_vllm_mtp_extend of a state_cache rank: the decode-only passes after the one just
 * formed, as the walk would form them one by one (each running request, in order, takes its
 * next KV block where it crosses one and a copy preserving its published checkpoint, released
 * once written; a checkpoint is published where its step ends a block). The run stops before
 * a pass that would preempt or reject, starts at or after horizon_ms, ends after cutoff_ms or
 * has no decode time known here, and after a pass in which a request emits its last token. */
static int state_extend(aisim_vllm_rank *r, double end_ms, double horizon_ms, double cutoff_ms,
                        int64_t max_passes, double *ends)
{
    int64_t bs = r->cfg.block_size, nb = r->state_blocks, P, P0, room, n;
    size_t i, count = r->running.len;
    double end = end_ms;
    if (!r->view.mtp_plain || !r->decode_timing)
        return 1;
    n = (int64_t)count;
    if (aisim_grow((void **)&r->sim_len, &r->sim_len_cap, count, sizeof *r->sim_len) ||
        aisim_grow((void **)&r->sim_left, &r->sim_left_cap, count, sizeof *r->sim_left) ||
        aisim_grow((void **)&r->sim_held, &r->sim_held_cap, count, sizeof *r->sim_held) ||
        aisim_grow((void **)&r->sim_pub, &r->sim_pub_cap, count, sizeof *r->sim_pub))
        return AISIM_ENOMEM;
    /* each decoder as the pass just formed leaves it (its token stamped at its end) */
    for (i = 0; i < count; i++) {
        int32_t s = r->running.v[i];
        r->sim_len[i] = r->computed[s];
        r->sim_left[i] = r->out_limit[s] - r->generated[s] - 1;
        r->sim_held[i] = r->held_blocks[s];
        r->sim_pub[i] = r->st_published[s];
    }
    room = allocatable(r);
    P0 = r->view.pass_index;
    for (P = P0 + 1; P < P0 + max_passes; P++) {
        int64_t avail = room, active = 0;
        int finishing = 0, fits = 1;
        if (end >= horizon_ms)
            break;
        for (i = 0; i < count && fits; i++) {
            int64_t target = r->sim_len[i] + 1, pres = r->sim_pub[i] ? nb : 0;
            int64_t kv = ceildiv(target, bs) - r->sim_held[i];
            if (kv < 0)
                kv = 0;
            if (ceildiv(target, bs) + nb + pres > r->cfg.num_blocks || kv + pres > avail)
                fits = 0;   /* it would be rejected, or preempt */
            avail -= kv;
            active += target;
        }
        if (!fits || !look_ahead_end(r, n, active, cutoff_ms, &end))
            break;
        for (i = 0; i < count; i++) {
            int64_t target = r->sim_len[i] + 1;
            if (ceildiv(target, bs) > r->sim_held[i])
                r->sim_held[i] = ceildiv(target, bs);
            r->sim_len[i] = target;
            r->sim_pub[i] = r->cfg.caching && target % bs == 0;
            finishing |= --r->sim_left[i] == 0;
        }
        room = avail;
        ends[P - P0] = end;
        if (finishing) {
            P++;
            break;
        }
    }
    return (int)(P - P0);
}

int aisim_vllm_mtp_extend(aisim_vllm_rank *r, double end_ms, double horizon_ms,
                          double cutoff_ms, int64_t max_passes, double *ends, size_t cap)
{
    int64_t bs, P, P0, room, n;
    size_t i, count;
    double end = end_ms;
    if (!r || !ends || max_passes < 1 || (uint64_t)max_passes > cap)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    ends[0] = end_ms;
    if (r->state)
        return state_extend(r, end_ms, horizon_ms, cutoff_ms, max_passes, ends);
    if (!r->mtp || !r->view.mtp_plain || !r->decode_timing)
        return 1;
    bs = r->cfg.block_size;
    count = r->emit.len;
    n = (int64_t)count;
    if (!r->sim_rng) {
        if (aisim_rng_new(&r->sim_rng))
            return AISIM_ENOMEM;
        aisim_rng_view_of(r->sim_rng, &r->sim_view);
    }
    if (aisim_grow((void **)&r->sim_len, &r->sim_len_cap, count, sizeof *r->sim_len) ||
        aisim_grow((void **)&r->sim_left, &r->sim_left_cap, count, sizeof *r->sim_left))
        return AISIM_ENOMEM;
    aisim_rng_copy(r->sim_rng, r->rng);
    /* each emitter as the pass just formed leaves it */
    for (i = 0; i < count; i++) {
        int32_t s = r->emit.v[i];
        r->sim_len[i] = r->prompt_len[s] + r->generated[s] + r->burst[s];
        r->sim_left[i] = r->out_limit[s] - r->generated[s] - r->burst[s];
    }
    room = allocatable(r);
    P0 = r->view.pass_index;
    for (P = P0 + 1; P < P0 + max_passes; P++) {
        int64_t need = 0, active = 0, grown = 0;
        int finishing = 0;
        if (end >= horizon_ms)
            break;
        for (i = 0; i < count; i++) {
            int64_t burst = r->max_burst < r->sim_left[i] ? r->max_burst : r->sim_left[i];
            need += ceildiv(r->sim_len[i] + burst, bs) - ceildiv(r->sim_len[i], bs);
            active += r->sim_len[i];
        }
        /* (past room: the reservation would preempt) */
        if (need > room || !look_ahead_end(r, n, active, cutoff_ms, &end))
            break;
        for (i = 0; i < count; i++) {
            int64_t tokens = mtp_draw(r, r->sim_rng, r->sim_view);
            int64_t burst = tokens < r->sim_left[i] ? tokens : r->sim_left[i];
            grown += ceildiv(r->sim_len[i] + burst, bs) - ceildiv(r->sim_len[i], bs);
            r->sim_len[i] += burst;
            r->sim_left[i] -= burst;
            finishing |= r->sim_left[i] == 0;
        }
        room -= grown;
        ends[P - P0] = end;
        if (finishing) {
            P++;
            break;
        }
    }
    return (int)(P - P0);
}

/* Decode role (VllmDecodeRank._activations_decode_next and _open_activated): when the only
 * requests outside an open stretch are activations taking their first token with the pass
 * just formed (a decode step, not the last token), the next pass would only decode (nothing
 * it could start waits, the larger batch fits the budget) and that pass end runs no retry
 * that can succeed, their stretches open now, as complete() would open them, and the pass
 * becomes plain decode. Returns 1 when it did, 0 when not. */
int aisim_vllm_open_activated(aisim_vllm_rank *r)
{
    aisim_vllm_view *v;
    size_t i;
    int status;
    if (!r)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    v = &r->view;
    if (r->cfg.role != AISIM_VLLM_DECODE || !r->plain_after_ready || !r->ready.len)
        return 0;
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        if (r->generated[s] || r->chunk_isl[s] >= 0 || r->out_limit[s] < 2)
            return 0;
    }
    if (v->n_dec + (int64_t)r->ready.len > r->cfg.max_batched)
        return 0;
    if (r->wait_len && (int64_t)r->running.len < r->cfg.max_seqs) {
        /* while a destination waits, only an activated request could start */
        if (r->pending.len <= r->pending_head)
            return 0;
        for (i = 0; i < r->wait_len; i++)
            if (r->seq[*wait_at(r, i)] >= 0)
                return 0;
    }
    for (i = 0; i < r->ready.len; i++) {
        status = open_stretch(r, r->ready.v[i], v->pass_index);
        if (status < 0)
            return fail(r, status);
    }
    r->ready.len = 0;
    r->partial.len = 0;
    v->plain_decode = 1;
    refresh_view(r);
    return 1;
}

/* ------------------------------------------------------------ pass completion */

/* The decode-only passes before the last one of an extended pass: every decoder gets the
 * KV blocks it grew into over all of them at once. */
static int complete_extension(aisim_vllm_rank *r, int64_t extra)
{
    aisim_vllm_view *v = &r->view;
    int64_t first = v->pass_index + 1, last, bs = r->cfg.block_size;
    size_t i, n = r->n_active_keys;
    int64_t *keys = r->key_scratch;
    v->decode_steps += v->n_dec * extra;
    v->decode_tokens += v->n_dec * extra;
    v->pass_index += extra;
    last = v->pass_index;
    sorted_keys(r, keys);
    /* ascending offsets, members in joining order: the order of one allocation per request */
    for (i = 0; i < n; i++) {
        bucket *b = &r->buckets[keys[i]];
        int64_t blocks = floordiv(last - keys[i], bs) - floordiv(first - 1 - keys[i], bs);
        if (blocks) {
            if (blocks > UINT32_MAX)
                return AISIM_ECORRUPT;
            TRY(aisim_kv_allocate_each(r->pool, b->seqs, b->len, (uint32_t)blocks));
            b->grown += blocks;
            v->held_total += blocks * (int64_t)b->len;
        }
    }
    return AISIM_OK;
}

static int order_signal(aisim_vllm_rank *r, int32_t s)
{
    int64_t index = list_index(&r->running, s);
    if (index < 0)
        return AISIM_ECORRUPT;
    TRY(aisim_grow((void **)&r->report_order, &r->report_order_cap, r->n_report_order + 2,
             sizeof *r->report_order));
    r->report_order[r->n_report_order++] = s;
    r->report_order[r->n_report_order++] = index;
    return AISIM_OK;
}

/* The open stretches whose last token is in pass P, as complete() will find them. */
static int order_finishing(aisim_vllm_rank *r, size_t i, int64_t P)
{
    size_t child;
    if (i >= r->heap_len || r->heap[i].pass > P)
        return AISIM_OK;
    if (r->heap[i].pass == P) {
        int32_t s = r->heap[i].slot;
        if (r->generation[s] == r->heap[i].generation && r->live[s] && r->in_stretch[s] &&
            r->base_pass[s] + r->out_limit[s] - r->base_gen[s] - 1 == P)
            TRY(order_signal(r, s));
    }
    for (child = 2 * i + 1; child <= 2 * i + 2; child++)
        TRY(order_finishing(r, child, P));
    return AISIM_OK;
}

/* What the pass that ends now did, for the router (VllmRank._report_pass): the runs of hashes
 * committed since the last report, the evictions, the running-order index of each request
 * that emits its first or last token, and the prompts completed. */
static int report_pass(aisim_vllm_rank *r, int64_t P, int32_t mode)
{
    size_t i, cap;
    uint64_t *swap_u;
    int64_t *swap_i;
    int taken;
    /* the stored runs become the report's; the pass's own retirements start the next */
    swap_u = r->report_stored, r->report_stored = r->stored, r->stored = swap_u;
    cap = r->report_stored_cap, r->report_stored_cap = r->stored_cap, r->stored_cap = cap;
    swap_i = r->report_ends, r->report_ends = r->stored_ends, r->stored_ends = swap_i;
    cap = r->report_ends_cap, r->report_ends_cap = r->stored_ends_cap, r->stored_ends_cap = cap;
    r->n_report_runs = r->n_stored_runs;
    r->n_stored_runs = r->n_stored = 0;
    TRY(aisim_grow((void **)&r->report_evicted, &r->report_evicted_cap, (size_t)r->kv->logged + 1,
             sizeof *r->report_evicted));
    taken = aisim_kv_take_evicted(r->pool, mode == AISIM_VLLM_REPORT_KV, r->report_evicted,
                                  r->report_evicted_cap);
    if (taken < 0)
        return taken;
    r->n_report_evicted = mode == AISIM_VLLM_REPORT_KV ? (size_t)taken : 0;
    r->n_report_order = 0;
    for (i = 0; i < r->ready.len; i++)
        TRY(order_signal(r, r->ready.v[i]));
    TRY(order_finishing(r, 0, P));
    /* a first token that is also the last is a terminal only, except on a prefill rank,
     * whose copies stop at their first token: that is their prefill completion */
    r->report_prefilled.len = 0;
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        if (r->generated[s] + 1 < r->out_limit[s] || r->cfg.role == AISIM_VLLM_PREFILL)
            TRY(list_push(&r->report_prefilled, s));
    }
    return AISIM_OK;
}

int aisim_vllm_observe(aisim_vllm_rank *r, int32_t on)
{
    if (!r)
        return AISIM_EINVAL;
    r->observed = on != 0;
    if (!r->observed)
        r->n_stored = r->n_stored_runs = 0;
    refresh_view(r);
    return AISIM_OK;
}

static int complete(aisim_vllm_rank *r, int64_t extra, int32_t report)
{
    aisim_vllm_view *v = &r->view;
    int64_t P;
    size_t i;
    /* a diff entry per pass, the extended ones and this one (zeroed) */
    size_t passes = (size_t)(v->pass_index + extra + 1);
    TRY(aisim_grow((void **)&r->itl_diff, &r->itl_diff_cap, passes, sizeof *r->itl_diff));
    memset(r->itl_diff + r->n_itl_diff, 0, (passes - r->n_itl_diff) * sizeof *r->itl_diff);
    r->n_itl_diff = passes;
    if (extra && r->mtp) {
        /* an MTP decode-only run: each pass before the last completes and the next forms,
         * as one event each would (aisim_vllm_mtp_extend's look-ahead drew the same bursts) */
        int64_t k;
        for (k = 0; k < extra; k++) {
            size_t events = r->n_events;
            P = v->pass_index;
            TRY(mtp_stamp(r, P));
            if (r->n_events != events)
                return AISIM_ECORRUPT;   /* no request finishes before the run's last pass */
            v->decode_steps += v->pass_steps;
            v->decode_tokens += v->pass_tokens;
            v->pass_index = P + 1;
            TRY(mtp_form_decode_pass(r, P + 1));
        }
    } else if (extra && r->state) {
        /* a state_cache decode-only run: each pass before the last completes and the next
         * forms, as one event each would (state_extend's look-ahead found that they only
         * decode) */
        int64_t k;
        for (k = 0; k < extra; k++) {
            size_t events = r->n_events;
            P = v->pass_index;
            TRY(state_emitters(r));
            TRY(mtp_stamp(r, P));
            if (r->n_events != events)
                return AISIM_ECORRUPT;   /* no request finishes before the run's last pass */
            v->decode_steps += v->pass_steps;
            v->decode_tokens += v->pass_tokens;
            v->pass_index = P + 1;
            /* (a request submitted meanwhile arrived after these passes started) */
            TRY(schedule(r, 0.0, 0));
            if (r->n_events != events || r->rejected.len || v->pf_count ||
                r->ready.len != r->running.len) {
                return AISIM_ECORRUPT;   /* the look-ahead said it fits and only decodes */
            }
        }
    } else if (extra) {
        TRY(complete_extension(r, extra));
    }
    P = v->pass_index;
    v->pass_index = P + 1;
    /* a pass cut off by the run's time limit never completes: its prompt work is not counted */
    v->committed_prefill_tokens += v->pf_tokens;
    v->decode_steps += v->pass_steps;
    v->decode_tokens += v->pass_tokens;
    if (report)
        TRY(report_pass(r, P, report));
    for (i = 0; i < r->rejected.len; i++) {
        /* (a running request rejected mid-way, state_cache, has emitted tokens) */
        TRY(push_terminal(r, AISIM_VLLM_REJECTED, r->rejected.v[i]));
        free_slot(r, r->rejected.v[i]);
    }
    r->rejected.len = 0;
    r->done.len = 0;
    while (r->heap_len && r->heap[0].pass == P) {
        fin_entry e = heap_pop(r);
        int32_t s = e.slot;
        if (r->generation[s] == e.generation && r->live[s] && r->in_stretch[s] &&
            r->base_pass[s] + r->out_limit[s] - r->base_gen[s] - 1 == P)
            TRY(list_push(&r->done, s));
    }
    if (r->state)   /* (no open stretches: nothing finished above) */
        TRY(state_emitters(r));
    if (r->mtp || r->state)
        return mtp_stamp(r, P);
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        TRY(list_remove(&r->partial, s));
        if (r->generated[s] >= r->out_limit[s]) {
            /* nothing left to generate: it ends without a token, released first */
            TRY(retire(r, s));
            continue;
        }
        TRY(open_stretch(r, s, P));
        if (r->generated[s] + 1 >= r->out_limit[s])
            TRY(list_push(&r->done, s));
    }
    r->ready.len = 0;
    if (r->done.len) {
        /* in running order */
        size_t k = 0, count = r->done.len;
        int32_t *order;
        if (count > 1) {
            for (i = 0; i < count; i++)
                r->sched_mark[r->done.v[i]] = -2;   /* the walk never reads it again this pass */
            /* reuse the ready list as the ordered output */
            for (i = 0; i < r->running.len && k < count; i++)
                if (r->sched_mark[r->running.v[i]] == -2) {
                    TRY(list_push(&r->ready, r->running.v[i]));
                    k++;
                }
            if (k != count)
                return AISIM_ECORRUPT;
            order = r->ready.v;
        } else {
            order = r->done.v;
        }
        for (i = 0; i < count; i++) {
            int32_t s = order[i];
            TRY(close_stretch(r, s, P));
            record_itl(r, s);
            TRY(retire(r, s));
        }
        r->ready.len = 0;
        r->done.len = 0;
    }
    return AISIM_OK;
}

int aisim_vllm_complete(aisim_vllm_rank *r, int64_t extra_passes, int32_t report)
{
    int status;
    if (!r || extra_passes < 0 || report < 0 || report > AISIM_VLLM_REPORT_INDEX ||
        (report && !r->observed))
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    r->n_events = 0;
    r->n_stretch_out = 0;
    status = complete(r, extra_passes, report);
    if (status < 0)
        return fail(r, status);
    refresh_view(r);
    return AISIM_OK;
}

/* ------------------------------------------------------------ queries */

int aisim_vllm_queue(const aisim_vllm_rank *r, int32_t which, int32_t *out, size_t cap)
{
    size_t i, n;
    if (!r || (!out && cap) || (which != 0 && which != 1))
        return AISIM_EINVAL;
    n = which == 0 ? r->running.len : r->wait_len;
    if (n > INT32_MAX)
        return AISIM_EINVAL;
    for (i = 0; i < n && i < cap; i++)
        out[i] = which == 0 ? r->running.v[i]
                            : r->wait_ring[(r->wait_head + i) & (r->wait_cap - 1)];
    return (int)n;
}

int aisim_vllm_request_blocks(const aisim_vllm_rank *r, int32_t slot, int64_t *blocks,
                              int64_t *computed, int32_t *seq)
{
    if (!r || !blocks || !computed || !seq || slot < 0 || (size_t)slot >= r->n_slots ||
        !r->live[slot])
        return AISIM_EINVAL;
    *blocks = r->held_blocks[slot];
    if (r->in_stretch[slot])
        *blocks += r->buckets[r->bucket_key[slot]].grown - r->grown_mark[slot];
    *computed = r->computed[slot];
    *seq = r->seq[slot];
    return AISIM_OK;
}

int aisim_vllm_pending_prefill_tokens(const aisim_vllm_rank *r, int64_t *out)
{
    size_t i;
    int64_t total = 0;
    if (!r || !out)
        return AISIM_EINVAL;
    for (i = 0; i < r->wait_len; i++)
        total += r->prompt_len[r->wait_ring[(r->wait_head + i) & (r->wait_cap - 1)]];
    for (i = 0; i < r->partial.len; i++) {
        int32_t s = r->partial.v[i];
        if (r->computed[s] < r->prompt_len[s])
            total += r->prompt_len[s] - r->computed[s];
    }
    *out = total;
    return AISIM_OK;
}

/* ------------------------------------------------------------ telemetry */

/* Stamps the live requests of heap entries at `pass` (the top region of the heap) whose
 * stretch finishes there, and lists them in r->done. */
static int stamp_finishing(aisim_vllm_rank *r, size_t i, int64_t pass, int64_t stamp)
{
    size_t child;
    if (i >= r->heap_len || r->heap[i].pass > pass)
        return AISIM_OK;
    if (r->heap[i].pass == pass) {
        int32_t s = r->heap[i].slot;
        if (r->generation[s] == r->heap[i].generation && r->live[s] && r->in_stretch[s] &&
            r->base_pass[s] + r->out_limit[s] - r->base_gen[s] - 1 == pass &&
            r->gauge_stamp[s] != stamp) {
            r->gauge_stamp[s] = stamp;
            TRY(list_push(&r->done, s));
        }
    }
    for (child = 2 * i + 1; child <= 2 * i + 2; child++)
        TRY(stamp_finishing(r, child, pass, stamp));
    return AISIM_OK;
}

static int block_order(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Appends the KV table of `seq` to *blocks (as int64 values); returns its length (a count,
 * not a status: callers test < 0). */
static int append_table(aisim_vllm_rank *r, int32_t seq, int64_t **blocks, size_t *n,
                        size_t *cap, int32_t **table, size_t *table_cap)
{
    int len = aisim_kv_seq_len(r->pool, seq), i;
    if (len < 0)
        return len;
    TRY(aisim_grow((void **)table, table_cap, (size_t)len + 1, sizeof **table));
    aisim_kv_seq_blocks(r->pool, seq, *table, (size_t)len);
    TRY(aisim_grow((void **)blocks, cap, *n + (size_t)len + 1, sizeof **blocks));
    for (i = 0; i < len; i++)
        (*blocks)[(*n)++] = (*table)[i];
    return len;
}

static int finishing_gauges(aisim_vllm_rank *r, int64_t extra, int64_t *out,
                            int64_t **kept, int32_t **table, int64_t **gone)
{
    int64_t P = r->view.pass_index + extra, stamp = ++r->gauge_stamps;
    size_t i, n_kept = 0, kept_cap = 0, table_cap = 0, n_gone = 0, gone_cap = 0;
    r->done.len = 0;
    TRY(stamp_finishing(r, 0, P, stamp));
    for (i = 0; i < r->ready.len; i++) {
        int32_t s = r->ready.v[i];
        /* (an MTP rank: the emitters whose burst reaches their last token, MtpBursts.finishing) */
        int ends = r->mtp ? r->generated[s] < r->out_limit[s] &&
                                r->generated[s] + r->burst[s] >= r->out_limit[s]
                          : r->generated[s] + 1 >= r->out_limit[s];
        if (ends && r->gauge_stamp[s] != stamp) {
            r->gauge_stamp[s] = stamp;
            TRY(list_push(&r->done, s));
        }
    }
    out[0] = (int64_t)r->done.len;
    out[1] = out[2] = 0;
    if (!r->done.len)
        return AISIM_OK;
    /* the blocks the other running requests keep */
    for (i = 0; i < r->running.len; i++) {
        int32_t s = r->running.v[i];
        if (r->gauge_stamp[s] != stamp && r->seq[s] >= 0) {
            int len = append_table(r, r->seq[s], kept, &n_kept, &kept_cap, table, &table_cap);
            if (len < 0)
                return len;
        }
    }
    if (n_kept)
        qsort(*kept, n_kept, sizeof **kept, block_order);
    /* the finishing requests' other blocks, as 2 * id + (full: stays cached) */
    for (i = 0; i < r->done.len; i++) {
        int32_t s = r->done.v[i];
        int64_t full = r->cfg.caching
                           ? floordiv(r->prompt_len[s] + r->out_limit[s] - 1, r->cfg.block_size)
                           : 0;
        size_t first = n_gone, j;
        int len;
        if (r->seq[s] < 0)
            continue;
        len = append_table(r, r->seq[s], gone, &n_gone, &gone_cap, table, &table_cap);
        if (len < 0)
            return len;
        for (j = first; j < n_gone; j++) {
            int64_t block = (*gone)[j];
            (*gone)[j] = 2 * block + ((int64_t)(j - first) < full);
        }
    }
    /* drop the kept ones */
    {
        size_t k = 0;
        for (i = 0; i < n_gone; i++) {
            int64_t key = (*gone)[i] / 2;
            if (!n_kept || !bsearch(&key, *kept, n_kept, sizeof **kept, block_order))
                (*gone)[k++] = (*gone)[i];
        }
        n_gone = k;
    }
    if (n_gone)
        qsort(*gone, n_gone, sizeof **gone, block_order);
    for (i = 0; i < n_gone; i++) {
        int first_of_block = i == 0 || (*gone)[i] / 2 != (*gone)[i - 1] / 2;
        out[1] += first_of_block;
        /* sorted: a block's cached occurrence (odd) comes last */
        if ((i + 1 == n_gone || (*gone)[i + 1] / 2 != (*gone)[i] / 2) && ((*gone)[i] & 1))
            out[2]++;
    }
    r->done.len = 0;
    return AISIM_OK;
}

int aisim_vllm_finishing_gauges(aisim_vllm_rank *r, int64_t extra_passes, int64_t *out)
{
    int64_t *kept = NULL, *gone = NULL;
    int32_t *table = NULL;
    int status;
    if (!r || !out || extra_passes < 0)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    status = finishing_gauges(r, extra_passes, out, &kept, &table, &gone);
    r->done.len = 0;
    free(kept);
    free(table);
    free(gone);
    return status < 0 ? status : AISIM_OK;
}

/* ------------------------------------------------------------ disaggregated roles */

/* A destination's slot joins the pending list (room grown by the caller before add_request). */
static void push_pending(aisim_vllm_rank *r, int32_t s)
{
    r->waiting_order[s] = r->accepted++;
    if (r->pending_head && r->pending_head * 2 >= r->pending.len) {
        /* the taken heads are dropped once they are half the list: amortized O(1) */
        size_t live = r->pending.len - r->pending_head;
        memmove(r->pending.v, r->pending.v + r->pending_head, live * sizeof *r->pending.v);
        r->pending.len = live;
        r->pending_head = 0;
    }
    r->pending.v[r->pending.len++] = s;   /* room grown before (dropping heads only frees) */
    refresh_view(r);
}

int aisim_vllm_accept(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                      int64_t out_limit, const uint64_t *hashes, size_t n_hashes,
                      const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                      int32_t authored, uint64_t salt)
{
    int32_t s;
    int status;
    if (!r || r->cfg.role != AISIM_VLLM_DECODE)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    if (aisim_grow((void **)&r->pending.v, &r->pending.cap, r->pending.len + 1, sizeof *r->pending.v))
        return AISIM_ENOMEM;
    status = add_request(r, prompt_len, max_output, out_limit, hashes, n_hashes, values, lengths,
                         n_runs, authored, salt, &s);
    if (status < 0)
        return status;
    push_pending(r, s);
    return s;
}

int aisim_vllm_accept_ranges(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                             int64_t out_limit, const uint32_t *ranges, size_t n_ranges,
                             int64_t block, uint64_t salt)
{
    size_t n;
    int status;
    if (!r || r->cfg.role != AISIM_VLLM_DECODE)
        return AISIM_EINVAL;
    status = runs_from_ranges(r, prompt_len, ranges, n_ranges, block, &n);
    if (status < 0)
        return status;
    return aisim_vllm_accept(r, prompt_len, max_output, out_limit, NULL, 0, r->run_values,
                             r->run_lengths, n, 0, salt);
}

static int retry(aisim_vllm_rank *r, int32_t *out, int64_t *fresh_tokens)
{
    int64_t bs = r->cfg.block_size, generation = r->view.generation, blocks, hits = 0,
            footprint = 0, room, fresh;
    int32_t s = r->pending.v[r->pending_head];
    int64_t attempted = r->last_attempt[s];
    r->last_attempt[s] = generation;
    if (attempted == generation || (int64_t)r->running.len >= r->cfg.max_seqs)
        return AISIM_OK;
    blocks = ceildiv(r->prompt_len[s], bs);
    room = allocatable(r);
    if (r->cfg.no_evict) {
        /* TensorRT-LLM reserves to completion and takes only fresh blocks */
        int64_t available;
        footprint = ceildiv(r->prompt_len[s] + r->out_limit[s], bs);
        available = r->cfg.num_blocks - (int64_t)r->kv->active -
                    (r->completion_total - r->view.held_total);
        if (footprint > available)
            return AISIM_OK;
    } else if (r->cfg.caching) {
        int64_t active_hits;
        TRY(match_prefix(r, s, (size_t)(r->prompt_len[s] / bs), &hits, &active_hits));
        room -= hits - active_hits;   /* evicting for the fresh blocks may not take a hit */
    }
    fresh = blocks - hits;
    if (fresh > room)
        return AISIM_OK;
    r->pending_head++;
    TRY(take_blocks(r, s, hits, footprint));
    if (fresh) {
        if (fresh > UINT32_MAX)
            return AISIM_ECORRUPT;
        TRY(aisim_kv_allocate(r->pool, r->seq[s], (uint32_t)fresh));
        r->held_blocks[s] += fresh;
        r->view.held_total += fresh;
    }
    r->status[s] = ST_RESERVED;
    r->view.holds++;
    r->view.kv_version++;
    *out = s;
    *fresh_tokens = fresh * bs;
    return AISIM_OK;
}

int aisim_vllm_retry(aisim_vllm_rank *r, int32_t *slot, int64_t *fresh_tokens, int32_t *seq)
{
    int status;
    if (!r || !slot || !fresh_tokens || !seq || r->cfg.role != AISIM_VLLM_DECODE)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    *slot = -1;
    *fresh_tokens = 0;
    *seq = -1;
    if (r->pending.len > r->pending_head) {
        status = retry(r, slot, fresh_tokens);
        if (status < 0)
            return fail(r, status);
        if (*slot >= 0)
            *seq = r->seq[*slot];
    }
    refresh_view(r);
    return AISIM_OK;
}

/* Into the waiting queue ahead of the first request accepted after s (preempted requests went
 * to the front: the queue need not be in acceptance order). */
static int join_waiting(aisim_vllm_rank *r, int32_t s)
{
    size_t i, j;
    TRY(wait_reserve(r));
    for (i = 0; i < r->wait_len; i++)
        if (r->waiting_order[*wait_at(r, i)] > r->waiting_order[s])
            break;
    r->wait_len++;
    for (j = r->wait_len - 1; j > i; j--)
        *wait_at(r, j) = *wait_at(r, j - 1);
    *wait_at(r, i) = s;
    return AISIM_OK;
}

static int activate(aisim_vllm_rank *r, int32_t s)
{
    r->view.holds--;
    if (r->cfg.caching)
        TRY(commit_full_blocks(r, s, r->prompt_len[s] / r->cfg.block_size));
    r->computed[s] = r->prompt_len[s];
    r->status[s] = ST_WAITING;
    return join_waiting(r, s);
}

int aisim_vllm_activate(aisim_vllm_rank *r, int32_t slot)
{
    int status;
    if (!r || r->cfg.role != AISIM_VLLM_DECODE || slot < 0 || (size_t)slot >= r->n_slots ||
        !r->live[slot] || r->status[slot] != ST_RESERVED)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    status = activate(r, slot);
    if (status < 0)
        return fail(r, status);
    refresh_view(r);
    return AISIM_OK;
}

int aisim_vllm_release_source(aisim_vllm_rank *r, int32_t slot)
{
    int status;
    if (!r || r->cfg.role != AISIM_VLLM_PREFILL || slot < 0 || (size_t)slot >= r->n_slots ||
        !r->live[slot] || r->status[slot] != ST_HELD)
        return AISIM_EINVAL;
    if (r->broken)
        return AISIM_ECORRUPT;
    status = release(r, slot);
    if (status < 0)
        return fail(r, status);
    r->view.held_sources--;
    free_slot(r, slot);
    refresh_view(r);
    return AISIM_OK;
}
