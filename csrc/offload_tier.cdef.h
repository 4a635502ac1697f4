/*
 * offload_tier.cdef.h: the block pool of one KV offload tier behind the GPU
 * cache (G2 host blocks, G3 storage blocks): at most `capacity` entries keyed
 * by a block's sequence hash, each pending (its store in flight) or
 * resident, a resident one pinned by transfers reading it; an LRU of the
 * resident unpinned entries. Read by cffi as its cdef (no preprocessor lines).
 */
typedef struct aisim_offload_tier aisim_offload_tier;

typedef struct aisim_ot_view {
    uint64_t capacity;
    uint64_t entries;    /* pending + resident */
    uint64_t pending;
    uint64_t pinned;     /* resident entries with pins > 0 */
    uint64_t evictions;  /* entries evicted so far */
} aisim_ot_view;

int aisim_ot_new(aisim_offload_tier **out, uint64_t capacity);
int aisim_ot_free(aisim_offload_tier *t);
int aisim_ot_view_of(const aisim_offload_tier *t, const aisim_ot_view **out);
/* 0 absent, 1 pending, 2 resident; the entry's pins into *pins (0 when absent) */
int aisim_ot_state(const aisim_offload_tier *t, uint64_t h, int64_t *pins);
/* the indices of the absent hashes, ascending, into absent[0..): returns how many
 * (absent has room for n) */
int64_t aisim_ot_absent(const aisim_offload_tier *t, const uint64_t *hashes, size_t n,
                        int64_t *absent);
/* how many leading hashes are present (pending or resident) */
int64_t aisim_ot_leading(const aisim_offload_tier *t, const uint64_t *hashes, size_t n);
/* each present hash becomes the most recent (resident unpinned ones move in the
 * LRU), in order, or from the last to the first when `reverse`; returns how many
 * were present */
int64_t aisim_ot_touch(aisim_offload_tier *t, const uint64_t *hashes, size_t n, int reverse);
/* room for n absent keys (distinct), as pending entries: free slots first, then
 * the oldest LRU entries that are not in `protect` are evicted (their hashes,
 * oldest first, into evicted[0..*n_evicted), evicted has room for n). Returns
 * AISIM_NOSPACE (nothing changed) when there are not enough victims, AISIM_EINVAL
 * for a present or repeated key. */
int aisim_ot_reserve(aisim_offload_tier *t, const uint64_t *keys, size_t n,
                     const uint64_t *protect, size_t n_protect,
                     uint64_t *evicted, int64_t *n_evicted);
/* pending -> resident; they join the LRU as the most recent, in ascending hash
 * order when `shared` (one shared epoch), else in the given order */
int aisim_ot_complete(aisim_offload_tier *t, const uint64_t *keys, size_t n, int shared);
/* resident entries gain one pin each (they leave the LRU) */
int aisim_ot_pin(aisim_offload_tier *t, const uint64_t *keys, size_t n);
/* resident pinned entries lose one pin; those left with none join the LRU as in
 * complete() */
int aisim_ot_unpin(aisim_offload_tier *t, const uint64_t *keys, size_t n, int shared);
/* pending entries removed (a dropped store) */
int aisim_ot_discard(aisim_offload_tier *t, const uint64_t *keys, size_t n);
/* the LRU's hashes, oldest first, up to cap; returns the LRU's length */
int64_t aisim_ot_lru(const aisim_offload_tier *t, uint64_t *out, size_t cap);
int aisim_ot_check(const aisim_offload_tier *t);
