/*
 * time_sums.c: the disaggregated loop's worker seconds, summed in time order over every
 * visited time and pass end (DisaggregatedSimulation._worker_seconds). The Python twin is
 * runtime/pass_time.py's _sums_py: a sort of the concatenated runs, then a left-to-right sum
 * of workers * dt / 1000; here a k-way merge of the runs, which are each in time order
 * already, with the same additions in the same order, so the sums are identical.
 */
#include "aisim.h"
#include "time_sums.cdef.h"

#include <stdlib.h>

/* a binary min-heap of run indices keyed by their head times (ties: the lower run first,
 * which cannot change a sum: equal times advance by +0.0) */
static int before(const double *heads, const size_t *heap, size_t a, size_t b)
{
    double x = heads[heap[a]], y = heads[heap[b]];
    return x < y || (x == y && heap[a] < heap[b]);
}

static void sift_down(const double *heads, size_t *heap, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(heads, heap, l, m))
            m = l;
        if (r < n && before(heads, heap, r, m))
            m = r;
        if (m == i)
            return;
        size_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

int aisim_time_sums(const double *const *runs, const size_t *lens, size_t n_runs,
                    const double *workers, size_t n_pools, double *out)
{
    if ((n_runs && (!runs || !lens)) || (n_pools && (!workers || !out)))
        return AISIM_EINVAL;
    for (size_t i = 0; i < n_runs; i++) {
        if (lens[i] && !runs[i])
            return AISIM_EINVAL;
        for (size_t k = 0; k < lens[i]; k++) {
            /* (a NaN compares false both ways: sorted() would leave it where it stands) */
            if (runs[i][k] != runs[i][k] || (k && runs[i][k] < runs[i][k - 1]))
                return AISIM_EINVAL;
        }
    }
    size_t *heap = malloc((n_runs ? n_runs : 1) * sizeof *heap);
    size_t *pos = malloc((n_runs ? n_runs : 1) * sizeof *pos);
    double *heads = malloc((n_runs ? n_runs : 1) * sizeof *heads);
    double *sums = malloc((n_pools ? n_pools : 1) * sizeof *sums);
    if (!heap || !pos || !heads || !sums) {
        free(heap); free(pos); free(heads); free(sums);
        return AISIM_ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_runs; i++) {
        pos[i] = 0;
        if (lens[i]) {
            heads[i] = runs[i][0];
            heap[n++] = i;
        }
    }
    for (size_t i = n / 2; i-- > 0;)
        sift_down(heads, heap, n, i);
    for (size_t p = 0; p < n_pools; p++)
        sums[p] = 0.0;
    double last = 0.0;
    while (n) {
        size_t i = heap[0];
        double t = heads[i];
        double dt = t - last;
        last = t;
        for (size_t p = 0; p < n_pools; p++) {
            double part = workers[p] * dt;
            sums[p] = sums[p] + part / 1000.0;
        }
        if (++pos[i] < lens[i]) {
            heads[i] = runs[i][pos[i]];
        } else {
            heap[0] = heap[--n];
        }
        sift_down(heads, heap, n, 0);
    }
    for (size_t p = 0; p < n_pools; p++)
        out[p] = sums[p];
    free(heap); free(pos); free(heads); free(sums);
    return AISIM_OK;
}
