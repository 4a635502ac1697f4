/*
 * sglang_rank.cdef.h: one SGLang rank's scheduling, pass completion and decode-only runs in C
 * (engine/sglang_native.py drives it; engine/sglang.py's SglangRank is its twin and its
 * specification) over the C radix cache (radix_cache.cdef.h). Read by cffi as its cdef (no
 * preprocessor lines).
 *
 * Requests live in the rank as slots; Python keeps the slot -> request map and learns what
 * happened from the events of each call (one flat int64 array, read once per call).
 */

typedef struct aisim_sglang_rank aisim_sglang_rank;

typedef struct aisim_sglang_config {
    int64_t page_size;          /* 1..65536 */
    int64_t total_kv_tokens;    /* num_gpu_blocks x page_size */
    int64_t max_running;        /* max_num_seqs */
    int64_t max_prefill;        /* sglang.max_prefill_tokens */
    int64_t chunk_size;         /* sglang.chunked_prefill_size */
    int64_t clip;               /* sglang.clip_max_new_tokens */
    int64_t interval;           /* prefill_decode_interval */
    int64_t max_model_len;      /* -1: no limit */
    double conservativeness;    /* sglang.schedule_conservativeness */
    int32_t caching;            /* enable_prefix_caching */
    int32_t lpm;                /* schedule_policy lpm */
    int32_t extension;          /* decode-only passes may run as one event (SglangRank.extension) */
    int32_t role;               /* enum aisim_sglang_role (engine/sglang_roles.py) */
} aisim_sglang_config;

/* The rank's part in a deployment: aggregated, or a role of the destination-first handoff
 * (FEATURES.md section 8). A prefill rank holds each finished copy's KV until
 * aisim_sglang_release_source; a decode rank accepts destinations into a pending FIFO,
 * reserves the head (aisim_sglang_retry), takes their KV (aisim_sglang_activate) and starts
 * them at its next pass, without charging prefill forwards (Python times the passes). */
enum aisim_sglang_role {
    AISIM_SG_AGGREGATED = 0,
    AISIM_SG_PREFILL = 1,
    AISIM_SG_DECODE = 2
};

/* An event is 5 int64 values: kind, slot, a, b, c. */
enum aisim_sglang_event_kind {
    AISIM_SG_ADMITTED = 1,    /* a = cached tokens, b = readmission (0/1) */
    AISIM_SG_RETRACTED = 2,   /* a = its retractions so far */
    AISIM_SG_REJECTED = 3,    /* at the completion of the pass that rejected it (max_model_len) */
    AISIM_SG_FINISHED = 4,    /* a = first stretch in stretches[], b = stretches, c = generated */
    AISIM_SG_HELD = 6,        /* prefill role: finished as FINISHED, but its KV stays held (the
                               * source) and its slot live until aisim_sglang_release_source */
    AISIM_SG_EVENT_WIDTH = 5
};

/* aisim_sglang_schedule's answer when nothing runs and the queue's head can never start
 * (SglangRank._stalled): Python words the error. */
enum aisim_sglang_status { AISIM_SG_STALLED = 4 };

typedef struct aisim_sglang_view {
    int64_t pass_index;
    int64_t n_running;
    int64_t n_waiting;
    int64_t rounds_left;
    int64_t retractions;
    int64_t committed_prefill_tokens;
    int64_t decodes;            /* decode passes recorded (RunningBatch.D) */
    double ratio;               /* new_token_ratio now (sglang_budget.RatioSchedule.value) */
    double ratio_init;          /* ... its init, min and step */
    double ratio_min;
    double ratio_step;
    /* the pass just formed: its timing keys */
    int64_t pf_count;           /* prefill batch (0: a decode pass) */
    int64_t pf_isl;             /* sum of chunk ends */
    int64_t pf_prefix;          /* sum of prefixes */
    int64_t dec_batch;          /* decode forward: members (0: none ran) */
    int64_t dec_active;         /* their total length */
    double decode_ms;           /* with decode_known: the decode time of dec_batch, dec_active */
    int32_t decode_known;
    int32_t formed;             /* schedule formed a pass (0: nothing to do) */
    int32_t pass_effect;
    int32_t stuck;
    int32_t extendable;
    int32_t prefill_in_pass;
    int32_t model_work_in_pass;
    /* events of the latest call */
    const int64_t *events;
    size_t n_events;            /* events, not values */
    const int64_t *stretches;   /* (first pass, last pass) pairs, flattened */
    size_t n_stretch_values;
    /* the ITL difference array over completed passes, and the gaps across breaks as
     * (last pass before, first pass after, count) triples in the order they were counted */
    const int64_t *itl_diff;
    size_t n_itl_diff;
    const int64_t *break_gaps;
    size_t n_break_gaps;        /* triples */
    /* the disaggregated roles: held sources (prefill); reserved destinations waiting for
     * their KV, the capacity generation (a completion, a retraction or an activation that
     * freed pages moves it; it gates retries of a refused head), accepted destinations
     * waiting for their reservation, activated ones waiting for a running slot (decode) */
    int64_t held_sources;
    int64_t holds;
    int64_t generation;
    int64_t n_pending;
    int64_t n_prebuilt;
    int32_t retry_due;          /* decode: the next pass end matters to the handoff (a head not
                                 * tried at this generation, or a prebuilt one with a slot) */
    int32_t promoted;           /* decode: the pass just formed started prebuilt requests */
    /* aisim_sglang_start: the end of the pass formed when C timed it (start_timed 1: not
     * extended; 2: the extension was tried, its run in the start buffers; 0: Python times the
     * pass and extends it) */
    int32_t start_timed;
    double start_end_ms;
} aisim_sglang_view;

int aisim_sglang_new(aisim_sglang_rank **out, const aisim_sglang_config *config);
int aisim_sglang_free(aisim_sglang_rank *r);
int aisim_sglang_view_of(const aisim_sglang_rank *r, const aisim_sglang_view **out);
/* The rank's radix cache (owned by the rank, valid for its lifetime). */
int aisim_sglang_cache(const aisim_sglang_rank *r, aisim_radix **out);
/* Decode times of the built-in models (decode_run.cdef.h); borrowed, NULL for none. */
int aisim_sglang_set_decode_timing(aisim_sglang_rank *r, const aisim_decode_timing *timing);
/* Overwrites the admission ratio's schedule (RatioSchedule's fields; tests defeat its floor). */
int aisim_sglang_set_ratio(aisim_sglang_rank *r, double init, double min, double step,
                           double value);
/* Queues a request; returns its slot (>= 0). The prompt is n_runs runs of values[i] repeated
 * lengths[i] times (read only with prefix caching); outputs are the n_authored authored tokens,
 * or out_tag repeated when authored is NULL. */
int aisim_sglang_submit(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                        const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                        const uint32_t *authored, size_t n_authored, uint32_t out_tag);
/* aisim_sglang_submit of a prompt given as id ranges (workload/prompt.py's IdRanges behind
 * Prompt.from_hash_ids): ids firsts[i] .. firsts[i] + counts[i] - 1, each repeated `block`
 * times, cut at prompt_len (AISIM_EINVAL for ids past u32: give the runs instead). */
int aisim_sglang_submit_ranges(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                               const uint32_t *firsts, const uint32_t *counts, size_t n_ranges,
                               int64_t block, const uint32_t *authored, size_t n_authored,
                               uint32_t out_tag);
/* Forms one pass (SglangRank.schedule): AISIM_OK (view.formed 0: nothing to do), or
 * AISIM_SG_STALLED. */
int aisim_sglang_schedule(aisim_sglang_rank *r, double now_ms);
/* SglangRank.extend of the pass just formed (ending at end_ms): resume 0 decides the run and
 * starts it (run->n_ends = 1 when there is none), resume 1 continues one that stopped on
 * AISIM_DECODE_MISS once Python put the missing time. max_passes <= cap. On AISIM_OK with
 * run->n_ends > 1, *finishing says whether the last pass is one in which members finish. */
int aisim_sglang_extend(aisim_sglang_rank *r, double end_ms, double horizon_ms,
                        double cutoff_ms, int64_t max_passes, double *ends, size_t cap,
                        aisim_decode_run *run, int32_t resume, int32_t *finishing);
/* Where aisim_sglang_start extends a pass: as aisim_sglang_extend's ends (cap of them), run and
 * finishing (kept for the rank's life; the caller's buffers outlive it). */
int aisim_sglang_set_start_buffers(aisim_sglang_rank *r, double *ends, size_t cap,
                                   aisim_decode_run *run, int32_t *finishing);
/* aisim_sglang_schedule, then, when the pass formed has a time C knows (no prefill, or one not
 * charged (charges_prefill 0); a decode forward of a known time, or none), its end in
 * view.start_end_ms and, when it is extendable, not retry_due and before horizon_ms,
 * aisim_sglang_extend of it into the start buffers (max passes: their cap), as
 * SglangRank.schedule then .extend. Returns aisim_sglang_schedule's status or the extension's
 * (AISIM_DECODE_MISS: resume it with aisim_sglang_extend). */
int aisim_sglang_start(aisim_sglang_rank *r, double now_ms, double horizon_ms, double cutoff_ms,
                       int32_t charges_prefill);
/* Completes the pass formed, lengthened by extra_passes decode-only passes (the last one a
 * pass in which members finish when finishing). */
int aisim_sglang_complete(aisim_sglang_rank *r, int64_t extra_passes, int32_t finishing);
/* Folds the counted decode runs' gaps into itl_diff and break_gaps (RunningBatch.fold_spans). */
int aisim_sglang_fold(aisim_sglang_rank *r);
/* Copies the slots of the running order (which 0) or the waiting queue (which 1); returns
 * how many there are. */
int aisim_sglang_queue(const aisim_sglang_rank *r, int32_t which, int32_t *out, size_t cap);
/* A live request's state into out[0..8]: generated, computed, held tokens, tokens on the
 * tree, its locked tree node (-1: it holds no KV), decode index it joined at (-1: none),
 * generated then, join number, output limit. Running members are brought up to date first. */
int aisim_sglang_request(const aisim_sglang_rank *r, int32_t slot, int64_t *out);
/* Prompt tokens not computed yet over the waiting requests. */
int aisim_sglang_pending_prefill_tokens(const aisim_sglang_rank *r, int64_t *out);

/* ---- the disaggregated roles (engine/sglang_native_roles.py; twins: engine/sglang_roles.py) */

/* Decode role: takes a destination (as aisim_sglang_submit takes a request) into the pending
 * FIFO; returns its slot. Python refuses the ones that can never fit first. */
int aisim_sglang_accept(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                        const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                        const uint32_t *authored, size_t n_authored, uint32_t out_tag);
int aisim_sglang_accept_ranges(aisim_sglang_rank *r, int64_t prompt_len, int64_t out_limit,
                               const uint32_t *firsts, const uint32_t *counts, size_t n_ranges,
                               int64_t block, const uint32_t *authored, size_t n_authored,
                               uint32_t out_tag);
/* Decode role (SglangDecodeRank.retry): reserves the pending head if it is due and fits:
 * *slot its slot (-1: none), *fresh_tokens the tokens the reservation allocated, *node its
 * locked tree node. idle_pass: the pass just completed took no time and changed nothing
 * (without a reservation the admission ratio then goes to its floor). */
int aisim_sglang_retry(aisim_sglang_rank *r, int32_t idle_pass, int32_t *slot,
                       int64_t *fresh_tokens, int64_t *node);
/* Decode role: the KV of reserved `slot` arrived: on the tree, prebuilt for the next pass. */
int aisim_sglang_activate(aisim_sglang_rank *r, int32_t slot);
/* Decode role: drops the reservation of `slot` (its prefill failed) and frees the slot. */
int aisim_sglang_cancel(aisim_sglang_rank *r, int32_t slot);
/* Prefill role: caches the prompt of held `slot`, unlocks it and frees the slot. */
int aisim_sglang_release_source(aisim_sglang_rank *r, int32_t slot);
/* KV tokens requests in neither queue own off the tree: held sources, reserved destinations
 * and prebuilt ones (runtime/checks.py adds them). */
int aisim_sglang_off_queue_tokens(const aisim_sglang_rank *r, int64_t *out);
