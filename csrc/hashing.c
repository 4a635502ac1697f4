/* Block hashing with the reference's chaining rule but our own 64-bit hash:
 *   local_i = H_block(tokens of complete block i)
 *   seq_0   = local_0, or H_pair(parent, local_0) when continuing a chain
 *   seq_i   = H_pair(seq_{i-1}, local_i)
 * The hashes only identify blocks (nothing outside this project reads
 * them), so XXH3 compatibility is not needed; what matters is a fast,
 * well-mixed function that the Python twin can reproduce bit for bit with
 * plain integers. The mixer is the folded 64x64->128 multiply popularised
 * by wyhash; the state is fed into both operands so that no single input
 * word can zero ("blind") the accumulated history. */
#include <stdlib.h>

#include "aisim.h"

#define SEED 1337u
#define K0 0xa0761d6478bd642full
#define K1 0xe7037ed1a0b428dbull
#define K2 0x8ebc6af09c88c6e3ull
#define K3 0x589965cc75374cc3ull
#define K4 0x1d8e4e27c47d124full
#define K5 0x9e3779b97f4a7c15ull
#define K6 0xc2b2ae3d27d4eb4full

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 wide_product;

static uint64_t fold_mul(uint64_t a, uint64_t b)
{
    wide_product product = (wide_product)a * b;
    return (uint64_t)product ^ (uint64_t)(product >> 64);
}
#else
static uint64_t fold_mul(uint64_t a, uint64_t b)
{
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t middle = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    uint64_t low = (middle << 32) | (uint32_t)ll;
    uint64_t high = hh + (lh >> 32) + (hl >> 32) + (middle >> 32);
    return low ^ high;
}
#endif

static uint64_t rotl64(uint64_t x, unsigned n)
{
    return (x << n) | (x >> (64 - n));
}

static uint64_t block_hash(const uint32_t *tokens, uint32_t n)
{
    uint64_t state = fold_mul(SEED ^ K0, (uint64_t)n ^ K1);
    uint32_t i;
    for (i = 0; i < n; i += 4) {
        /* four tokens per step, zero-padded: n is mixed in, so padding is unambiguous */
        uint64_t t0 = tokens[i];
        uint64_t t1 = i + 1 < n ? tokens[i + 1] : 0;
        uint64_t t2 = i + 2 < n ? tokens[i + 2] : 0;
        uint64_t t3 = i + 3 < n ? tokens[i + 3] : 0;
        uint64_t a = t0 | t1 << 32, b = t2 | t3 << 32;
        state = fold_mul(a ^ state ^ K1, b ^ rotl64(state, 32) ^ K2);
    }
    return fold_mul(state ^ K3, (uint64_t)n ^ K4);
}

static uint64_t pair_hash(uint64_t parent, uint64_t local)
{
    uint64_t state = fold_mul(parent ^ K5, local ^ K6);
    return fold_mul(state ^ K3, 16u ^ K4);
}

static uint64_t chain(int has_previous, uint64_t previous, uint64_t local)
{
    return has_previous ? pair_hash(previous, local) : local;
}

int aisim_hash_blocks(const uint32_t *tokens, size_t n_tokens, uint32_t block_size,
                      int has_parent, uint64_t parent, uint64_t *out, size_t out_cap)
{
    size_t n_blocks, i;
    uint64_t previous = parent;
    int has_previous = has_parent != 0;
    if (block_size == 0 || (!tokens && n_tokens))
        return AISIM_EINVAL;
    n_blocks = n_tokens / block_size;
    if (n_blocks > INT32_MAX || n_blocks > out_cap || (!out && n_blocks))
        return AISIM_EINVAL;
    for (i = 0; i < n_blocks; i++) {
        previous = chain(has_previous, previous, block_hash(tokens + i * block_size, block_size));
        has_previous = 1;
        out[i] = previous;
    }
    return (int)n_blocks;
}

/* Same result as expanding (value, length) runs into tokens first. A block
 * that lies inside one run is a constant block; consecutive constant blocks
 * of the same value reuse the hash (the reference does the same for
 * trace-synthesized prompts). */
int aisim_hash_block_runs(const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                          uint32_t block_size, int has_parent, uint64_t parent,
                          uint64_t *out, size_t out_cap)
{
    uint64_t total = 0, previous = parent, n_blocks, b, const_hash = 0;
    uint32_t *scratch, const_value = 0;
    int has_previous = has_parent != 0, have_const = 0;
    size_t run = 0;
    uint32_t used = 0; /* tokens of values[run] already consumed */
    if (block_size == 0 || ((!values || !lengths) && n_runs))
        return AISIM_EINVAL;
    for (b = 0; b < n_runs; b++)
        total += lengths[b];
    n_blocks = total / block_size;
    if (n_blocks > INT32_MAX || n_blocks > out_cap || (!out && n_blocks))
        return AISIM_EINVAL;
    if (n_blocks == 0)
        return 0;
    scratch = malloc((size_t)block_size * sizeof *scratch);
    if (!scratch)
        return AISIM_ENOMEM;
    for (b = 0; b < n_blocks; b++) {
        uint64_t local;
        uint32_t filled = 0;
        while (run < n_runs && used == lengths[run]) {
            run++;
            used = 0;
        }
        if (lengths[run] - used >= block_size) {
            if (!have_const || const_value != values[run]) {
                uint32_t i;
                for (i = 0; i < block_size; i++)
                    scratch[i] = values[run];
                const_value = values[run];
                const_hash = block_hash(scratch, block_size);
                have_const = 1;
            }
            local = const_hash;
            used += block_size;
        } else {
            while (filled < block_size) {
                uint32_t take = lengths[run] - used;
                if (take > block_size - filled)
                    take = block_size - filled;
                while (take--) {
                    scratch[filled++] = values[run];
                    used++;
                }
                if (used == lengths[run] && filled < block_size) {
                    run++;
                    used = 0;
                }
            }
            local = block_hash(scratch, block_size);
        }
        previous = chain(has_previous, previous, local);
        has_previous = 1;
        out[b] = previous;
    }
    free(scratch);
    return (int)n_blocks;
}
