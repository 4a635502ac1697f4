/*
 * id_ranges.c: consecutive canonical ids without a Python int per id (an
 * SGLang prompt at page size 1 is thousands of them). The Python twin is
 * IdRanges.__getitem__'s loop in workload/prompt.py.
 */
#include "aisim.h"
#include "id_ranges.cdef.h"

int64_t aisim_fill_id_ranges(const uint32_t *firsts, const uint32_t *counts, size_t n,
                             uint32_t *out, size_t cap)
{
    if ((n && (!firsts || !counts)) || (cap && !out))
        return AISIM_EINVAL;
    size_t left = cap;
    for (size_t i = 0; i < n && left; i++) {
        size_t take = counts[i] < left ? counts[i] : left;
        if (take && (uint64_t)firsts[i] + take - 1 > UINT32_MAX)
            return AISIM_EINVAL;
        left -= take;
    }
    size_t written = 0;
    for (size_t i = 0; i < n && written < cap; i++) {
        size_t take = counts[i] < cap - written ? counts[i] : cap - written;
        uint32_t id = firsts[i];
        for (size_t k = 0; k < take; k++)
            out[written++] = id++;
    }
    return (int64_t)written;
}
