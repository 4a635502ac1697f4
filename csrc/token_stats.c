/* token_stats.c: the report's inter-token gaps, from the ranks' pass arrays to
 * the figures of the ITL and per-user rate distributions.
 *
 * The handle holds one count per distinct sample gap, in the order the gaps
 * were first seen (the order of the Python dict it replaces). A gap is a
 * sample when it is not NaN and not +inf; a negative gap, -inf and -0.0 count
 * as 0.0, which the reference clamps them to. Counts are added in 128-bit
 * two's complement, so no run of int64 additions can overflow on the way
 * (Python's integers do not either); a count handed back must fit an int64.
 *
 * summarize() reproduces aisimulate_core.stats.summarize_counts bit for bit:
 * for the pairs (value, count) with count > 0, the mean is
 * fsum(value * (double)count) / (double)total and m2 is
 * fsum((double)count * (value - mean) * (value - mean)), with CPython's
 * math.fsum algorithm (Shewchuk's partials and its half-even correction at
 * the end), so that the result is correctly rounded and identical to the
 * Python twin, errors included. The products are rounded before they are
 * summed: the build must not contract them into fused multiply-adds (the
 * flags in ffi_build.py do not enable FMA). The DDSketch's key of a value v
 * >= min_indexable is ceil(log(v) * multiplier) with the C library's log,
 * the one Python's math.log calls.
 *
 * Nothing here aborts or prints; on error nothing observable has changed
 * except view.failure, which every call resets and sets to say why it
 * returned AISIM_EINVAL.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "token_stats.cdef.h"

/* ---- 128-bit counts ------------------------------------------------------ */

typedef struct wide {
    uint64_t lo;
    uint64_t hi; /* two's complement high word */
} wide;

static void wide_add(wide *w, wide x)
{
    uint64_t lo = w->lo + x.lo;
    w->hi += x.hi + (lo < w->lo);
    w->lo = lo;
}

static wide wide_of(int64_t v)
{
    wide w;
    w.lo = (uint64_t)v;
    w.hi = v < 0 ? UINT64_MAX : 0;
    return w;
}

static int wide_is_zero(wide w)
{
    return w.lo == 0 && w.hi == 0;
}

static int wide_positive(wide w)
{
    return w.hi < (UINT64_C(1) << 63) && !wide_is_zero(w);
}

static int wide_fits(wide w)
{
    return (w.hi == 0 && w.lo < (UINT64_C(1) << 63))
        || (w.hi == UINT64_MAX && w.lo >= (UINT64_C(1) << 63));
}

static int64_t wide_value(wide w) /* for wide_fits(w) */
{
    int64_t v;
    memcpy(&v, &w.lo, sizeof v);
    return v;
}

/* ---- math.fsum --------------------------------------------------------- */

/* Partials never share a bit position and a double has 2098 of them (2^-1074
 * to 2^1023), so 2100 partials are always enough. */
#define FSUM_PARTIALS 2100

typedef struct fsum {
    size_t n;
    double special;
    double inf;
    int failure;
    double p[FSUM_PARTIALS];
} fsum;

static void fsum_start(fsum *f)
{
    f->n = 0;
    f->special = 0.0;
    f->inf = 0.0;
    f->failure = AISIM_TS_FINE;
}

static void fsum_add(fsum *f, double x)
{
    size_t i = 0, j;
    double xsave = x;
    if (f->failure)
        return; /* CPython stops at the first error */
    for (j = 0; j < f->n; j++) {
        double y = f->p[j], hi, yr, lo;
        if (fabs(x) < fabs(y)) {
            double t = x;
            x = y;
            y = t;
        }
        hi = x + y;
        yr = hi - x;
        lo = y - yr;
        if (lo != 0.0)
            f->p[i++] = lo;
        x = hi;
    }
    f->n = i;
    if (x != 0.0) {
        if (!isfinite(x)) {
            /* overflow of the running sum, or a summand that was not finite */
            if (isfinite(xsave)) {
                f->failure = AISIM_TS_FSUM_OVERFLOW;
                return;
            }
            if (isinf(xsave))
                f->inf += xsave;
            f->special += xsave;
            f->n = 0;
        } else {
            f->p[f->n++] = x;
        }
    }
}

static int fsum_result(fsum *f, double *out)
{
    size_t n = f->n;
    double hi = 0.0, lo = 0.0, x, y, yr;
    if (f->failure)
        return f->failure;
    if (f->special != 0.0) {
        if (isnan(f->inf))
            return AISIM_TS_FSUM_INF_NAN;
        *out = f->special;
        return AISIM_TS_FINE;
    }
    if (n > 0) {
        hi = f->p[--n];
        /* from the top, until the sum becomes inexact */
        while (n > 0) {
            x = hi;
            y = f->p[--n];
            hi = x + y;
            yr = hi - x;
            lo = y - yr;
            if (lo != 0.0)
                break;
        }
        /* half-even rounding across partials (CPython's correction) */
        if (n > 0 && ((lo < 0.0 && f->p[n - 1] < 0.0) || (lo > 0.0 && f->p[n - 1] > 0.0))) {
            y = lo * 2.0;
            x = hi + y;
            yr = x - hi;
            if (y == yr)
                hi = x;
        }
    }
    *out = hi;
    return AISIM_TS_FINE;
}

/* ---- the handle -------------------------------------------------------- */

typedef struct dist_arrays {
    int64_t *keys;
    int64_t *key_counts;
    double *low_values;
    int64_t *low_counts;
} dist_arrays;

/* One distinct sample gap; entries stay in first-seen order, and the value and its total
 * share a cache line for the lookup that finds them. */
typedef struct entry {
    double value;
    wide total;
} entry;

struct aisim_token_stats {
    entry *entries;   /* view.len of them */
    size_t cap;       /* entries allocated */
    uint32_t *slots;  /* open addressing: entry index + 1, 0 when free */
    size_t n_slots;   /* a power of two, at least twice cap, or 0 */
    size_t last;      /* the entry the last add went to (passes often repeat a gap) */
    dist_arrays itl_arrays, rate_arrays;
    fsum sum;
    aisim_ts_view view;
};

static const aisim_ts_dist EMPTY_DIST = {0, 0.0, 0.0, INFINITY, -INFINITY, 0, NULL, NULL,
                                         0, NULL, NULL};

static void free_arrays(dist_arrays *a)
{
    free(a->keys);
    free(a->key_counts);
    free(a->low_values);
    free(a->low_counts);
    memset(a, 0, sizeof *a);
}

int aisim_ts_new(aisim_token_stats **out)
{
    aisim_token_stats *s;
    if (out == NULL)
        return AISIM_EINVAL;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return AISIM_ENOMEM;
    s->view.itl = EMPTY_DIST;
    s->view.rate = EMPTY_DIST;
    *out = s;
    return AISIM_OK;
}

int aisim_ts_free(aisim_token_stats *s)
{
    if (s == NULL)
        return AISIM_OK;
    free(s->entries);
    free(s->slots);
    free_arrays(&s->itl_arrays);
    free_arrays(&s->rate_arrays);
    free(s);
    return AISIM_OK;
}

int aisim_ts_view_of(const aisim_token_stats *s, const aisim_ts_view **out)
{
    if (s == NULL || out == NULL)
        return AISIM_EINVAL;
    *out = &s->view;
    return AISIM_OK;
}

static int fail(aisim_token_stats *s, int failure)
{
    s->view.failure = failure;
    return AISIM_EINVAL;
}

static size_t slot_of(double v, size_t mask)
{
    uint64_t h;
    memcpy(&h, &v, sizeof h); /* samples are +0.0 or positive: equal values, equal bits */
    h ^= h >> 30;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 27;
    h *= UINT64_C(0x94d049bb133111eb);
    h ^= h >> 31;
    return (size_t)h & mask;
}

/* Room for `more` new entries, so that the adds after it cannot fail (the slots hold
 * uint32 entry numbers: more than 2^31 distinct gaps is refused as out of memory). */
static int reserve(aisim_token_stats *s, size_t more)
{
    size_t len = s->view.len, cap, n_slots, i;
    entry *entries;
    uint32_t *slots;
    if (more > ((size_t)1 << 31) - len)
        return AISIM_ENOMEM;
    if (len + more <= s->cap)
        return AISIM_OK;
    cap = s->cap ? s->cap : 64;
    while (cap < len + more)
        cap *= 2;
    n_slots = 2 * cap;
    entries = malloc(cap * sizeof *entries);
    slots = calloc(n_slots, sizeof *slots);
    if (entries == NULL || slots == NULL) {
        free(entries);
        free(slots);
        return AISIM_ENOMEM;
    }
    if (len)
        memcpy(entries, s->entries, len * sizeof *entries);
    for (i = 0; i < len; i++) {
        size_t slot = slot_of(entries[i].value, n_slots - 1);
        while (slots[slot])
            slot = (slot + 1) & (n_slots - 1);
        slots[slot] = (uint32_t)(i + 1);
    }
    free(s->entries);
    free(s->slots);
    s->entries = entries;
    s->slots = slots;
    s->cap = cap;
    s->n_slots = n_slots;
    return AISIM_OK;
}

/* Adds `count` gaps of `gap` ms if the gap is a sample. With `grow`, makes room for a new
 * entry when it needs one (AISIM_ENOMEM when it cannot); without, room was reserved. */
static int add_gap(aisim_token_stats *s, double gap, wide count, int grow)
{
    size_t mask, slot, found;
    if (!(gap > 0.0)) {
        if (gap != gap)
            return AISIM_OK;
        gap = 0.0;
    } else if (gap == INFINITY) {
        return AISIM_OK;
    }
    if (s->view.len && s->entries[s->last].value == gap) {
        wide_add(&s->entries[s->last].total, count);
        return AISIM_OK;
    }
    mask = s->n_slots - 1;
    for (slot = slot_of(gap, mask); (found = s->slots[slot]) != 0; slot = (slot + 1) & mask) {
        if (s->entries[found - 1].value == gap) {
            wide_add(&s->entries[found - 1].total, count);
            s->last = found - 1;
            return AISIM_OK;
        }
    }
    if (grow && s->view.len == s->cap) {
        int status = reserve(s, s->cap);
        if (status)
            return status;
        mask = s->n_slots - 1;
        for (slot = slot_of(gap, mask); s->slots[slot]; slot = (slot + 1) & mask)
            ;
    }
    s->last = s->view.len++;
    s->entries[s->last].value = gap;
    s->entries[s->last].total = count;
    s->slots[slot] = (uint32_t)(s->last + 1);
    return AISIM_OK;
}

/* Forgets every entry, keeping the allocations (a failed add into a fresh handle). */
static void clear(aisim_token_stats *s)
{
    if (s->n_slots)
        memset(s->slots, 0, s->n_slots * sizeof *s->slots);
    s->view.len = 0;
    s->last = 0;
}

int aisim_ts_add_passes(aisim_token_stats *s, const double *ends, size_t n_ends,
                        const int64_t *diff, size_t n_diff, const int64_t *breaks,
                        const int64_t *break_counts, size_t n_breaks)
{
    size_t n = n_ends > 0 ? n_ends - 1 : 0, i;
    wide running = {0, 0};
    int status, grow;
    if (s == NULL)
        return AISIM_EINVAL;
    s->view.failure = AISIM_TS_FINE;
    if ((n_ends && ends == NULL) || (n_diff && diff == NULL)
        || (n_breaks && (breaks == NULL || break_counts == NULL)))
        return AISIM_EINVAL;
    for (i = 0; i < 2 * n_breaks; i++)
        if (breaks[i] < 0 || (uint64_t)breaks[i] >= n_ends)
            return fail(s, AISIM_TS_BAD_BREAK);
    if (n_diff < n)
        n = n_diff;
    /* a fresh handle (one rank's) grows as distinct gaps come, and is emptied again if it
     * cannot; a handle holding gaps reserves room for the worst case first */
    grow = s->view.len == 0;
    if (grow)
        status = reserve(s, 1);
    else
        status = n_breaks > ((size_t)1 << 31) - n ? AISIM_ENOMEM : reserve(s, n + n_breaks);
    for (i = 0; i < n && !status; i++) {
        wide_add(&running, wide_of(diff[i]));
        if (!wide_is_zero(running))
            status = add_gap(s, ends[i + 1] - ends[i], running, grow);
    }
    for (i = 0; i < n_breaks && !status; i++)
        status = add_gap(s, ends[breaks[2 * i + 1]] - ends[breaks[2 * i]],
                         wide_of(break_counts[i]), grow);
    if (status && grow)
        clear(s);
    return status;
}

int aisim_ts_add_gaps(aisim_token_stats *s, const double *values, const int64_t *counts,
                      size_t n)
{
    size_t i;
    int status;
    if (s == NULL)
        return AISIM_EINVAL;
    s->view.failure = AISIM_TS_FINE;
    if (n && (values == NULL || counts == NULL))
        return AISIM_EINVAL;
    status = reserve(s, n);
    if (status)
        return status;
    for (i = 0; i < n; i++)
        add_gap(s, values[i], wide_of(counts[i]), 0);
    return AISIM_OK;
}

int aisim_ts_gaps(aisim_token_stats *s, double *values, int64_t *counts, size_t cap)
{
    size_t len, i;
    if (s == NULL)
        return AISIM_EINVAL;
    s->view.failure = AISIM_TS_FINE;
    len = s->view.len;
    if (cap < len || (len && (values == NULL || counts == NULL)))
        return AISIM_EINVAL;
    for (i = 0; i < len; i++)
        if (!wide_fits(s->entries[i].total))
            return fail(s, AISIM_TS_COUNT_OVERFLOW);
    for (i = 0; i < len; i++) {
        values[i] = s->entries[i].value;
        counts[i] = wide_value(s->entries[i].total);
    }
    return AISIM_OK;
}

/* ---- summary ------------------------------------------------------------ */

typedef struct key_count {
    int64_t key;
    int64_t count;
} key_count;

static int by_key(const void *a, const void *b)
{
    int64_t x = ((const key_count *)a)->key, y = ((const key_count *)b)->key;
    return (x > y) - (x < y);
}

/* The sample that entry e gives distribution `rate` (0: the gap itself, 1:
 * 1000 / gap); 0 when it gives none. */
static int sample(const aisim_token_stats *s, size_t e, int rate, double *x, int64_t *count)
{
    wide total = s->entries[e].total;
    double v = s->entries[e].value;
    if (!wide_positive(total))
        return 0;
    if (rate) {
        if (!(v > 0.0))
            return 0;
        v = 1000.0 / v;
        if (!isfinite(v))
            return 0;
    }
    *x = v;
    *count = wide_value(total); /* positive and <= the total, which fits */
    return 1;
}

static int summarize_one(aisim_token_stats *s, int rate, double multiplier,
                         double min_indexable, aisim_ts_dist *out, dist_arrays *arrays)
{
    size_t len = s->view.len, e, n_pos = 0, n_low = 0, n_keys = 0, i;
    int64_t total = 0, count, kmin = INT64_MAX, kmax = INT64_MIN;
    int64_t *pos_keys = NULL, *dense = NULL;
    key_count *sorted = NULL;
    uint64_t span = 0;
    double x, lowest = INFINITY, highest = -INFINITY, sum, centre, m2;
    int failure;
    dist_arrays a = {NULL, NULL, NULL, NULL};

    /* pass 1: the total (it bounds every count), the keys */
    for (e = 0; e < len; e++) {
        wide w = s->entries[e].total;
        double v = s->entries[e].value;
        if (rate && !(v > 0.0 && isfinite(1000.0 / v)))
            continue;
        if (!wide_positive(w))
            continue;
        if (!wide_fits(w) || wide_value(w) > INT64_MAX - total)
            return fail(s, AISIM_TS_COUNT_OVERFLOW);
        total += wide_value(w);
    }
    pos_keys = malloc((len ? len : 1) * sizeof *pos_keys);
    if (pos_keys == NULL)
        return AISIM_ENOMEM;
    for (e = 0; e < len; e++) {
        if (!sample(s, e, rate, &x, &count))
            continue;
        if (x >= min_indexable) {
            int64_t key = (int64_t)ceil(log(x) * multiplier);
            pos_keys[n_pos++] = key;
            if (key < kmin)
                kmin = key;
            if (key > kmax)
                kmax = key;
        } else {
            n_low++;
        }
    }
    if (n_pos)
        span = (uint64_t)kmax - (uint64_t)kmin + 1;
    a.keys = malloc((n_pos ? n_pos : 1) * sizeof *a.keys);
    a.key_counts = malloc((n_pos ? n_pos : 1) * sizeof *a.key_counts);
    a.low_values = malloc((n_low ? n_low : 1) * sizeof *a.low_values);
    a.low_counts = malloc((n_low ? n_low : 1) * sizeof *a.low_counts);
    /* keys are counted in a dense array when their span is not much larger than their
     * number (ms gaps: a few thousand keys), else sorted */
    if (n_pos && span <= 2 * (uint64_t)n_pos + 65536)
        dense = calloc((size_t)span, sizeof *dense);
    else if (n_pos)
        sorted = malloc(n_pos * sizeof *sorted);
    if (a.keys == NULL || a.key_counts == NULL || a.low_values == NULL
        || a.low_counts == NULL || (n_pos && dense == NULL && sorted == NULL)) {
        free(pos_keys);
        free(dense);
        free(sorted);
        free_arrays(&a);
        return AISIM_ENOMEM;
    }

    /* pass 2: bins, low values, extremes, the sum */
    fsum_start(&s->sum);
    n_pos = n_low = 0;
    for (e = 0; e < len; e++) {
        if (!sample(s, e, rate, &x, &count))
            continue;
        if (x >= min_indexable) {
            if (dense)
                dense[pos_keys[n_pos] - kmin] += count;
            else
                sorted[n_pos] = (key_count){pos_keys[n_pos], count};
            n_pos++;
        } else {
            a.low_values[n_low] = x;
            a.low_counts[n_low++] = count;
        }
        if (x < lowest)
            lowest = x;
        if (x > highest)
            highest = x;
        fsum_add(&s->sum, x * (double)count);
    }
    free(pos_keys);
    if (dense) {
        for (i = 0; i < (size_t)span; i++) {
            if (dense[i]) {
                a.keys[n_keys] = kmin + (int64_t)i;
                a.key_counts[n_keys++] = dense[i];
            }
        }
        free(dense);
    } else if (sorted) {
        qsort(sorted, n_pos, sizeof *sorted, by_key);
        for (i = 0; i < n_pos; i++) {
            if (n_keys && a.keys[n_keys - 1] == sorted[i].key) {
                a.key_counts[n_keys - 1] += sorted[i].count;
            } else {
                a.keys[n_keys] = sorted[i].key;
                a.key_counts[n_keys++] = sorted[i].count;
            }
        }
        free(sorted);
    }

    sum = centre = m2 = 0.0;
    failure = AISIM_TS_FINE;
    if (total) {
        failure = fsum_result(&s->sum, &sum);
        if (!failure) {
            /* pass 3: the centred squares */
            centre = sum / (double)total;
            fsum_start(&s->sum);
            for (e = 0; e < len; e++) {
                if (sample(s, e, rate, &x, &count))
                    fsum_add(&s->sum, (double)count * (x - centre) * (x - centre));
            }
            failure = fsum_result(&s->sum, &m2);
        }
    }
    if (failure) {
        free_arrays(&a);
        return fail(s, failure);
    }
    *arrays = a;
    out->count = total;
    out->mean = centre;
    out->m2 = m2;
    out->min = lowest;
    out->max = highest;
    out->n_keys = n_keys;
    out->keys = a.keys;
    out->key_counts = a.key_counts;
    out->n_low = n_low;
    out->low_values = a.low_values;
    out->low_counts = a.low_counts;
    return AISIM_OK;
}

int aisim_ts_summarize(aisim_token_stats *s, double multiplier, double min_indexable)
{
    aisim_ts_dist itl, rate;
    dist_arrays itl_arrays, rate_arrays;
    int status;
    if (s == NULL)
        return AISIM_EINVAL;
    s->view.failure = AISIM_TS_FINE;
    /* |log| of a double is below 745: keys stay far inside an int64 */
    if (!(multiplier > 0.0 && multiplier <= 4503599627370496.0 /* 2^52 */)
        || !(min_indexable > 0.0 && isfinite(min_indexable)))
        return fail(s, AISIM_TS_BAD_SKETCH);
    status = summarize_one(s, 0, multiplier, min_indexable, &itl, &itl_arrays);
    if (status)
        return status;
    status = summarize_one(s, 1, multiplier, min_indexable, &rate, &rate_arrays);
    if (status) {
        free_arrays(&itl_arrays);
        return status;
    }
    free_arrays(&s->itl_arrays);
    free_arrays(&s->rate_arrays);
    s->itl_arrays = itl_arrays;
    s->rate_arrays = rate_arrays;
    s->view.itl = itl;
    s->view.rate = rate;
    return AISIM_OK;
}
