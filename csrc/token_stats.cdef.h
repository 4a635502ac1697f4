/* ---- token statistics: the report's inter-token gaps (token_stats.c) ---- */

typedef struct aisim_token_stats aisim_token_stats;

/* Why the last call returned AISIM_EINVAL (view.failure), so that the Python
 * wrapper raises what the pure-Python twin raises. */
enum aisim_ts_failure {
    AISIM_TS_FINE = 0,
    AISIM_TS_COUNT_OVERFLOW = 1,  /* a count to hand back does not fit an int64 */
    AISIM_TS_FSUM_OVERFLOW = 2,   /* math.fsum's "intermediate overflow in fsum" */
    AISIM_TS_FSUM_INF_NAN = 3,    /* math.fsum's "-inf + inf in fsum" */
    AISIM_TS_BAD_BREAK = 4,       /* a break names a pass with no end time */
    AISIM_TS_BAD_SKETCH = 5       /* multiplier or min_indexable out of range */
};

/* One distribution of the summary: exact moments (math.fsum semantics) and the
 * DDSketch's content. The arrays belong to the handle and stay valid until the
 * next summarize or free. */
typedef struct aisim_ts_dist {
    int64_t count;
    double mean;
    double m2;
    double min;                 /* +inf when count is 0 */
    double max;                 /* -inf when count is 0 */
    size_t n_keys;              /* positive-store keys, ascending, with their counts */
    const int64_t *keys;
    const int64_t *key_counts;
    size_t n_low;               /* values below min_indexable, in first-seen order */
    const double *low_values;
    const int64_t *low_counts;
} aisim_ts_dist;

typedef struct aisim_ts_view {
    size_t len;                 /* distinct sample gaps held */
    int32_t failure;            /* enum aisim_ts_failure of the last failed call */
    aisim_ts_dist itl;          /* filled by summarize */
    aisim_ts_dist rate;
} aisim_ts_view;

int aisim_ts_new(aisim_token_stats **out);
int aisim_ts_free(aisim_token_stats *s);
int aisim_ts_view_of(const aisim_token_stats *s, const aisim_ts_view **out);
/* One rank: the gap ends[i+1] - ends[i] counted (running sum of diff[0..i])
 * times, for every i where that sum is not 0; then for each break b the gap
 * ends[breaks[2b+1]] - ends[breaks[2b]] counted break_counts[b] times. */
int aisim_ts_add_passes(aisim_token_stats *s, const double *ends, size_t n_ends,
                        const int64_t *diff, size_t n_diff, const int64_t *breaks,
                        const int64_t *break_counts, size_t n_breaks);
/* counts[i] gaps of values[i] ms */
int aisim_ts_add_gaps(aisim_token_stats *s, const double *values, const int64_t *counts,
                      size_t n);
/* copies the view.len distinct sample gaps and their counts (cap >= view.len) */
int aisim_ts_gaps(aisim_token_stats *s, double *values, int64_t *counts, size_t cap);
/* fills view.itl and view.rate (per-user rate 1000 / gap) */
int aisim_ts_summarize(aisim_token_stats *s, double multiplier, double min_indexable);
