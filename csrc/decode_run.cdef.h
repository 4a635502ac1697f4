/*
 * decode_run.cdef.h: the vLLM rank's run of decode-only passes (engine/vllm.py
 * extend) and the decode timing it evaluates per pass. Read by cffi as its
 * cdef (no preprocessor lines); decode_run.c includes it through aisim.h's
 * conventions.
 */

/* A decode-time source: the built-in models evaluated here, or a memo of
 * (batch, active tokens) -> modeled ms that Python fills when the run stops
 * on a miss (an external provider, or a value the built-in path cannot
 * reproduce exactly). */
enum aisim_decode_kind {
    AISIM_DECODE_MEMO = 0,       /* only the memo */
    AISIM_DECODE_FIXED = 1,      /* fixed_ms for any non-empty batch */
    AISIM_DECODE_POLYNOMIAL = 2  /* the reference's default decode fit */
};

/* aisim_decode_extend's answer when the memo lacks the pass's time: the
 * run's position is saved in the run struct, miss_* name the key. */
enum aisim_decode_status { AISIM_DECODE_MISS = 2 };

typedef struct aisim_decode_timing aisim_decode_timing;

int aisim_decode_timing_new(aisim_decode_timing **out, int kind, double fixed_ms,
                            double ratio, int64_t total_kv_tokens, size_t memo_limit);
int aisim_decode_timing_free(aisim_decode_timing *t);
int aisim_decode_timing_put(aisim_decode_timing *t, int64_t batch, int64_t active, double ms);
/* the modeled ms the built-in path gives, or AISIM_DECODE_MISS when it
 * cannot (parity tests read single values through it) */
int aisim_decode_timing_eval(const aisim_decode_timing *t, int64_t batch, int64_t active,
                             double *out_ms);

/* One run of decode-only passes after the pass just formed. Inputs stay
 * fixed across a resumed call; the position fields are read and updated. */
typedef struct aisim_decode_run {
    int64_t block_size;
    int64_t batch;          /* open-stretch decoders */
    int64_t base;           /* sum of (base_len - base_pass): active = base + batch * pass */
    int64_t stop_pass;      /* a request's last token is in this pass; -1 for none */
    int64_t last_pass;      /* passes before this one only */
    double horizon_ms;      /* no pass starts at or after it */
    double cutoff_ms;       /* no pass ends after it */
    const int64_t *crossing_keys;    /* pass offsets (mod block_size), ascending */
    const int64_t *crossing_counts;  /* decoders needing a block at that offset */
    size_t n_crossing;
    /* position */
    int64_t pass_;          /* next pass to try (pass is a Python keyword) */
    int64_t room;           /* allocatable KV blocks left */
    double end_ms;          /* end of the last accepted pass */
    size_t n_ends;          /* entries of ends[] written */
    /* out, with AISIM_DECODE_MISS */
    int64_t miss_batch;
    int64_t miss_active;
} aisim_decode_run;

/* Appends the end time of each accepted pass to ends[n_ends...] (cap
 * entries in all). Returns AISIM_OK when the run stops, AISIM_DECODE_MISS
 * to have a time filled in, or AISIM_EINVAL. */
int aisim_decode_extend(const aisim_decode_timing *t, aisim_decode_run *run, double *ends,
                        size_t cap);
