/*
 * plain_disagg.cdef.h: a whole plain disaggregated run in one C call (runtime/
 * plain_disagg_native.py decides when a run is one and drives it; runtime/disaggregated.py's
 * loop with synthetic or trace sessions, round robin or the C kv_router in each pool and C
 * vLLM role ranks, dp 1, is its twin). Read by cffi as its cdef (no preprocessor lines).
 */

typedef struct aisim_pd aisim_pd;

enum aisim_pd_status {
    AISIM_PD_STALLED = 5,       /* nothing left to happen with requests in flight */
    AISIM_PD_TIMING = 6,        /* a modeled time the C path cannot give */
    AISIM_PD_LIVELOCK = 8,      /* the same-time rounds did not settle */
    AISIM_PD_RECORDS = 9,       /* records_every records settled: take them (aisim_pd_
                                   records, then aisim_pd_clear_records), then call
                                   aisim_pd_run again to go on */
    /* scaling (cluster): a pause where the Python loop calls runtime/cluster.py; then tell
     * the loop what changed (aisim_pd_add_worker, _set_rr, _set_draining, and last
     * aisim_pd_set_cluster) and call aisim_pd_run again */
    AISIM_PD_CLUSTER = 10,      /* after a round's completions: the view's idle_keys are
                                   the workers heard (cluster.worker_idle, in order), then
                                   settle and ready_due */
    AISIM_PD_TICK = 11,         /* the rounds of a step settled and a tick is due */
    AISIM_PD_NO_WORKER = 12     /* round robin's pool has no active worker */
};

typedef struct aisim_pd_config {
    /* sessions and prompts, as aisim_plain_config's fields of the same names */
    int32_t arrivals;
    void *arrival_rng;
    double gap_ms;
    int64_t sessions;
    int64_t max_sessions;
    int64_t isl;
    int64_t osl;
    int64_t trace_block;
    int64_t own;
    int64_t shared;
    int64_t fresh_base;
    int64_t groups;
    void *shape_rng;
    int32_t trace_closed;
    const int64_t *turn_base;
    const int64_t *turn_input;
    const int64_t *turn_output;
    const double *turn_delay;
    const int64_t *ids_off;
    const uint32_t *ids;
    const int64_t *start_order;
    const double *start_ms;
    int64_t max_input;
    int64_t turns_per_session;
    double inter_turn_delay_ms;
    int32_t start_kind;
    /* per-request records kept (aisim_pd_records), handed over every records_every (0: at
     * the end) */
    int32_t keep_records;
    int64_t records_every;
    /* a running stream takes them (a record is with its sink once a later arrival settled),
     * handed over too once the oldest gathered settled records_lag_ms ago (0: no bound) */
    int32_t records_stream;
    double records_lag_ms;
    /* the pools: n_prefill then n_decode workers of one rank each (worker keys in that
     * order), their aisim_vllm_rank handles, round robin's worker lists (pool-local
     * indices) and cursors */
    size_t n_prefill;
    size_t n_decode;
    void **ranks;
    const int32_t *rr_prefill;
    size_t n_rr_prefill;
    int64_t rr_prefill_cursor;
    const int32_t *rr_decode;
    size_t n_rr_decode;
    int64_t rr_decode_cursor;
    /* or each pool's kv_router (an aisim_kvr, no pending queue, its candidates every worker
     * of the pool: NULL for round robin), whether it is given the prompt's runs, the
     * aisim_vllm_complete report its pool's ranks make (AISIM_VLLM_REPORT_INDEX: their
     * prompts completed reach the router), and each worker key's logical worker id */
    void *kvr[2];
    int32_t kvr_runs[2];
    int32_t report[2];
    const int64_t *worker_ids;
    /* scheduled scaling: the loop pauses for it (round robin in both pools), its next tick
     * and worker ready (INFINITY: none) */
    int32_t cluster;
    double next_tick_ms;
    double next_ready_ms;
    /* each pool's engine: [0] prefill, [1] decode */
    int64_t block_size[2];
    int64_t num_blocks[2];
    int64_t max_model_len[2];   /* -1: none */
    int32_t caching[2];
    int32_t no_evict[2];
    /* the prefill role's prefill timing: AISIM_DECODE_FIXED or _POLYNOMIAL */
    int32_t prefill_kind;
    double prefill_fixed_ms;
    double prefill_ratio;
    /* the KV transfer (TransferModel): by bandwidth when use_bandwidth, else fallback_ms */
    int32_t use_bandwidth;
    double bytes_per_token;
    double bandwidth_gbps;
    int32_t missing_only;
    double fallback_ms;
    double cutoff_ms;
    /* the summary */
    double report_start_ms;
    int32_t has_ttft;
    int32_t has_itl;
    int32_t has_e2e;
    double sla_ttft_ms;
    double sla_itl_ms;
    double sla_e2e_ms;
} aisim_pd_config;

typedef struct aisim_pd_view {
    double now_ms;
    double next_ms;
    int64_t arrived;
    int64_t completed;
    int64_t in_flight;
    int64_t made;
    double next_arrival_ms;
    int64_t active;             /* as aisim_plain_view's */
    int64_t next_pending;
    int64_t next_start;
    int64_t sessions_made;
    int64_t rr_prefill_cursor;
    int64_t rr_decode_cursor;
    aisim_plain_summary summary;
    const double *visited;      /* every time the clock stopped at (DisaggregatedSimulation._visited) */
    size_t n_visited;
    int64_t extensions;         /* decode passes that began an extended run with activations */
    /* with AISIM_PD_STALLED: the first worker whose rank has a pending destination
     * (stuck_pending) or a waiting request, and that head (worker -1: none) */
    int32_t stuck_worker;
    int32_t stuck_pending;
    int64_t stuck_uuid;
    int64_t stuck_prompt_len;
    int64_t stuck_generated;
    /* what a scaling pause reads: the workers, those heard while draining, the next pass
     * completion or transfer and the next session ready */
    size_t n_workers;
    const int32_t *idle_keys;
    size_t n_idle_keys;
    double next_event_ms;
    double next_ready_ms;
} aisim_pd_view;

int aisim_pd_new(aisim_pd **out, const aisim_pd_config *config);
int aisim_pd_free(aisim_pd *p);
int aisim_pd_view_of(const aisim_pd *p, const aisim_pd_view **out);
int aisim_pd_run(aisim_pd *p);
/* worker key w's (its one rank's) pass ends and break pairs, as aisim_plain_pass_ends */
int aisim_pd_pass_ends(const aisim_pd *p, size_t w, const double **out, size_t *n);
int aisim_pd_breaks(const aisim_pd *p, size_t w, const int64_t **out, size_t *n_pairs);
int aisim_pd_sample_stats(aisim_pd *p, int32_t which, double *out);
int aisim_pd_drop_samples(aisim_pd *p, int32_t which);
/* aisim_plain_ready's answer of this loop's sessions */
int aisim_pd_ready(aisim_pd *p, int64_t *index, double *ready_ms, size_t cap);
/* The records gathered since the last aisim_pd_clear_records, as aisim_plain_records's with
 * rows of 19 integers (aisim_plain_records's 13, the prefill worker key in the rank column,
 * then the decode worker key chosen (-1: none), the stages: 1 source held, 2 destination
 * reserved, 4 activated, 8 source released, 16 destination accepted, 32 decode worker
 * chosen, and a kv_router's selected and best overlap blocks in the prefill pool, then in
 * the decode pool) and 10 doubles (its 6, then the held, reserved, activated and released times);
 * an admission's readmission column (and the flags' bit 8 for the first) holds the decode
 * pool as bit 1; the sources released after their request's row was gathered, as (uuid,
 * time, the rows gathered before it: -1 when a running stream has the record already); and
 * *rest_from as aisim_plain_records's. */
int aisim_pd_records(const aisim_pd *p, const int64_t **ints, const double **doubles,
                     size_t *n, const int64_t **adm_ints, const double **adm_at, size_t *n_adm,
                     const int64_t **late_uuid, const double **late_at,
                     const int64_t **late_row, size_t *n_late, size_t *rest_from);
int aisim_pd_clear_records(aisim_pd *p);

/* Scaling, at a pause: a worker of one rank added (its key the next), a pool's round robin
 * list as worker keys (pool 0 prefill, 1 decode), a worker draining or not, and last the
 * next tick and ready (which ends the pause: the heard workers are forgotten) */
int aisim_pd_add_worker(aisim_pd *p, void *rank, int32_t decode, int64_t worker_id);
int aisim_pd_set_rr(aisim_pd *p, int32_t pool, const int32_t *keys, size_t n);
int aisim_pd_set_draining(aisim_pd *p, size_t key, int32_t on);
int aisim_pd_set_cluster(aisim_pd *p, double next_tick_ms, double next_ready_ms);
/* the view's stuck_* of the state now (a stall scaling's watch names) */
int aisim_pd_find_stall(aisim_pd *p);
/* decode worker key's accepted destinations waiting for their reservation (uuids, up to cap
 * copied); returns how many */
int aisim_pd_pending(const aisim_pd *p, size_t key, int64_t *uuids, size_t cap);
