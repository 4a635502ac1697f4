/*
 * aisim_cdef.h: every declaration of the C core, with no preprocessor lines
 * so that cffi's parser reads it as the cdef (ffi_build.py); aisim.h
 * includes it, so C and Python see one set of declarations.
 */
enum aisim_status {
    AISIM_OK = 0,
    AISIM_NOSPACE = 1,        /* allocation refused: not enough blocks */
    AISIM_ENOMEM = -1,        /* malloc/realloc failed */
    AISIM_EEMPTY = -2,        /* pop from an empty queue */
    AISIM_EINVAL = -3,        /* bad argument (null, range, size) */
    AISIM_EBADSEQ = -4,       /* unknown or released sequence handle */
    AISIM_ENOTRESIDENT = -5,  /* acquire of a hash with no resident copy */
    AISIM_EHASHMISMATCH = -6, /* commit of a block already hashed otherwise */
    AISIM_ECORRUPT = -7       /* consistency check failed */
};

/* ---- event queue: binary min-heap keyed (time_ms, insertion seq) ---- */

typedef struct aisim_event_queue aisim_event_queue;

/* pop() leaves the event in popped_*: a one-argument call is about half the
 * cost of a two-argument one through cffi (METH_O instead of a tuple). */
typedef struct aisim_eq_view {
    size_t len;
    double head_time_ms; /* +infinity when empty */
    double popped_time_ms;
    int64_t popped_ident;
    int32_t popped_kind;
} aisim_eq_view;

int aisim_eq_new(aisim_event_queue **out, size_t initial_capacity);
int aisim_eq_free(aisim_event_queue *q);
int aisim_eq_view_of(const aisim_event_queue *q, const aisim_eq_view **out);
int aisim_eq_push(aisim_event_queue *q, double time_ms, int32_t kind, int64_t ident);
int aisim_eq_pop(aisim_event_queue *q);

/* ---- KV block pool (vLLM / TRT-LLM paged cache with prefix caching) ---- */

typedef struct aisim_kv_pool aisim_kv_pool;

typedef struct aisim_kv_view {
    uint64_t num_blocks; /* capacity (any u64: the pool is lazy) */
    uint64_t free;       /* blocks holding nothing, untouched ones included */
    uint32_t inactive;   /* hashed, unreferenced, in the LRU list */
    uint32_t active;     /* referenced by at least one sequence */
    uint32_t cached;     /* hashed blocks resident (active or inactive) */
    uint32_t live_seqs;
    uint32_t match_active; /* of the last match, hits whose copy is referenced */
    uint64_t evictions;    /* hashed copies evicted since creation */
    uint32_t logged;       /* hashes in the eviction log (0 while it is off) */
} aisim_kv_view;

int aisim_kv_new(aisim_kv_pool **out, uint64_t num_blocks);
int aisim_kv_free(aisim_kv_pool *p);
int aisim_kv_view_of(const aisim_kv_pool *p, const aisim_kv_view **out);
/* returns the new handle (>= 0) */
int aisim_kv_new_seq(aisim_kv_pool *p);
/* returns the number of blocks the sequence holds (>= 0) */
int aisim_kv_seq_len(const aisim_kv_pool *p, int32_t seq);
/* copies up to cap physical block ids of the table; returns the table length */
int aisim_kv_seq_blocks(const aisim_kv_pool *p, int32_t seq, int32_t *out, size_t cap);
/* returns how many leading hashes have a resident copy; view.match_active
 * gets how many of those copies are referenced (the reference's
 * PrefixHit::is_active, which TRT-LLM admission subtracts) */
int aisim_kv_match(aisim_kv_pool *p, const uint64_t *hashes, size_t n);
int aisim_kv_acquire(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes, size_t n);
int aisim_kv_allocate(aisim_kv_pool *p, int32_t seq, uint32_t k);
int aisim_kv_acquire_allocate(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes,
                              size_t n, uint32_t k);
int aisim_kv_allocate_each(aisim_kv_pool *p, const int32_t *seqs, size_t n_seqs,
                           uint32_t k_each);
/* hashes[i] goes to table position first_block + i */
int aisim_kv_commit(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes,
                    uint32_t first_block, uint32_t count);
int aisim_kv_release(aisim_kv_pool *p, int32_t seq);
int aisim_kv_check(const aisim_kv_pool *p);
/* state_cache checkpoints (engine/vllm_state_cache.py's StatePool): uncache makes the cached
 * blocks of seq private again (held, no hash); discard frees `block` when it is still an
 * unreferenced cached copy of `key` (returns 1; 0 when it is not: evicted or reused since);
 * key_refs is the references of key's primary copy (-1: no copy resident). */
int aisim_kv_uncache(aisim_kv_pool *p, int32_t seq);
int aisim_kv_discard(aisim_kv_pool *p, int32_t block, uint64_t key);
int aisim_kv_key_refs(const aisim_kv_pool *p, uint64_t key);
/* The eviction log (off at creation): while enabled, every eviction that
 * removes the last resident copy of a hash appends the hash. Disabling drops
 * the log. take_evicted copies the view.logged hashes, oldest first, into out
 * (cap >= view.logged, else AISIM_EINVAL), empties the log and returns how
 * many it copied; with absent_only it skips the hashes resident again (a
 * copy committed since the eviction). */
int aisim_kv_log_evictions(aisim_kv_pool *p, int enabled);
int aisim_kv_take_evicted(aisim_kv_pool *p, int absent_only, uint64_t *out, size_t cap);

/* ---- block hashing: chained 64-bit hashes of complete token blocks ---- */

/* Both return the number of hashes written (complete blocks only). */
int aisim_hash_blocks(const uint32_t *tokens, size_t n_tokens, uint32_t block_size,
                      int has_parent, uint64_t parent, uint64_t *out, size_t out_cap);
int aisim_hash_block_runs(const uint32_t *values, const uint32_t *lengths, size_t n_runs,
                          uint32_t block_size, int has_parent, uint64_t parent,
                          uint64_t *out, size_t out_cap);

/* ---- StdRng: rand 0.9 StdRng (ChaCha12) bit for bit ---- */

typedef struct aisim_rng aisim_rng;

/* Single draws land in the view, so that a draw is a one-argument call. */
typedef struct aisim_rng_view {
    uint64_t last_u64;
    double last_f64;
    uint32_t last_u32;
} aisim_rng_view;

int aisim_rng_new(aisim_rng **out);
int aisim_rng_free(aisim_rng *r);
int aisim_rng_view_of(const aisim_rng *r, const aisim_rng_view **out);
int aisim_rng_seed_u64(aisim_rng *r, uint64_t seed);
int aisim_rng_seed_bytes(aisim_rng *r, const uint8_t *seed32, uint32_t rounds);
int aisim_rng_next_u32(aisim_rng *r);                                /* -> last_u32 */
int aisim_rng_next_u64(aisim_rng *r);                                /* -> last_u64 */
int aisim_rng_next_f64(aisim_rng *r);                                /* -> last_f64 */
int aisim_rng_range_u32(aisim_rng *r, uint32_t low, uint32_t high);  /* -> last_u32 */
int aisim_rng_range_u64(aisim_rng *r, uint64_t low, uint64_t high);  /* -> last_u64 */
int aisim_rng_exponential(aisim_rng *r, double mean);                /* -> last_f64 */
int aisim_rng_fill_u32(aisim_rng *r, uint32_t *out, size_t n);
int aisim_rng_poisson_arrivals(aisim_rng *r, size_t n, double mean_gap_ms, double *out);

/* The summary's inputs a plain C loop gathered (plain_loop.c, plain_disagg.c): report._Totals'
 * fields, its samples in uuid order, the collector's fallback count. Both loops' views carry
 * one, filled by plain_fill_summary and read by plain_native._fill_collector. */
typedef struct aisim_plain_summary {
    int64_t completed;
    int64_t input_tokens;
    int64_t output_tokens;
    int64_t reused;
    int64_t first_reused;
    int64_t good;
    int64_t good_tokens;
    int64_t fallback_committed;
    double duration_ms;
    const double *ttft;
    const double *e2e;
    size_t n_ttft;              /* = n_e2e */
    const double *ttst;
    size_t n_ttst;
    const double *tpot;
    size_t n_tpot;
} aisim_plain_summary;
