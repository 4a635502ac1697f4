/*
 * kv_router.cdef.h: one pool's kv_router in C (plugins/placement's kv_router_native.py drives
 * it; kv_router.py's KvRouter is its twin and its specification, CLUSTER.md §2). Read by cffi
 * as its cdef (no preprocessor lines).
 *
 * The router keeps, per scheduler (worker x DP rank, keyed (worker_id, dp_rank)): the
 * prefill tokens of its placed requests still in prefill, its active blocks (a refcounted
 * multiset of chains, or a plain count), its placed requests, and, when it does not read the
 * engines' own index, its index of KV events (optionally lagged). A placement is one call:
 * overlaps, costs, the first lowest cost, booking, or a place in the pending queue.
 */

typedef struct aisim_kvr aisim_kvr;

enum aisim_kvr_queue_policy {
    AISIM_KVR_NO_QUEUE = 0,
    AISIM_KVR_FCFS = 1,
    AISIM_KVR_LCFS = 2,
    AISIM_KVR_WSPT = 3
};

enum aisim_kvr_status {
    AISIM_KVR_QUEUED = 0,         /* aisim_kvr_place: the pending queue holds the request */
    AISIM_KVR_PLACED = 1,         /* placed: the view's choice */
    AISIM_KVR_NO_ENDPOINTS = 2    /* no candidate and no queue: the run cannot go on */
};

typedef struct aisim_kvr_config {
    int64_t block_size;
    double credit;                /* overlap_score_credit */
    double scale;                 /* prefill_load_scale */
    double decay;                 /* overlap_score_credit_decay */
    double weight;                /* decode_active_request_weight */
    int32_t track_prefill;        /* router_track_prefill_tokens */
    int32_t track_blocks;         /* router_track_active_blocks */
    int32_t reuse;                /* router_assume_kv_reuse */
    int32_t uses_index;           /* overlaps counted (0: the decode pool) */
    int32_t engine_index;         /* overlaps from the candidates' C vLLM ranks */
    int32_t queue_policy;         /* enum aisim_kvr_queue_policy */
    double queue_limit;           /* router_queue_threshold x the batch budget */
    double lag_ms;                /* kv_event_lag_ms (own index only) */
} aisim_kvr_config;

typedef struct aisim_kvr_view {
    /* the latest decision (aisim_kvr_place, or the last release) */
    int64_t worker_id;
    int64_t dp_rank;
    int64_t overlap;
    int64_t best_overlap;
    double logit;
    /* its candidates' keys (worker_id, dp_rank pairs) and costs */
    const int64_t *cost_keys;
    const double *costs;
    size_t n_costs;
    /* the requests released by the latest call, as (uuid, worker_id, dp_rank, overlap,
     * best overlap) */
    const int64_t *released;
    size_t n_released;
    size_t queued;                /* requests the pending queue holds */
    size_t n_candidates;
    /* with the decision log on: every decision as (uuid, worker_id, dp_rank, overlap,
     * n candidates, first cost) int64s, (now_ms, logit) doubles, and the costs and keys */
    const int64_t *log_ints;
    const double *log_doubles;
    size_t n_log;
    const double *log_costs;
    const int64_t *log_keys;
} aisim_kvr_view;

int aisim_kvr_new(aisim_kvr **out, const aisim_kvr_config *config);
int aisim_kvr_free(aisim_kvr *r);
int aisim_kvr_view_of(const aisim_kvr *r, const aisim_kvr_view **out);
int aisim_kvr_log_decisions(aisim_kvr *r, int32_t on);
/* The candidates, in order (active workers ascending, ranks ascending). In engine-index mode
 * rank_views[i] is candidate i's C vLLM rank's view (a const aisim_vllm_view *; void here, as
 * this header is read before vllm_rank's) and pools[i] its KV pool, both borrowed: alive
 * while the candidate is; both NULL when some candidate's rank is not a C vLLM rank (then
 * aisim_kvr_place gets the overlaps). */
int aisim_kvr_set_candidates(aisim_kvr *r, const int64_t *worker_ids, const int64_t *dp_ranks,
                             const void *const *rank_views, aisim_kv_pool *const *pools,
                             size_t n);
/* Place a request (hashes: its prompt's full-block sequence hashes, only needed when the
 * router counts overlaps or reused blocks). overlaps: NULL (the router computes them) or one
 * per candidate. Returns an aisim_kvr_status. */
int aisim_kvr_place(aisim_kvr *r, int64_t uuid, int64_t isl, const uint64_t *hashes, size_t n,
                    double now_ms, int64_t priority, int64_t strict_priority,
                    const int64_t *overlaps);
/* aisim_kvr_place of a prompt given as n_runs runs of values[i] repeated lengths[i] times,
 * hashed here (aisim_hash_block_runs, no parent): its first isl / block_size block hashes. */
int aisim_kvr_place_runs(aisim_kvr *r, int64_t uuid, int64_t isl, const uint32_t *values,
                         const uint32_t *lengths, size_t n_runs, double now_ms,
                         int64_t priority, int64_t strict_priority);
/* KV events of scheduler (worker_id, dp_rank): stored (1) or removed (0) */
int aisim_kvr_kv_event(aisim_kvr *r, int64_t worker_id, int64_t dp_rank, int32_t stored,
                       const uint64_t *hashes, size_t n, double now_ms);
/* The notifications return how many requests they released (the view's released). */
int aisim_kvr_prefill_done(aisim_kvr *r, int64_t uuid, double now_ms);
int aisim_kvr_terminal(aisim_kvr *r, int64_t uuid, double now_ms);
/* after a worker became ready or started draining (the candidates set already) */
int aisim_kvr_drain(aisim_kvr *r, double now_ms);
int aisim_kvr_worker_removed(aisim_kvr *r, int64_t worker_id, int64_t dp_size, double now_ms);
/* the held requests in release order; returns how many (copies up to cap) */
int aisim_kvr_queued_uuids(const aisim_kvr *r, int64_t *out, size_t cap);
/* Diagnostics: scheduler (worker_id, dp_rank)'s counters (prefill tokens, fresh blocks,
 * requests, distinct active blocks, indexed blocks) and up to cap of its own index's hashes
 * (any order); returns how many it copied, AISIM_EBADSEQ when the router has no such state. */
int aisim_kvr_state(const aisim_kvr *r, int64_t worker_id, int64_t dp_rank, int64_t *counters,
                    uint64_t *cached, size_t cap);
