/*
 * id_ranges.cdef.h: a synthetic prompt's canonical ids written out from their
 * ranges (workload/prompt.py IdRanges). Read by cffi as its cdef.
 */

/* Writes firsts[i], firsts[i] + 1, ... (counts[i] ids) for each range in
 * order, stopping after cap ids; returns how many it wrote, or AISIM_EINVAL
 * (nothing written) when an id it would write passes 2^32 - 1. */
int64_t aisim_fill_id_ranges(const uint32_t *firsts, const uint32_t *counts, size_t n,
                             uint32_t *out, size_t cap);
