/*
 * plain_disagg.c: a plain disaggregated run as one C loop. Its twin and specification is
 * runtime/disaggregated.py's loop (the module docstring's steps; _step, _complete_due,
 * _complete, _drive, _start, _cut, _absorb_transfers and the handoff's actions) with the
 * one-turn synthetic driver, synthetic sessions or trace sessions, round robin in both pools,
 * dp 1, and the C vLLM / TensorRT-LLM role ranks (engine/vllm_native_roles.py) driven through
 * their public entry points. Sessions, prompts, the summary and the per-request record rows
 * are plain_common.h's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"
#include "vllm_rank.cdef.h"
#include "kv_router.cdef.h"
#include "plain_loop.cdef.h"
#include "plain_disagg.cdef.h"
#include "plain_common.h"

#define MAX_PASSES 4096
#define GOLDEN 0x9E3779B97F4A7C15ull
#define MAX_ROUNDS 1000000
#define TRY PLAIN_TRY

enum { SUBMIT, RESERVE, START_TRANSFER, ACTIVATE, RELEASE_SOURCE, CANCEL_SOURCE };

typedef struct action {
    int32_t kind;
    int32_t pworker, pslot, dworker, dslot;
    int64_t uuid;
    int64_t missing;
    double arrival;         /* the request's (a release may come after it settled) */
} action;

typedef struct action_list {
    action *items;
    size_t len, cap;
} action_list;

typedef struct pd_worker {
    aisim_vllm_rank *rank;
    const aisim_vllm_view *view;
    int decode;
    int draining;           /* scaling drains it: its completions and releases are heard */
    int64_t worker_id;
    int busy, active;
    uint32_t generation;
    double pass_end;
    double *ends;           /* the pass formed and its extension */
    size_t n_ends;
    plain_history hist;
    int idle, extended;
    action_list deferred;
    plain_heap inbound;     /* decode: its transfers' done times */
    int64_t *pending;       /* decode: accepted destinations (uuids) in FIFO order from
                               pending_head (the rank's pending FIFO, named at a stall) */
    size_t pending_head, n_pending, pending_cap;
    int32_t *held;          /* prefill: slots of sources the pass completing now held */
    int64_t *held_uuid;
    size_t n_held, held_cap, held_uuid_cap;
} pd_worker;

struct aisim_pd {
    aisim_pd_config cfg;
    pd_worker *workers;
    size_t n_workers, workers_cap;
    int32_t *order;         /* worker keys by (decode, worker id): the same-time order */
    size_t order_cap;
    int32_t *rr[2];         /* each pool's round robin list, as worker keys */
    size_t n_rr[2], rr_cap[2];
    /* scheduled scaling (cfg.cluster): its next tick and worker ready, the workers the
     * loop heard complete a pass or release a source while draining (cluster.worker_idle,
     * in order) since the last pause, and where a step paused */
    double next_tick_ms, next_ready_ms;
    int32_t *idle_keys;
    size_t n_idle_keys, idle_cap;
    int in_step, phase, changed, ticked;
    long rounds;
    double step_t;
    plain_sessions sess;
    plain_prompts prompts;
    plain_requests req;
    uint32_t *lengths;      /* a trace prompt's run lengths (trace_block but the last) */
    size_t n_last;          /* the run cut last (SIZE_MAX: none) */
    const aisim_kvr_view *kvr_view[2];   /* each pool's kv_router (cfg.kvr; NULL: round
                               robin) */
    uint32_t *run_values, *run_lengths;  /* scratch: a prompt of id ranges as runs */
    size_t run_values_cap, run_lengths_cap;
    struct late { int64_t session; int32_t turn; double end_ms; } *late_list;   /* terminals
                               of zero-time passes, heard after the round's arrivals */
    size_t n_late, late_cap;
    plain_heap passes;      /* pass completions: key worker << 32 | generation */
    plain_heap transfers;   /* key: the start order; value: its action in moving */
    action *moving;         /* by start order: the transfers' actions */
    size_t moving_cap;
    int64_t transfer_order;
    plain_event *due;       /* scratch: the transfers completing at one time */
    size_t due_cap;
    action *queue;          /* the actions, first in first out (a ring) */
    size_t q_head, q_len, q_cap;
    double *visited;
    size_t n_visited, visited_cap;
    int no_extend, late;    /* late: a zero-time pass completes (terminals to late_list) */
    double until;
    aisim_decode_run run;
    aisim_pd_view view;
};

/* ------------------------------------------------------------ heaps */

static int push_pass(aisim_pd *p, double time, int32_t key, uint32_t generation)
{
    int64_t ident = ((int64_t)key << 32) | generation;
    return plain_heap_push(&p->passes, time, ident, ident);
}

static int is_stale(const aisim_pd *p, int64_t ident)
{
    const pd_worker *w = &p->workers[ident >> 32];
    return !w->busy || w->generation != (uint32_t)(ident & 0xFFFFFFFF);
}

static double raw_pass_time(const aisim_pd *p)
{
    return p->passes.len ? p->passes.items[0].time : INFINITY;
}

/* _pass_time: cut-short completions dropped from the head */
static double pass_time(aisim_pd *p)
{
    while (p->passes.len && is_stale(p, p->passes.items[0].key))
        plain_heap_pop(&p->passes);
    return raw_pass_time(p);
}

static double transfer_time(const aisim_pd *p)
{
    return p->transfers.len ? p->transfers.items[0].time : INFINITY;
}

/* ------------------------------------------------------------ actions */

static int enqueue(aisim_pd *p, const action *a)
{
    if (p->q_len == p->q_cap) {
        size_t cap = p->q_cap ? 2 * p->q_cap : 64, i;
        action *q = malloc(cap * sizeof *q);
        if (!q)
            return AISIM_ENOMEM;
        for (i = 0; i < p->q_len; i++)
            q[i] = p->queue[(p->q_head + i) & (p->q_cap - 1)];
        free(p->queue);
        p->queue = q;
        p->q_head = 0;
        p->q_cap = cap;
    }
    p->queue[(p->q_head + p->q_len) & (p->q_cap - 1)] = *a;
    p->q_len++;
    return AISIM_OK;
}

static int enqueue_kind(aisim_pd *p, action a, int32_t kind)
{
    a.kind = kind;
    return enqueue(p, &a);
}

static int list_push(action_list *l, const action *a)
{
    TRY(aisim_grow((void **)&l->items, &l->cap, l->len + 1, sizeof *l->items));
    l->items[l->len++] = *a;
    return AISIM_OK;
}

/* ------------------------------------------------------------ requests */

/* A trace turn's prompt runs (Prompt.from_hash_ids): its ids, each trace_block long, the
 * last cut at the prompt's length; *n the runs (plain_loop.c's turn_runs). */
static const uint32_t *turn_runs(aisim_pd *p, int64_t k, size_t *n)
{
    const aisim_pd_config *c = &p->cfg;
    *n = plain_turn_lengths(p->lengths, &p->n_last, c->turn_input[k], c->trace_block);
    return c->ids + c->ids_off[k];
}

/* The prompt of session `index`'s turn `turn`, made at its arrival as request uuid
 * (OneTurnDriver._request, SessionDriver._request) into its entry e. */
static int make_prompt(aisim_pd *p, int64_t uuid, int64_t index, int32_t turn, plain_entry *e)
{
    const aisim_pd_config *c = &p->cfg;
    plain_entry *in = e;
    size_t n = 0;
    in->prompt_turn = -1;
    e->prompt_len = c->isl;
    e->max_output = c->osl;
    if (c->arrivals == AISIM_PLAIN_TRACE && !c->turns_per_session) {
        in->prompt_turn = c->turn_base[index] + turn;
        e->prompt_len = c->turn_input[in->prompt_turn];
        e->max_output = c->turn_output[in->prompt_turn];
    } else if (c->turns_per_session) {
        TRY(plain_session_ranges(&p->prompts, index, turn, c->turns_per_session,
                                 in->prompt_ranges, &n));
    } else {
        TRY(plain_prompt_ranges(&p->prompts, index, in->prompt_ranges, &n));
    }
    in->n_prompt_ranges = (int32_t)n;
    return AISIM_OK;
}

/* aisim_vllm_submit (accept: aisim_vllm_accept) of request uuid's copy, hashed or not */
static int submit_copy(aisim_pd *p, pd_worker *w, int64_t uuid, const plain_entry *e,
                       int64_t max_output, int64_t out, int hashed, int accept)
{
    const plain_entry *in = e;
    uint64_t salt = (uint64_t)uuid * GOLDEN;
    int64_t len = e->prompt_len;
    if (hashed && in->prompt_turn >= 0) {
        size_t n;
        const uint32_t *values = turn_runs(p, in->prompt_turn, &n);
        return accept ? aisim_vllm_accept(w->rank, len, max_output, out, NULL, 0, values,
                                          p->lengths, n, 0, salt)
                      : aisim_vllm_submit(w->rank, len, max_output, out, NULL, 0, values,
                                          p->lengths, n, 0, salt);
    }
    if (hashed)
        return accept ? aisim_vllm_accept_ranges(w->rank, len, max_output, out,
                                                 in->prompt_ranges,
                                                 (size_t)in->n_prompt_ranges, p->cfg.trace_block,
                                                 salt)
                      : aisim_vllm_submit_ranges(w->rank, len, max_output, out,
                                                 in->prompt_ranges,
                                                 (size_t)in->n_prompt_ranges, p->cfg.trace_block,
                                                 salt);
    return accept ? aisim_vllm_accept(w->rank, len, max_output, out, NULL, 0, NULL, NULL, 0, 0,
                                      salt)
                  : aisim_vllm_submit(w->rank, len, max_output, out, NULL, 0, NULL, NULL, 0, 0,
                                      salt);
}

/* VllmRank._limit_output's out_limit */
static int64_t out_limit_of(const aisim_pd_config *c, int pool, int64_t prompt_len,
                            int64_t max_output)
{
    int64_t out = max_output, limit = c->max_model_len[pool];
    if (limit >= 0 && prompt_len < limit)
        out = max_output < limit - prompt_len ? max_output : limit - prompt_len;
    if (c->no_evict[pool]) {
        int64_t room = c->num_blocks[pool] * c->block_size[pool] - prompt_len;
        if (room < 0)
            room = 0;
        if (room < out)
            out = room;
    }
    return out;
}

/* NativeVllmRank.submit of the prefill copy (one token) of request uuid */
static int submit_prefill(aisim_pd *p, pd_worker *w, int64_t uuid)
{
    const aisim_pd_config *c = &p->cfg;
    const plain_entry *e = plain_entry_of(&p->req, uuid);
    int64_t prompt_len = e->prompt_len, max_output = e->max_output < 1 ? e->max_output : 1;
    int64_t blocks = (prompt_len + c->block_size[0] - 1) / c->block_size[0];
    int64_t limit = c->max_model_len[0];
    int64_t out = out_limit_of(c, 0, prompt_len, max_output);
    int hashed = (limit < 0 || prompt_len < limit) && blocks <= c->num_blocks[0];
    int slot = submit_copy(p, w, uuid, e, max_output, out, c->caching[0] && hashed, 0);
    if (slot < 0)
        return slot;
    return plain_history_take_slot(&w->hist, (int32_t)slot, uuid);
}

/* ------------------------------------------------------------ summary entries */

/* Router.terminal of `pool` (a kv_router's; round robin hears none) */
static int route_terminal(aisim_pd *p, int pool, int64_t uuid, double t)
{
    int status;
    if (!p->cfg.kvr[pool])
        return AISIM_OK;
    status = aisim_kvr_terminal(p->cfg.kvr[pool], uuid, t);
    return status < 0 ? status : status ? AISIM_ECORRUPT : AISIM_OK;   /* (no queue) */
}

/* a request's terminal: state 1 completed, 2 rejected, 3 failed (no decode rank holds it) */
static int finish(aisim_pd *p, int64_t uuid, double end_ms, int state)
{
    plain_entry *e = plain_entry_of(&p->req, uuid);
    int64_t session = e->session;
    int32_t turn = e->turn;
    int held = e->stages & PLAIN_STAGE_HELD;
    e->state = (int8_t)state;
    e->terminal = end_ms;
    p->view.in_flight--;
    if (state == 1)
        p->view.completed++;
    /* the collector settles it now if every earlier request did (a stream's records reach
     * their sink in that order: a release after it may be too late for its record) */
    TRY(plain_settle_ready(&p->req));
    /* _route_terminal: the prefill pool hears it here unless a source was held (then at
     * the source's release) */
    if (!held)
        TRY(route_terminal(p, 0, uuid, end_ms));
    TRY(route_terminal(p, 1, uuid, end_ms));
    if (!p->late)
        return plain_sessions_terminal(&p->sess, session, turn, end_ms);
    /* a zero-time pass's terminal: the driver hears it after the round's arrivals */
    TRY(aisim_grow((void **)&p->late_list, &p->late_cap, p->n_late + 1, sizeof *p->late_list));
    p->late_list[p->n_late].session = session;
    p->late_list[p->n_late].turn = turn;
    p->late_list[p->n_late++].end_ms = end_ms;
    return AISIM_OK;
}

/* NativeVllmRank._schedule_events (the record's first admission reuse is the prefill
 * copy's) */
static int schedule_events(aisim_pd *p, pd_worker *w, double now_ms)
{
    return plain_schedule_events(&p->req, &w->hist, w->view->events, w->view->n_events,
                                 now_ms, w->decode);
}

/* ------------------------------------------------------------ a worker's pass */

static double extension_cutoff(const aisim_pd *p);


/* Worker.start_pass of a lone rank (schedule, then the role's extend); *formed 0: no work */
static int start_pass(aisim_pd *p, pd_worker *w, double now_ms, double horizon_ms, int *formed)
{
    const aisim_pd_config *c = &p->cfg;
    const aisim_vllm_view *v = w->view;
    double end;
    int status;
    *formed = 0;
    if (!v->n_running && !v->n_waiting)
        return AISIM_OK;
    TRY(aisim_vllm_schedule(w->rank, now_ms));
    if (v->n_events)
        TRY(schedule_events(p, w, now_ms));
    status = plain_pass_end(v, c->prefill_kind, c->prefill_fixed_ms, c->prefill_ratio,
                            !w->decode, w->decode, now_ms, &end);
    if (status == AISIM_PLAIN_TIMING)
        return AISIM_PD_TIMING;
    TRY(status);
    w->ends[0] = end;
    w->n_ends = 1;
    /* NativeVllmDecodeRank.extend, then NativeVllmRank.extend */
    if (w->decode && !v->retry_due) {
        int open = 0;
        if (v->n_ready && end < horizon_ms) {
            open = aisim_vllm_open_activated(w->rank);
            TRY(open);
        }
        if (v->plain_decode && v->n_dec != 0 && end < horizon_ms) {
            status = aisim_vllm_extend(w->rank, end, horizon_ms, extension_cutoff(p),
                                       MAX_PASSES, w->ends, MAX_PASSES, &p->run, 0);
            if (status == AISIM_DECODE_MISS || status == AISIM_VLLM_EXTEND_IN_PYTHON)
                return AISIM_PD_TIMING;
            TRY(status);
            w->n_ends = p->run.n_ends;
            if (open && w->n_ends > 1)
                p->view.extensions++;
        }
    }
    w->active = 1;
    w->busy = 1;
    w->pass_end = w->ends[w->n_ends - 1];
    *formed = 1;
    return AISIM_OK;
}

/* NativeVllmRank.complete and _completed of the pass in flight */
static int complete_rank(aisim_pd *p, pd_worker *w)
{
    const aisim_vllm_view *v = w->view;
    double end_ms = w->ends[w->n_ends - 1];
    size_t i;
    w->busy = 0;
    w->n_held = 0;
    if (!w->active)
        return AISIM_OK;
    w->active = 0;
    TRY(plain_history_passes(&w->hist, w->ends, w->n_ends));
    TRY(aisim_vllm_complete(w->rank, (int64_t)w->n_ends - 1, p->cfg.report[w->decode]));
    if (p->cfg.report[w->decode]) {   /* _report_pass: the prompts it completed */
        for (i = 0; i < v->n_report_prefilled; i++) {
            int status = aisim_kvr_prefill_done(p->cfg.kvr[w->decode],
                                                w->hist.slot_uuid[v->report_prefilled[i]],
                                                end_ms);
            if (status)
                return status < 0 ? status : AISIM_ECORRUPT;   /* (no queue) */
        }
    }
    for (i = 0; i < v->n_events; i++) {
        const int64_t *f = v->events + AISIM_VLLM_EVENT_WIDTH * i;
        int64_t uuid = w->hist.slot_uuid[f[1]];
        plain_entry *e = plain_entry_of(&p->req, uuid);
        if (f[0] == AISIM_VLLM_FINISHED) {
            int64_t b = f[3];
            const int64_t *st = v->stretches + 2 * f[2];
            if (!w->decode)
                return AISIM_ECORRUPT;   /* (a prefill copy of no token: not eligible) */
            if (b > 0)
                plain_token_times(w->hist.pass_ends, e, st, b);
            TRY(plain_history_breaks(&w->hist, st, b));
            TRY(finish(p, uuid, end_ms, 1));
        } else if (f[0] == AISIM_VLLM_REJECTED) {
            TRY(finish(p, uuid, end_ms, 2));
        } else if (f[0] == AISIM_VLLM_HELD && !w->decode) {
            if (f[3] > 1)
                return AISIM_ECORRUPT;
            TRY(aisim_grow((void **)&w->held, &w->held_cap, w->n_held + 1, sizeof(int32_t)));
            TRY(aisim_grow((void **)&w->held_uuid, &w->held_uuid_cap, w->n_held + 1,
                           sizeof(int64_t)));
            w->held[w->n_held] = (int32_t)f[1];
            w->held_uuid[w->n_held++] = uuid;
            e->stages |= PLAIN_STAGE_HELD;
            e->held = end_ms;
        } else {
            return AISIM_ECORRUPT;
        }
    }
    return AISIM_OK;
}

/* _reserved: the destination of slot on decode worker key got its KV room at t */
static int reserved(aisim_pd *p, int32_t key, int32_t slot, int64_t fresh, double t)
{
    pd_worker *w = &p->workers[key];
    action a;
    plain_entry *e;
    a.uuid = w->hist.slot_uuid[slot];
    e = plain_entry_of(&p->req, a.uuid);
    a.arrival = e->arrival;
    e->stages |= PLAIN_STAGE_RESERVED;
    e->reserved = t;
    w->pending_head++;   /* (the head is what a retry reserves) */
    a.dworker = key;
    a.dslot = slot;
    a.missing = fresh;
    a.pworker = e->rank;   /* (the request is in flight: its entry lives) */
    a.pslot = e->source_slot;
    return enqueue_kind(p, a, START_TRANSFER);
}

/* rank.retry(): *slot the destination reserved (-1: none), *fresh its missing tokens */
static int retry(aisim_pd *p, int32_t key, int32_t *slot, int64_t *fresh)
{
    int32_t seq;
    return aisim_vllm_retry(p->workers[key].rank, slot, fresh, &seq);
}

/* ------------------------------------------------------------ the loop's pieces */

static int cut(aisim_pd *p, int32_t key, double t);

/* _defer: run the action when worker key's pass in flight ends (cut there) */
static int defer(aisim_pd *p, int32_t key, const action *a, double t)
{
    TRY(list_push(&p->workers[key].deferred, a));
    if (p->workers[key].extended)
        TRY(cut(p, key, t));
    return AISIM_OK;
}

/* RankBase.ends_pass_at */
static int ends_pass_at(const pd_worker *w, double t)
{
    if (w->n_ends <= 1 || t >= w->ends[w->n_ends - 1])
        return 0;
    return w->ends[plain_bisect_left(w->ends, w->n_ends, t)] == t;
}

/* _cut: Worker.truncate(t) of the extended pass in flight */
static int cut(aisim_pd *p, int32_t key, double t)
{
    pd_worker *w = &p->workers[key];
    size_t lo;
    double end;
    if (w->n_ends <= 1)
        return AISIM_OK;
    lo = plain_bisect_left(w->ends, w->n_ends, t);
    if (lo < w->n_ends - 1)
        w->n_ends = lo + 1;
    end = w->ends[w->n_ends - 1];
    if (end < w->pass_end) {
        w->pass_end = end;
        w->generation = w->generation + 1;
        TRY(push_pass(p, end, key, w->generation));
    }
    return AISIM_OK;
}

static int take_deferred(aisim_pd *p, pd_worker *w)
{
    size_t i;
    for (i = 0; i < w->deferred.len; i++)
        TRY(enqueue(p, &w->deferred.items[i]));
    w->deferred.len = 0;
    return AISIM_OK;
}

/* _complete: a pass of worker key ends at t; *produced whether it made a reservation or a
 * held source */
static int complete(aisim_pd *p, int32_t key, double t, int immediate, int *produced)
{
    pd_worker *w = &p->workers[key];
    size_t i;
    w->extended = 0;
    TRY(complete_rank(p, w));
    if (w->decode) {
        int32_t slot;
        int64_t fresh;
        TRY(retry(p, key, &slot, &fresh));
        if (!immediate)
            TRY(take_deferred(p, w));
        if (slot >= 0)
            TRY(reserved(p, key, slot, fresh, t));
        w->idle = 1;
        *produced = slot >= 0;
        return AISIM_OK;
    }
    if (!immediate)
        TRY(take_deferred(p, w));
    for (i = 0; i < w->n_held; i++) {
        action a;
        int64_t uuid = w->held_uuid[i];
        a.uuid = uuid;
        a.pworker = key;
        a.pslot = w->held[i];
        a.dworker = a.dslot = -1;
        a.missing = 0;
        a.arrival = 0.0;
        plain_entry_of(&p->req, uuid)->source_slot = a.pslot;
        TRY(enqueue_kind(p, a, RESERVE));
    }
    w->idle = 1;
    *produced = w->n_held > 0;
    return AISIM_OK;
}

static int has_work(const pd_worker *w)
{
    return w->view->n_running || w->view->n_waiting;
}

/* _start: worker key starts a pass at t; *out whether it changed something */
static int start(aisim_pd *p, int32_t key, double t, int *out)
{
    pd_worker *w = &p->workers[key];
    double horizon = t;
    int formed, effect, produced;
    *out = 0;
    if (w->decode && !p->no_extend)
        horizon = w->inbound.len ? w->inbound.items[0].time : INFINITY;
    TRY(start_pass(p, w, t, horizon, &formed));
    if (!formed)
        return AISIM_OK;
    if (w->pass_end > t) {
        TRY(push_pass(p, w->pass_end, key, w->generation));
        w->idle = 0;
        if (w->decode)
            w->extended = 1;
        *out = 1;
        return AISIM_OK;
    }
    effect = w->view->pass_effect || w->view->chunked_pass;
    p->late = 1;
    TRY(complete(p, key, t, 1, &produced));
    p->late = 0;
    *out = produced || effect;
    return AISIM_OK;
}

/* _drive: the idle workers of a pool with work start a pass, in key order, from the first
 * again after each one that made progress; *progressed */
static int drive(aisim_pd *p, int decode, double t, int *progressed)
{
    size_t lo = 0, hi = p->n_workers;
    long rounds = 0;
    *progressed = 0;
    for (;;) {
        size_t k;
        int restarted = 0;
        if (++rounds > MAX_ROUNDS)
            return AISIM_PD_LIVELOCK;
        for (k = lo; k < hi; k++) {
            pd_worker *w = &p->workers[k];
            int did;
            if (!w->idle || w->decode != decode)
                continue;
            if (w->busy || !has_work(w)) {
                w->idle = 0;
                continue;
            }
            TRY(start(p, (int32_t)k, t, &did));
            if (did) {
                *progressed = 1;
                restarted = 1;
                break;
            }
        }
        if (!restarted)
            return AISIM_OK;
    }
}

static int any_idle(const aisim_pd *p, int decode)
{
    size_t k;
    for (k = 0; k < p->n_workers; k++)
        if (p->workers[k].idle && p->workers[k].decode == decode)
            return 1;
    return 0;
}

/* Prompt.values / lengths of request uuid's prompt: the trace turn's runs, or each id of
 * its ranges trace_block long, the last cut at the prompt's length */
static int prompt_runs(aisim_pd *p, int64_t uuid, int64_t prompt_len, const uint32_t **values,
                       const uint32_t **lengths, size_t *n)
{
    const plain_entry *in = plain_entry_of(&p->req, uuid);
    int status;
    if (in->prompt_turn >= 0) {
        *values = turn_runs(p, in->prompt_turn, n);
        *lengths = p->lengths;
        return AISIM_OK;
    }
    status = aisim_runs_from_ranges(prompt_len, in->prompt_ranges,
                                    (size_t)in->n_prompt_ranges, p->cfg.trace_block,
                                    &p->run_values, &p->run_values_cap, &p->run_lengths,
                                    &p->run_lengths_cap, n);
    if (status == AISIM_EINVAL)
        return AISIM_ECORRUPT;   /* (ranges shorter than the prompt: not eligible) */
    if (status)
        return status;
    *values = p->run_values;
    *lengths = p->run_lengths;
    return AISIM_OK;
}

/* Router.place's pick in `pool` for request uuid at t: round robin's next worker, or the
 * kv_router's choice (NativeKvRouter.place_simulated; its overlaps kept on the entry for
 * the route); *key its worker key */
static int pick(aisim_pd *p, int pool, int64_t uuid, double t, int32_t *key)
{
    const aisim_pd_config *c = &p->cfg;
    plain_entry *e = plain_entry_of(&p->req, uuid);
    aisim_kvr *kvr = c->kvr[pool];
    const aisim_kvr_view *v = p->kvr_view[pool];
    size_t k;
    int status;
    if (!kvr) {
        int64_t *cursor = pool ? &p->view.rr_decode_cursor : &p->view.rr_prefill_cursor;
        size_t n = p->n_rr[pool], at;
        if (!n)
            return AISIM_PD_NO_WORKER;
        at = (size_t)(*cursor % (int64_t)n);
        *key = p->rr[pool][at];
        *cursor = (int64_t)at + 1;
        return AISIM_OK;
    }
    if (c->kvr_runs[pool]) {
        const uint32_t *values = NULL, *lengths = NULL;
        size_t n = 0;
        TRY(prompt_runs(p, uuid, e->prompt_len, &values, &lengths, &n));
        status = aisim_kvr_place_runs(kvr, uuid, e->prompt_len, n ? values : NULL,
                                      n ? lengths : NULL, n, t, 0, 0);
    } else {
        status = aisim_kvr_place(kvr, uuid, e->prompt_len, NULL, 0, t, 0, 0, NULL);
    }
    if (status < 0)
        return status;
    if (status != AISIM_KVR_PLACED || v->dp_rank != 0)
        return AISIM_ECORRUPT;   /* (no queue, every worker a candidate: it places) */
    for (k = 0; k < p->n_workers; k++)   /* (the pool's worker of that id) */
        if (p->workers[k].decode == pool && p->workers[k].worker_id == v->worker_id)
            break;
    if (k == p->n_workers)
        return AISIM_ECORRUPT;
    e->route_overlap[pool] = v->overlap;
    e->route_best[pool] = v->best_overlap;
    *key = (int32_t)k;
    return AISIM_OK;
}

/* _deliver_decode of a held source's handoff */
static int reserve_destination(aisim_pd *p, const action *src, double t)
{
    const aisim_pd_config *c = &p->cfg;
    int32_t key;
    pd_worker *w;
    plain_entry *e = plain_entry_of(&p->req, src->uuid);
    int64_t prompt_len = e->prompt_len, max_output = e->max_output;
    int64_t tokens = prompt_len;
    int slot;
    TRY(pick(p, 1, src->uuid, t, &key));
    w = &p->workers[key];
    e->stages |= PLAIN_STAGE_ROUTED;
    e->decode_rank = key;
    /* VllmDecodeRank._destination_fits */
    if (c->no_evict[1]) {
        int64_t capacity = c->num_blocks[1] * c->block_size[1];
        tokens += tokens >= capacity ? max_output
                                     : (max_output < capacity - tokens ? max_output
                                                                       : capacity - tokens);
    }
    if ((tokens + c->block_size[1] - 1) / c->block_size[1] > c->num_blocks[1]) {
        TRY(finish(p, src->uuid, t, 3));
        return enqueue_kind(p, *src, CANCEL_SOURCE);
    }
    int64_t out = out_limit_of(c, 1, prompt_len, max_output);
    slot = submit_copy(p, w, src->uuid, e, max_output, out, c->caching[1], 1);
    if (slot < 0)
        return slot;
    e->stages |= PLAIN_STAGE_ACCEPTED;
    TRY(plain_history_take_slot(&w->hist, (int32_t)slot, src->uuid));
    TRY(aisim_grow((void **)&w->pending, &w->pending_cap, w->n_pending + 1, sizeof(int64_t)));
    w->pending[w->n_pending++] = src->uuid;
    if (w->busy) {
        if (w->extended)
            TRY(cut(p, key, t));
    } else {
        int32_t got;
        int64_t fresh;
        TRY(retry(p, key, &got, &fresh));
        if (got >= 0)
            TRY(reserved(p, key, got, fresh, t));
    }
    return AISIM_OK;
}

/* _submit_prefill and _deliver_prefill */
static int submit_handoff(aisim_pd *p, int64_t uuid, double t)
{
    int32_t key;
    TRY(pick(p, 0, uuid, t, &key));
    plain_entry_of(&p->req, uuid)->rank = key;
    TRY(submit_prefill(p, &p->workers[key], uuid));
    p->workers[key].idle = 1;
    return AISIM_OK;
}

/* cluster.worker_idle of draining worker key, heard at the next pause */
static int heard_idle(aisim_pd *p, int32_t key)
{
    TRY(aisim_grow((void **)&p->idle_keys, &p->idle_cap, p->n_idle_keys + 1,
                   sizeof *p->idle_keys));
    p->idle_keys[p->n_idle_keys++] = key;
    return AISIM_OK;
}

/* TransferModel.delay_ms */
static double delay_ms(const aisim_pd_config *c, int64_t prompt_len, int64_t missing)
{
    if (!c->use_bandwidth)
        return c->fallback_ms;
    return (double)(c->missing_only ? missing : prompt_len) * c->bytes_per_token /
           (c->bandwidth_gbps * 1e9) * 1000.0;
}

/* _run_actions */
static int run_actions(aisim_pd *p, double t)
{
    while (p->q_len) {
        action a = p->queue[p->q_head];
        p->q_head = (p->q_head + 1) & (p->q_cap - 1);
        p->q_len--;
        switch (a.kind) {
        case SUBMIT:
            TRY(submit_handoff(p, a.uuid, t));
            break;
        case RESERVE:
            TRY(reserve_destination(p, &a, t));
            break;
        case START_TRANSFER: {
            double delay = delay_ms(&p->cfg, plain_entry_of(&p->req, a.uuid)->prompt_len,
                                    a.missing);
            if (delay > 0) {
                double done = t + delay;
                int64_t order = p->transfer_order++;
                TRY(aisim_grow((void **)&p->moving, &p->moving_cap, (size_t)order + 1,
                               sizeof *p->moving));
                p->moving[order] = a;
                TRY(plain_heap_push(&p->transfers, done, order, order));
                TRY(plain_heap_push(&p->workers[a.dworker].inbound, done, 0, 0));
            } else {
                TRY(enqueue_kind(p, a, ACTIVATE));
            }
            break;
        }
        case ACTIVATE: {
            pd_worker *w = &p->workers[a.dworker];
            int32_t got;
            int64_t fresh;
            if (w->busy) {
                TRY(defer(p, a.dworker, &a, t));
                break;
            }
            TRY(aisim_vllm_activate(w->rank, a.dslot));
            {
                plain_entry *e = plain_entry_of(&p->req, a.uuid);
                e->stages |= PLAIN_STAGE_ACTIVATED;
                e->activated = t;
            }
            w->idle = 1;
            TRY(enqueue_kind(p, a, RELEASE_SOURCE));
            TRY(retry(p, a.dworker, &got, &fresh));
            if (got >= 0)
                TRY(reserved(p, a.dworker, got, fresh, t));
            break;
        }
        default: {   /* RELEASE_SOURCE, CANCEL_SOURCE */
            pd_worker *w = &p->workers[a.pworker];
            if (w->busy) {
                TRY(defer(p, a.pworker, &a, t));
                break;
            }
            TRY(aisim_vllm_release_source(w->rank, a.pslot));
            w->idle = 1;
            TRY(route_terminal(p, 0, a.uuid, t));
            if (w->draining)
                TRY(heard_idle(p, a.pworker));
            if (a.kind == RELEASE_SOURCE)
                TRY(plain_released(&p->req, a.uuid, a.arrival, t));
        }
        }
    }
    return AISIM_OK;
}

/* _release_arrivals and _arrive */
static int release_arrivals(aisim_pd *p, double t, int *arrived)
{
    *arrived = 0;
    for (;;) {
        int64_t index, uuid;
        int32_t turn;
        plain_entry *e;
        action a;
        TRY(plain_sessions_pop(&p->sess, t, &index, &turn));
        if (index < 0)
            return AISIM_OK;
        TRY(plain_new_entry(&p->req, &e));
        uuid = p->req.next_uuid++;
        e->arrival = t;
        e->session = index;
        e->turn = turn;
        TRY(make_prompt(p, uuid, index, turn, e));   /* (its group drawn now) */
        p->view.arrived++;
        p->view.in_flight++;
        memset(&a, 0, sizeof a);
        a.kind = SUBMIT;
        a.uuid = uuid;
        a.pworker = a.pslot = a.dworker = a.dslot = -1;
        TRY(enqueue(p, &a));
        *arrived = 1;
    }
}

/* _complete_due: steps 1 and 2 */
static int complete_due(aisim_pd *p, double t, int *done)
{
    int any = 0;
    size_t k;
    while (p->passes.len && p->passes.items[0].time <= t) {
        plain_event e = plain_heap_pop(&p->passes);
        if (is_stale(p, e.key))
            continue;
        p->workers[e.key >> 32].active |= 2;   /* due now */
        any = 1;
    }
    if (any) {   /* prefill workers first, each pool in id order */
        for (k = 0; k < p->n_workers; k++) {
            int32_t key = p->order[k];
            pd_worker *w = &p->workers[key];
            int produced;
            if (w->active & 2) {
                w->active &= 1;
                TRY(complete(p, key, t, 0, &produced));
                if (w->draining)
                    TRY(heard_idle(p, key));
            }
        }
    }
    while (p->transfers.len && p->transfers.items[0].time <= t) {
        const action *a = &p->moving[plain_heap_pop(&p->transfers).value];
        /* (the earliest of all, so of its destination's too) */
        plain_heap_pop(&p->workers[a->dworker].inbound);
        TRY(enqueue_kind(p, *a, ACTIVATE));
        any = 1;
    }
    *done = any;
    return AISIM_OK;
}

static int record_visit(aisim_pd *p, double t)
{
    TRY(aisim_grow((void **)&p->visited, &p->visited_cap, p->n_visited + 1, sizeof(double)));
    p->visited[p->n_visited++] = t;
    return AISIM_OK;
}

static int cut_at_pass_ends(aisim_pd *p, double t)
{
    size_t k;
    for (k = 0; k < p->n_workers; k++)
        if (p->workers[k].extended && ends_pass_at(&p->workers[k], t))
            TRY(cut(p, (int32_t)k, t));
    return AISIM_OK;
}

/* _absorb_transfers */
static int absorb_transfers(aisim_pd *p)
{
    while (p->transfers.len) {
        double t = p->transfers.items[0].time, next_pass = pass_time(p);
        size_t n = 0, i;
        if (t >= next_pass || next_pass > p->until ||
            t >= plain_sessions_next_ready(&p->sess) || p->q_len)
            return AISIM_OK;
        /* the transfers due at t, in start order: do they all go into passes in flight?
         * (the heap's head run, looked at without popping it) */
        while (p->transfers.len && p->transfers.items[0].time == t) {
            plain_event e = plain_heap_pop(&p->transfers);
            TRY(aisim_grow((void **)&p->due, &p->due_cap, n + 1, sizeof *p->due));
            p->due[n++] = e;
        }
        for (i = 0; i < n; i++)
            if (!p->workers[p->moving[p->due[i].value].dworker].busy)
                break;
        if (i < n) {
            for (i = 0; i < n; i++)   /* (time, start order) keys: the order is kept */
                TRY(plain_heap_push(&p->transfers, p->due[i].time, p->due[i].key,
                                    p->due[i].value));
            return AISIM_OK;
        }
        TRY(record_visit(p, t));
        TRY(cut_at_pass_ends(p, t));
        for (i = 0; i < n; i++) {
            action a = p->moving[p->due[i].value];
            a.kind = ACTIVATE;
            plain_heap_pop(&p->workers[a.dworker].inbound);
            TRY(defer(p, a.dworker, &a, t));
        }
    }
    return AISIM_OK;
}

/* _progress_parked */
static int progress_parked(const aisim_pd *p)
{
    size_t k;
    for (k = 0; k < p->n_workers; k++) {
        const pd_worker *w = &p->workers[k];
        if (w->idle && !w->busy && w->view->n_partial)
            return 1;
    }
    return 0;
}

/* _cluster_time: the next tick or worker ready if before t and work remains */
static double cluster_time(const aisim_pd *p, double t)
{
    double c = p->next_tick_ms < p->next_ready_ms ? p->next_tick_ms : p->next_ready_ms;
    if (!p->cfg.cluster || c >= t ||
        (p->view.in_flight <= 0 && plain_sessions_next_ready(&p->sess) == INFINITY))
        return t;
    return c;
}

/* _extension_cutoff */
static double extension_cutoff(const aisim_pd *p)
{
    double c = cluster_time(p, INFINITY);
    return c < p->cfg.cutoff_ms ? c : p->cfg.cutoff_ms;
}

/* Worker.holds_work of worker key: requests queued or running, a held source, a reserved
 * or pending destination */
static int holds_work(const aisim_pd *p, int32_t key)
{
    const pd_worker *w = &p->workers[key];
    const aisim_vllm_view *v = w->view;
    return v->n_running || v->n_waiting ||
           (w->decode ? v->holds > 0 || w->pending_head < w->n_pending : v->held_sources > 0);
}

/* whether cluster.settle would remove a worker heard since the last pause */
static int settles(const aisim_pd *p)
{
    size_t i;
    for (i = 0; i < p->n_idle_keys; i++)
        if (!holds_work(p, p->idle_keys[i]))
            return 1;
    return 0;
}

/* _step's start: the visit and the cuts at it */
static int begin_step(aisim_pd *p, double t)
{
    p->view.now_ms = t;
    p->step_t = t;
    p->in_step = 1;
    p->phase = 0;
    p->rounds = 0;
    p->ticked = 0;
    TRY(record_visit(p, t));
    return cut_at_pass_ends(p, t);
}

/* _step's rounds until nothing changes: AISIM_OK at the end, or a pause for scaling
 * (AISIM_PD_CLUSTER after a round's completions with a worker heard or ready, AISIM_PD_TICK
 * once the rounds settled with a tick due), after which the next call goes on from there */
static int rounds(aisim_pd *p)
{
    double t = p->step_t;
    for (;;) {
        int did;
        if (p->phase == 0) {
            if (++p->rounds > MAX_ROUNDS)
                return AISIM_PD_LIVELOCK;
            p->changed = 0;
            if (raw_pass_time(p) <= t || transfer_time(p) <= t) {
                TRY(complete_due(p, t, &did));
                p->changed = did;
            }
            p->phase = 1;
            if (p->cfg.cluster && (settles(p) || p->next_ready_ms <= t))
                return AISIM_PD_CLUSTER;   /* settle and ready_due */
            p->n_idle_keys = 0;   /* (settle would find each heard worker busy: nothing) */
        }
        if (p->q_len) {
            TRY(run_actions(p, t));
            p->changed = 1;
        }
        if (any_idle(p, 0)) {
            TRY(drive(p, 0, t, &did));
            p->changed |= did;
        }
        if (any_idle(p, 1)) {
            TRY(drive(p, 1, t, &did));
            p->changed |= did;
        }
        if (plain_sessions_next_ready(&p->sess) <= t) {
            TRY(release_arrivals(p, t, &did));
            p->changed |= did;
        }
        if (p->n_late) {      /* the zero-time passes' terminals, after the arrivals */
            size_t i;
            for (i = 0; i < p->n_late; i++)
                TRY(plain_sessions_terminal(&p->sess, p->late_list[i].session,
                                            p->late_list[i].turn, p->late_list[i].end_ms));
            p->n_late = 0;
            p->changed = 1;
        }
        p->phase = 0;
        if (!p->changed) {
            if (p->ticked)
                return AISIM_OK;
            p->ticked = 1;
            if (!p->cfg.cluster || p->next_tick_ms > t)
                return AISIM_OK;
            return AISIM_PD_TICK;   /* the tick's changes get rounds of their own */
        }
    }
}

/* _step's end: parked workers keep passes single; transfers into passes in flight absorbed */
static int end_step(aisim_pd *p)
{
    double t = p->step_t;
    p->in_step = 0;
    if (any_idle(p, 0) || any_idle(p, 1)) {
        p->no_extend = progress_parked(p);
        if (p->no_extend) {
            size_t k;
            for (k = 0; k < p->n_workers; k++)
                if (p->workers[k].extended)
                    TRY(cut(p, (int32_t)k, t));
        }
    } else {
        p->no_extend = 0;
        if (p->transfers.len && !p->cfg.cluster) {
            double head = p->transfers.items[0].time;
            if (head < raw_pass_time(p) || (p->passes.len && is_stale(p, p->passes.items[0].key)))
                TRY(absorb_transfers(p));
        }
    }
    return AISIM_OK;
}

/* _next_time */
static double next_time(aisim_pd *p)
{
    double t = pass_time(p), ready = plain_sessions_next_ready(&p->sess);
    if (transfer_time(p) < t)
        t = transfer_time(p);
    if (ready < t)
        t = ready > p->view.now_ms ? ready : p->view.now_ms;
    return cluster_time(p, t);
}

static void refresh_view(aisim_pd *p)
{
    aisim_pd_view *v = &p->view;
    v->made = p->sess.made;
    v->next_arrival_ms = p->sess.next_arrival;
    v->active = p->sess.active;
    v->next_pending = p->sess.next_pending;
    v->next_start = p->sess.next_start;
    v->sessions_made = p->sess.first_turns;
    plain_fill_summary(&v->summary, &p->req);
    v->visited = p->visited;
    v->n_visited = p->n_visited;
    v->n_workers = p->n_workers;
    v->idle_keys = p->idle_keys;
    v->n_idle_keys = p->n_idle_keys;
    v->next_event_ms = pass_time(p) < transfer_time(p) ? pass_time(p) : transfer_time(p);
    v->next_ready_ms = plain_sessions_next_ready(&p->sess);
}

/* _stuck_request's question: the first worker (prefill pool first) whose rank has a pending
 * destination or a waiting request, and that head */
static void find_stall(aisim_pd *p)
{
    size_t i;
    p->view.stuck_worker = -1;
    for (i = 0; i < 2 * p->n_workers; i++) {
        size_t k = i % p->n_workers;
        pd_worker *w = &p->workers[k];
        int64_t uuid = -1;
        int32_t head;
        if (w->decode != (i >= p->n_workers))
            continue;
        if (w->pending_head < w->n_pending) {
            uuid = w->pending[w->pending_head];
            p->view.stuck_pending = 1;
        } else if (w->view->n_waiting && aisim_vllm_queue(w->rank, 1, &head, 1) > 0) {
            uuid = w->hist.slot_uuid[head];
            p->view.stuck_pending = 0;
        }
        if (uuid >= 0) {
            plain_entry *e = plain_entry_of(&p->req, uuid);
            p->view.stuck_worker = (int32_t)k;
            p->view.stuck_uuid = uuid;
            p->view.stuck_prompt_len = e->prompt_len;
            p->view.stuck_generated = e->generated;
            return;
        }
    }
}

int aisim_pd_run(aisim_pd *p)
{
    int status = AISIM_OK;
    if (!p)
        return AISIM_EINVAL;
    for (;;) {
        double t;
        if (!p->in_step && p->req.records.n) {   /* after enough records, or long enough */
            plain_records *r = &p->req.records;
            if (isnan(r->first_ms))
                r->first_ms = p->view.now_ms;
            if ((p->cfg.records_every && r->n >= (size_t)p->cfg.records_every) ||
                (p->cfg.records_lag_ms > 0.0 &&
                 p->view.now_ms - r->first_ms >= p->cfg.records_lag_ms)) {
                refresh_view(p);
                return AISIM_PD_RECORDS;
            }
        }
        if (!p->in_step) {
            t = next_time(p);
            if (t > p->cfg.cutoff_ms || t == INFINITY) {
                p->view.next_ms = t;
                break;
            }
            status = begin_step(p, t);
            if (status != AISIM_OK)
                break;
        }
        status = rounds(p);
        if (status == AISIM_PD_CLUSTER || status == AISIM_PD_TICK) {
            refresh_view(p);
            return status;
        }
        if (status == AISIM_OK)
            status = end_step(p);
        if (status != AISIM_OK)
            break;
    }
    if (status == AISIM_OK && p->view.next_ms == INFINITY && p->view.in_flight > 0) {
        find_stall(p);
        status = AISIM_PD_STALLED;
    }
    if (status == AISIM_OK)
        status = plain_settle_rest(&p->req);
    refresh_view(p);
    return status;
}

/* A worker of one rank joins (worker key n_workers): its pass buffer, its place in the
 * same-time order */
static int add_worker(aisim_pd *p, void *rank, int decode, int64_t worker_id)
{
    pd_worker *w;
    size_t at;
    TRY(aisim_grow((void **)&p->workers, &p->workers_cap, p->n_workers + 1,
                   sizeof *p->workers));
    TRY(aisim_grow((void **)&p->order, &p->order_cap, p->n_workers + 1, sizeof *p->order));
    w = &p->workers[p->n_workers];
    memset(w, 0, sizeof *w);
    if (!rank || aisim_vllm_view_of(rank, &w->view) != AISIM_OK)
        return AISIM_EINVAL;
    w->ends = malloc(MAX_PASSES * sizeof *w->ends);
    if (!w->ends)
        return AISIM_ENOMEM;
    w->rank = rank;
    w->decode = decode;
    w->worker_id = worker_id;
    for (at = p->n_workers; at > 0; at--) {   /* (decode, worker id) order */
        const pd_worker *o = &p->workers[p->order[at - 1]];
        if (o->decode < decode || (o->decode == decode && o->worker_id < worker_id))
            break;
        p->order[at] = p->order[at - 1];
    }
    p->order[at] = (int32_t)p->n_workers;
    p->n_workers++;
    return AISIM_OK;
}

int aisim_pd_new(aisim_pd **out, const aisim_pd_config *c)
{
    aisim_pd *p;
    size_t i, n;
    if (!out || !c || !c->n_prefill || !c->n_decode || !c->ranks || !c->worker_ids ||
        (!c->kvr[0] && (!c->rr_prefill || !c->n_rr_prefill)) ||
        (!c->kvr[1] && (!c->rr_decode || !c->n_rr_decode)) ||
        c->trace_block < 1 ||
        c->isl < 1 || c->osl < 1 || c->own < 0 || c->shared < 0 || c->fresh_base < 0 ||
        c->fresh_base >= PLAIN_ID_LIMIT || c->sessions < 0 ||
        c->arrivals < AISIM_PLAIN_POISSON || c->arrivals > AISIM_PLAIN_TRACE ||
        (c->arrivals == AISIM_PLAIN_POISSON && !c->arrival_rng) ||
        (c->shape_rng && c->groups < 1) || c->block_size[0] < 1 || c->block_size[1] < 1 ||
        c->sessions > INT64_MAX / (c->own + 1) || c->records_every < 0 ||
        c->turns_per_session < 0 ||
        (c->arrivals == AISIM_PLAIN_TRACE && !c->turns_per_session &&
         (!c->turn_base || !c->turn_input || !c->turn_output || !c->turn_delay ||
          !c->ids_off || !c->ids || c->max_input < 1 ||
          c->max_input > INT64_MAX - c->trace_block ||
          (c->max_input + c->trace_block - 1) / c->trace_block > INT32_MAX ||
          (c->trace_closed ? c->max_sessions < 0 : (!c->start_order || !c->start_ms)))))
        return AISIM_EINVAL;
    for (i = 0; i < c->n_rr_prefill; i++)
        if (c->rr_prefill[i] < 0 || (size_t)c->rr_prefill[i] >= c->n_prefill)
            return AISIM_EINVAL;
    for (i = 0; i < c->n_rr_decode; i++)
        if (c->rr_decode[i] < 0 || (size_t)c->rr_decode[i] >= c->n_decode)
            return AISIM_EINVAL;
    p = calloc(1, sizeof *p);
    if (!p)
        return AISIM_ENOMEM;
    p->cfg = *c;
    n = c->n_prefill + c->n_decode;
    for (i = 0; i < n; i++) {
        int status = add_worker(p, c->ranks[i], i >= c->n_prefill, c->worker_ids[i]);
        if (status != AISIM_OK) {
            aisim_pd_free(p);
            return status;
        }
    }
    for (i = 0; i < 2; i++) {
        size_t k, count = i ? c->n_rr_decode : c->n_rr_prefill;
        const int32_t *list = i ? c->rr_decode : c->rr_prefill;
        if (c->kvr[i])
            continue;
        if (aisim_grow((void **)&p->rr[i], &p->rr_cap[i], count, sizeof *p->rr[i]) != AISIM_OK) {
            aisim_pd_free(p);
            return AISIM_ENOMEM;
        }
        for (k = 0; k < count; k++)   /* (pool-local indices: worker keys from the pool's first) */
            p->rr[i][k] = list[k] + (int32_t)(i ? c->n_prefill : 0);
        p->n_rr[i] = count;
    }
    p->next_tick_ms = c->next_tick_ms;
    p->next_ready_ms = c->next_ready_ms;
    p->sess.arrivals = c->arrivals;
    p->sess.gap_ms = c->gap_ms;
    p->sess.sessions = c->sessions;
    p->sess.max_sessions = c->max_sessions;
    p->sess.arrival_rng = c->arrival_rng;
    p->sess.trace_closed = c->arrivals == AISIM_PLAIN_TRACE && c->trace_closed;
    p->sess.turn_base = c->turn_base;
    p->sess.turn_delay = c->turn_delay;
    p->sess.start_order = c->start_order;
    p->sess.start_ms = c->start_ms;
    p->sess.turns_each = c->arrivals == AISIM_PLAIN_TRACE ? c->turns_per_session : 0;
    p->sess.inter_delay_ms = c->inter_turn_delay_ms;
    p->sess.start_kind = c->start_kind;
    p->req.records.on = c->keep_records != 0;
    p->req.records.disagg = 1;
    p->req.records.streamed = c->records_stream != 0;
    p->req.records.settled_arrival = -INFINITY;
    p->req.records.rest_from = SIZE_MAX;
    p->req.records.first_ms = NAN;
    p->n_last = SIZE_MAX;
    if (c->arrivals == AISIM_PLAIN_TRACE && !c->turns_per_session) {
        size_t runs = (size_t)((c->max_input + c->trace_block - 1) / c->trace_block);
        p->lengths = malloc(runs * sizeof *p->lengths);
        if (!p->lengths) {
            aisim_pd_free(p);
            return AISIM_ENOMEM;
        }
        for (i = 0; i < runs; i++)
            p->lengths[i] = (uint32_t)c->trace_block;
    }
    p->prompts.own = c->own;
    p->prompts.shared = c->shared;
    p->prompts.fresh_base = c->fresh_base;
    p->prompts.groups = c->groups;
    p->prompts.shape_rng = c->shape_rng;
    p->req.settle_uuid = p->req.next_uuid = 1;
    p->req.report_start_ms = c->report_start_ms;
    p->req.has_ttft = c->has_ttft;
    p->req.has_itl = c->has_itl;
    p->req.has_e2e = c->has_e2e;
    p->req.sla_ttft_ms = c->sla_ttft_ms;
    p->req.sla_itl_ms = c->sla_itl_ms;
    p->req.sla_e2e_ms = c->sla_e2e_ms;
    p->until = c->cutoff_ms;
    p->view.rr_prefill_cursor = c->rr_prefill_cursor;
    p->view.rr_decode_cursor = c->rr_decode_cursor;
    for (i = 0; i < 2; i++) {
        if (c->kvr[i] && aisim_kvr_view_of(c->kvr[i], &p->kvr_view[i]) != AISIM_OK) {
            aisim_pd_free(p);
            return AISIM_EINVAL;
        }
        if (c->report[i] && !c->kvr[i]) {
            aisim_pd_free(p);
            return AISIM_EINVAL;
        }
    }
    if (plain_sessions_start(&p->sess) != AISIM_OK) {
        aisim_pd_free(p);
        return AISIM_EINVAL;
    }
    refresh_view(p);
    *out = p;
    return AISIM_OK;
}

int aisim_pd_free(aisim_pd *p)
{
    size_t i;
    if (!p)
        return AISIM_OK;
    for (i = 0; p->workers && i < p->n_workers; i++) {
        pd_worker *w = &p->workers[i];
        free(w->ends);
        plain_history_free(&w->hist);
        free(w->deferred.items);
        free(w->inbound.items);
        free(w->held);
        free(w->held_uuid);
        free(w->pending);
    }
    free(p->workers);
    free(p->order);
    free(p->rr[0]);
    free(p->rr[1]);
    free(p->idle_keys);
    free(p->lengths);
    free(p->late_list);
    free(p->run_values);
    free(p->run_lengths);
    free(p->prompts.groups_of);
    free(p->passes.items);
    free(p->transfers.items);
    free(p->moving);
    free(p->due);
    free(p->queue);
    free(p->visited);
    plain_sessions_free(&p->sess);
    plain_requests_free(&p->req);
    free(p);
    return AISIM_OK;
}

int aisim_pd_view_of(const aisim_pd *p, const aisim_pd_view **out)
{
    if (!p || !out)
        return AISIM_EINVAL;
    *out = &p->view;
    return AISIM_OK;
}

int aisim_pd_pass_ends(const aisim_pd *p, size_t w, const double **out, size_t *n)
{
    if (!p || !out || !n || w >= p->n_workers)
        return AISIM_EINVAL;
    *out = p->workers[w].hist.pass_ends;
    *n = p->workers[w].hist.n_pass_ends;
    return AISIM_OK;
}

int aisim_pd_breaks(const aisim_pd *p, size_t w, const int64_t **out, size_t *n_pairs)
{
    if (!p || !out || !n_pairs || w >= p->n_workers)
        return AISIM_EINVAL;
    *out = p->workers[w].hist.breaks;
    *n_pairs = p->workers[w].hist.n_breaks / 2;
    return AISIM_OK;
}

int aisim_pd_sample_stats(aisim_pd *p, int32_t which, double *out)
{
    if (!p)
        return AISIM_EINVAL;
    return plain_sample_stats(&p->req, which, out);
}

int aisim_pd_drop_samples(aisim_pd *p, int32_t which)
{
    if (!p || which < 0 || which > 3)
        return AISIM_EINVAL;
    plain_drop_samples(&p->req, which);
    refresh_view(p);
    return AISIM_OK;
}

int aisim_pd_ready(aisim_pd *p, int64_t *index, double *ready_ms, size_t cap)
{
    if (!p)
        return AISIM_EINVAL;
    return plain_sessions_ready(&p->sess, index, ready_ms, cap);
}

int aisim_pd_records(const aisim_pd *p, const int64_t **ints, const double **doubles,
                     size_t *n, const int64_t **adm_ints, const double **adm_at, size_t *n_adm,
                     const int64_t **late_uuid, const double **late_at,
                     const int64_t **late_row, size_t *n_late, size_t *rest_from)
{
    const plain_records *r;
    if (!p || !late_uuid || !late_at || !late_row || !n_late)
        return AISIM_EINVAL;
    r = &p->req.records;
    *late_uuid = r->late_uuid;
    *late_at = r->late_at;
    *late_row = r->late_row;
    *n_late = r->n_late;
    return plain_records_out(r, ints, doubles, n, adm_ints, adm_at, n_adm, rest_from);
}

int aisim_pd_clear_records(aisim_pd *p)
{
    if (!p)
        return AISIM_EINVAL;
    plain_records_clear(&p->req.records);
    return AISIM_OK;
}

int aisim_pd_add_worker(aisim_pd *p, void *rank, int32_t decode, int64_t worker_id)
{
    if (!p || !p->cfg.cluster)
        return AISIM_EINVAL;
    return add_worker(p, rank, decode != 0, worker_id);
}

int aisim_pd_set_rr(aisim_pd *p, int32_t pool, const int32_t *keys, size_t n)
{
    size_t i;
    if (!p || pool < 0 || pool > 1 || p->cfg.kvr[pool] || (n && !keys))
        return AISIM_EINVAL;
    for (i = 0; i < n; i++)
        if (keys[i] < 0 || (size_t)keys[i] >= p->n_workers ||
            p->workers[keys[i]].decode != pool)
            return AISIM_EINVAL;
    TRY(aisim_grow((void **)&p->rr[pool], &p->rr_cap[pool], n, sizeof *p->rr[pool]));
    if (n)
        memcpy(p->rr[pool], keys, n * sizeof *keys);
    p->n_rr[pool] = n;
    return AISIM_OK;
}

int aisim_pd_set_draining(aisim_pd *p, size_t key, int32_t on)
{
    if (!p || key >= p->n_workers)
        return AISIM_EINVAL;
    p->workers[key].draining = on != 0;
    return AISIM_OK;
}

int aisim_pd_set_cluster(aisim_pd *p, double next_tick_ms, double next_ready_ms)
{
    if (!p || !p->cfg.cluster)
        return AISIM_EINVAL;
    p->next_tick_ms = next_tick_ms;
    p->next_ready_ms = next_ready_ms;
    p->n_idle_keys = 0;
    refresh_view(p);
    return AISIM_OK;
}

int aisim_pd_find_stall(aisim_pd *p)
{
    if (!p)
        return AISIM_EINVAL;
    find_stall(p);
    return AISIM_OK;
}

int aisim_pd_pending(const aisim_pd *p, size_t key, int64_t *uuids, size_t cap)
{
    const pd_worker *w;
    size_t n, i;
    if (!p || key >= p->n_workers || (cap && !uuids))
        return AISIM_EINVAL;
    w = &p->workers[key];
    n = w->n_pending - w->pending_head;
    if (n > INT32_MAX)
        return AISIM_EINVAL;
    for (i = 0; i < n && i < cap; i++)
        uuids[i] = w->pending[w->pending_head + i];
    return (int)n;
}
