/*
 * plain_loop.c: a plain aggregated run as one C loop. Its twin and specification is the
 * Python path it replaces, step for step: runtime/simulation.py's _run_plain (the clock,
 * completions before arrivals before new passes, the livelock guard), workload/one_turn.py
 * (sessions' starts and prompts as id ranges), round robin's place_unpinned, runtime/
 * worker.py (a lone rank's pass, its extension and truncation; an attention-DP group's
 * lockstep pass), engine/vllm_native.py
 * (submit, schedule with the prefill time of engine/timing.py, complete, the events) and,
 * at each terminal, runtime/records.py token_times with report.Collector's _settled and
 * _Totals.add over the values in uuid order. The ranks' own C (vllm_rank.c) does the
 * engine work through its public entry points, so their state is the Python path's.
 *
 * Per request the loop keeps one entry from arrival to settlement (a ring over the uuids
 * not yet settled, bounded by what is in flight), and nothing once it settles but the
 * summary's samples; at the end it computes their exact statistics (stats.exact_stats).
 * Anything the Python path would word as an error comes back as an aisim_plain_status for
 * Python to word; the ranks' own errors come back as their negative statuses.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"
#include "vllm_rank.cdef.h"
#include "kv_router.cdef.h"
#include "plain_loop.cdef.h"
#include "plain_common.h"

#define MAX_PASSES 4096              /* engine/decode_run.py MAX_PASSES */
#define GOLDEN 0x9E3779B97F4A7C15ull /* workload/prompt.py's salt of blocks past the prompt */

#define TRY PLAIN_TRY

typedef struct rank_state {
    aisim_vllm_rank *rank;
    const aisim_vllm_view *view;
    int active;             /* in the worker's pass in flight */
    double *ends;           /* the pass formed and its extension (RankBase._macro_ends) */
    size_t n_ends;
    plain_history hist;     /* its pass ends, break pairs and slots' uuids */
} rank_state;

/* runtime/worker.py's Worker: a lone rank extends its passes; an attention-DP group's ranks
 * pass in lockstep, each pass ending at the slowest rank's end. */
typedef struct worker {
    rank_state *ranks;
    size_t n_ranks;
    int busy;
    uint32_t generation;
    double pass_end;        /* Worker.pass_end_ms */
    int64_t rank_cursor;    /* round robin's next rank of this worker */
    int dirty;
    int draining;           /* scaling drains it: no new work; its completions may empty it */
    int completed;          /* a draining worker that completed a pass at this step */
} worker;


typedef struct signal_entry {
    int64_t uuid;
    int64_t key;            /* its running index (rejections: after them all) */
    int64_t seq;            /* the order it came in (the sort is stable) */
    int32_t terminal;       /* 0 prefill completed, 1 terminal */
} signal_entry;

struct aisim_plain {
    aisim_plain_config cfg;
    worker *workers;
    rank_state *ranks;      /* worker w's are ranks[w * dp_size ...] */
    /* pass completions: a min-heap on (time, seq), as runtime/event_queue.py orders them */
    plain_heap heap;        /* key: the push order; value: worker << 32 | generation */
    int64_t seq;
    plain_sessions sess;
    plain_prompts prompts;
    plain_requests req;     /* requests by uuid and the summary */
    double passes_started_at;   /* the instant passes last started (-INFINITY: never) */
    /* the livelock guard */
    double spin_t;
    int64_t spins;
    int64_t steps;          /* loop steps, for progress reports */
    uint32_t ranges[8];     /* a prompt's (first, count) pairs */
    uint32_t *lengths;      /* a trace prompt's run lengths (trace_block but the last) */
    size_t n_last;          /* the run cut last (SIZE_MAX: none) */
    aisim_decode_run run;
    /* round robin's active workers (as worker indices), replaced as scaling changes them */
    int32_t *rr;
    size_t n_rr;
    /* scaling (runtime/cluster.py, in Python): its next tick and worker ready, and where a
     * step paused for them (0: a new step; 1: completions done; 2: arrivals done) */
    int cluster;
    double tick_ms;
    double ready_ms;
    int phase;
    int32_t *emptied;       /* draining workers a step's completions left without work */
    size_t n_emptied;
    double ext_cutoff;      /* the extension cutoff of the passes starting now */
    size_t workers_cap, ranks_cap, rr_cap, emptied_cap;
    /* kv_router placement (NULL: round robin), and each placed request's (selected, best)
     * overlap blocks by uuid - 1 when records are kept */
    aisim_kvr *kvr;
    const aisim_kvr_view *kvr_view;
    int64_t *overlaps;
    size_t overlaps_cap;
    double *queue_times;    /* ... and its (queued, released) times (NAN: placed at once) */
    size_t queue_times_cap;
    /* with its pending queue (Router.wants_order): a pass's prefill completions and
     * terminals, sorted by running order (Router.end_pass), and the releases they made,
     * delivered at Router.flush */
    signal_entry *signals;
    size_t n_signals, signals_cap;
    int64_t *order_of;      /* a slot's running index in the pass reported (-1: none) */
    size_t order_cap;
    int64_t *released;      /* (uuid, worker_id, dp_rank, overlap, best overlap) rows */
    size_t n_released, released_cap;
    aisim_plain_view view;
};

/* ------------------------------------------------------------ the event heap */

static int heap_push(aisim_plain *p, double time, int32_t w, uint32_t generation)
{
    return plain_heap_push(&p->heap, time, p->seq++, ((int64_t)w << 32) | generation);
}

static double peek(const aisim_plain *p)
{
    return p->heap.len ? p->heap.items[0].time : INFINITY;
}

/* ------------------------------------------------------------ a worker's rank */

/* A trace turn's prompt runs (Prompt.from_hash_ids): its ids, each trace_block long, the
 * last cut at the prompt's length. *n the runs. */
static const uint32_t *turn_runs(aisim_plain *p, int64_t k, const uint32_t **lengths,
                                 size_t *n)
{
    const aisim_plain_config *c = &p->cfg;
    *n = plain_turn_lengths(p->lengths, &p->n_last, c->turn_input[k], c->trace_block);
    *lengths = p->lengths;
    return c->ids + c->ids_off[k];
}

/* NativeVllmRank.submit of the request of session `index`'s turn `turn` (OneTurnDriver.
 * _request, or SessionDriver._request over trace sessions). */
static int submit(aisim_plain *p, rank_state *w, int64_t index, int32_t turn, int64_t uuid,
                  plain_entry *e)
{
    const aisim_plain_config *c = &p->cfg;
    size_t k = 0;
    int64_t prompt_len = c->isl, max_output = c->osl, out_limit, g = 0;
    uint64_t salt = (uint64_t)uuid * GOLDEN;
    int trace = c->arrivals == AISIM_PLAIN_TRACE && !c->turns_per_session;
    int slot;
    if (trace) {
        g = c->turn_base[index] + turn;
        prompt_len = c->turn_input[g];
        max_output = c->turn_output[g];
    } else if (c->turns_per_session) {
        TRY(plain_session_ranges(&p->prompts, index, turn, c->turns_per_session, p->ranges,
                                 &k));
    } else {
        TRY(plain_prompt_ranges(&p->prompts, index, p->ranges, &k));
    }
    e->prompt_len = prompt_len;
    e->max_output = max_output;
    out_limit = max_output;
    int64_t blocks = (prompt_len + c->block_size - 1) / c->block_size;
    int hashed = 1;
    if (!(c->max_model_len < 0 && !c->no_evict && c->caching && blocks <= c->num_blocks)) {
        /* VllmRank._limit_output, then _request_args: hashed only when it may fit */
        int64_t limit = c->max_model_len;
        if (limit >= 0 && prompt_len < limit)
            out_limit = max_output < limit - prompt_len ? max_output : limit - prompt_len;
        if (c->no_evict) {
            int64_t room = c->num_blocks * c->block_size - prompt_len;
            if (room < 0)
                room = 0;
            if (room < out_limit)
                out_limit = room;
        }
        hashed = c->caching && (limit < 0 || prompt_len < limit) && blocks <= c->num_blocks;
    }
    if (!hashed) {
        slot = aisim_vllm_submit(w->rank, prompt_len, max_output, out_limit, NULL, 0, NULL,
                                 NULL, 0, 0, salt);
    } else if (trace) {
        const uint32_t *lengths;
        size_t n;
        const uint32_t *values = turn_runs(p, g, &lengths, &n);
        slot = aisim_vllm_submit(w->rank, prompt_len, max_output, out_limit, NULL, 0, values,
                                 lengths, n, 0, salt);
    } else {
        slot = aisim_vllm_submit_ranges(w->rank, prompt_len, max_output, out_limit, p->ranges,
                                        k, c->trace_block, salt);
    }
    if (slot < 0)
        return slot;
    return plain_history_take_slot(&w->hist, (int32_t)slot, uuid);
}

/* NativeVllmRank._schedule_events: admissions and preemptions. */
static int schedule_events(aisim_plain *p, rank_state *w, double now_ms)
{
    return plain_schedule_events(&p->req, &w->hist, w->view->events, w->view->n_events,
                                 now_ms, 0);
}

/* NativeVllmRank.schedule, then (a lone rank: extend) its extend. *formed 0 when the rank
 * had no work. */
static int schedule_rank(aisim_plain *p, rank_state *w, double now_ms, double horizon_ms,
                         int extend, int *formed)
{
    const aisim_plain_config *c = &p->cfg;
    const aisim_vllm_view *v = w->view;
    double end;
    int status;
    *formed = 0;
    if (!v->n_running && !v->n_waiting)
        return AISIM_OK;
    if (!w->ends) {   /* made at the rank's first pass: a rank that never runs holds none */
        w->ends = malloc(MAX_PASSES * sizeof *w->ends);
        if (!w->ends)
            return AISIM_ENOMEM;
    }
    TRY(aisim_vllm_schedule(w->rank, now_ms));
    if (v->n_events)
        TRY(schedule_events(p, w, now_ms));
    status = plain_pass_end(v, c->prefill_kind, c->prefill_fixed_ms, c->prefill_ratio, 1, 1,
                            now_ms, &end);
    if (status != AISIM_OK)
        return status;
    w->ends[0] = end;
    w->n_ends = 1;
    /* NativeVllmRank.extend */
    if (extend && v->plain_decode && v->n_dec != 0 && end < horizon_ms) {
        status = aisim_vllm_extend(w->rank, end, horizon_ms, p->ext_cutoff, MAX_PASSES,
                                   w->ends, MAX_PASSES, &p->run, 0);
        if (status == AISIM_DECODE_MISS || status == AISIM_VLLM_EXTEND_IN_PYTHON)
            return AISIM_PLAIN_TIMING;
        TRY(status);
        w->n_ends = p->run.n_ends;
    }
    *formed = 1;
    return AISIM_OK;
}

/* Worker.start_pass: every rank with work forms its pass; a group's passes all end at the
 * slowest one's end. *formed 0 when no rank had work (the worker stays idle). */
static int start_pass(aisim_plain *p, worker *w, double now_ms, double horizon_ms, int *formed)
{
    size_t i;
    int any = 0;
    double end = 0.0;
    for (i = 0; i < w->n_ranks; i++) {
        rank_state *r = &w->ranks[i];
        int ran;
        TRY(schedule_rank(p, r, now_ms, horizon_ms, w->n_ranks == 1, &ran));
        r->active = ran;
        if (ran) {
            double rank_end = r->ends[r->n_ends - 1];
            if (!any || rank_end > end)
                end = rank_end;
            any = 1;
        }
    }
    *formed = any;
    if (!any)
        return AISIM_OK;
    if (w->n_ranks > 1)
        for (i = 0; i < w->n_ranks; i++)
            if (w->ranks[i].active)
                w->ranks[i].ends[0] = end;
    w->busy = 1;
    w->pass_end = end;
    return AISIM_OK;
}

/* A kv_router call's answer: the requests it released wait for the next flush. */
static int kvr_notified(aisim_plain *p, int status)
{
    const aisim_kvr_view *v = p->kvr_view;
    if (status <= 0)
        return status;
    if (!p->cfg.kvr_queue || v->n_released > SIZE_MAX / 5 - p->n_released)
        return AISIM_ECORRUPT;   /* (without a pending queue nothing is released) */
    TRY(aisim_grow((void **)&p->released, &p->released_cap, 5 * (p->n_released +
                                                                  v->n_released),
                   sizeof *p->released));
    memcpy(p->released + 5 * p->n_released, v->released, 5 * v->n_released * sizeof(int64_t));
    p->n_released += v->n_released;
    return AISIM_OK;
}

/* Router.prefill_completed / terminal: at once without a pending queue, else kept for the
 * pass's end (Router.end_pass). */
static int kvr_signal(aisim_plain *p, rank_state *w, int32_t slot, int terminal, double now_ms)
{
    int64_t uuid = w->hist.slot_uuid[slot];
    signal_entry *s;
    if (!p->cfg.kvr_queue)
        return kvr_notified(p, terminal ? aisim_kvr_terminal(p->kvr, uuid, now_ms)
                                        : aisim_kvr_prefill_done(p->kvr, uuid, now_ms));
    TRY(aisim_grow((void **)&p->signals, &p->signals_cap, p->n_signals + 1,
                   sizeof *p->signals));
    s = &p->signals[p->n_signals];
    s->uuid = uuid;
    s->key = (size_t)slot < p->order_cap ? p->order_of[slot] : -1;
    s->seq = (int64_t)p->n_signals++;
    s->terminal = terminal;
    return AISIM_OK;
}

static int signal_order(const void *a, const void *b)
{
    const signal_entry *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Router.begin_pass: the running order of the pass the rank reported. */
static int begin_signals(aisim_plain *p, rank_state *w)
{
    const aisim_vllm_view *v = w->view;
    size_t i;
    p->n_signals = 0;
    for (i = 0; i < p->order_cap; i++)
        p->order_of[i] = -1;
    for (i = 0; i < v->n_report_order; i++) {
        int64_t slot = v->report_order[2 * i];
        if (slot < 0)
            return AISIM_ECORRUPT;
        if ((size_t)slot >= p->order_cap) {
            size_t old = p->order_cap, k;
            TRY(aisim_grow((void **)&p->order_of, &p->order_cap, (size_t)slot + 1,
                           sizeof *p->order_of));
            for (k = old; k < p->order_cap; k++)
                p->order_of[k] = -1;
        }
        p->order_of[slot] = v->report_order[2 * i + 1];
    }
    return AISIM_OK;
}

/* Router.end_pass: the pass's signals to the router, in running order (rejections last). */
static int end_signals(aisim_plain *p, double now_ms)
{
    size_t i;
    for (i = 0; i < p->n_signals; i++)
        if (p->signals[i].key < 0)
            p->signals[i].key = INT64_MAX;   /* (order.get(uuid, last)) */
    if (p->n_signals > 1)
        qsort(p->signals, p->n_signals, sizeof *p->signals, signal_order);
    for (i = 0; i < p->n_signals; i++) {
        const signal_entry *s = &p->signals[i];
        TRY(kvr_notified(p, s->terminal ? aisim_kvr_terminal(p->kvr, s->uuid, now_ms)
                                        : aisim_kvr_prefill_done(p->kvr, s->uuid, now_ms)));
    }
    p->n_signals = 0;
    return AISIM_OK;
}

/* NativeVllmRank._report_pass to the kv_router (EngineEvents): the KV events of the pass
 * (stored runs, then the evicted blocks) when the router keeps its own index, then the
 * prompts it completed. */
static int report_pass(aisim_plain *p, rank_state *w)
{
    const aisim_vllm_view *v = w->view;
    size_t i, start = 0;
    int64_t worker_id = (int64_t)((size_t)(w - p->ranks) / p->cfg.dp_size);
    int64_t dp_rank = (int64_t)((size_t)(w - p->ranks) % p->cfg.dp_size);
    double now_ms = p->view.now_ms;
    if (p->cfg.kvr_report == AISIM_VLLM_REPORT_KV) {
        for (i = 0; i < v->n_report_runs; i++) {
            size_t end = (size_t)v->report_ends[i];
            TRY(aisim_kvr_kv_event(p->kvr, worker_id, dp_rank, 1, v->report_stored + start,
                                   end - start, now_ms));
            start = end;
        }
        if (v->n_report_evicted)
            TRY(aisim_kvr_kv_event(p->kvr, worker_id, dp_rank, 0, v->report_evicted,
                                   v->n_report_evicted, now_ms));
    }
    if (p->cfg.kvr_queue)
        TRY(begin_signals(p, w));
    for (i = 0; i < v->n_report_prefilled; i++)
        TRY(kvr_signal(p, w, v->report_prefilled[i], 0, now_ms));
    return AISIM_OK;
}

/* NativeVllmRank.complete and _completed, then the simulation's _finish_all (records,
 * collector, driver) of each terminal in event order. */
static int complete_rank(aisim_plain *p, rank_state *w)
{
    const aisim_vllm_view *v = w->view;
    double end_ms = w->ends[w->n_ends - 1];
    size_t i;
    w->active = 0;
    TRY(plain_history_passes(&w->hist, w->ends, w->n_ends));
    TRY(aisim_vllm_complete(w->rank, (int64_t)w->n_ends - 1, p->cfg.kvr_report));
    if (p->kvr)
        TRY(report_pass(p, w));
    for (i = 0; i < v->n_events; i++) {
        const int64_t *f = v->events + AISIM_VLLM_EVENT_WIDTH * i;
        plain_entry *e = plain_entry_of(&p->req, w->hist.slot_uuid[f[1]]);
        if (f[0] == AISIM_VLLM_FINISHED) {
            int64_t b = f[3];
            const int64_t *st = v->stretches + 2 * f[2];
            if (b > 0)
                plain_token_times(w->hist.pass_ends, e, st, b);
            TRY(plain_history_breaks(&w->hist, st, b));   /* NativeVllmRank._count_breaks */
            e->state = 1;
            p->view.completed++;
        } else if (f[0] == AISIM_VLLM_REJECTED) {
            e->state = 2;
        } else {
            return AISIM_ECORRUPT;   /* an aggregated rank holds no source */
        }
        e->terminal = end_ms;
        p->view.in_flight--;
        if (p->kvr)   /* Router.terminal */
            TRY(kvr_signal(p, w, (int32_t)f[1], 1, end_ms));
        TRY(plain_sessions_terminal(&p->sess, e->session, e->turn, end_ms));
    }
    if (p->cfg.kvr_queue)
        TRY(end_signals(p, p->view.now_ms));
    return plain_settle_ready(&p->req);
}

/* Worker.complete_pass: each rank of the pass, in rank order. */
static int complete_pass(aisim_plain *p, worker *w)
{
    size_t i;
    w->busy = 0;
    for (i = 0; i < w->n_ranks; i++)
        if (w->ranks[i].active)
            TRY(complete_rank(p, &w->ranks[i]));
    return AISIM_OK;
}

/* Worker.truncate: an arrival at arrival_ms meets the extended pass in flight (a group's
 * passes are never extended). `started`: it comes in a later round of an instant whose
 * passes started already, so a pass ending exactly then does not take it (RankBase.
 * truncate's bisect_right). */
static int truncate_pass(aisim_plain *p, int32_t wi, double arrival_ms, int started)
{
    worker *w = &p->workers[wi];
    rank_state *r = &w->ranks[0];
    size_t lo;
    double end;
    if (w->n_ranks > 1 || r->n_ends <= 1)
        return AISIM_OK;
    lo = started ? plain_bisect_right(r->ends, r->n_ends, arrival_ms)
                 : plain_bisect_left(r->ends, r->n_ends, arrival_ms);
    if (lo < r->n_ends - 1)
        r->n_ends = lo + 1;
    end = r->ends[r->n_ends - 1];
    if (end < w->pass_end) {
        w->pass_end = end;
        w->generation = w->generation + 1;
        TRY(heap_push(p, end, wi, w->generation));
    }
    return AISIM_OK;
}

static int deliver(aisim_plain *p, plain_entry *e, int64_t uuid, int32_t wi, int64_t dp_rank,
                   int64_t index, int32_t turn, double now_ms);
static int deliver_to(aisim_plain *p, plain_entry *e, int64_t uuid, int32_t wi,
                      int64_t dp_rank, double now_ms);
static void register_arrival(aisim_plain *p, plain_entry *e, int64_t index, int32_t turn,
                             double now_ms);
static int note_route(aisim_plain *p, int64_t uuid, int64_t overlap, int64_t best,
                      double queued_ms, double released_ms);
static int place(aisim_plain *p, plain_entry *e, int64_t uuid, int64_t worker_id,
                 int64_t dp_rank, int64_t overlap, int64_t best, double released_ms,
                 double now_ms);
static int flush_released(aisim_plain *p, double now_ms);

/* _register_arrival, the kv_router's place_simulated (a trace turn's prompt runs, hashed in
 * C) and _deliver of one request. */
static int arrive_kvr(aisim_plain *p, int64_t index, int32_t turn, double now_ms)
{
    const aisim_plain_config *c = &p->cfg;
    const aisim_kvr_view *v = p->kvr_view;
    plain_entry *e;
    const uint32_t *lengths, *values;
    size_t n;
    int64_t g = c->turn_base[index] + turn, uuid;
    int status;
    TRY(plain_new_entry(&p->req, &e));
    uuid = p->req.next_uuid;
    values = turn_runs(p, g, &lengths, &n);
    status = aisim_kvr_place_runs(p->kvr, uuid, c->turn_input[g], values, lengths, n, now_ms,
                                  c->turn_priority ? c->turn_priority[g] : 0,
                                  c->turn_strict ? c->turn_strict[g] : 0);
    if (status == AISIM_KVR_NO_ENDPOINTS)
        return AISIM_PLAIN_NO_ENDPOINTS;
    if (status < 0)
        return status;
    if (status == AISIM_KVR_QUEUED) {   /* the router holds it: arrived, not delivered */
        if (!c->kvr_queue)
            return AISIM_ECORRUPT;
        register_arrival(p, e, index, turn, now_ms);
        return note_route(p, uuid, 0, 0, now_ms, NAN);
    }
    if (status != AISIM_KVR_PLACED)
        return AISIM_ECORRUPT;
    register_arrival(p, e, index, turn, now_ms);
    TRY(place(p, e, uuid, v->worker_id, v->dp_rank, v->overlap, v->best_overlap, NAN, now_ms));
    return p->n_released ? flush_released(p, now_ms) : AISIM_OK;   /* (Router.place's flush) */
}

/* The route a record reports of request uuid (records kept): its overlaps, and when it was
 * queued and released (NAN: not). */
static int note_route(aisim_plain *p, int64_t uuid, int64_t overlap, int64_t best,
                      double queued_ms, double released_ms)
{
    size_t at = 2 * (size_t)(uuid - 1);
    if (!p->cfg.keep_records)
        return AISIM_OK;
    TRY(aisim_grow((void **)&p->overlaps, &p->overlaps_cap, at + 2, sizeof *p->overlaps));
    TRY(aisim_grow((void **)&p->queue_times, &p->queue_times_cap, at + 2,
                   sizeof *p->queue_times));
    p->overlaps[at] = overlap;
    p->overlaps[at + 1] = best;
    if (!isnan(queued_ms))
        p->queue_times[at] = queued_ms;
    else if (isnan(released_ms))
        p->queue_times[at] = NAN;   /* placed at once */
    p->queue_times[at + 1] = released_ms;
    return AISIM_OK;
}

/* The kv_router's choice (worker_id = index, dp_rank) delivered: Router._place_native or
 * (released_ms not NAN) Router._route of a release. */
static int place(aisim_plain *p, plain_entry *e, int64_t uuid, int64_t worker_id,
                 int64_t dp_rank, int64_t overlap, int64_t best, double released_ms,
                 double now_ms)
{
    const aisim_plain_config *c = &p->cfg;
    if (worker_id < 0 || (size_t)worker_id >= c->n_workers || dp_rank < 0 ||
        (size_t)dp_rank >= c->dp_size)
        return AISIM_ECORRUPT;   /* (candidates are workers of the loop, id = index) */
    TRY(note_route(p, uuid, overlap, best, NAN, released_ms));
    return deliver_to(p, e, uuid, (int32_t)worker_id, dp_rank, now_ms);
}

/* Router.flush: the requests the router released, delivered in release order. */
static int flush_released(aisim_plain *p, double now_ms)
{
    size_t i = 0;
    while (i < p->n_released) {
        const int64_t *r = p->released + 5 * i++;
        int64_t uuid = r[0];
        if (uuid < p->req.settle_uuid || uuid >= p->req.next_uuid)
            return AISIM_ECORRUPT;
        TRY(place(p, plain_entry_of(&p->req, uuid), uuid, r[1], r[2], r[3], r[4], now_ms,
                  now_ms));
    }
    p->n_released = 0;
    return AISIM_OK;
}

/* _register_arrival, round robin's place_unpinned and _deliver of one request. */
static int arrive(aisim_plain *p, int64_t index, int32_t turn, double now_ms)
{
    plain_entry *e;
    int32_t wi;
    worker *w;
    int64_t dp_rank, uuid;
    size_t at = 0;
    if (p->kvr)
        return arrive_kvr(p, index, turn, now_ms);
    if (!p->n_rr)
        return AISIM_PLAIN_NO_WORKER;   /* scaling left no active worker */
    TRY(plain_new_entry(&p->req, &e));
    uuid = p->req.next_uuid;
    at = (size_t)(p->view.rr_cursor % (int64_t)p->n_rr);
    wi = p->rr[at];
    w = &p->workers[wi];
    dp_rank = w->rank_cursor;
    p->view.rr_cursor = (int64_t)at + 1;
    w->rank_cursor = (dp_rank + 1) % (int64_t)w->n_ranks;
    return deliver(p, e, uuid, wi, dp_rank, index, turn, now_ms);
}

/* Simulation._deliver of request `uuid` (entry e) onto worker wi's rank dp_rank. */
static int deliver(aisim_plain *p, plain_entry *e, int64_t uuid, int32_t wi, int64_t dp_rank,
                   int64_t index, int32_t turn, double now_ms)
{
    register_arrival(p, e, index, turn, now_ms);
    return deliver_to(p, e, uuid, wi, dp_rank, now_ms);
}

/* Simulation._register_arrival of the entry plain_new_entry just made. */
static void register_arrival(aisim_plain *p, plain_entry *e, int64_t index, int32_t turn,
                             double now_ms)
{
    e->arrival = now_ms;
    e->session = index;
    e->turn = turn;
    p->req.next_uuid++;
    p->view.arrived++;
    p->view.in_flight++;
}

/* Simulation._deliver of an arrived request onto worker wi's rank dp_rank. */
static int deliver_to(aisim_plain *p, plain_entry *e, int64_t uuid, int32_t wi,
                      int64_t dp_rank, double now_ms)
{
    const aisim_plain_config *c = &p->cfg;
    worker *w = &p->workers[wi];
    e->rank = (int32_t)((size_t)wi * c->dp_size + (size_t)dp_rank);
    TRY(submit(p, &w->ranks[dp_rank], e->session, e->turn, uuid, e));
    if (w->busy)
        return truncate_pass(p, wi, now_ms, now_ms == p->passes_started_at);
    w->dirty = 1;
    return AISIM_OK;
}

static int pop_ready(aisim_plain *p, double now_ms)
{
    for (;;) {
        int64_t index;
        int32_t turn;
        TRY(plain_sessions_pop(&p->sess, now_ms, &index, &turn));
        if (index < 0)
            return AISIM_OK;
        int status = arrive(p, index, turn, now_ms);
        if (status != AISIM_OK)   /* (AISIM_PLAIN_NO_WORKER too) */
            return status;
    }
}

/* Worker.progressed: some rank of the pass just formed changed something. */
static int progressed(const worker *w)
{
    size_t i;
    for (i = 0; i < w->n_ranks; i++) {
        const aisim_vllm_view *v = w->ranks[i].view;
        if (w->ranks[i].active && (v->pass_effect || v->chunked_pass))
            return 1;
    }
    return 0;
}

/* Worker.blocked: every rank of the pass runs nothing and has a queue it cannot start. */
static int blocked(const worker *w)
{
    size_t i;
    for (i = 0; i < w->n_ranks; i++) {
        const aisim_vllm_view *v = w->ranks[i].view;
        if (w->ranks[i].active && (v->n_running || !v->n_waiting))
            return 0;
    }
    return 1;
}

/* Simulation._start_passes and _zero_time_pass. */
static int start_passes(aisim_plain *p, double t)
{
    size_t i;
    double horizon = NAN;
    for (i = 0; i < p->cfg.n_workers; i++) {
        worker *w = &p->workers[i];
        int formed;
        if (!w->dirty)
            continue;
        w->dirty = 0;
        p->passes_started_at = t;   /* Simulation._passes_started_at (a step with work) */
        if (w->busy)
            continue;
        if (isnan(horizon))
            horizon = plain_sessions_next_ready(&p->sess);
        TRY(start_pass(p, w, t, horizon, &formed));
        if (!formed)
            continue;
        if (w->pass_end == t) {
            if (progressed(w)) {
                p->spins = 0;
            } else if (blocked(w)) {
                /* parked: the pass is over at once, and waits for the next arrival */
                TRY(complete_pass(p, w));
                continue;
            } else {
                if (t != p->spin_t) {
                    p->spin_t = t;
                    p->spins = 0;
                }
                if (++p->spins >= p->cfg.livelock_passes) {
                    p->view.stuck_worker = (int32_t)i;
                    p->view.stuck_ms = t;
                    p->view.spins = p->spins;
                    return AISIM_PLAIN_LIVELOCK;
                }
            }
        }
        TRY(heap_push(p, w->pass_end, (int32_t)i, w->generation));
    }
    return AISIM_OK;
}

/* Simulation._check_drained's question: the first rank waiting with nothing running. */
static void find_stall(aisim_plain *p)
{
    size_t i;
    p->view.stuck_worker = -1;
    for (i = 0; i < p->cfg.n_workers * p->cfg.dp_size; i++) {
        rank_state *w = &p->ranks[i];
        int32_t head;
        if (w->view->n_waiting && !w->view->n_running &&
            aisim_vllm_queue(w->rank, 1, &head, 1) > 0) {
            plain_entry *e = plain_entry_of(&p->req, w->hist.slot_uuid[head]);
            p->view.stuck_worker = (int32_t)(i / p->cfg.dp_size);
            p->view.stuck_rank = (int32_t)(i % p->cfg.dp_size);
            p->view.stuck_uuid = w->hist.slot_uuid[head];
            p->view.stuck_prompt_len = e->prompt_len;
            p->view.stuck_generated = e->generated;
            return;
        }
    }
}

static void refresh_view(aisim_plain *p)
{
    aisim_plain_view *v = &p->view;
    const plain_sessions *s = &p->sess;
    v->made = s->made;
    v->active = s->active;
    v->next_pending = s->next_pending;
    v->next_start = s->next_start;
    v->sessions_made = s->first_turns;
    v->next_arrival_ms = plain_sessions_closed(s) ? INFINITY : s->next_arrival;
    v->next_event_ms = peek(p);
    v->next_ready_ms = plain_sessions_next_ready(s);
    v->n_workers = p->cfg.n_workers;
    v->emptied = p->emptied;
    v->n_emptied = p->n_emptied;
    plain_fill_summary(&v->summary, &p->req);
}

/* Simulation._cluster_time: the next tick or worker ready if earlier than t and work remains
 * (a request in flight or still to arrive). */
static double cluster_time(const aisim_plain *p, double t)
{
    double c = p->tick_ms < p->ready_ms ? p->tick_ms : p->ready_ms;
    if (c >= t || (p->view.in_flight <= 0 && plain_sessions_next_ready(&p->sess) == INFINITY))
        return t;
    return c;
}

/* The draining workers that completed a pass at this step and hold nothing now
 * (Simulation._complete_passes' cluster.worker_idle, settle's holds_work). */
static void collect_emptied(aisim_plain *p)
{
    size_t i, r;
    for (i = 0; i < p->cfg.n_workers; i++) {
        worker *w = &p->workers[i];
        int holds = 0;
        if (!w->completed)
            continue;
        w->completed = 0;
        for (r = 0; r < w->n_ranks; r++)
            if (w->ranks[r].view->n_running || w->ranks[r].view->n_waiting)
                holds = 1;
        if (!holds)
            p->emptied[p->n_emptied++] = (int32_t)i;
    }
}

/* Simulation._run_plain until the next event is past the cutoff. With scaling, a step pauses
 * where Python's cluster acts (runtime/cluster.py): after its completions when a worker gets
 * ready or a draining one emptied (AISIM_PLAIN_CLUSTER), after its arrivals when a tick is
 * due (AISIM_PLAIN_TICK); the next call goes on from there. */
static int run(aisim_plain *p)
{
    const double limit = p->cfg.cutoff_ms;
    aisim_plain_view *v = &p->view;
    for (;;) {
        double t;
        if (p->phase == 0) {
            double ready = plain_sessions_next_ready(&p->sess);
            int draining_done = 0;
            t = peek(p);
            if (ready < t)
                t = ready > v->now_ms ? ready : v->now_ms;
            if (p->cluster)
                t = cluster_time(p, t);
            if (t > limit || t == INFINITY) {
                v->next_ms = t;
                return AISIM_OK;
            }
            v->now_ms = t;
            while (peek(p) <= t) {
                plain_event e = plain_heap_pop(&p->heap);
                worker *w = &p->workers[e.value >> 32];
                if (!w->busy || w->generation != (uint32_t)(e.value & 0xFFFFFFFF))
                    continue;   /* the pass was cut short and rescheduled earlier */
                TRY(complete_pass(p, w));
                w->dirty = 1;
                if (w->draining)
                    draining_done = w->completed = 1;
            }
            if (p->n_released)   /* (_run_plain: router.flush after the completions) */
                TRY(flush_released(p, t));
            p->n_emptied = 0;
            if (draining_done)
                collect_emptied(p);
            p->phase = 1;
            if (p->cluster && (p->ready_ms <= t || p->n_emptied))
                return AISIM_PLAIN_CLUSTER;
        }
        t = v->now_ms;
        if (p->phase == 1) {
            if (plain_sessions_next_ready(&p->sess) <= t) {
                int status = pop_ready(p, t);
                if (status != AISIM_OK)
                    return status;
            }
            p->phase = 2;
            if (p->cluster && p->tick_ms <= t)
                return AISIM_PLAIN_TICK;
        }
        p->phase = 0;
        p->ext_cutoff = limit;
        if (p->cluster) {
            double c = cluster_time(p, INFINITY);
            if (c < limit)
                p->ext_cutoff = c;
        }
        TRY(start_passes(p, t));
        if (p->cfg.progress_every && ++p->steps % p->cfg.progress_every == 0)
            return AISIM_PLAIN_PROGRESS;
        if (p->req.records.n) {   /* hand the records over after enough, or long enough */
            plain_records *r = &p->req.records;
            if (isnan(r->first_ms))
                r->first_ms = t;
            if ((p->cfg.records_every && r->n >= (size_t)p->cfg.records_every) ||
                (p->cfg.records_lag_ms > 0.0 && t - r->first_ms >= p->cfg.records_lag_ms))
                return AISIM_PLAIN_RECORDS;
        }
    }
}

int aisim_plain_run(aisim_plain *p)
{
    int status;
    if (!p)
        return AISIM_EINVAL;
    status = run(p);
    if (status == AISIM_PLAIN_PROGRESS || status == AISIM_PLAIN_RECORDS ||
        status == AISIM_PLAIN_CLUSTER || status == AISIM_PLAIN_TICK) {
        refresh_view(p);
        return status;
    }
    if (status == AISIM_OK && p->view.next_ms == INFINITY && p->view.in_flight > 0) {
        find_stall(p);
        status = AISIM_PLAIN_STALLED;
    }
    if (status == AISIM_OK) {
        status = plain_settle_rest(&p->req);
    }
    refresh_view(p);
    return status;
}

/* ------------------------------------------------------------ lifecycle */

/* Round robin's active workers (RoundRobin._workers as worker indices). */
static int set_rr(aisim_plain *p, const int32_t *workers, size_t n)
{
    size_t i;
    if (n && !workers)
        return AISIM_EINVAL;
    for (i = 0; i < n; i++)
        if (workers[i] < 0 || (size_t)workers[i] >= p->cfg.n_workers)
            return AISIM_EINVAL;
    TRY(aisim_grow((void **)&p->rr, &p->rr_cap, n ? n : 1, sizeof *p->rr));
    if (n)
        memcpy(p->rr, workers, n * sizeof *p->rr);
    p->n_rr = n;
    return AISIM_OK;
}

int aisim_plain_new(aisim_plain **out, const aisim_plain_config *config)
{
    aisim_plain *p;
    size_t i;
    if (!out || !config || !config->n_workers || !config->dp_size ||
        config->dp_size > SIZE_MAX / sizeof(rank_state) / config->n_workers || !config->ranks ||
        !config->rr_workers ||
        (!config->n_rr && !config->kvr) || config->block_size < 1 || config->trace_block < 1 ||
        config->isl < 1 || config->osl < 0 || config->own < 0 || config->shared < 0 ||
        config->fresh_base < 0 || config->fresh_base >= PLAIN_ID_LIMIT || config->sessions < 0 ||
        config->arrivals < AISIM_PLAIN_POISSON || config->arrivals > AISIM_PLAIN_TRACE ||
        (config->arrivals == AISIM_PLAIN_POISSON && !config->arrival_rng) ||
        (config->shape_rng && config->groups < 1) || config->rr_cursor < 0 ||
        config->sessions > INT64_MAX / (config->own + 1) || config->livelock_passes < 1 ||
        config->progress_every < 0 || config->records_every < 0 ||
        config->turns_per_session < 0 ||
        (config->arrivals == AISIM_PLAIN_TRACE && !config->turns_per_session &&
         (!config->turn_base || !config->turn_input || !config->turn_output ||
          !config->turn_delay || !config->ids_off || !config->ids || config->max_input < 1 ||
          config->max_input > INT64_MAX - config->trace_block ||
          (config->max_input + config->trace_block - 1) / config->trace_block > INT32_MAX ||
          (config->trace_closed ? config->max_sessions < 0
                                : (!config->start_order || !config->start_ms)))))
        return AISIM_EINVAL;
    for (i = 0; i < config->n_rr; i++)
        if (config->rr_workers[i] < 0 || (size_t)config->rr_workers[i] >= config->n_workers)
            return AISIM_EINVAL;
    p = calloc(1, sizeof *p);
    if (!p)
        return AISIM_ENOMEM;
    p->cfg = *config;
    p->workers = calloc(config->n_workers, sizeof *p->workers);
    p->ranks = calloc(config->n_workers * config->dp_size, sizeof *p->ranks);
    p->emptied = calloc(config->n_workers, sizeof *p->emptied);
    p->workers_cap = p->emptied_cap = config->n_workers;
    p->ranks_cap = config->n_workers * config->dp_size;
    if (!p->workers || !p->ranks || !p->emptied ||
        set_rr(p, config->rr_workers, config->n_rr) != AISIM_OK) {
        aisim_plain_free(p);
        return AISIM_ENOMEM;
    }
    for (i = 0; i < config->n_workers * config->dp_size; i++) {
        rank_state *r = &p->ranks[i];
        r->rank = config->ranks[i];
        if (!r->rank || aisim_vllm_view_of(r->rank, &r->view) != AISIM_OK) {
            aisim_plain_free(p);
            return AISIM_EINVAL;
        }
    }
    for (i = 0; i < config->n_workers; i++) {
        worker *w = &p->workers[i];
        w->ranks = &p->ranks[i * config->dp_size];
        w->n_ranks = config->dp_size;
        w->rank_cursor = config->rank_cursors ? config->rank_cursors[i] : 0;
        if (w->rank_cursor < 0 || (size_t)w->rank_cursor >= w->n_ranks) {
            aisim_plain_free(p);
            return AISIM_EINVAL;
        }
        w->dirty = 1;   /* Simulation.attach marks every worker */
    }
    p->sess.arrivals = config->arrivals;
    p->sess.gap_ms = config->gap_ms;
    p->sess.sessions = config->sessions;
    p->sess.max_sessions = config->max_sessions;
    p->sess.arrival_rng = config->arrival_rng;
    p->sess.trace_closed = config->arrivals == AISIM_PLAIN_TRACE && config->trace_closed;
    p->sess.turn_base = config->turn_base;
    p->sess.turn_delay = config->turn_delay;
    p->sess.start_order = config->start_order;
    p->sess.start_ms = config->start_ms;
    p->req.records.on = config->keep_records != 0;
    p->req.records.rest_from = SIZE_MAX;
    p->req.records.first_ms = NAN;
    p->n_last = SIZE_MAX;
    p->sess.turns_each = config->arrivals == AISIM_PLAIN_TRACE ? config->turns_per_session : 0;
    p->sess.inter_delay_ms = config->inter_turn_delay_ms;
    p->sess.start_kind = config->start_kind;
    if (config->arrivals == AISIM_PLAIN_TRACE && !config->turns_per_session) {
        size_t runs = (size_t)((config->max_input + config->trace_block - 1) /
                               config->trace_block), i;
        p->lengths = malloc(runs * sizeof *p->lengths);
        if (!p->lengths) {
            aisim_plain_free(p);
            return AISIM_ENOMEM;
        }
        for (i = 0; i < runs; i++)
            p->lengths[i] = (uint32_t)config->trace_block;
    }
    p->prompts.own = config->own;
    p->prompts.shared = config->shared;
    p->prompts.fresh_base = config->fresh_base;
    p->prompts.groups = config->groups;
    p->prompts.shape_rng = config->shape_rng;
    p->req.settle_uuid = p->req.next_uuid = 1;
    p->req.report_start_ms = config->report_start_ms;
    p->req.has_ttft = config->has_ttft;
    p->req.has_itl = config->has_itl;
    p->req.has_e2e = config->has_e2e;
    p->req.sla_ttft_ms = config->sla_ttft_ms;
    p->req.sla_itl_ms = config->sla_itl_ms;
    p->req.sla_e2e_ms = config->sla_e2e_ms;
    p->spin_t = -1.0;
    p->passes_started_at = -INFINITY;
    p->tick_ms = p->ready_ms = INFINITY;
    p->kvr = config->kvr;
    if (p->kvr && (aisim_kvr_view_of(p->kvr, &p->kvr_view) != AISIM_OK ||
                   config->arrivals != AISIM_PLAIN_TRACE || config->turns_per_session)) {
        aisim_plain_free(p);
        return AISIM_EINVAL;
    }
    p->ext_cutoff = config->cutoff_ms;
    p->view.rr_cursor = config->rr_cursor;
    p->view.stuck_worker = -1;
    {
        int status = plain_sessions_start(&p->sess);
        if (status == AISIM_OK && p->prompts.shape_rng)
            status = aisim_rng_view_of(p->prompts.shape_rng, &p->prompts.shape_view);
        if (status != AISIM_OK) {
            aisim_plain_free(p);
            return status == AISIM_ENOMEM ? AISIM_ENOMEM : AISIM_EINVAL;
        }
    }
    refresh_view(p);
    *out = p;
    return AISIM_OK;
}

int aisim_plain_free(aisim_plain *p)
{
    size_t i;
    if (!p)
        return AISIM_OK;
    for (i = 0; p->ranks && i < p->cfg.n_workers * p->cfg.dp_size; i++) {
        free(p->ranks[i].ends);
        plain_history_free(&p->ranks[i].hist);
    }
    free(p->ranks);
    free(p->workers);
    free(p->rr);
    free(p->emptied);
    free(p->overlaps);
    free(p->queue_times);
    free(p->signals);
    free(p->order_of);
    free(p->released);
    free(p->lengths);
    free(p->prompts.groups_of);
    free(p->heap.items);
    plain_sessions_free(&p->sess);
    plain_requests_free(&p->req);
    free(p);
    return AISIM_OK;
}

int aisim_plain_view_of(const aisim_plain *p, const aisim_plain_view **out)
{
    if (!p || !out)
        return AISIM_EINVAL;
    *out = &p->view;
    return AISIM_OK;
}

int aisim_plain_pass_ends(const aisim_plain *p, size_t rank, const double **out, size_t *n)
{
    if (!p || !out || !n || rank >= p->cfg.n_workers * p->cfg.dp_size)
        return AISIM_EINVAL;
    *out = p->ranks[rank].hist.pass_ends;
    *n = p->ranks[rank].hist.n_pass_ends;
    return AISIM_OK;
}

int aisim_plain_breaks(const aisim_plain *p, size_t rank, const int64_t **out,
                       size_t *n_pairs)
{
    if (!p || !out || !n_pairs || rank >= p->cfg.n_workers * p->cfg.dp_size)
        return AISIM_EINVAL;
    *out = p->ranks[rank].hist.breaks;
    *n_pairs = p->ranks[rank].hist.n_breaks / 2;
    return AISIM_OK;
}

int aisim_plain_sample_stats(aisim_plain *p, int32_t which, double *out)
{
    if (!p)
        return AISIM_EINVAL;
    return plain_sample_stats(&p->req, which, out);
}


int aisim_plain_ready(aisim_plain *p, int64_t *index, double *ready_ms, size_t cap)
{
    if (!p)
        return AISIM_EINVAL;
    return plain_sessions_ready(&p->sess, index, ready_ms, cap);
}

static int event_order(const void *a, const void *b)
{
    return plain_event_before(a, b) ? -1 : plain_event_before(b, a) ? 1 : 0;
}

int aisim_plain_events(aisim_plain *p, double *times, int64_t *idents, size_t cap)
{
    size_t i, n;
    if (!p || (cap && (!times || !idents)) || p->heap.len > INT32_MAX)
        return AISIM_EINVAL;
    n = p->heap.len;
    if (n > 1)   /* a sorted array is a heap */
        qsort(p->heap.items, n, sizeof *p->heap.items, event_order);
    for (i = 0; i < n && i < cap; i++) {
        times[i] = p->heap.items[i].time;
        idents[i] = p->heap.items[i].value;
    }
    return (int)n;
}

int aisim_plain_worker(const aisim_plain *p, size_t w, int32_t *busy, uint32_t *generation,
                       double *pass_end_ms, int64_t *rank_cursor)
{
    if (!p || !busy || !generation || !pass_end_ms || !rank_cursor || w >= p->cfg.n_workers)
        return AISIM_EINVAL;
    *rank_cursor = p->workers[w].rank_cursor;
    *busy = p->workers[w].busy;
    *generation = p->workers[w].generation;
    *pass_end_ms = p->workers[w].pass_end;
    return AISIM_OK;
}

int aisim_plain_drop_samples(aisim_plain *p, int32_t which)
{
    if (!p || which < 0 || which > 3)
        return AISIM_EINVAL;
    plain_drop_samples(&p->req, which);
    refresh_view(p);
    return AISIM_OK;
}

int aisim_plain_records(const aisim_plain *p, const int64_t **ints, const double **doubles,
                        size_t *n, const int64_t **adm_ints, const double **adm_at,
                        size_t *n_adm, size_t *rest_from)
{
    if (!p)
        return AISIM_EINVAL;
    return plain_records_out(&p->req.records, ints, doubles, n, adm_ints, adm_at, n_adm,
                             rest_from);
}

int aisim_plain_clear_records(aisim_plain *p)
{
    if (!p)
        return AISIM_EINVAL;
    plain_records_clear(&p->req.records);
    return AISIM_OK;
}

/* ------------------------------------------------------------ scaling (runtime/cluster.py) */

int aisim_plain_set_cluster(aisim_plain *p, double tick_ms, double ready_ms)
{
    if (!p || isnan(tick_ms) || isnan(ready_ms))
        return AISIM_EINVAL;
    p->cluster = 1;
    p->tick_ms = tick_ms;
    p->ready_ms = ready_ms;
    return AISIM_OK;
}

int aisim_plain_set_rr(aisim_plain *p, const int32_t *workers, size_t n)
{
    if (!p)
        return AISIM_EINVAL;
    return set_rr(p, workers, n);
}

int aisim_plain_set_draining(aisim_plain *p, size_t w, int32_t draining)
{
    if (!p || w >= p->cfg.n_workers)
        return AISIM_EINVAL;
    p->workers[w].draining = draining != 0;
    return AISIM_OK;
}

int aisim_plain_add_worker(aisim_plain *p, void **ranks)
{
    size_t n, dp, i, old_ranks;
    if (!p || !ranks)
        return AISIM_EINVAL;
    n = p->cfg.n_workers;
    dp = p->cfg.dp_size;
    if (n >= INT32_MAX || (n + 1) > SIZE_MAX / sizeof(rank_state) / dp)
        return AISIM_EINVAL;
    for (i = 0; i < dp; i++)
        if (!ranks[i])
            return AISIM_EINVAL;
    old_ranks = p->ranks_cap;
    TRY(aisim_grow((void **)&p->workers, &p->workers_cap, n + 1, sizeof *p->workers));
    TRY(aisim_grow((void **)&p->emptied, &p->emptied_cap, n + 1, sizeof *p->emptied));
    TRY(aisim_grow((void **)&p->ranks, &p->ranks_cap, (n + 1) * dp, sizeof *p->ranks));
    if (p->ranks_cap > old_ranks)
        memset(p->ranks + old_ranks, 0, (p->ranks_cap - old_ranks) * sizeof *p->ranks);
    for (i = 0; i < dp; i++) {
        rank_state *r = &p->ranks[n * dp + i];
        r->rank = ranks[i];
        if (aisim_vllm_view_of(r->rank, &r->view) != AISIM_OK) {
            r->rank = NULL;
            return AISIM_EINVAL;
        }
    }
    for (i = 0; i < n; i++)   /* (the ranks may have moved) */
        p->workers[i].ranks = &p->ranks[i * dp];
    memset(&p->workers[n], 0, sizeof p->workers[n]);
    p->workers[n].ranks = &p->ranks[n * dp];
    p->workers[n].n_ranks = dp;
    /* (not dirty: Simulation.spawn_worker marks nothing, and a worker with no work starts
     * no pass) */
    p->cfg.n_workers = n + 1;
    p->view.n_workers = n + 1;
    return AISIM_OK;
}

int aisim_plain_find_stall(aisim_plain *p)
{
    if (!p)
        return AISIM_EINVAL;
    find_stall(p);
    return AISIM_OK;
}

int aisim_plain_overlaps(const aisim_plain *p, const int64_t **out, const double **times,
                         size_t *n)
{
    if (!p || !out || !times || !n)
        return AISIM_EINVAL;
    *out = p->overlaps;
    *times = p->queue_times;
    *n = p->overlaps ? p->overlaps_cap / 2 : 0;
    return AISIM_OK;
}

int aisim_plain_release(aisim_plain *p, int64_t uuid, int64_t worker_id, int64_t dp_rank,
                        int64_t overlap, int64_t best, double now_ms)
{
    if (!p || !p->kvr || uuid < p->req.settle_uuid || uuid >= p->req.next_uuid)
        return AISIM_EINVAL;
    return place(p, plain_entry_of(&p->req, uuid), uuid, worker_id, dp_rank, overlap, best,
                 now_ms, now_ms);
}

int aisim_plain_queued(const aisim_plain *p)
{
    if (!p)
        return AISIM_EINVAL;
    return p->kvr ? (int)(p->kvr_view->queued > INT32_MAX ? INT32_MAX : p->kvr_view->queued)
                  : 0;
}
