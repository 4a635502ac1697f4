/*
 * vllm_rank.cdef.h: one vLLM (or TensorRT-LLM) rank's scheduling and pass completion in C
 * (engine/vllm_native.py drives it; engine/vllm.py's VllmRank is its twin
 * and its specification). Read by cffi as its cdef (no preprocessor lines).
 *
 * Requests live in the rank as struct-of-arrays slots; Python keeps only
 * the slot -> request map and learns what happened from the events of each
 * call (read once per call, not one call per request).
 */

typedef struct aisim_vllm_rank aisim_vllm_rank;

typedef struct aisim_vllm_config {
    int64_t block_size;      /* 1..65536 */
    int64_t num_blocks;      /* the pool's capacity */
    int64_t max_batched;     /* max_num_batched_tokens */
    int64_t max_seqs;        /* max_num_seqs */
    int64_t max_model_len;   /* -1: no limit */
    int32_t caching;         /* enable_prefix_caching */
    int32_t chunked;         /* enable_chunked_prefill */
    int32_t lifo;            /* preemption victim: the last running (else the first) */
    int32_t no_evict;        /* TensorRT-LLM GUARANTEED_NO_EVICT: admission reserves the
                                whole prompt + output footprint, nothing is preempted */
    int32_t role;            /* enum aisim_vllm_role (engine/vllm_roles.py) */
} aisim_vllm_config;

/* The rank's part in a deployment: aggregated, or a disaggregated role. A prefill rank holds
 * a finished copy's KV (a source) until aisim_vllm_release_source; a decode rank takes
 * destinations (aisim_vllm_accept / retry / activate) whose first token is a decode step. */
enum aisim_vllm_role {
    AISIM_VLLM_AGGREGATED = 0,
    AISIM_VLLM_PREFILL = 1,
    AISIM_VLLM_DECODE = 2
};

/* An event is AISIM_VLLM_EVENT_WIDTH int64 values: kind, slot, a, b, c (one
 * flat array, so that Python unpacks a call's events at once). */
enum aisim_vllm_event_kind {
    AISIM_VLLM_ADMITTED = 1,   /* a = cached tokens, b = readmission (0/1) */
    AISIM_VLLM_PREEMPTED = 2,  /* a = its preemptions so far, c = tokens generated */
    AISIM_VLLM_REJECTED = 3,   /* at the completion of the pass that rejected it */
    AISIM_VLLM_FINISHED = 4,   /* a = first stretch in stretches[], b = stretches, c = generated */
    AISIM_VLLM_EVENT_WIDTH = 5,
    AISIM_VLLM_HELD = 6        /* prefill role: finished as FINISHED, its KV held (the slot
                                  stays live until aisim_vllm_release_source) */
};

/* Kept current after every call. The event and stretch pointers are valid
 * until the next call that changes the rank. */
typedef struct aisim_vllm_view {
    int64_t pass_index;
    int64_t n_running;
    int64_t n_waiting;
    int64_t n_partial;
    int64_t n_dec;            /* open-stretch decoders */
    int64_t sum_base;
    int64_t held_total;
    int64_t kv_version;
    int64_t preemptions;
    int64_t committed_prefill_tokens;
    int64_t decode_steps;
    /* the pass just formed: the timing keys and what it does */
    int64_t pf_count;
    int64_t pf_isl;
    int64_t pf_prefix;
    int64_t pf_tokens;
    int64_t dec_batch;
    int64_t dec_active;
    int64_t pass_steps;
    double decode_ms;         /* with decode_known: the decode time of dec_batch, dec_active */
    int32_t decode_known;
    int32_t formed;           /* schedule formed a pass (0: nothing to do) */
    int32_t chunked_pass;     /* some known tokens were computed */
    int32_t pass_effect;
    int32_t plain_decode;     /* only open stretches decode: extend may lengthen it */
    int64_t n_ready;
    int64_t n_rejected;
    /* events of the latest call */
    const int64_t *events;
    size_t n_events;          /* events, not values */
    const int64_t *stretches; /* (first pass, last pass) pairs, flattened */
    size_t n_stretch_values;
    /* the ITL difference array over completed passes (rank_base.RankBase.itl_diff): each
     * finished request adds +1 at the first and -1 at the last pass of each stretch */
    const int64_t *itl_diff;
    size_t n_itl_diff;
    /* observed: the runs of hashes committed since the last report (stored_ends[i]: where
     * run i ends in stored), and the latest report: its runs, its evicted hashes, its
     * running-order signals (slot, index) and its prefill completions (slots) */
    const uint64_t *stored;
    const int64_t *stored_ends;
    size_t n_stored_runs;
    int64_t stored_commits;         /* runs stored since observing began (never reset) */
    const uint64_t *report_stored;
    const int64_t *report_ends;
    size_t n_report_runs;
    const uint64_t *report_evicted;
    size_t n_report_evicted;
    const int64_t *report_order;    /* (slot, running index) pairs */
    size_t n_report_order;
    const int32_t *report_prefilled;
    size_t n_report_prefilled;
    /* with forward-pass metrics on (aisim_vllm_set_fpm), of the pass just formed: its prompt
     * chunks as (prompt length, prefix) pairs, its decoders' contexts, its queue as
     * (resumes after a preemption, length) pairs */
    const int64_t *fpm_chunks;
    size_t n_fpm_chunks;
    const int64_t *fpm_contexts;
    size_t n_fpm_contexts;
    const int64_t *fpm_queued;
    size_t n_fpm_queued;
    /* the disaggregated roles: held sources (prefill); the capacity generation (bumped by
     * every release), reserved destinations waiting for their KV and accepted ones waiting
     * for their reservation (decode); retry_due: the pending head may be reserved at the
     * next retry (it was not tried at this generation and a max_num_seqs seat is free) */
    int64_t held_sources;
    int64_t generation;
    int64_t holds;
    int64_t n_pending;
    int32_t retry_due;
    /* the tokens the decode steps emitted (more than one a step with MTP bursts: telemetry's
     * avg_accept_length is decode_tokens / decode_steps over a window), over completed passes
     * and in the pass just formed */
    int64_t decode_tokens;
    int64_t pass_tokens;
    /* MTP or state_cache: the pass just formed only decodes, every running request emits
     * without finishing, nothing could start: aisim_vllm_mtp_extend may lengthen it */
    int32_t mtp_plain;
    /* MTP: the gaps across breaks between the stretches of the requests finished so far, as
     * (last pass before, first pass after, count) triples in the order they were counted,
     * consecutive equal ones merged; a zero-length break (two stretches in one pass: a burst)
     * is (0, 0), as engine/mtp.py's record_burst_itl counts it (rank_base's break_gaps) */
    const int64_t *mtp_breaks;
    size_t n_mtp_breaks;
} aisim_vllm_view;

/* The pool is borrowed: the caller keeps it alive for the rank's lifetime
 * and changes it only through the rank. */
int aisim_vllm_new(aisim_vllm_rank **out, const aisim_vllm_config *config, aisim_kv_pool *pool);
int aisim_vllm_free(aisim_vllm_rank *r);
int aisim_vllm_view_of(const aisim_vllm_rank *r, const aisim_vllm_view **out);
/* Queues a request; returns its slot (>= 0). With prefix caching, either
 * hashes (n_hashes of them: the prompt's block hashes, or with authored
 * outputs those of prompt then outputs) or the prompt as n_runs runs of
 * values[i] repeated lengths[i] times, hashed here (aisim_hash_block_runs);
 * neither without caching. salt: the uuid salt of the blocks past them. */
int aisim_vllm_submit(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                      int64_t out_limit, const uint64_t *hashes, size_t n_hashes,
                      const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                      int32_t authored, uint64_t salt);
/* aisim_vllm_submit of a prompt given as id ranges (workload/prompt.py's IdRanges behind
 * Prompt.from_hash_ids), with prefix caching and no authored outputs: ranges holds n_ranges
 * (first id, count) pairs; the prompt is their first ceil(prompt_len / block) ids, each
 * repeated `block` times, cut at prompt_len. AISIM_EINVAL (nothing queued) when the ranges
 * are shorter or an id passes u32: give the runs instead. */
int aisim_vllm_submit_ranges(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                             int64_t out_limit, const uint32_t *ranges, size_t n_ranges,
                             int64_t block, uint64_t salt);
/* Decode role: takes a destination as aisim_vllm_submit takes a request, into the pending
 * FIFO instead of the waiting queue (the caller checked that it can ever fit); its slot. */
int aisim_vllm_accept(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                      int64_t out_limit, const uint64_t *hashes, size_t n_hashes,
                      const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                      int32_t authored, uint64_t salt);
/* aisim_vllm_accept of a prompt given as id ranges, as aisim_vllm_submit_ranges takes one
 * (AISIM_EINVAL, nothing accepted, when the runs must be given instead). */
int aisim_vllm_accept_ranges(aisim_vllm_rank *r, int64_t prompt_len, int64_t max_output,
                             int64_t out_limit, const uint32_t *ranges, size_t n_ranges,
                             int64_t block, uint64_t salt);
/* Decode role (VllmDecodeRank.retry): reserves the prompt blocks of the pending head if it
 * may be tried and fits; *slot is the head reserved (-1: none), *fresh_tokens the tokens of
 * its fresh blocks, *seq its KV table. */
int aisim_vllm_retry(aisim_vllm_rank *r, int32_t *slot, int64_t *fresh_tokens, int32_t *seq);
/* Decode role: the KV of reserved `slot` arrived; it waits to start, in acceptance order. */
int aisim_vllm_activate(aisim_vllm_rank *r, int32_t slot);
/* Prefill role: frees the KV of a held source and its slot. */
int aisim_vllm_release_source(aisim_vllm_rank *r, int32_t slot);
/* Decode times of built-in models evaluated here (engine/decode_run.py's
 * handle: the fixed or polynomial model, or a memo Python fills): with it,
 * schedule leaves the pass's decode time in the view when it knows it. The
 * handle is borrowed (NULL: none). */
int aisim_vllm_set_decode_timing(aisim_vllm_rank *r, const aisim_decode_timing *timing);
int aisim_vllm_schedule(aisim_vllm_rank *r, double now_ms);
/* The crossing buckets (offset mod block size ascending, decoders needing a
 * block there) and the first pass after the current one in which a request
 * emits its last token (-1: none); returns how many keys (cap too small:
 * AISIM_EINVAL). */
int aisim_vllm_extension_input(const aisim_vllm_rank *r, int64_t *keys, int64_t *counts,
                               size_t cap, int64_t *stop_pass);
/* aisim_vllm_extend's answer when the run's integers could leave the range
 * the C loop computes exactly: run the Python loop instead. */
enum aisim_vllm_extend_status { AISIM_VLLM_EXTEND_IN_PYTHON = 3 };

/* The decode-only passes after the pass just formed (VllmRank.extend), through
 * aisim_decode_extend with the rank's decode timing: resume 0 fills run from
 * the rank (ends[0] = end_ms), resume 1 continues a run that stopped on
 * AISIM_DECODE_MISS once Python put the missing time. Answers AISIM_OK
 * (run->n_ends ends written), AISIM_DECODE_MISS, AISIM_VLLM_EXTEND_IN_PYTHON
 * or an error. max_passes <= cap. */
int aisim_vllm_extend(aisim_vllm_rank *r, double end_ms, double horizon_ms, double cutoff_ms,
                      int64_t max_passes, double *ends, size_t cap, aisim_decode_run *run,
                      int32_t resume);
/* Decode role: opens the stretches of the activations whose first token the pass
 * just formed computes when that pass may then be extended (VllmDecodeRank's
 * _activations_decode_next, _open_activated); 1 when it did, 0 when not. */
int aisim_vllm_open_activated(aisim_vllm_rank *r);
/* Completes the pass formed, lengthened by extra_passes decode-only passes.
 * report (a router observes the rank, VllmRank._report_pass): 0 none;
 * AISIM_VLLM_REPORT_KV takes the pool's eviction log of hashes not resident
 * again, AISIM_VLLM_REPORT_INDEX empties it; either fills the view's report
 * arrays as of the pass end, before its requests retire. */
enum aisim_vllm_report {
    AISIM_VLLM_REPORT_KV = 1,
    AISIM_VLLM_REPORT_INDEX = 2
};
int aisim_vllm_complete(aisim_vllm_rank *r, int64_t extra_passes, int32_t report);
/* While on, every commit of block hashes is kept (the pass's "stored" runs,
 * reported with the pass that ends next). */
int aisim_vllm_observe(aisim_vllm_rank *r, int32_t on);
/* Copies the slots of the running order (which 0) or the waiting queue
 * (which 1); returns how many there are. */
int aisim_vllm_queue(const aisim_vllm_rank *r, int32_t which, int32_t *out, size_t cap);
/* A live request's KV blocks now (an open stretch's included) and computed tokens. */
int aisim_vllm_request_blocks(const aisim_vllm_rank *r, int32_t slot, int64_t *blocks,
                              int64_t *computed, int32_t *seq);
/* Prompt tokens not computed yet, over the requests waiting or running (VllmRank.
 * pending_prefill_tokens: a placement policy's active_prefill_tokens). */
int aisim_vllm_pending_prefill_tokens(const aisim_vllm_rank *r, int64_t *out);
/* What the pass in flight (extended by extra_passes) will finish, as telemetry's
 * submission gauges see it (VllmRank.submission_gauges): out[0] requests
 * finishing, out[1] blocks they free (held by no other running request, each
 * once), out[2] of those, the full ones that stay cached. */
int aisim_vllm_finishing_gauges(aisim_vllm_rank *r, int64_t extra_passes, int64_t *out);
/* MTP bursts (aic_nextn, engine/mtp.py): before the first submission, nextn (1..5) drafts a
 * verification forward may accept; limits[i] the u64 a draw must stay below for draft i to be
 * accepted (floor(rate x 2^64)) unless always[i] (a rate of 1: accepted without a draw); the
 * generator is StdRng::seed_from_u64(seed) (csrc/rng.c); draws 0: a prefill-role copy emits
 * its one token without drawing. Every request of the rank then stays outside open stretches:
 * each pass reserves its bursts' KV (preempting by the preemption mode while it does not fit),
 * samples them in running order and stamps their tokens at its end (zero gaps). */
enum { AISIM_VLLM_MAX_NEXTN = 5 };
int aisim_vllm_set_mtp(aisim_vllm_rank *r, int32_t nextn, const uint64_t *limits,
                       const int32_t *always, uint64_t seed, int32_t draws);
/* prefill_schedule_interval's gate of one rank (engine/vllm_psi.py's PrefillCadence, the
 * twin: the same fields): the worker sets wave before each grouped pass; the rank sets defer
 * at the start of each pass and capacity_bound at the end of the admission of a pass that did
 * not defer and preempted nothing. Borrowed by aisim_vllm_set_psi (interval >= 2; once): the
 * caller keeps it alive for the rank's lifetime. */
typedef struct aisim_vllm_psi {
    int64_t interval;
    int64_t wave;
    int32_t capacity_bound;
    int32_t defer;
} aisim_vllm_psi;
int aisim_vllm_set_psi(aisim_vllm_rank *r, aisim_vllm_psi *psi);
/* state_cache (engine/vllm_state_cache.py's StateCacheRank, the twin): before the first
 * submission of an aggregated vLLM rank without MTP, every running request also holds
 * state_blocks working-state blocks of the pool, published as checkpoints where its computed
 * tokens end the known sequence on a block boundary, preserved before the next write; prefix
 * reuse needs a checkpoint. Every request then stays outside open stretches (each pass stamps
 * its tokens); view.mtp_plain marks a pass after which aisim_vllm_mtp_extend may run its
 * decode-only passes ahead (complete replays them). */
int aisim_vllm_set_state(aisim_vllm_rank *r, int64_t state_blocks);
/* MTP or state_cache: the decode-only passes after the pass just formed (with view.mtp_plain), as the rank
 * would form and complete them one by one: each pass's bursts are drawn ahead from a copy of
 * the generator, its decode time evaluated here; the run stops before a pass that would
 * preempt, starts at or after horizon_ms, ends after cutoff_ms or has no decode time known
 * here, and after a pass in which a request emits its last token. Writes the end times
 * (ends[0] = end_ms) and returns how many (1: no extension); nothing changes until
 * aisim_vllm_complete(extra_passes) replays the first extra_passes of them. max_passes <= cap. */
int aisim_vllm_mtp_extend(aisim_vllm_rank *r, double end_ms, double horizon_ms,
                          double cutoff_ms, int64_t max_passes, double *ends, size_t cap);
/* Forward-pass metrics of each pass formed from now on (off at creation). */
int aisim_vllm_set_fpm(aisim_vllm_rank *r, int32_t on);
