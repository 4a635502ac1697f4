/*
 * plain_common.c: the sessions, prompts, per-request entries and summary the plain loops
 * share (plain_common.h says what each mirrors of the Python path).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plain_common.h"
#include "decode_run.cdef.h"
#include "vllm_rank.cdef.h"
#include "plain_loop.cdef.h"

/* ------------------------------------------------------------ sessions (one_turn.py) */

int plain_sessions_closed(const plain_sessions *s)
{
    return s->arrivals == AISIM_PLAIN_CLOSED;
}

/* OneTurnDriver._activate: sessions become ready now while there is room. */
static int activate(plain_sessions *p, double now_ms)
{
    while (p->active < p->max_sessions && p->next_pending < p->sessions) {
        if (p->ready_len == p->ready_cap) {
            size_t cap = p->ready_cap ? 2 * p->ready_cap : 64, i;
            int64_t *idx = malloc(cap * sizeof *idx);
            double *ms = malloc(cap * sizeof *ms);
            if (!idx || !ms) {
                free(idx);
                free(ms);
                return AISIM_ENOMEM;
            }
            for (i = 0; i < p->ready_len; i++) {
                idx[i] = p->ready_idx[(p->ready_head + i) & (p->ready_cap - 1)];
                ms[i] = p->ready_ms[(p->ready_head + i) & (p->ready_cap - 1)];
            }
            free(p->ready_idx);
            free(p->ready_ms);
            p->ready_idx = idx;
            p->ready_ms = ms;
            p->ready_head = 0;
            p->ready_cap = cap;
        }
        size_t at = (p->ready_head + p->ready_len) & (p->ready_cap - 1);
        p->ready_idx[at] = p->next_pending++;
        p->ready_ms[at] = now_ms;
        p->ready_len++;
        p->active++;
    }
    return AISIM_OK;
}

static int advance_arrival(plain_sessions *p);

/* sessions.SessionDriver._push_next_start: the next timed session's first turn joins. */
static int push_next_start(plain_sessions *s)
{
    if (s->next_start >= s->sessions)
        return AISIM_OK;
    if (s->turns_each) {   /* SyntheticSessions.start_order: first_arrivals in session order */
        int64_t index = s->next_start++;
        PLAIN_TRY(plain_heap_push(&s->turns, s->next_arrival, index << 32, 0));
        s->made = s->next_start;   /* (advance_arrival's count of the starts taken) */
        return advance_arrival(s);
    }
    int64_t index = s->start_order[s->next_start++];
    return plain_heap_push(&s->turns, s->start_ms[index], index << 32, 0);
}

/* SessionDriver._activate: sessions start now while there is room. */
static int trace_activate(plain_sessions *s, double now_ms)
{
    while (s->active < s->max_sessions && s->next_pending < s->sessions) {
        PLAIN_TRY(plain_heap_push(&s->turns, now_ms, s->next_pending << 32, 0));
        s->next_pending++;
        s->active++;
    }
    return AISIM_OK;
}

int plain_sessions_start(plain_sessions *s)
{
    if (s->arrival_rng && aisim_rng_view_of(s->arrival_rng, &s->arrival_view) != AISIM_OK)
        return AISIM_EINVAL;
    if (s->arrivals == AISIM_PLAIN_TRACE) {
        if ((!s->turns_each && (!s->turn_base || !s->turn_delay)) || s->sessions >= INT32_MAX ||
            s->turns_each < 0 || s->turns_each > INT32_MAX)
            return AISIM_EINVAL;
        if (s->trace_closed)
            return trace_activate(s, 0.0);
        if (s->turns_each) {
            if (s->start_kind < AISIM_PLAIN_POISSON || s->start_kind > AISIM_PLAIN_BURST ||
                (s->start_kind == AISIM_PLAIN_POISSON && !s->arrival_rng))
                return AISIM_EINVAL;
            s->next_arrival = 0.0;
        } else if (!s->start_order || !s->start_ms) {
            return AISIM_EINVAL;
        }
        s->next_pending = s->sessions;
        return push_next_start(s);
    }
    if (plain_sessions_closed(s))
        return activate(s, 0.0);
    s->next_arrival = s->sessions ? 0.0 : INFINITY;
    return AISIM_OK;
}

void plain_sessions_free(plain_sessions *s)
{
    free(s->ready_idx);
    free(s->ready_ms);
    free(s->turns.items);
    s->ready_idx = NULL;
    s->ready_ms = NULL;
    s->turns.items = NULL;
}

double plain_sessions_next_ready(const plain_sessions *p)
{
    if (p->arrivals == AISIM_PLAIN_TRACE)
        return p->turns.len ? p->turns.items[0].time : INFINITY;
    if (plain_sessions_closed(p))
        return p->ready_len ? p->ready_ms[p->ready_head] : INFINITY;
    return p->next_arrival;
}

/* first_arrivals' next start after session `made` - 1 started at `t`. */
static int advance_arrival(plain_sessions *p)
{
    double t = p->next_arrival;
    if (p->made >= p->sessions) {
        p->next_arrival = INFINITY;
        return AISIM_OK;
    }
    int32_t kind = p->arrivals == AISIM_PLAIN_TRACE ? p->start_kind : p->arrivals;
    if (kind == AISIM_PLAIN_POISSON) {
        PLAIN_TRY(aisim_rng_exponential(p->arrival_rng, p->gap_ms));
        t += p->arrival_view->last_f64;
    } else if (kind == AISIM_PLAIN_CONSTANT) {
        t += p->gap_ms;
    } else {
        t = 0.0;
    }
    p->next_arrival = t;
    return AISIM_OK;
}

int plain_sessions_pop(plain_sessions *p, double now_ms, int64_t *index, int32_t *turn)
{
    *index = -1;
    *turn = 0;
    if (p->arrivals == AISIM_PLAIN_TRACE) {   /* HeapDriver.pop_ready, SessionDriver._request */
        if (p->turns.len && p->turns.items[0].time <= now_ms) {
            plain_event e = plain_heap_pop(&p->turns);
            *index = e.key >> 32;
            *turn = (int32_t)(e.key & 0xFFFFFFFF);
            if (*turn == 0) {
                p->first_turns++;
                if (!p->trace_closed)
                    return push_next_start(p);
            }
        }
        return AISIM_OK;
    }
    if (plain_sessions_closed(p)) {
        if (p->ready_len && p->ready_ms[p->ready_head] <= now_ms) {
            *index = p->ready_idx[p->ready_head];
            p->ready_head = (p->ready_head + 1) & (p->ready_cap - 1);
            p->ready_len--;
            p->made++;
        }
        return AISIM_OK;
    }
    if (p->next_arrival <= now_ms) {
        *index = p->made++;
        /* (the arrival stream is its own: drawing the next gap before the request is
         * placed draws what drawing it after would) */
        return advance_arrival(p);
    }
    return AISIM_OK;
}

int plain_sessions_terminal(plain_sessions *s, int64_t index, int32_t turn, double end_ms)
{
    if (s->arrivals == AISIM_PLAIN_TRACE) {   /* SessionDriver.on_terminal */
        if (s->turns_each) {
            if (turn + 1 < s->turns_each)
                return plain_heap_push(&s->turns, end_ms + s->inter_delay_ms,
                                       (index << 32) | (int64_t)(turn + 1), 0);
        } else {
            int64_t next = s->turn_base[index] + turn + 1;
            if (next < s->turn_base[index + 1])
                return plain_heap_push(&s->turns, end_ms + s->turn_delay[next],
                                       (index << 32) | (int64_t)(turn + 1), 0);
        }
        if (!s->trace_closed)
            return AISIM_OK;
        s->active--;
        return trace_activate(s, end_ms);
    }
    if (!plain_sessions_closed(s))
        return AISIM_OK;
    s->active--;
    return activate(s, end_ms);
}

static int event_order(const void *a, const void *b)
{
    return plain_event_before(a, b) ? -1 : plain_event_before(b, a) ? 1 : 0;
}

int plain_sessions_ready(plain_sessions *s, int64_t *index, double *ready_ms, size_t cap)
{
    size_t i;
    if ((cap && (!index || !ready_ms)) || s->ready_len > INT32_MAX || s->turns.len > INT32_MAX)
        return AISIM_EINVAL;
    if (s->arrivals == AISIM_PLAIN_TRACE) {
        plain_heap *h = &s->turns;
        if (h->len > 1)   /* a sorted array is a heap */
            qsort(h->items, h->len, sizeof *h->items, event_order);
        for (i = 0; i < h->len && i < cap; i++) {
            index[i] = h->items[i].key;
            ready_ms[i] = h->items[i].time;
        }
        return (int)h->len;
    }
    for (i = 0; i < s->ready_len && i < cap; i++) {
        index[i] = s->ready_idx[(s->ready_head + i) & (s->ready_cap - 1)];
        ready_ms[i] = s->ready_ms[(s->ready_head + i) & (s->ready_cap - 1)];
    }
    return (int)s->ready_len;
}

/* ------------------------------------------------------------ prompts */

/* SyntheticSessions._fresh_ranges into ranges from pair k on; returns the pairs written. */
size_t plain_fresh_ranges(const plain_prompts *p, int64_t offset, int64_t count,
                          uint32_t *ranges, size_t k)
{
    int64_t base = p->fresh_base, span = PLAIN_ID_LIMIT - base;
    while (k < 4) {
        int64_t start = offset % span;
        if (start + count <= span) {
            ranges[2 * k] = (uint32_t)(base + start);
            ranges[2 * k + 1] = (uint32_t)count;
            return k + 1;
        }
        int64_t head = span - start;
        ranges[2 * k] = (uint32_t)(base + start);
        ranges[2 * k + 1] = (uint32_t)head;
        k++;
        offset += head;
        count -= head;
    }
    return k;
}

int plain_prompt_ranges(plain_prompts *pr, int64_t index, uint32_t *ranges, size_t *n)
{
    size_t k = 0;
    if (pr->shape_rng) {   /* SyntheticSessions.draw_prefix (gen_range over usize) */
        int64_t group;
        if (!pr->shape_view)
            PLAIN_TRY(aisim_rng_view_of(pr->shape_rng, &pr->shape_view));
        if ((uint64_t)pr->groups > UINT32_MAX) {
            PLAIN_TRY(aisim_rng_range_u64(pr->shape_rng, 0, (uint64_t)pr->groups));
            group = (int64_t)pr->shape_view->last_u64;
        } else {
            PLAIN_TRY(aisim_rng_range_u32(pr->shape_rng, 0, (uint32_t)pr->groups));
            group = (int64_t)pr->shape_view->last_u32;
        }
        ranges[0] = (uint32_t)(group * pr->shared);
        ranges[1] = (uint32_t)pr->shared;
        k = 1;
    }
    *n = plain_fresh_ranges(pr, index * pr->own, pr->own, ranges, k);
    return AISIM_OK;
}

int plain_session_ranges(plain_prompts *pr, int64_t index, int32_t turn, int64_t turns,
                         uint32_t *ranges, size_t *n)
{
    size_t k = 0;
    if (pr->shape_rng) {
        if (turn == 0) {   /* SyntheticSessions._make: the session's draw_prefix */
            PLAIN_TRY(plain_prompt_ranges(pr, 0, ranges, n));   /* (its group range) */
            PLAIN_TRY(aisim_grow((void **)&pr->groups_of, &pr->groups_cap, (size_t)index + 1,
                                 sizeof *pr->groups_of));
            pr->groups_of[index] = ranges[0];
        }
        ranges[0] = pr->groups_of[index];
        ranges[1] = (uint32_t)pr->shared;
        k = 1;
    }
    *n = plain_fresh_ranges(pr, (index * turns + turn) * pr->own, pr->own, ranges, k);
    return AISIM_OK;
}

/* ------------------------------------------------------------ requests by uuid */

static void records_free(plain_records *r);

void plain_requests_free(plain_requests *q)
{
    size_t i;
    records_free(&q->records);
    free(q->ring);
    q->ring = NULL;
    for (i = 0; i < 4; i++) {
        free(q->samples[i]);
        q->samples[i] = NULL;
    }
}

plain_entry *plain_entry_of(plain_requests *q, int64_t uuid)
{
    return &q->ring[(size_t)uuid & (q->ring_cap - 1)];
}

int plain_new_entry(plain_requests *q, plain_entry **out)
{
    size_t live = (size_t)(q->next_uuid - q->settle_uuid);
    if (live == q->ring_cap) {
        size_t cap = q->ring_cap ? 2 * q->ring_cap : 1024;
        plain_entry *ring = malloc(cap * sizeof *ring);
        int64_t u;
        if (!ring)
            return AISIM_ENOMEM;
        for (u = q->settle_uuid; u < q->next_uuid; u++)
            ring[(size_t)u & (cap - 1)] = *plain_entry_of(q, u);
        free(q->ring);
        q->ring = ring;
        q->ring_cap = cap;
    }
    plain_entry *e = plain_entry_of(q, q->next_uuid);
    memset(e, 0, sizeof *e);
    e->first_reused = -1;
    *out = e;
    return AISIM_OK;
}

static int push_sample(plain_requests *q, int which, double value)
{
    PLAIN_TRY(aisim_grow((void **)&q->samples[which], &q->samples_cap[which],
                         q->n_samples[which] + 1, sizeof(double)));
    q->samples[which][q->n_samples[which]++] = value;
    return AISIM_OK;
}

int plain_admitted_in(plain_requests *q, int64_t uuid, double at_ms, int64_t reused,
                      int readmit, int pool)
{
    plain_entry *e = plain_entry_of(q, uuid);
    plain_records *r = &q->records;
    e->admitted = 1;
    if (!readmit && !pool)
        e->first_reused = reused;
    if (reused > e->max_reused)
        e->max_reused = reused;
    if (!r->on)
        return AISIM_OK;
    if (!e->n_admissions++) {
        e->admit_at = at_ms;
        e->admit_reused = reused;
        e->admit_readmit = (int8_t)((readmit != 0) | (pool << 1));
        return AISIM_OK;
    }
    PLAIN_TRY(aisim_grow((void **)&r->adm_ints, &r->adm_ints_cap, 3 * (r->n_adm + 1),
                         sizeof *r->adm_ints));
    PLAIN_TRY(aisim_grow((void **)&r->adm_at, &r->adm_at_cap, r->n_adm + 1, sizeof *r->adm_at));
    r->adm_ints[3 * r->n_adm] = uuid;
    r->adm_ints[3 * r->n_adm + 1] = reused;
    r->adm_ints[3 * r->n_adm + 2] = (readmit != 0) | (pool << 1);
    r->adm_at[r->n_adm++] = at_ms;
    return AISIM_OK;
}

size_t plain_turn_lengths(uint32_t *lengths, size_t *n_last, int64_t len, int64_t block)
{
    int64_t runs = (len + block - 1) / block;
    if (*n_last < SIZE_MAX)
        lengths[*n_last] = (uint32_t)block;
    lengths[runs - 1] = (uint32_t)(len - (runs - 1) * block);
    *n_last = (size_t)(runs - 1);
    return (size_t)runs;
}

int plain_schedule_events(plain_requests *q, const plain_history *hist,
                          const int64_t *events, size_t n, double now_ms, int pool)
{
    size_t i;
    for (i = 0; i < n; i++) {
        const int64_t *f = events + AISIM_VLLM_EVENT_WIDTH * i;
        int64_t uuid = hist->slot_uuid[f[1]];
        if (f[0] == AISIM_VLLM_ADMITTED)
            PLAIN_TRY(plain_admitted_in(q, uuid, now_ms, f[2], f[3] != 0, pool));
        else
            plain_entry_of(q, uuid)->generated = f[4];
    }
    return AISIM_OK;
}

int plain_pass_end(const aisim_vllm_view *v, int32_t kind, double fixed_ms, double ratio,
                   int prefills, int decodes, double now_ms, double *end)
{
    double prefill = 0.0, decode = 0.0;
    if (prefills && v->pf_count) {
        int64_t count = v->pf_count;
        int status = aisim_prefill_timing_eval(kind, fixed_ms, ratio, count, v->pf_isl / count,
                                               v->pf_prefix / count, &prefill);
        if (status == AISIM_DECODE_MISS)
            return AISIM_PLAIN_TIMING;
        PLAIN_TRY(status);
    }
    if (decodes && v->dec_batch) {
        if (!v->decode_known)
            return AISIM_PLAIN_TIMING;
        decode = v->decode_ms;
    }
    *end = (now_ms + prefill) + decode;
    return AISIM_OK;
}

int plain_released(plain_requests *q, int64_t uuid, double arrival_ms, double at_ms)
{
    plain_records *r = &q->records;
    if (uuid >= q->settle_uuid) {
        plain_entry *e = plain_entry_of(q, uuid);
        e->stages |= PLAIN_STAGE_RELEASED;
        e->released = at_ms;
        return AISIM_OK;
    }
    if (!r->on)
        return AISIM_OK;
    PLAIN_TRY(aisim_grow((void **)&r->late_uuid, &r->late_uuid_cap, r->n_late + 1,
                         sizeof *r->late_uuid));
    PLAIN_TRY(aisim_grow((void **)&r->late_at, &r->late_at_cap, r->n_late + 1,
                         sizeof *r->late_at));
    PLAIN_TRY(aisim_grow((void **)&r->late_row, &r->late_row_cap, r->n_late + 1,
                         sizeof *r->late_row));
    r->late_uuid[r->n_late] = uuid;
    r->late_at[r->n_late] = at_ms;
    /* (a running stream made its dict when a later arrival settled: it stays without) */
    r->late_row[r->n_late++] = r->streamed && r->settled_arrival > arrival_ms ? -1
                                                                               : (int64_t)r->n;
    return AISIM_OK;
}

void plain_records_clear(plain_records *r)
{
    r->n = 0;
    r->n_adm = 0;
    r->n_late = 0;
    r->first_ms = NAN;
}

int plain_records_out(const plain_records *r, const int64_t **ints, const double **doubles,
                      size_t *n, const int64_t **adm_ints, const double **adm_at,
                      size_t *n_adm, size_t *rest_from)
{
    if (!ints || !doubles || !n || !adm_ints || !adm_at || !n_adm || !rest_from)
        return AISIM_EINVAL;
    *ints = r->ints;
    *doubles = r->doubles;
    *n = r->n;
    *adm_ints = r->adm_ints;
    *adm_at = r->adm_at;
    *n_adm = r->n_adm;
    *rest_from = r->rest_from < r->n ? r->rest_from : r->n;
    return AISIM_OK;
}

static void records_free(plain_records *r)
{
    free(r->ints);
    free(r->doubles);
    free(r->adm_ints);
    free(r->adm_at);
    free(r->late_uuid);
    free(r->late_at);
    free(r->late_row);
    r->ints = r->adm_ints = r->late_uuid = r->late_row = NULL;
    r->doubles = r->adm_at = r->late_at = NULL;
    r->n_late = r->late_uuid_cap = r->late_at_cap = r->late_row_cap = 0;
    r->n = r->n_adm = r->ints_cap = r->doubles_cap = r->adm_ints_cap = r->adm_at_cap = 0;
}

/* The record row of the entry of `uuid` (make_record's values). */
static int record(plain_records *r, int64_t uuid, const plain_entry *e)
{
    int64_t *row;
    double *d;
    size_t n_ints = r->disagg ? PLAIN_PD_REC_INTS : PLAIN_REC_INTS;
    size_t n_doubles = r->disagg ? PLAIN_PD_REC_DOUBLES : PLAIN_REC_DOUBLES;
    PLAIN_TRY(aisim_grow((void **)&r->ints, &r->ints_cap, n_ints * (r->n + 1),
                         sizeof *r->ints));
    PLAIN_TRY(aisim_grow((void **)&r->doubles, &r->doubles_cap, n_doubles * (r->n + 1),
                         sizeof *r->doubles));
    row = r->ints + n_ints * r->n;
    d = r->doubles + n_doubles * r->n;
    r->n++;
    row[0] = uuid;
    row[1] = e->prompt_len;
    row[2] = e->max_output;
    row[3] = e->has_first ? e->count : 0;
    row[4] = e->max_reused;
    row[5] = e->first_reused;
    row[6] = e->state;
    row[7] = e->rank;
    row[8] = e->session;
    row[9] = e->turn;
    row[10] = e->n_admissions;
    row[11] = e->admit_reused;
    row[12] = e->has_first | (e->has_second << 1) | (e->admit_readmit << 2);
    d[0] = e->arrival;
    d[1] = e->terminal;
    d[2] = e->has_first ? e->first : 0.0;
    d[3] = e->has_second ? e->second : 0.0;
    d[4] = e->has_first ? e->last : 0.0;
    d[5] = e->admit_at;
    if (r->disagg) {
        row[13] = e->stages & PLAIN_STAGE_ROUTED ? e->decode_rank : -1;
        row[14] = e->stages;
        row[15] = e->route_overlap[0];
        row[16] = e->route_best[0];
        row[17] = e->route_overlap[1];
        row[18] = e->route_best[1];
        d[6] = e->held;
        d[7] = e->reserved;
        d[8] = e->activated;
        d[9] = e->released;
    }
    return AISIM_OK;
}

/* Collector._settled and _Totals.add of the entry of the next uuid. */
static int settle(plain_requests *q, const plain_entry *e)
{
    const plain_requests *c = q;
    plain_totals *v = &q->totals;
    if (q->records.on) {
        PLAIN_TRY(record(&q->records, q->settle_uuid, e));
        q->records.settled_arrival = e->arrival;
    }
    if (!e->admitted)
        return AISIM_OK;
    v->fallback_committed += e->prompt_len > e->max_reused ? e->prompt_len - e->max_reused : 0;
    if (e->state != 1)
        return AISIM_OK;
    int64_t output = e->count;
    v->completed++;
    v->input_tokens += e->prompt_len;
    v->output_tokens += output;
    v->reused += e->max_reused;
    if (e->first_reused > 0)
        v->first_reused += e->first_reused;
    double end = e->terminal - c->report_start_ms;
    if (end > v->duration_ms)
        v->duration_ms = end;
    if (!e->has_first) {
        double e2e = e->terminal - e->arrival;
        if (!(e2e > 0.0))
            e2e = 0.0;
        /* _Sla.is_good_without_tokens */
        if ((c->has_ttft || c->has_itl || c->has_e2e) && !c->has_ttft && !c->has_itl &&
            c->has_e2e && e2e <= c->sla_e2e_ms)
            v->good++;
        return AISIM_OK;
    }
    double ttft = e->first - e->arrival;
    if (!(ttft > 0.0))
        ttft = 0.0;
    double e2e = e->last - e->arrival;
    if (!(e2e > 0.0))
        e2e = 0.0;
    PLAIN_TRY(push_sample(q, PLAIN_TTFT, ttft));
    PLAIN_TRY(push_sample(q, PLAIN_E2E, e2e));
    if (c->has_ttft || c->has_itl || c->has_e2e) {
        /* _Sla.is_good */
        int good = 1;
        if (c->has_e2e && e2e > c->sla_e2e_ms)
            good = 0;
        else if (c->has_ttft && ttft > c->sla_ttft_ms)
            good = 0;
        else if (c->has_itl && output > 1 &&
                 (e2e - ttft) / ((double)output - 1.0) > c->sla_itl_ms)
            good = 0;
        if (good) {
            v->good++;
            v->good_tokens += output;
        }
    }
    if (e->has_second) {
        double ttst = e->second - e->first;
        PLAIN_TRY(push_sample(q, PLAIN_TTST, ttst > 0.0 ? ttst : 0.0));
    }
    if (output > 1) {
        double span = e->last - e->first;
        PLAIN_TRY(push_sample(q, PLAIN_TPOT, (span > 0.0 ? span : 0.0) / (double)(output - 1)));
    }
    return AISIM_OK;
}

int plain_settle_ready(plain_requests *q)
{
    while (q->settle_uuid < q->next_uuid) {
        plain_entry *e = plain_entry_of(q, q->settle_uuid);
        if (!e->state)
            break;
        PLAIN_TRY(settle(q, e));
        q->settle_uuid++;
    }
    return AISIM_OK;
}

int plain_settle_rest(plain_requests *q)
{
    int64_t u;
    q->records.rest_from = q->records.n;
    for (u = q->settle_uuid; u < q->next_uuid; u++) {
        plain_entry *e = plain_entry_of(q, u);
        q->settle_uuid = u;   /* (the uuid settle reads) */
        if (e->state)
            PLAIN_TRY(settle(q, e));
    }
    q->settle_uuid = q->next_uuid;
    return AISIM_OK;
}

void plain_drop_samples(plain_requests *q, int32_t which)
{
    free(q->samples[which]);
    q->samples[which] = NULL;
    q->n_samples[which] = q->samples_cap[which] = 0;
}

/* stats.round_half_away and rank_index */
static size_t rank_index(size_t n, double percentile)
{
    double x = (double)(n - 1) * percentile / 100.0;
    double whole = floor(fabs(x));
    if (fabs(x) - whole >= 0.5)
        whole += 1.0;
    double rank = x >= 0 ? whole : -whole;
    size_t index = rank > 0 ? (size_t)rank : 0;
    return index < n - 1 ? index : n - 1;
}

static int ascending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts non-negative doubles ascending by their bits (the same order for them; the
 * summary's clamps give +0 only): an LSD radix sort, 16 bits a pass, through a scratch array
 * of the keys (bits move by memcpy: no aliasing of double and integer). Returns -1 (nothing
 * changed) for a negative value, a NaN, or no scratch memory: the caller sorts by comparison
 * instead. */
static int radix_sort(double *values, size_t n)
{
    uint64_t *scratch, key;
    size_t *counts, i;
    int pass;
    for (i = 0; i < n; i++) {
        memcpy(&key, &values[i], sizeof key);
        if (!(values[i] >= 0.0) || (key >> 63))
            return -1;
    }
    scratch = malloc(n * sizeof *scratch);
    counts = malloc(65536 * sizeof *counts);
    if (!scratch || !counts) {
        free(scratch);
        free(counts);
        return -1;
    }
    for (pass = 0; pass < 4; pass++) {
        /* even passes: values -> scratch; odd ones: back (so four end in values) */
        int shift = 16 * pass, back = pass & 1;
        size_t total = 0;
        memset(counts, 0, 65536 * sizeof *counts);
        for (i = 0; i < n; i++) {
            if (back)
                key = scratch[i];
            else
                memcpy(&key, &values[i], sizeof key);
            counts[(key >> shift) & 0xFFFF]++;
        }
        for (i = 0; i < 65536; i++) {
            size_t c = counts[i];
            counts[i] = total;
            total += c;
        }
        for (i = 0; i < n; i++) {
            size_t at;
            if (back)
                key = scratch[i];
            else
                memcpy(&key, &values[i], sizeof key);
            at = counts[(key >> shift) & 0xFFFF]++;
            if (back)
                memcpy(&values[at], &key, sizeof key);
            else
                scratch[at] = key;
        }
    }
    free(scratch);
    free(counts);
    return 0;
}

static double seq_sum(const double *values, size_t n)
{
    double total = 0.0;
    size_t i;
    for (i = 0; i < n; i++)
        total += values[i];
    return total;
}

int plain_sample_stats(plain_requests *p, int32_t which, double *out)
{
    static const double percentiles[5] = {50.0, 75.0, 90.0, 95.0, 99.0};
    double *values, centre, squares = 0.0;
    size_t n, i;
    if (!p || !out || which < 0 || which > 3)
        return AISIM_EINVAL;
    values = p->samples[which];
    n = p->n_samples[which];
    if (!n) {
        for (i = 0; i < 9; i++)
            out[i] = 0.0;
        return AISIM_OK;
    }
    out[0] = seq_sum(values, n) / (double)n;   /* the mean, in the summary's order */
    if (n < 4096 || radix_sort(values, n) != 0)
        qsort(values, n, sizeof *values, ascending);
    out[1] = values[0];
    out[2] = values[n - 1];
    for (i = 0; i < 5; i++)
        out[3 + i] = values[rank_index(n, percentiles[i])];
    /* population_std over the ascending order, as stats.exact_stats computes it */
    centre = seq_sum(values, n) / (double)n;
    for (i = 0; i < n; i++) {
        double centred = values[i] - centre;
        squares += centred * centred;
    }
    out[8] = sqrt(squares / (double)n);
    return AISIM_OK;
}

void plain_token_times(const double *ends, plain_entry *e, const int64_t *st, int64_t n)
{
    int64_t i, count = 0;
    e->has_first = 1;
    e->first = ends[st[0]];
    if (st[1] > st[0]) {
        e->second = ends[st[0] + 1];
        e->has_second = 1;
    } else if (n > 1) {
        e->second = ends[st[2]];
        e->has_second = 1;
    }
    e->last = ends[st[2 * n - 1]];
    for (i = 0; i < n; i++)
        count += st[2 * i + 1] - st[2 * i] + 1;
    e->count = count;
}

/* ------------------------------------------------------------ heaps and pass histories */

int plain_event_before(const plain_event *a, const plain_event *b)
{
    return a->time != b->time ? a->time < b->time : a->key < b->key;
}

int plain_heap_push(plain_heap *h, double time, int64_t key, int64_t value)
{
    size_t i;
    plain_event e = {time, key, value};
    PLAIN_TRY(aisim_grow((void **)&h->items, &h->cap, h->len + 1, sizeof *h->items));
    i = h->len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!plain_event_before(&e, &h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = e;
    return AISIM_OK;
}

plain_event plain_heap_pop(plain_heap *h)
{
    plain_event top = h->items[0];
    plain_event last = h->items[--h->len];
    size_t i = 0, n = h->len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && plain_event_before(&h->items[c + 1], &h->items[c]))
            c++;
        if (!plain_event_before(&h->items[c], &last))
            break;
        h->items[i] = h->items[c];
        i = c;
    }
    if (n)
        h->items[i] = last;
    return top;
}

void plain_history_free(plain_history *h)
{
    free(h->pass_ends);
    free(h->breaks);
    free(h->slot_uuid);
    h->pass_ends = NULL;
    h->breaks = NULL;
    h->slot_uuid = NULL;
}

int plain_history_take_slot(plain_history *h, int32_t slot, int64_t uuid)
{
    PLAIN_TRY(aisim_grow((void **)&h->slot_uuid, &h->slot_cap, (size_t)slot + 1,
                         sizeof *h->slot_uuid));
    h->slot_uuid[slot] = uuid;
    return AISIM_OK;
}

int plain_history_passes(plain_history *h, const double *ends, size_t n)
{
    PLAIN_TRY(aisim_grow((void **)&h->pass_ends, &h->pass_ends_cap, h->n_pass_ends + n,
                         sizeof(double)));
    memcpy(h->pass_ends + h->n_pass_ends, ends, n * sizeof(double));
    h->n_pass_ends += n;
    return AISIM_OK;
}

int plain_history_breaks(plain_history *h, const int64_t *st, int64_t b)
{
    int64_t k;
    if (b <= 1)
        return AISIM_OK;
    PLAIN_TRY(aisim_grow((void **)&h->breaks, &h->breaks_cap, h->n_breaks + 2 * (size_t)(b - 1),
                         sizeof *h->breaks));
    for (k = 1; k < b; k++) {
        h->breaks[h->n_breaks++] = st[2 * k - 1];
        h->breaks[h->n_breaks++] = st[2 * k];
    }
    return AISIM_OK;
}

size_t plain_bisect_left(const double *ends, size_t n, double t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ends[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t plain_bisect_right(const double *ends, size_t n, double t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t < ends[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void plain_fill_summary(aisim_plain_summary *out, const plain_requests *q)
{
    const plain_totals *t = &q->totals;
    out->completed = t->completed;
    out->input_tokens = t->input_tokens;
    out->output_tokens = t->output_tokens;
    out->reused = t->reused;
    out->first_reused = t->first_reused;
    out->good = t->good;
    out->good_tokens = t->good_tokens;
    out->fallback_committed = t->fallback_committed;
    out->duration_ms = t->duration_ms;
    out->ttft = q->samples[PLAIN_TTFT];
    out->e2e = q->samples[PLAIN_E2E];
    out->n_ttft = q->n_samples[PLAIN_TTFT];
    out->ttst = q->samples[PLAIN_TTST];
    out->n_ttst = q->n_samples[PLAIN_TTST];
    out->tpot = q->samples[PLAIN_TPOT];
    out->n_tpot = q->n_samples[PLAIN_TPOT];
}
