/*
 * decode_run.c: the hot loop of a vLLM rank's decode-only run, and the
 * decode timing it needs per pass, bit for bit as the Python twin
 * (engine/decode_run.py, engine/timing.py).
 *
 * Modeled times follow timing.modeled_ms: the raw model time in ms becomes
 * whole nanoseconds as Rust's Duration::from_secs_f64 is emulated there (a
 * rounded product, made exact near half a nanosecond), is optionally scaled
 * by the speedup ratio the same way, and is read back as Duration::as_secs_f64
 * in ms. Anything the twin would compute with Python's unbounded integers
 * (values beyond 2^53 or 2^63) is not attempted here: the pass is reported as
 * a memo miss and Python computes (or raises) it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "decode_run.cdef.h"

#define EXACT_LIMIT 9007199254740992.0   /* 2^53 */
#define NANOS_LIMIT 9223372036854775808.0 /* 2^63: the nanos this file keeps in int64 */

typedef struct memo_slot {
    int64_t batch;   /* 0 marks an empty slot (a batch is never empty) */
    int64_t active;
    double ms;
} memo_slot;

struct aisim_decode_timing {
    int kind;
    double fixed_ms;
    double ratio;
    int64_t total_kv;
    size_t limit;      /* at most this many memo entries (bounded memory) */
    size_t used;
    size_t mask;       /* slots - 1; 0 while no slot is allocated */
    memo_slot *slots;
};

/* ---- Rust Duration arithmetic, as engine/timing.py emulates it ---- */

/* timing._nanos: nearest whole nanosecond of seconds; 0 on success, -1 when the
 * twin would need integers past 2^63 (or raise). */
static int nanos_of(double seconds, int64_t *out)
{
    double scaled = seconds * 1e9;
    if (!(scaled < NANOS_LIMIT) || !(scaled >= 0.0))
        return -1;
    double whole = floor(scaled);
    double frac = scaled - whole;
    if (fabs(frac - 0.5) > 1e-4) {
        *out = (int64_t)whole + (frac > 0.5 ? 1 : 0);
        return 0;
    }
    /* exactly: seconds = mant * 2^exp, nanos = round_half_up(mant * 1e9 * 2^exp) */
    int exp2;
    double m = frexp(seconds, &exp2);
    uint64_t mant = (uint64_t)ldexp(m, 53);
    exp2 -= 53;
    unsigned __int128 product = (unsigned __int128)mant * 1000000000u;
    unsigned __int128 nanos;
    if (exp2 >= 0) {
        if (exp2 > 40)
            return -1;
        nanos = product << exp2;
    } else {
        int shift = -exp2;
        if (shift >= 100) {
            nanos = 0;   /* product < 2^83: far below half a nanosecond */
        } else {
            unsigned __int128 one = 1;
            unsigned __int128 rest = product & ((one << shift) - 1);
            nanos = (product >> shift) + (rest >= (one << (shift - 1)) ? 1 : 0);
        }
    }
    if (nanos >= ((unsigned __int128)1 << 63))
        return -1;
    *out = (int64_t)nanos;
    return 0;
}

/* timing._secs */
static double secs_of(int64_t nanos)
{
    return (double)(nanos / 1000000000) + (double)(nanos % 1000000000) / 1e9;
}

/* timing.modeled_ms */
static int modeled(double raw_ms, double ratio, double *out)
{
    int64_t d;
    if (nanos_of(raw_ms / 1000.0, &d) != 0)
        return -1;
    if (ratio > 0 && ratio != 1.0 && d > 0) {
        if (nanos_of(secs_of(d) / ratio, &d) != 0)
            return -1;
    }
    *out = secs_of(d) * 1000.0;
    return 0;
}

/* The built-in model's raw decode time (timing.FixedTiming / PolynomialTiming), then
 * StepTimer.decode's checks and scaling. */
static int builtin_ms(const aisim_decode_timing *t, int64_t batch, int64_t active, double *out)
{
    double raw;
    if (t->kind == AISIM_DECODE_FIXED) {
        raw = t->fixed_ms;
    } else if (t->kind == AISIM_DECODE_POLYNOMIAL) {
        double p;
        if (t->total_kv <= 0) {
            p = 1.0;
        } else {
            /* Python's int / int is correctly rounded; so is this while both are exact */
            if ((double)active >= EXACT_LIMIT || (double)active <= -EXACT_LIMIT ||
                (double)t->total_kv >= EXACT_LIMIT)
                return -1;
            p = (double)active / (double)t->total_kv;
            if (p > 1.0)
                p = 1.0;
        }
        raw = -25.74 * (p * p) + 54.01 * p + 5.74;
        if (raw < 1.0)
            raw = 1.0;
    } else {
        return -1;
    }
    if (!isfinite(raw) || raw < 0)
        return -1;
    (void)batch;
    return modeled(raw, t->ratio, out);
}

/* ---- the memo: open addressing on (batch, active) ---- */

static size_t slot_of(const aisim_decode_timing *t, int64_t batch, int64_t active)
{
    uint64_t h = (uint64_t)active * 0x9E3779B97F4A7C15ull ^ (uint64_t)batch * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (size_t)h & t->mask;
}

static int memo_get(const aisim_decode_timing *t, int64_t batch, int64_t active, double *out)
{
    if (t->mask == 0)
        return -1;
    for (size_t i = slot_of(t, batch, active);; i = (i + 1) & t->mask) {
        const memo_slot *s = &t->slots[i];
        if (s->batch == 0)
            return -1;
        if (s->batch == batch && s->active == active) {
            *out = s->ms;
            return 0;
        }
    }
}

static int memo_grow(aisim_decode_timing *t)
{
    size_t slots = t->mask ? (t->mask + 1) * 2 : 1024;
    memo_slot *fresh = calloc(slots, sizeof(memo_slot));
    if (fresh == NULL)
        return AISIM_ENOMEM;
    memo_slot *old = t->slots;
    size_t old_slots = t->mask ? t->mask + 1 : 0;
    t->slots = fresh;
    t->mask = slots - 1;
    for (size_t i = 0; i < old_slots; i++) {
        if (old[i].batch != 0) {
            size_t j = slot_of(t, old[i].batch, old[i].active);
            while (fresh[j].batch != 0)
                j = (j + 1) & t->mask;
            fresh[j] = old[i];
        }
    }
    free(old);
    return AISIM_OK;
}

int aisim_decode_timing_new(aisim_decode_timing **out, int kind, double fixed_ms,
                            double ratio, int64_t total_kv_tokens, size_t memo_limit)
{
    if (out == NULL || kind < AISIM_DECODE_MEMO || kind > AISIM_DECODE_POLYNOMIAL)
        return AISIM_EINVAL;
    aisim_decode_timing *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return AISIM_ENOMEM;
    t->kind = kind;
    t->fixed_ms = fixed_ms;
    t->ratio = ratio;
    t->total_kv = total_kv_tokens;
    t->limit = memo_limit;
    *out = t;
    return AISIM_OK;
}

int aisim_decode_timing_free(aisim_decode_timing *t)
{
    if (t != NULL) {
        free(t->slots);
        free(t);
    }
    return AISIM_OK;
}

int aisim_decode_timing_put(aisim_decode_timing *t, int64_t batch, int64_t active, double ms)
{
    if (t == NULL || batch <= 0)
        return AISIM_EINVAL;
    double known;
    if (memo_get(t, batch, active, &known) == 0 || t->used >= t->limit)
        return AISIM_OK;   /* full: the run asks Python again, memory stays bounded */
    /* at most half full */
    if (t->mask == 0 || (t->used + 1) * 2 > t->mask + 1) {
        int status = memo_grow(t);
        if (status != AISIM_OK)
            return status;
    }
    size_t i = slot_of(t, batch, active);
    while (t->slots[i].batch != 0)
        i = (i + 1) & t->mask;
    t->slots[i].batch = batch;
    t->slots[i].active = active;
    t->slots[i].ms = ms;
    t->used++;
    return AISIM_OK;
}

static int pass_ms(const aisim_decode_timing *t, int64_t batch, int64_t active, double *out)
{
    if (builtin_ms(t, batch, active, out) == 0)
        return 0;
    return memo_get(t, batch, active, out);
}

int aisim_decode_timing_eval(const aisim_decode_timing *t, int64_t batch, int64_t active,
                             double *out_ms)
{
    if (t == NULL || out_ms == NULL || batch <= 0)
        return AISIM_EINVAL;
    return pass_ms(t, batch, active, out_ms) == 0 ? AISIM_OK : AISIM_DECODE_MISS;
}

/* timing.StepTimer.prefill over FixedTiming / PolynomialTiming (declared in
 * plain_loop.cdef.h, whose C loop charges prefill itself): the same operations in the same
 * order, then the same Duration rounding as the decode models. */
int aisim_prefill_timing_eval(int32_t kind, double fixed_ms, double ratio, int64_t batch,
                              int64_t mean_isl, int64_t mean_prefix, double *out_ms)
{
    double raw;
    if (out_ms == NULL)
        return AISIM_EINVAL;
    if (batch <= 0 || mean_isl <= mean_prefix) {
        *out_ms = 0.0;
        return AISIM_OK;
    }
    if (kind == AISIM_DECODE_FIXED) {
        raw = fixed_ms;
    } else if (kind == AISIM_DECODE_POLYNOMIAL) {
        /* batch * (isl - prefix) as Python's integers, then float(): exact below 2^53 */
        if (mean_isl - mean_prefix > INT64_MAX / batch)
            return AISIM_DECODE_MISS;
        int64_t new_tokens = batch * (mean_isl - mean_prefix);
        double t = (double)new_tokens;
        if (t >= EXACT_LIMIT)
            return AISIM_DECODE_MISS;
        raw = 4.209989e-7 * (t * t) + 1.518344e-2 * t + 16.50142;
    } else {
        return AISIM_EINVAL;
    }
    if (!isfinite(raw))
        return AISIM_DECODE_MISS;
    return modeled(raw > 0.0 ? raw : 0.0, ratio, out_ms) == 0 ? AISIM_OK : AISIM_DECODE_MISS;
}

/* ---- the run ---- */

static size_t lower_bound(const int64_t *keys, size_t n, int64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int aisim_decode_extend(const aisim_decode_timing *t, aisim_decode_run *run, double *ends,
                        size_t cap)
{
    if (t == NULL || run == NULL || ends == NULL || run->block_size <= 0 || run->batch <= 0 ||
        run->n_ends == 0 || run->n_ends > cap ||
        (run->n_crossing > 0 && (run->crossing_keys == NULL || run->crossing_counts == NULL)))
        return AISIM_EINVAL;
    const int64_t bs = run->block_size;
    const int64_t batch = run->batch;
    const int64_t *keys = run->crossing_keys;
    const size_t nk = run->n_crossing;
    int64_t P = run->pass_;
    int64_t offset = P % bs;
    size_t k = lower_bound(keys, nk, offset);
    double end = run->end_ms;
    int64_t room = run->room;
    size_t n_ends = run->n_ends;
    int status = AISIM_OK;
    for (; P < run->last_pass; P++) {
        if (end >= run->horizon_ms || n_ends >= cap)
            break;
        int64_t need = (k < nk && keys[k] == offset) ? run->crossing_counts[k] : 0;
        if (need > room)
            break;
        int64_t active = run->base + batch * P;
        double step;
        if (pass_ms(t, batch, active, &step) != 0) {
            run->miss_batch = batch;
            run->miss_active = active;
            status = AISIM_DECODE_MISS;
            break;
        }
        double next = end + step;
        if (next > run->cutoff_ms)
            break;
        room -= need;
        end = next;
        ends[n_ends++] = end;
        if (P == run->stop_pass) {
            P++;
            break;
        }
        if (need)
            k++;
        if (++offset == bs) {
            offset = 0;
            k = 0;
        } else if (k < nk && keys[k] < offset) {
            k = lower_bound(keys, nk, offset);
        }
    }
    run->pass_ = P;
    run->room = room;
    run->end_ms = end;
    run->n_ends = n_ends;
    return status;
}
