/*
 * radix_cache.cdef.h: SGLang's paged radix-tree KV cache with LRU leaf eviction and locks
 * (kv/radix_native.py drives it; kv/radix_cache.py's RadixCache is its twin and its
 * specification). Read by cffi as its cdef (no preprocessor lines).
 *
 * Nodes are named by handles: (generation << 32) | index, the root 0. A handle of an
 * evicted node stays dead (its index is reused under another generation), so a memoized
 * match can tell that its node is gone. Tokens are u32; lengths and depths are tokens,
 * whole pages where the twin wants them; access stamps are caller-given int64 keys.
 */

typedef struct aisim_radix aisim_radix;

typedef struct aisim_radix_view {
    int64_t page_size;
    int64_t total_tokens;       /* whole pages */
    int64_t free_tokens;
    int64_t evictable_size;     /* tokens on unlocked edges */
    int64_t protected_size;     /* tokens on locked edges */
    int64_t inserts;            /* bumped when tokens join the tree */
    int64_t nodes;              /* live nodes, the root included */
    int32_t trim_partial_leaf;
    int32_t logging;            /* the eviction log is on */
    /* the eviction log while on: span i is (lo, hi, offset), its path's tokens from the root
     * (hi of them) at log_tokens[offset] */
    const int64_t *log_spans;
    size_t n_log;
    const uint32_t *log_tokens;
} aisim_radix_view;

int aisim_radix_new(aisim_radix **out, int64_t total_tokens, int64_t page_size,
                    int32_t trim_partial_leaf);
int aisim_radix_free(aisim_radix *c);
int aisim_radix_view_of(const aisim_radix *c, const aisim_radix_view **out);

/* The pool: allocate answers AISIM_OK, or AISIM_NOSPACE (nothing taken) when `tokens` are
 * not free; release gives tokens back; set_free overwrites the free count (checks' tests). */
int aisim_radix_allocate(aisim_radix *c, int64_t tokens);
int aisim_radix_release(aisim_radix *c, int64_t tokens);
int aisim_radix_set_free(aisim_radix *c, int64_t tokens);

/* RadixCache.match_where (read-only): out[0] tokens matched (whole pages, at most limit <= n),
 * out[1] the node holding the last one (root if none). */
int aisim_radix_match(const aisim_radix *c, const uint32_t *tokens, size_t n, int64_t limit,
                      int64_t *out);
/* RadixCache.still_matches: 1 or 0. */
int aisim_radix_still_matches(const aisim_radix *c, int64_t matched, int64_t node,
                              int64_t inserts);
/* RadixCache.match_and_lock: out as aisim_radix_match's. */
int aisim_radix_match_and_lock(aisim_radix *c, const uint32_t *tokens, size_t n, int64_t limit,
                               int64_t access, int64_t *out);
int aisim_radix_lock(aisim_radix *c, int64_t node);
int aisim_radix_unlock(aisim_radix *c, int64_t node);
int aisim_radix_touch_path(aisim_radix *c, int64_t node, int64_t access);
/* RadixCache.insert of tokens[start:end] (end <= n) below start_node: out[0] the node holding
 * depth end, out[1] the tokens that were already there. */
int aisim_radix_insert(aisim_radix *c, int64_t start_node, const uint32_t *tokens, size_t n,
                       int64_t start, int64_t end, int64_t access, int64_t create_access,
                       int32_t allow_locked_tail, int64_t *out);
/* RadixCache.evict: frees at least `tokens` from unlocked leaves, LRU first; *out freed. */
int aisim_radix_evict(aisim_radix *c, int64_t tokens, int64_t *out);
/* The eviction log: on keeps it, off drops it; clear empties it (after a take). */
int aisim_radix_log_evictions(aisim_radix *c, int32_t on);
int aisim_radix_log_clear(aisim_radix *c);

/* Inspection (tests, checks): a node's fields into out[0..5] = start, end, access, lock,
 * children, indexed (an evictable leaf); AISIM_EBADSEQ for a dead handle. */
int aisim_radix_node(const aisim_radix *c, int64_t node, int64_t *out);
/* Every live node but the root, as rows of (handle, parent handle, start, end, access, lock)
 * and their edge tokens concatenated in row order (evictable + protected of them); returns
 * the rows (caps too small: AISIM_EINVAL). */
int aisim_radix_dump(const aisim_radix *c, int64_t *rows, size_t cap_rows, uint32_t *tokens,
                     size_t cap_tokens);
/* The consistency of counts, children, heap and child table: AISIM_OK or AISIM_ECORRUPT. */
int aisim_radix_check(const aisim_radix *c);
