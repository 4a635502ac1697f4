/*
 * plain_common.h: what the plain loops (plain_loop.c, the aggregated one, and plain_disagg.c,
 * the disaggregated one) share, internal to them (not a cffi cdef):
 *   - sessions: workload/one_turn.py's one-turn synthetic sessions becoming ready (timed
 *     arrivals, or a closed loop's sessions at each terminal);
 *   - prompts: synthetic.SyntheticSessions' id ranges of a session's prompt;
 *   - requests: one entry per request from arrival to settlement (a ring over the uuids not
 *     yet settled), settled in uuid order into the summary's totals and samples as
 *     report.Collector's _settled and _Totals.add do, and stats.exact_stats of the samples;
 *   - records.token_times of a finished request's stretches.
 * Everything returns an aisim status (never aborts or prints).
 */
#ifndef AISIM_PLAIN_COMMON_H
#define AISIM_PLAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "aisim.h"

#define PLAIN_ID_LIMIT ((int64_t)1 << 32)  /* synthetic.py _ID_LIMIT */
#define PLAIN_TRY(x) do { int status_ = (x); if (status_ < 0) return status_; } while (0)

/* A min-heap of events ordered by (time, key) (runtime/event_queue.py's (time, seq), the
 * disaggregated loop's (time, worker << 32 | generation) tuples); value rides along. */
typedef struct plain_event {
    double time;
    int64_t key;
    int64_t value;
} plain_event;

typedef struct plain_heap {
    plain_event *items;
    size_t len, cap;
} plain_heap;

/* ------------------------------------------------------------ sessions */

typedef struct plain_sessions {
    int32_t arrivals;       /* enum aisim_plain_arrivals */
    double gap_ms;
    int64_t sessions;
    int64_t max_sessions;   /* closed loop */
    aisim_rng *arrival_rng;
    const aisim_rng_view *arrival_view;
    double next_arrival;    /* timed: the next session's start */
    int64_t made;           /* sessions made into requests */
    int64_t *ready_idx;     /* closed loop: ready sessions (FIFO: ready times never decrease) */
    double *ready_ms;
    size_t ready_head, ready_len, ready_cap;   /* ready_cap: a power of two */
    int64_t active, next_pending;
    /* trace sessions (arrivals AISIM_PLAIN_TRACE): turns ready in a heap on (time, session
     * << 32 | turn), as sessions.SessionDriver's heap of (time, index, turn) */
    const int64_t *turn_base;   /* session i's turns: turn_base[i] .. turn_base[i + 1] */
    const double *turn_delay;   /* a turn's think time after the previous one's terminal */
    const int64_t *start_order; /* timed: sessions in (start, index) order */
    const double *start_ms;     /* timed: each session's start */
    int64_t next_start;         /* timed: the next of start_order to join the heap */
    int32_t trace_closed;       /* trace: closed loop of max_sessions sessions */
    plain_heap turns;
    /* synthetic sessions (turns_each > 0: synthetic.SyntheticSessions, that many turns each, every
     * one after the first inter_delay_ms after its predecessor's terminal; turn_base and
     * turn_delay unused): timed ones start at first_arrivals' times (arrivals' kind in
     * start_kind, next_arrival the start of session next_start) */
    int64_t turns_each;
    double inter_delay_ms;
    int32_t start_kind;
    int64_t first_turns;        /* sessions whose first turn was made */
} plain_sessions;

/* The sessions of a run from its start (the fields above arrivals..arrival_rng set). */
int plain_sessions_start(plain_sessions *s);
void plain_sessions_free(plain_sessions *s);
int plain_sessions_closed(const plain_sessions *s);
/* when the next session becomes ready (INFINITY: none) */
double plain_sessions_next_ready(const plain_sessions *s);
/* The next session ready at now_ms, made into a request: *index its session (-1: none),
 * *turn its turn (0 but for trace sessions). */
int plain_sessions_pop(plain_sessions *s, double now_ms, int64_t *index, int32_t *turn);
/* The driver's on_terminal of session `index`'s turn `turn` at end_ms (OneTurnDriver's:
 * nothing when timed; SessionDriver's: the next turn, or the session's end). Every
 * aggregated terminal (completed, rejected) lets a trace session go on. */
int plain_sessions_terminal(plain_sessions *s, int64_t index, int32_t turn, double end_ms);
/* The sessions ready and not made yet (closed loop: in ready order, as index and time;
 * trace sessions: the turns in heap order, each as session << 32 | turn), up to cap copied
 * (the heap left sorted); returns how many there are, or AISIM_EINVAL. */
int plain_sessions_ready(plain_sessions *s, int64_t *index, double *ready_ms, size_t cap);

/* ------------------------------------------------------------ prompts */

typedef struct plain_prompts {
    int64_t own;            /* fresh blocks of each session, from fresh_base + i * own */
    int64_t shared;         /* blocks of a group's prefix */
    int64_t fresh_base;
    int64_t groups;
    aisim_rng *shape_rng;   /* NULL: ungrouped */
    const aisim_rng_view *shape_view;
    uint32_t *groups_of;    /* synthetic sessions: each one's prefix's first id */
    size_t groups_cap;
} plain_prompts;

/* SyntheticSessions._fresh_ranges of `count` fresh blocks from block `offset` into ranges
 * from pair k on; returns the pairs written then. */
size_t plain_fresh_ranges(const plain_prompts *p, int64_t offset, int64_t count,
                          uint32_t *ranges, size_t k);
/* Session `index`'s prompt as (first, count) pairs into ranges[8] (drawing its group from
 * shape_rng); *n the pairs written. */
int plain_prompt_ranges(plain_prompts *pr, int64_t index, uint32_t *ranges, size_t *n);
/* SyntheticSessions' prompt of turn `turn` of session `index` (of `turns` each): its group
 * prefix (drawn at its first turn, kept in pr->groups_of) then its own fresh blocks. */
int plain_session_ranges(plain_prompts *pr, int64_t index, int32_t turn, int64_t turns,
                         uint32_t *ranges, size_t *n);

/* ------------------------------------------------------------ requests and the summary */

/* A request from arrival to settlement (a SummaryRecord's values as they become known). */
typedef struct plain_entry {
    double arrival, terminal, first, second, last;
    int64_t prompt_len, count, max_reused, first_reused, generated;
    int8_t state;       /* 0 in flight, 1 completed, 2 another terminal */
    int8_t admitted, has_first, has_second;
    /* what a per-request record reads besides (records kept) */
    int32_t turn;
    int32_t rank;       /* the rank it was placed on (w * dp_size + r) */
    int64_t session, max_output;
    double admit_at;    /* its first admission */
    int64_t admit_reused, n_admissions;
    int8_t admit_readmit;
    /* the disaggregated handoff (records kept): the decode worker chosen (rank holds the
     * prefill worker), the PLAIN_STAGE_* reached and their times */
    int8_t stages;
    int32_t decode_rank;
    double held, reserved, activated, released;
    int64_t route_overlap[2], route_best[2];   /* a kv_router's pick in each pool */
    /* the disaggregated loop's: the prompt made at arrival (a trace turn, -1: the id ranges)
     * and the slot of its held source on its prefill worker (rank) */
    int64_t prompt_turn;
    uint32_t prompt_ranges[8];
    int32_t n_prompt_ranges;
    int32_t source_slot;
} plain_entry;

/* a disaggregated request's stages (plain_entry.stages, a record row's column 14) */
enum { PLAIN_STAGE_HELD = 1, PLAIN_STAGE_RESERVED = 2, PLAIN_STAGE_ACTIVATED = 4,
       PLAIN_STAGE_RELEASED = 8, PLAIN_STAGE_ACCEPTED = 16, PLAIN_STAGE_ROUTED = 32 };

/* The per-request records the loops gather (records kept): one row of PLAIN_REC_INTS
 * integers and one of PLAIN_REC_DOUBLES doubles per settled entry, in settlement order
 * (the columns: aisim_plain_records in plain_loop.cdef.h), and each admission after a
 * request's first as (uuid, reused, readmission) integers and its time. */
enum { PLAIN_REC_INTS = 13, PLAIN_REC_DOUBLES = 6 };
/* A disaggregated row (records.disagg) has six integers more (the decode worker, -1: none;
 * the stages; a kv_router's selected and best overlaps in the prefill, then the decode pool)
 * and four doubles (held, reserved, activated, released). */
enum { PLAIN_PD_REC_INTS = 19, PLAIN_PD_REC_DOUBLES = 10 };

typedef struct plain_records {
    int32_t on;
    int32_t disagg;             /* rows of PLAIN_PD_REC_* columns */
    int64_t *ints;
    double *doubles;
    size_t n, ints_cap, doubles_cap;
    int64_t *adm_ints;          /* 3 per admission */
    double *adm_at;
    size_t n_adm, adm_ints_cap, adm_at_cap;
    size_t rest_from;           /* the first row plain_settle_rest settled (SIZE_MAX: none) */
    int64_t *late_uuid;         /* disaggregated: sources released after their request
                                   settled, when, and the rows gathered before (-1: the
                                   record is with a running stream's sink already) */
    double *late_at;
    int64_t *late_row;
    size_t n_late, late_uuid_cap, late_at_cap, late_row_cap;
    int32_t streamed;           /* a running stream takes the records (report.
                                   _RecordStream): a record reaches its sink once a later
                                   arrival settled */
    double settled_arrival;     /* the arrival of the request settled last */
    double first_ms;            /* when the oldest row gathered settled (NAN: none) */
} plain_records;

enum { PLAIN_TTFT = 0, PLAIN_E2E = 1, PLAIN_TTST = 2, PLAIN_TPOT = 3 };

/* report._Totals' fields, and the collector's fallback count */
typedef struct plain_totals {
    int64_t completed, input_tokens, output_tokens, reused, first_reused, good, good_tokens,
        fallback_committed;
    double duration_ms;
} plain_totals;

typedef struct plain_requests {
    plain_entry *ring;
    size_t ring_cap;        /* a power of two */
    int64_t settle_uuid, next_uuid;   /* entries of [settle_uuid, next_uuid) */
    double *samples[4];
    size_t n_samples[4], samples_cap[4];
    plain_totals totals;
    /* the report's start and SLA */
    double report_start_ms;
    int32_t has_ttft, has_itl, has_e2e;
    double sla_ttft_ms, sla_itl_ms, sla_e2e_ms;
    plain_records records;
} plain_requests;

void plain_requests_free(plain_requests *q);
/* the view's copy of what the summary reads (aisim_plain_summary) */
void plain_fill_summary(aisim_plain_summary *out, const plain_requests *q);
plain_entry *plain_entry_of(plain_requests *q, int64_t uuid);
/* the entry of uuid next_uuid (not taken: the caller advances next_uuid) */
int plain_new_entry(plain_requests *q, plain_entry **out);
/* NativeVllmRank._schedule_events of an admission at at_ms (reused tokens, readmission) in
 * pool `pool` (0 aggregated or prefill, 1 decode: it leaves the first admission's reuse,
 * which is the prefill copy's); a later admission's readmission column holds
 * readmit | pool << 1. */
int plain_admitted_in(plain_requests *q, int64_t uuid, double at_ms, int64_t reused,
                      int readmit, int pool);
/* A disaggregated source of the request of uuid (arrived at arrival_ms) released at at_ms:
 * on its entry, or (records kept, its request settled already) into records' late list. */
int plain_released(plain_requests *q, int64_t uuid, double arrival_ms, double at_ms);
void plain_records_clear(plain_records *r);
/* The rows gathered in r as aisim_plain_records hands them out (the cdef's columns);
 * AISIM_EINVAL on a NULL out pointer. */
int plain_records_out(const plain_records *r, const int64_t **ints, const double **doubles,
                      size_t *n, const int64_t **adm_ints, const double **adm_at,
                      size_t *n_adm, size_t *rest_from);
/* Collector's arrival order: entries settle as soon as every earlier uuid has. */
int plain_settle_ready(plain_requests *q);
/* _ArrivalOrder.flush at the report: the terminals behind a request still in flight. */
int plain_settle_rest(plain_requests *q);
/* stats.exact_stats of sample array `which` into out[9] (aisim_plain_sample_stats). */
int plain_sample_stats(plain_requests *q, int32_t which, double *out);
void plain_drop_samples(plain_requests *q, int32_t which);

/* A trace turn's prompt of len tokens as runs of `block` tokens (Prompt.from_hash_ids):
 * their lengths into lengths (block each, the last cut at len), after the run cut last,
 * *n_last (SIZE_MAX: none), is made whole again; *n_last becomes this turn's cut. The count
 * of runs (len >= 1; lengths holds them: the loops size it by the longest turn). */
size_t plain_turn_lengths(uint32_t *lengths, size_t *n_last, int64_t len, int64_t block);

/* ------------------------------------------------------------ heaps and pass histories */

int plain_heap_push(plain_heap *h, double time, int64_t key, int64_t value);
plain_event plain_heap_pop(plain_heap *h);   /* (h not empty) */
int plain_event_before(const plain_event *a, const plain_event *b);

/* A rank's pass end times (RankBase.pass_ends), its break pairs (NativeVllmRank.
 * _count_breaks: last pass before, first pass after) and its slots' uuids. */
typedef struct plain_history {
    double *pass_ends;
    size_t n_pass_ends, pass_ends_cap;
    int64_t *breaks;
    size_t n_breaks, breaks_cap;   /* values */
    int64_t *slot_uuid;
    size_t slot_cap;
} plain_history;

void plain_history_free(plain_history *h);
int plain_history_take_slot(plain_history *h, int32_t slot, int64_t uuid);
/* NativeVllmRank._schedule_events over a rank's n events (vllm_rank.cdef.h's
 * AISIM_VLLM_EVENT_WIDTH values each; the slots' uuids in hist): admissions in pool `pool`
 * (plain_admitted_in's), and preemptions' generated counts on their entries. */
int plain_schedule_events(plain_requests *q, const plain_history *hist,
                          const int64_t *events, size_t n, double now_ms, int pool);
/* StepTimer's end of the pass a rank just formed (its view, vllm_rank.cdef.h's
 * aisim_vllm_view) from now_ms: its prefill chunks' time by the prefill model (kind, fixed
 * time, ratio: aisim_prefill_timing_eval's), when `prefills`, then its decode batch's, when
 * `decodes`; AISIM_PLAIN_TIMING when a time is one the C path cannot give. */
struct aisim_vllm_view;
int plain_pass_end(const struct aisim_vllm_view *v, int32_t kind, double fixed_ms,
                   double ratio, int prefills, int decodes, double now_ms, double *end);
/* the pass ends ends[0..n) completed */
int plain_history_passes(plain_history *h, const double *ends, size_t n);
/* the breaks between the b stretches st[0..2b) of a finished request */
int plain_history_breaks(plain_history *h, const int64_t *st, int64_t b);
/* bisect_left and bisect_right of t in ends[0..n) */
size_t plain_bisect_left(const double *ends, size_t n, double t);
size_t plain_bisect_right(const double *ends, size_t n, double t);

/* records.token_times of a finished request's stretches st[0..2n) over pass end times ends */
void plain_token_times(const double *ends, plain_entry *e, const int64_t *st, int64_t n);

#endif
