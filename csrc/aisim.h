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

#endif
