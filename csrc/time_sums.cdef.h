/*
 * time_sums.cdef.h: the disaggregated loop's worker seconds (runtime/pass_time.py). Read by
 * cffi as its cdef.
 */

/* Merges the n_runs time-ordered runs (runs[i] has lens[i] times) into one time order and,
 * for each pool p, adds workers[p] * dt / 1000 over its advances dt (the first from 0.0)
 * left to right into out[p], starting at 0.0. Returns AISIM_OK, or AISIM_EINVAL (out
 * untouched) when a run is out of time order or holds a NaN, or an argument is missing. */
int aisim_time_sums(const double *const *runs, const size_t *lens, size_t n_runs,
                    const double *workers, size_t n_pools, double *out);
