/*
 * arrivals.c: a Poisson arrival schedule continued in chunks, so that a
 * synthetic run's sessions do not pay a Python call per exponential draw.
 * The Python twin is PyStdRng.arrivals_after in workload/rng.py.
 */
#include "aisim.h"
#include "arrivals.cdef.h"

int aisim_rng_arrivals_after(aisim_rng *r, size_t n, double mean_gap_ms, double now_ms,
                             double *out)
{
    const aisim_rng_view *view = NULL;
    size_t i;
    int status;
    if (!r || (!out && n))
        return AISIM_EINVAL;
    status = aisim_rng_view_of(r, &view);
    if (status)
        return status;
    for (i = 0; i < n; i++) {
        /* only the first call can fail (a bad mean), and then it has drawn nothing */
        status = aisim_rng_exponential(r, mean_gap_ms);
        if (status)
            return status;
        now_ms += view->last_f64;
        out[i] = now_ms;
    }
    return AISIM_OK;
}
