/*
 * arrivals.cdef.h: a Poisson schedule continued from a given time
 * (workload/synthetic.py first_arrivals). Read by cffi as its cdef.
 */

/* Writes out[i] = now_ms after adding i + 1 exponential gaps of mean mean_gap_ms, each
 * drawn as aisim_rng_exponential draws it and added in order (the arithmetic of a Python
 * loop ``now += gap``). Returns AISIM_OK, or AISIM_EINVAL (nothing drawn) for a bad mean. */
int aisim_rng_arrivals_after(aisim_rng *r, size_t n, double mean_gap_ms, double now_ms,
                             double *out);
