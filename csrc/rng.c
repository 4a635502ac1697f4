/* StdRng as the reference's Rust code sees it (rand 0.9.x, rand_chacha 0.9,
 * rand_core 0.9): ChaCha with 12 rounds, 32-byte key, 64-bit block counter
 * from 0 in words 12..13, stream 0 in words 14..15. rand_chacha refills a
 * buffer of four consecutive blocks (64 words) at a time; next_u32 takes the
 * next word and next_u64 two words low-then-high, the high word coming from
 * a fresh buffer when only one word was left. seed_from_u64 fills the key
 * with rand_core's PCG32 stream (state advanced before each output). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "rng.cdef.h"

#define BUFFER_WORDS 64

struct aisim_rng {
    uint32_t key[8];
    uint64_t counter;
    uint32_t rounds;
    uint32_t index;
    uint32_t buffer[BUFFER_WORDS];
    aisim_rng_view view;
};

static uint32_t rotl32(uint32_t x, unsigned n)
{
    return (x << n) | (x >> (32 - n));
}

#define QUARTER(a, b, c, d)                  \
    do {                                     \
        s[a] += s[b];                        \
        s[d] = rotl32(s[d] ^ s[a], 16);      \
        s[c] += s[d];                        \
        s[b] = rotl32(s[b] ^ s[c], 12);      \
        s[a] += s[b];                        \
        s[d] = rotl32(s[d] ^ s[a], 8);       \
        s[c] += s[d];                        \
        s[b] = rotl32(s[b] ^ s[c], 7);       \
    } while (0)

static void chacha_block(const aisim_rng *r, uint64_t counter, uint32_t *out)
{
    uint32_t init[16], s[16];
    uint32_t i;
    init[0] = 0x61707865u; /* "expand 32-byte k" */
    init[1] = 0x3320646eu;
    init[2] = 0x79622d32u;
    init[3] = 0x6b206574u;
    memcpy(init + 4, r->key, sizeof r->key);
    init[12] = (uint32_t)counter;
    init[13] = (uint32_t)(counter >> 32);
    init[14] = 0;
    init[15] = 0;
    memcpy(s, init, sizeof s);
    for (i = 0; i < r->rounds; i += 2) {
        QUARTER(0, 4, 8, 12);
        QUARTER(1, 5, 9, 13);
        QUARTER(2, 6, 10, 14);
        QUARTER(3, 7, 11, 15);
        QUARTER(0, 5, 10, 15);
        QUARTER(1, 6, 11, 12);
        QUARTER(2, 7, 8, 13);
        QUARTER(3, 4, 9, 14);
    }
    for (i = 0; i < 16; i++)
        out[i] = s[i] + init[i];
}

static void refill(aisim_rng *r)
{
    uint32_t b;
    for (b = 0; b < BUFFER_WORDS / 16; b++)
        chacha_block(r, r->counter + b, r->buffer + 16 * b);
    r->counter += BUFFER_WORDS / 16;
    r->index = 0;
}

static uint32_t take_u32(aisim_rng *r)
{
    if (r->index >= BUFFER_WORDS)
        refill(r);
    return r->buffer[r->index++];
}

static uint64_t take_u64(aisim_rng *r)
{
    uint64_t low, high;
    if (r->index + 1 < BUFFER_WORDS) {
        low = r->buffer[r->index];
        high = r->buffer[r->index + 1];
        r->index += 2;
    } else if (r->index >= BUFFER_WORDS) {
        refill(r);
        low = r->buffer[0];
        high = r->buffer[1];
        r->index = 2;
    } else {
        low = r->buffer[BUFFER_WORDS - 1];
        refill(r);
        high = r->buffer[0];
        r->index = 1;
    }
    return (high << 32) | low;
}

static double take_f64(aisim_rng *r)
{
    /* rand's StandardUniform for f64: 53 high bits scaled into [0, 1) */
    return (double)(take_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

static void reset(aisim_rng *r, uint32_t rounds)
{
    r->counter = 0;
    r->rounds = rounds;
    r->index = BUFFER_WORDS; /* empty: the first draw generates */
}

int aisim_rng_new(aisim_rng **out)
{
    aisim_rng *r;
    if (!out)
        return AISIM_EINVAL;
    r = calloc(1, sizeof *r);
    if (!r)
        return AISIM_ENOMEM;
    reset(r, 12);
    *out = r;
    return AISIM_OK;
}

int aisim_rng_free(aisim_rng *r)
{
    free(r);
    return AISIM_OK;
}

int aisim_rng_seed_u64(aisim_rng *r, uint64_t seed)
{
    uint64_t state = seed;
    uint32_t i;
    if (!r)
        return AISIM_EINVAL;
    for (i = 0; i < 8; i++) {
        uint32_t xorshifted, rot;
        state = state * 6364136223846793005ull + 11634580027462260723ull;
        xorshifted = (uint32_t)(((state >> 18) ^ state) >> 27);
        rot = (uint32_t)(state >> 59);
        r->key[i] = (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
    }
    reset(r, 12);
    return AISIM_OK;
}

int aisim_rng_seed_bytes(aisim_rng *r, const uint8_t *seed32, uint32_t rounds)
{
    uint32_t i;
    if (!r || !seed32 || rounds == 0 || rounds % 2)
        return AISIM_EINVAL;
    for (i = 0; i < 8; i++)
        r->key[i] = (uint32_t)seed32[4 * i] | (uint32_t)seed32[4 * i + 1] << 8 |
                    (uint32_t)seed32[4 * i + 2] << 16 | (uint32_t)seed32[4 * i + 3] << 24;
    reset(r, rounds);
    return AISIM_OK;
}

int aisim_rng_copy(aisim_rng *dst, const aisim_rng *src)
{
    if (!dst || !src)
        return AISIM_EINVAL;
    if (dst != src)
        *dst = *src;
    return AISIM_OK;
}

int aisim_rng_view_of(const aisim_rng *r, const aisim_rng_view **out)
{
    if (!r || !out)
        return AISIM_EINVAL;
    *out = &r->view;
    return AISIM_OK;
}

int aisim_rng_next_u32(aisim_rng *r)
{
    if (!r)
        return AISIM_EINVAL;
    r->view.last_u32 = take_u32(r);
    return AISIM_OK;
}

int aisim_rng_next_u64(aisim_rng *r)
{
    if (!r)
        return AISIM_EINVAL;
    r->view.last_u64 = take_u64(r);
    return AISIM_OK;
}

int aisim_rng_next_f64(aisim_rng *r)
{
    if (!r)
        return AISIM_EINVAL;
    r->view.last_f64 = take_f64(r);
    return AISIM_OK;
}

int aisim_rng_fill_u32(aisim_rng *r, uint32_t *out, size_t n)
{
    size_t i;
    if (!r || (!out && n))
        return AISIM_EINVAL;
    for (i = 0; i < n; i++)
        out[i] = take_u32(r);
    return AISIM_OK;
}

/* rand 0.9 sample_single for integers is Canon's method (biased variant,
 * the default without the `unbiased` feature): one widening multiply, and
 * a second draw only when the low half lands in the top `range` values. */
int aisim_rng_range_u32(aisim_rng *r, uint32_t low, uint32_t high)
{
    uint32_t range, result, low_half;
    uint64_t product;
    if (!r || low >= high)
        return AISIM_EINVAL;
    range = high - low;
    product = (uint64_t)take_u32(r) * range;
    result = (uint32_t)(product >> 32);
    low_half = (uint32_t)product;
    if (low_half > 0u - range) {
        uint32_t carry_in = (uint32_t)(((uint64_t)take_u32(r) * range) >> 32);
        if ((uint64_t)low_half + carry_in > UINT32_MAX)
            result++;
    }
    r->view.last_u32 = low + result;
    return AISIM_OK;
}

static void widening_mul64(uint64_t a, uint64_t b, uint64_t *high, uint64_t *low)
{
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t middle = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    *low = (middle << 32) | (uint32_t)ll;
    *high = hh + (lh >> 32) + (hl >> 32) + (middle >> 32);
}

int aisim_rng_range_u64(aisim_rng *r, uint64_t low, uint64_t high)
{
    uint64_t range, result, low_half, carry_in, ignored;
    if (!r || low >= high)
        return AISIM_EINVAL;
    range = high - low;
    widening_mul64(take_u64(r), range, &result, &low_half);
    if (low_half > 0ull - range) {
        widening_mul64(take_u64(r), range, &carry_in, &ignored);
        if (low_half + carry_in < low_half)
            result++;
    }
    r->view.last_u64 = low + result;
    return AISIM_OK;
}

/* ln(DBL_MIN) is about -708, so this bound keeps every sample finite */
#define MAX_MEAN (DBL_MAX / 1024.0)

/* The reference's exponential sample: no draw at all when the mean is 0,
 * else -mean * ln(u) with u = 1 - f64 clamped to [DBL_MIN, 1]. */
static double exponential(aisim_rng *r, double mean)
{
    double u;
    if (mean == 0.0)
        return 0.0;
    u = 1.0 - take_f64(r);
    if (u < DBL_MIN)
        u = DBL_MIN;
    if (u > 1.0)
        u = 1.0;
    return -mean * log(u);
}

int aisim_rng_exponential(aisim_rng *r, double mean)
{
    if (!r || !(mean >= 0.0) || mean > MAX_MEAN)
        return AISIM_EINVAL;
    r->view.last_f64 = exponential(r, mean);
    return AISIM_OK;
}

/* Trace::synthetic's PoissonQps schedule: the first arrival is at 0 and
 * draws nothing; every later one adds an exponential gap. */
int aisim_rng_poisson_arrivals(aisim_rng *r, size_t n, double mean_gap_ms, double *out)
{
    double now_ms = 0.0;
    size_t i;
    if (!r || (!out && n) || !(mean_gap_ms >= 0.0) || mean_gap_ms > MAX_MEAN)
        return AISIM_EINVAL;
    for (i = 0; i < n; i++) {
        if (i > 0)
            now_ms += exponential(r, mean_gap_ms);
        out[i] = now_ms;
    }
    return AISIM_OK;
}
