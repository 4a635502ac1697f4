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

int aisim_runs_from_ranges(int64_t prompt_len, const uint32_t *ranges, size_t n_ranges,
                           int64_t block, uint32_t **values, size_t *values_cap,
                           uint32_t **lengths, size_t *lengths_cap, size_t *n_runs)
{
    if ((n_ranges && !ranges) || block < 1 || block > UINT32_MAX || prompt_len < 0 ||
        prompt_len > INT64_MAX / 4 || !values || !values_cap || !lengths || !lengths_cap ||
        !n_runs)
        return AISIM_EINVAL;
    int64_t n = (prompt_len + block - 1) / block, k = 0;
    if ((uint64_t)n > SIZE_MAX / sizeof(uint32_t))
        return AISIM_ENOMEM;
    int status = aisim_grow((void **)values, values_cap, (size_t)n, sizeof **values);
    if (status)
        return status;
    status = aisim_grow((void **)lengths, lengths_cap, (size_t)n, sizeof **lengths);
    if (status)
        return status;
    for (size_t i = 0; i < n_ranges && k < n; i++) {
        uint64_t id = ranges[2 * i], count = ranges[2 * i + 1];
        for (uint64_t j = 0; j < count && k < n; j++, k++) {
            if (id + j > UINT32_MAX)
                return AISIM_EINVAL;
            (*values)[k] = (uint32_t)(id + j);
            (*lengths)[k] = (uint32_t)block;
        }
    }
    if (k < n)
        return AISIM_EINVAL;
    if (n)
        (*lengths)[n - 1] = (uint32_t)(prompt_len - (n - 1) * block);
    *n_runs = (size_t)n;
    return AISIM_OK;
}
