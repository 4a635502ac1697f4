/*
 * The reference's block sequence hashes (XXH3-64, seed 1337), the C twin of
 * aisimulate_core/kv/ref_hashes.py: the offload tiers key their blocks by these hashes because
 * the reference's host tier orders one transfer's blocks by them (FEATURES.md §5.2), so they
 * must be bit-exact XXH3, unlike hashing.c's own hash, where only equality matters.
 *
 * A block's own hash is XXH3-64 (seed 1337) of its tokens as little-endian u32; a later
 * block's sequence hash is XXH3-64 (seed 1337) of (previous sequence hash, own hash) as two
 * little-endian u64.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "ref_hashes.cdef.h"

#define P32_1 0x9E3779B1ULL
#define P32_2 0x85EBCA77ULL
#define P32_3 0xC2B2AE3DULL
#define P64_1 0x9E3779B185EBCA87ULL
#define P64_2 0xC2B2AE3D27D4EB4FULL
#define P64_3 0x165667B19E3779F9ULL
#define P64_4 0x85EBCA77C2B2AE63ULL
#define P64_5 0x27D4EB2F165667C5ULL
#define MX1 0x165667919E3779F9ULL
#define MX2 0x9FB21C651E98DF25ULL
#define SECRET_SIZE 192
#define REF_SEED 1337ULL
/* a block of up to this many tokens is hashed from a buffer on the stack */
#define STACK_TOKENS 1024

static const uint8_t SECRET[SECRET_SIZE] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

static uint64_t r64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t r32(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

static void w64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t fold(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#else
    uint64_t a_lo = a & 0xFFFFFFFFULL, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFULL, b_hi = b >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFULL) + lo_hi;
    uint64_t upper = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    uint64_t lower = (cross << 32) | (lo_lo & 0xFFFFFFFFULL);
    return lower ^ upper;
#endif
}

static uint64_t avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= MX1;
    return h ^ (h >> 32);
}

static uint64_t avalanche64(uint64_t h)
{
    h ^= h >> 33;
    h *= P64_2;
    h ^= h >> 29;
    h *= P64_3;
    return h ^ (h >> 32);
}

static uint64_t rotl(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t bswap64(uint64_t x)
{
    uint64_t y = 0;
    for (int i = 0; i < 8; i++, x >>= 8)
        y = (y << 8) | (x & 0xFF);
    return y;
}

static uint64_t bswap32(uint64_t x)
{
    return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | ((x >> 24) & 0xFF);
}

static uint64_t mix16(const uint8_t *d, const uint8_t *s, uint64_t seed)
{
    return fold(r64(d) ^ (r64(s) + seed), r64(d + 8) ^ (r64(s + 8) - seed));
}

static uint64_t xxh3_short(const uint8_t *d, size_t n, uint64_t seed)
{
    const uint8_t *s = SECRET;
    if (n > 8) {
        uint64_t lo = r64(d) ^ ((r64(s + 24) ^ r64(s + 32)) + seed);
        uint64_t hi = r64(d + n - 8) ^ ((r64(s + 40) ^ r64(s + 48)) - seed);
        return avalanche(n + bswap64(lo) + hi + fold(lo, hi));
    }
    if (n >= 4) {
        seed ^= bswap32(seed & 0xFFFFFFFFULL) << 32;
        uint64_t x = (r32(d + n - 4) + (r32(d) << 32)) ^ ((r64(s + 8) ^ r64(s + 16)) - seed);
        x ^= rotl(x, 49) ^ rotl(x, 24);
        x *= MX2;
        x ^= (x >> 35) + n;
        x *= MX2;
        return x ^ (x >> 28);
    }
    if (n) {
        uint64_t combined = ((uint64_t)d[0] << 16) | ((uint64_t)d[n >> 1] << 24) | d[n - 1] |
                            ((uint64_t)n << 8);
        return avalanche64(combined ^ ((r32(s) ^ r32(s + 4)) + seed));
    }
    return avalanche64(seed ^ r64(s + 56) ^ r64(s + 64));
}

static void accumulate(uint64_t *acc, const uint8_t *d, const uint8_t *s)
{
    for (int lane = 0; lane < 8; lane++) {
        uint64_t value = r64(d + 8 * lane);
        uint64_t key = value ^ r64(s + 8 * lane);
        acc[lane ^ 1] += value;
        acc[lane] += (key & 0xFFFFFFFFULL) * (key >> 32);
    }
}

static uint64_t xxh3_long(const uint8_t *d, size_t n, uint64_t seed)
{
    uint8_t secret[SECRET_SIZE];
    for (int i = 0; i < SECRET_SIZE / 16; i++) {
        w64(secret + 16 * i, r64(SECRET + 16 * i) + seed);
        w64(secret + 16 * i + 8, r64(SECRET + 16 * i + 8) - seed);
    }
    uint64_t acc[8] = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
    size_t stripes_per_block = (SECRET_SIZE - 64) / 8;
    size_t block_len = 64 * stripes_per_block;
    size_t blocks = (n - 1) / block_len;
    for (size_t b = 0; b < blocks; b++) {
        for (size_t k = 0; k < stripes_per_block; k++)
            accumulate(acc, d + b * block_len + 64 * k, secret + 8 * k);
        for (int lane = 0; lane < 8; lane++) {
            uint64_t a = acc[lane];
            a ^= a >> 47;
            a ^= r64(secret + SECRET_SIZE - 64 + 8 * lane);
            acc[lane] = a * P32_1;
        }
    }
    size_t stripes = ((n - 1) - block_len * blocks) / 64;
    for (size_t k = 0; k < stripes; k++)
        accumulate(acc, d + blocks * block_len + 64 * k, secret + 8 * k);
    accumulate(acc, d + n - 64, secret + SECRET_SIZE - 64 - 7);
    uint64_t result = n * P64_1;
    for (int i = 0; i < 4; i++)
        result += fold(acc[2 * i] ^ r64(secret + 11 + 16 * i),
                       acc[2 * i + 1] ^ r64(secret + 11 + 16 * i + 8));
    return avalanche(result);
}

uint64_t aisim_xxh3_64(const uint8_t *d, size_t n, uint64_t seed)
{
    const uint8_t *s = SECRET;
    if (n <= 16)
        return xxh3_short(d, n, seed);
    if (n <= 128) {
        uint64_t acc = n * P64_1;
        if (n > 32) {
            if (n > 64) {
                if (n > 96) {
                    acc += mix16(d + 48, s + 96, seed);
                    acc += mix16(d + n - 64, s + 112, seed);
                }
                acc += mix16(d + 32, s + 64, seed);
                acc += mix16(d + n - 48, s + 80, seed);
            }
            acc += mix16(d + 16, s + 32, seed);
            acc += mix16(d + n - 32, s + 48, seed);
        }
        acc += mix16(d, s, seed);
        acc += mix16(d + n - 16, s + 16, seed);
        return avalanche(acc);
    }
    if (n <= 240) {
        uint64_t acc = n * P64_1;
        for (size_t i = 0; i < 8; i++)
            acc += mix16(d + 16 * i, s + 16 * i, seed);
        acc = avalanche(acc);
        uint64_t end = mix16(d + n - 16, s + 136 - 17, seed);
        for (size_t i = 8; i < n / 16; i++)
            end += mix16(d + 16 * i, s + 16 * (i - 8) + 3, seed);
        return avalanche(acc + end);
    }
    return xxh3_long(d, n, seed);
}

static uint64_t pair_hash(uint64_t parent, uint64_t local)
{
    uint8_t pair[16];
    w64(pair, parent);
    w64(pair + 8, local);
    return aisim_xxh3_64(pair, 16, REF_SEED);
}

static void put_token(uint8_t *p, uint32_t token)
{
    p[0] = (uint8_t)token;
    p[1] = (uint8_t)(token >> 8);
    p[2] = (uint8_t)(token >> 16);
    p[3] = (uint8_t)(token >> 24);
}

int aisim_ref_seq_hashes(const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                         uint32_t block_size, uint64_t *out, size_t n_blocks)
{
    if (block_size == 0 || (size_t)block_size > SIZE_MAX / 4)
        return AISIM_EINVAL;
    size_t bytes = (size_t)block_size * 4;
    uint8_t stack[4 * STACK_TOKENS];
    uint8_t *buf = block_size <= STACK_TOKENS ? stack : malloc(bytes);
    if (buf == NULL)
        return AISIM_ENOMEM;
    size_t run = 0, used = 0, made = 0;
    uint64_t parent = 0;
    /* a run's whole blocks of one repeated token share their own hash: hashed once per run */
    int uniform_known = 0;
    uint64_t uniform_local = 0;
    size_t uniform_run = 0;
    int status = AISIM_OK;
    while (made < n_blocks) {
        while (run < n_runs && used == lengths[run]) {
            run++;
            used = 0;
        }
        if (run >= n_runs) {
            status = AISIM_EINVAL; /* fewer whole blocks than asked */
            break;
        }
        uint64_t local;
        if ((size_t)lengths[run] - used >= block_size) {
            if (!uniform_known || uniform_run != run) {
                for (size_t i = 0; i < block_size; i++)
                    put_token(buf + 4 * i, values[run]);
                uniform_local = aisim_xxh3_64(buf, bytes, REF_SEED);
                uniform_known = 1;
                uniform_run = run;
            }
            local = uniform_local;
            used += block_size;
        } else {
            size_t filled = 0;
            while (filled < block_size) {
                if (run >= n_runs) {
                    status = AISIM_EINVAL;
                    break;
                }
                size_t take = (size_t)lengths[run] - used;
                if (take > block_size - filled)
                    take = block_size - filled;
                for (size_t i = 0; i < take; i++)
                    put_token(buf + 4 * (filled + i), values[run]);
                filled += take;
                used += take;
                if (used == lengths[run] && filled < block_size) {
                    run++;
                    used = 0;
                }
            }
            if (status != AISIM_OK)
                break;
            local = aisim_xxh3_64(buf, bytes, REF_SEED);
        }
        parent = made == 0 ? local : pair_hash(parent, local);
        out[made++] = parent;
    }
    if (buf != stack)
        free(buf);
    return status;
}
