/*
 * hash_counts.cdef.h: a multiset of 64-bit block hashes for router indexes
 * (plugins/placement's kv_router): a scheduler's refcounted active blocks and
 * its set of cached blocks, with whole-chain operations in one call. Read by
 * cffi as its cdef (no preprocessor lines).
 */
typedef struct aisim_hash_counts aisim_hash_counts;

typedef struct aisim_hc_view {
    uint64_t len;   /* distinct hashes present (a count of 0 still counts as present) */
} aisim_hc_view;

int aisim_hc_new(aisim_hash_counts **out);
int aisim_hc_free(aisim_hash_counts *m);
int aisim_hc_view_of(const aisim_hash_counts *m, const aisim_hc_view **out);
/* the count of h into *out; returns 1 when present, 0 when absent */
int aisim_hc_get(const aisim_hash_counts *m, uint64_t h, int64_t *out);
/* copies up to cap present hashes and their counts (any order); returns how many */
int aisim_hc_items(const aisim_hash_counts *m, uint64_t *keys, int64_t *counts, size_t cap);

/* A chain's leading hashes present, by binary search: the present blocks of
 * a chain are a prefix of it when the multiset is a union of whole chains. */
int64_t aisim_hc_held_prefix(const aisim_hash_counts *m, const uint64_t *hashes, size_t n);
/* the held prefix's counts + 1 (read before written), every later hash set to 1 */
int aisim_hc_add_chain(aisim_hash_counts *m, const uint64_t *hashes, size_t n);
/* the leading hashes with count > 1 (binary search) lose 1, the rest are
 * removed; AISIM_EINVAL (nothing changed) when a hash it reads is absent */
int aisim_hc_drop_chain(aisim_hash_counts *m, const uint64_t *hashes, size_t n);

/* set use: insert with count 1 when absent, remove when present */
int aisim_hc_insert_all(aisim_hash_counts *m, const uint64_t *hashes, size_t n);
int aisim_hc_remove_all(aisim_hash_counts *m, const uint64_t *hashes, size_t n);
/* how many leading hashes are present (a linear scan to the first absent one) */
int64_t aisim_hc_leading(const aisim_hash_counts *m, const uint64_t *hashes, size_t n);
/* how many leading hashes are absent (a linear scan to the first present one) */
int64_t aisim_hc_leading_absent(const aisim_hash_counts *m, const uint64_t *hashes, size_t n);

/* map use (the kv_router's uuid and scheduler maps): empty it; set h's count
 * (inserted when absent); remove h (returns 1 when it was present, else 0) */
int aisim_hc_clear(aisim_hash_counts *m);
int aisim_hc_set(aisim_hash_counts *m, uint64_t h, int64_t count);
int aisim_hc_remove(aisim_hash_counts *m, uint64_t h);

/* interning use (a trace's raw hash ids): out[k] = raw[k]'s dense id, the number
 * of distinct ids before its first appearance, in this call or an earlier one
 * (an id is inserted with that number as its count); AISIM_EINVAL past 2^32 ids */
int aisim_hc_intern(aisim_hash_counts *m, const uint64_t *raw, size_t n, uint32_t *out);
