/*
 * sglang_rank.h: what the files of the C SGLang rank share (internal; cffi reads
 * sglang_rank.cdef.h): the rank's struct and its requests' slots, the helpers every file
 * inlines, and the functions one file calls in another.
 *
 *   sglang_rank.c    the pass (admission, first tokens, decode steps, retraction), its
 *                    completion (ITL counting) and the public calls
 *   sglang_batch.c   the growable arrays, the running batch kept arithmetically, the waiting
 *                    queue, a request's tokens and stretches
 *   sglang_extend.c  the decode-only runs that follow a pass (SglangRank.extend)
 *   sglang_roles.c   the disaggregated roles (engine/sglang_roles.py): held sources, the
 *                    decode role's destinations and its gates on the pass
 */
#ifndef AISIM_SGLANG_RANK_H
#define AISIM_SGLANG_RANK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"
#include "radix_cache.cdef.h"
#include "sglang_rank.cdef.h"

#define TRY(x) do { int status_ = (x); if (status_ < 0) return status_; } while (0)
#define NONE (-1)
#define ROOT 0
#define PHASE_BITS 34
#define MAX_PASS ((int64_t)1 << 27)        /* stamps stay in int64 */
#define EXACT_INT ((int64_t)1 << 62)       /* engine/decode_run.py's _EXACT */
#define INIT_RATIO 0.7
#define MIN_RATIO_FACTOR 0.14
#define DECAY_STEPS 600.0
#define RETRACT_DECODE_STEPS 20
#define LPM_MAX_WAITING 128
#define DUPLICATE_CHECK_TOKENS 32

enum { WAITING = 0, RUNNING = 1, PREEMPTED = 2, FINISHED = 3 };

/* where a role's request is outside the queues and the running batch (sglang_roles.c) */
enum { IN_QUEUES = 0, PENDING = 1, RESERVED = 2, PREBUILT = 3, HELD = 4 };

typedef struct i64s {
    int64_t *v;
    size_t len, cap;
} i64s;

typedef struct i32s {
    int32_t *v;
    size_t len, cap;
} i32s;

typedef struct sg_req {
    int64_t prompt_len, out_limit;
    int64_t generated, computed, held, committed;
    int64_t seq;                 /* radix node handle, NONE: holds no KV */
    int64_t open_start;          /* decode index it joined at, NONE: not a decoder */
    int64_t base_gen;
    int64_t join;                /* join number (running order) */
    int64_t key;                 /* (length - D) mod page size at joining */
    int64_t last_at;             /* decode index of its last token */
    int64_t unclip_at;           /* decode index after which its remaining output is clip */
    int64_t admissions;
    int64_t retractions;
    int64_t serial;              /* submission number: the match memo's identity */
    int32_t in_stretch, big, live, status;
    int32_t rejected;            /* terminal by max_model_len (no tokens) */
    int32_t place;               /* a role's request: IN_QUEUES, PENDING, ... */
    int64_t last_attempt;        /* decode role: the generation its reservation was last tried at */
    /* the last decode run, counted per rank (RunningBatch.leave's itl_span) */
    int32_t has_span;
    int64_t span_first, span_last, span_before, span_prev_last, span_after;
    i64s stretches;              /* (first, last) pass pairs */
    /* tokens: prompt then outputs, as far as the tree needs them */
    uint32_t *tok;
    int64_t n_tok, cap_tok;
    uint32_t *authored;
    int64_t n_authored;
    uint32_t out_tag;
} sg_req;

struct aisim_sglang_rank {
    aisim_sglang_view view;
    aisim_sglang_config cfg;
    aisim_radix *cache;
    const aisim_radix_view *cv;
    const aisim_decode_timing *timing;
    /* requests */
    sg_req *reqs;
    size_t n_reqs, cap_reqs;
    i32s free_slots;
    int64_t serials;
    /* the waiting queue: wq.v[w_head .. w_head + n_waiting) */
    i32s wq;
    size_t w_head;
    /* the running batch, in join order */
    i32s run;
    int64_t D;
    i64s dec_pass;               /* rank pass of each decode pass */
    i64s breaks;                 /* decode indices d after which the next is not d's pass + 1 */
    int64_t sum_len, sum_small, n_small, n_big;
    int64_t *crossings;          /* members by (len - D) mod page size */
    i64s cover;                  /* counted runs: difference array over decode indices */
    int64_t join_seq;
    /* pass state */
    int64_t k0, k2;
    int32_t emitted_any, starved, interval_idle;
    int64_t pass_committed;
    i32s done, finishing, retracted, catch_up, can_run, fresh, growing;
    /* the match memo: (serial, limit, matched, node, inserts) */
    int64_t memo_serial, memo_limit, memo_matched, memo_node, memo_inserts;
    /* outputs */
    i64s events, stretch_out, itl_diff, break_gaps;
    /* scratch */
    i64s keys, counts, unclips, charges;
    int64_t run_finish;          /* the extension's finishing decode index */
    size_t run_cap;              /* its passes + 1: the loop's buffer bound, on resumes too */
    i32s dec_done;               /* the members a decode step finished */
    /* the decode role's FIFOs: pending.v[p_head ..), prebuilt.v[b_head ..) */
    i32s pending, prebuilt;
    size_t p_head, b_head;
    int64_t k3;                  /* the roles' between-passes stamp counter (never reset) */
    int32_t broken;
    /* aisim_sglang_start's extension buffers (Python's, set by aisim_sglang_set_start_buffers;
     * NULL: it never extends) */
    double *start_ends;
    size_t start_cap;
    aisim_decode_run *start_run;
    int32_t *start_finishing;
};

/* ------------------------------------------------------------------ inlined helpers */

static inline int64_t pages(const aisim_sglang_rank *r, int64_t tokens)
{
    int64_t ps = r->cfg.page_size;
    return ((tokens + ps - 1) / ps) * ps;
}

static inline int64_t mod(int64_t a, int64_t m)
{
    int64_t x = a % m;
    return x < 0 ? x + m : x;
}

static inline int64_t stamp(int64_t pass_index, int64_t phase, int64_t k)
{
    return (((pass_index << 2) | phase) << PHASE_BITS) | k;
}

static inline int64_t available(const aisim_sglang_rank *r)
{
    return r->cv->free_tokens;
}

static inline int64_t evictable(const aisim_sglang_rank *r)
{
    return r->cv->evictable_size;
}

/* the admission ratio (sglang_budget.RatioSchedule) */
static inline void ratio_decay(aisim_sglang_rank *r)
{
    double value = r->view.ratio - r->view.ratio_step;
    r->view.ratio = value > r->view.ratio_min ? value : r->view.ratio_min;
}

static inline int ratio_settled(const aisim_sglang_rank *r)
{
    double value = r->view.ratio - r->view.ratio_step;
    return (value > r->view.ratio_min ? value : r->view.ratio_min) == r->view.ratio;
}

/* The queue may form a prefill batch now: a decode role keeps it shut while destinations
 * wait for a reservation or a running slot (SglangDecodeRank._may_prefill). */
static inline int may_prefill(const aisim_sglang_rank *r)
{
    return r->cfg.role != AISIM_SG_DECODE || (!r->view.n_pending && !r->view.n_prebuilt);
}

typedef struct priced {
    int64_t start, chunk, charged, reserve;
} priced;

/* ------------------------------------------------------------------ across the files */

int sgl_i64_push(i64s *a, int64_t x);
int sgl_i64_reserve(i64s *a, size_t n);
int sgl_i32_reserve(i32s *a, size_t n);
int sgl_i32_push(i32s *a, int32_t x);
int sgl_emit(sg_req *q, int64_t P);
int sgl_ensure_tokens(sg_req *q, int64_t depth);
void sgl_sync(const aisim_sglang_rank *r, sg_req *q);
int sgl_batch_join(aisim_sglang_rank *r, int32_t s, int64_t number);
int sgl_add_stretch(i64s *s, int64_t a, int64_t b);
size_t sgl_bisect_left(const i64s *a, int64_t x);
int sgl_close_stretches(aisim_sglang_rank *r, sg_req *q, int64_t first, int64_t last);
int sgl_batch_leave(aisim_sglang_rank *r, int32_t s);
int64_t sgl_growth(const aisim_sglang_rank *r);
int64_t sgl_clipped_remaining(const aisim_sglang_rank *r);
int sgl_record_decode(aisim_sglang_rank *r, int64_t P, i32s *done);
int sgl_record_decodes(aisim_sglang_rank *r, int64_t first_pass, int64_t count);
int64_t sgl_next_finish(const aisim_sglang_rank *r);
int32_t sgl_w_at(const aisim_sglang_rank *r, size_t i);
void sgl_w_popleft(aisim_sglang_rank *r);
int sgl_w_append(aisim_sglang_rank *r, int32_t s);
int sgl_w_appendleft(aisim_sglang_rank *r, int32_t s);
int sgl_head_match(aisim_sglang_rank *r, int32_t s, int64_t length, int64_t *cached,
                   int64_t *node);
int sgl_lpm_ranked(aisim_sglang_rank *r, int32_t *out);
int sgl_lpm_sorts(const aisim_sglang_rank *r);
int sgl_price_chunk(aisim_sglang_rank *r, int32_t s, double rem_chunk, priced *p, int *ok);
int sgl_event(aisim_sglang_rank *r, int64_t kind, int32_t slot, int64_t a, int64_t b,
              int64_t c);
int sgl_evict(aisim_sglang_rank *r, int64_t tokens);
int sgl_insert_own(aisim_sglang_rank *r, int32_t s, int64_t upto, int64_t access);
int sgl_finish_kv(aisim_sglang_rank *r, int32_t s, const int64_t *access);
int sgl_complete_req(aisim_sglang_rank *r, int32_t s);
void sgl_free_slot(aisim_sglang_rank *r, int32_t s);
int sgl_guard(aisim_sglang_rank *r, int status);
/* sglang_roles.c */
int sgl_promote(aisim_sglang_rank *r);
int sgl_may_stall(const aisim_sglang_rank *r);
int sgl_hold(aisim_sglang_rank *r, int32_t s);
void sgl_role_view(aisim_sglang_rank *r);
void sgl_role_free(aisim_sglang_rank *r);
int sgl_start_extension(aisim_sglang_rank *r, double end_ms, double horizon_ms, double cutoff_ms,
                        int64_t max_passes, double *ends, aisim_decode_run *run);

#endif
