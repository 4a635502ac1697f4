/*
 * aisim.h: the C core of aisimulate-core (event queue, KV block pool,
 * block hashing, Rust-compatible StdRng).
 *
 * Contract shared by every function here:
 *   - it never aborts, never prints, never exits;
 *   - it returns a status: AISIM_OK (0) or a negative AISIM_E* code.
 *     Functions that answer a count return it as a non-negative status;
 *     the pool's allocation functions return AISIM_NOSPACE (1) when they
 *     refuse for lack of capacity, which is an answer, not an error;
 *   - on error nothing observable has changed.
 * Handles are opaque. The only memory Python reads directly is the
 * read-only "view" structs, which the C side keeps current after every
 * call so that hot-path getters cost a field read instead of a call.
 */
#ifndef AISIM_H
#define AISIM_H

#include <stddef.h>
#include <stdint.h>

/* The declarations live in aisim_cdef.h, which cffi reads as its cdef: one source for both. */
#include "aisim_cdef.h"

#include <stdlib.h>

/* Grow the array *array of *cap elements of elem bytes to hold at least need of them, doubling
 * from 8: AISIM_OK, or AISIM_ENOMEM (the array unchanged) when realloc fails or the size would
 * overflow. Every module's growable arrays use it. */
static inline int aisim_grow(void **array, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 8;
    void *grown;
    if (need <= *cap)
        return AISIM_OK;
    while (c < need) {
        if (c > ((size_t)-1) / 2)
            return AISIM_ENOMEM;
        c *= 2;
    }
    if (elem && c > ((size_t)-1) / elem)
        return AISIM_ENOMEM;
    grown = realloc(*array, c * elem);
    if (!grown)
        return AISIM_ENOMEM;
    *array = grown;
    *cap = c;
    return AISIM_OK;
}

/* workload/prompt.py's _build_runs: the first ceil(prompt_len / block) ids of the
 * (first, count) `ranges`, each a run of `block` tokens, the last run cut at the prompt's
 * length, into the growable arrays *values and *lengths (aisim_grow's); *n_runs the runs.
 * AISIM_EINVAL for bad arguments, an id past 2^32 - 1 or ranges shorter than the prompt;
 * AISIM_ENOMEM. (id_ranges.c; the vLLM rank's and the disaggregated loop's prompts) */
int aisim_runs_from_ranges(int64_t prompt_len, const uint32_t *ranges, size_t n_ranges,
                           int64_t block, uint32_t **values, size_t *values_cap,
                           uint32_t **lengths, size_t *lengths_cap, size_t *n_runs);

#endif
