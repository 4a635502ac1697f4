/* KV block pool modelled on the reference's vLLM G1 pool
 * (vllm_block_pool.rs + kv_manager/vllm_backend.rs):
 *  - a block is FREE, PRIVATE (referenced, not yet hashed) or CACHED
 *    (hashed, findable by prefix lookup);
 *  - a CACHED block with no reference sits in an intrusive LRU list: the
 *    head is evicted first, releases append at the tail;
 *  - fresh blocks come from the free stack first, then by evicting the LRU
 *    head; an evicted copy leaves the hash index;
 *  - one hash may have several physical copies (two sequences computed the
 *    same block before either committed). The index points at the oldest
 *    copy ("primary"); later copies queue behind it in commit order and a
 *    prefix hit always takes the primary. Evicting the primary promotes the
 *    next copy; the hash disappears only with its last copy;
 *  - a sequence releases its table from the last block to the first, so a
 *    prompt's leaf blocks become older LRU entries than their parents and
 *    are evicted before them.
 * Physical block ids are deterministic (free stack pops the lowest id
 * first at start) so the pure-Python twin can be compared id for id.
 *
 * The pool is lazy, like the reference's: only the blocks ever handed out
 * ("touched", ids 0..touched-1) have state. A fresh block comes from the
 * stack of released blocks first, then from the untouched ids in ascending
 * order, then by eviction: exactly the order of a stack that starts with
 * every id, lowest on top. So num_blocks may be any u64 and memory grows
 * with the blocks in use, not with the capacity.
 *
 * Eviction log (off by default, for the router's "removed" KV events): while
 * it is on, an eviction that takes the last resident copy of a hash out of
 * the index appends that hash (an evicted duplicate logs nothing: the hash is
 * still findable, as the reference's evict_one reports only a final copy).
 * The log holds what was evicted since the last take, so it is bounded by
 * the evictions between two takes. Allocations size it before they change
 * anything (an allocation of k evicts at most k - free blocks), so appending
 * never fails and a failed growth leaves the pool as it was. A take may skip
 * the hashes committed again since their eviction: a router that applies a
 * pass's "stored" events and then these "removed" ones ends up with exactly
 * the hashes resident, whatever the order of evictions and commits in the
 * pass. */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"

enum block_state { BLOCK_FREE = 0, BLOCK_PRIVATE = 1, BLOCK_CACHED = 2 };

#define NO_BLOCK (-1)

typedef struct seq_table {
    int32_t *blocks;
    uint32_t len;
    uint32_t cap;
    uint64_t pending; /* scratch for allocate_each; zero between calls */
    int live;
} seq_table;

struct aisim_kv_pool {
    uint64_t n;        /* capacity: num_blocks */
    uint32_t touched;  /* blocks 0..touched-1 have state; the rest are free */
    uint32_t cap;      /* length of the per-block arrays (>= touched) */
    uint32_t n_free;   /* released blocks on free_stack */
    uint32_t *ref;
    uint64_t *hash;
    uint8_t *state;
    uint8_t *mark; /* scratch for counting distinct blocks; all zero between calls */
    int32_t *lru_prev;
    int32_t *lru_next;
    int32_t *dup_next; /* next physical copy of the same hash, commit order */
    int32_t lru_head;
    int32_t lru_tail;
    int32_t *free_stack;
    /* hash -> primary copy: open addressing with linear probing */
    uint64_t *slot_key;
    int32_t *slot_block;
    uint32_t slot_mask;
    unsigned slot_shift;
    seq_table *seqs;
    uint32_t n_seqs;
    uint32_t seqs_cap;
    int32_t *free_handles;
    uint32_t n_free_handles;
    int log_on;
    uint64_t *log; /* evicted hashes, oldest first; view.logged of them */
    uint32_t log_cap;
    aisim_kv_view view;
};

/* ---------------------------------------------------------------- index */

static uint32_t home_slot(const aisim_kv_pool *p, uint64_t key)
{
    /* Fibonacci hashing: callers may use small consecutive ints as hashes */
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> p->slot_shift);
}

static int64_t find_slot(const aisim_kv_pool *p, uint64_t key)
{
    uint32_t i = home_slot(p, key);
    while (p->slot_block[i] != NO_BLOCK) {
        if (p->slot_key[i] == key)
            return i;
        i = (i + 1) & p->slot_mask;
    }
    return -1;
}

static int32_t primary_copy(const aisim_kv_pool *p, uint64_t key)
{
    int64_t slot = find_slot(p, key);
    return slot < 0 ? NO_BLOCK : p->slot_block[slot];
}

static void index_insert(aisim_kv_pool *p, uint64_t key, int32_t block)
{
    uint32_t i = home_slot(p, key);
    while (p->slot_block[i] != NO_BLOCK)
        i = (i + 1) & p->slot_mask;
    p->slot_key[i] = key;
    p->slot_block[i] = block;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void index_remove_slot(aisim_kv_pool *p, uint32_t hole)
{
    uint32_t j = hole;
    for (;;) {
        uint32_t home;
        int movable;
        j = (j + 1) & p->slot_mask;
        if (p->slot_block[j] == NO_BLOCK)
            break;
        home = home_slot(p, p->slot_key[j]);
        if (j > hole)
            movable = home <= hole || home > j;
        else
            movable = home <= hole && home > j;
        if (movable) {
            p->slot_key[hole] = p->slot_key[j];
            p->slot_block[hole] = p->slot_block[j];
            hole = j;
        }
    }
    p->slot_block[hole] = NO_BLOCK;
}

/* A table of 2^bits slots, every primary copy re-inserted; the old one is
 * kept on failure. */
static int index_resize(aisim_kv_pool *p, unsigned bits)
{
    uint64_t slots = (uint64_t)1 << bits, i;
    uint64_t *old_key = p->slot_key;
    int32_t *old_block = p->slot_block;
    uint64_t old_slots = old_block ? (uint64_t)p->slot_mask + 1 : 0;
    uint64_t *keys = calloc(slots, sizeof *keys);
    int32_t *blocks = malloc(slots * sizeof *blocks);
    if (!keys || !blocks) {
        free(keys);
        free(blocks);
        return AISIM_ENOMEM;
    }
    for (i = 0; i < slots; i++)
        blocks[i] = NO_BLOCK;
    p->slot_key = keys;
    p->slot_block = blocks;
    p->slot_mask = (uint32_t)(slots - 1);
    p->slot_shift = 64 - bits;
    for (i = 0; i < old_slots; i++)
        if (old_block[i] != NO_BLOCK)
            index_insert(p, old_key[i], old_block[i]);
    free(old_key);
    free(old_block);
    return AISIM_OK;
}

static int grow_array(void **array, size_t elem, uint32_t cap)
{
    void *grown = realloc(*array, (size_t)cap * elem);
    if (!grown)
        return AISIM_ENOMEM;
    *array = grown;
    return AISIM_OK;
}

/* Room for `more` untouched blocks to be handed out: the per-block arrays
 * grow by doubling, the index keeps at least two slots per block. Nothing
 * observable changes, so a failure leaves the pool as it was. */
static int reserve_touched(aisim_kv_pool *p, uint64_t more)
{
    uint64_t need = (uint64_t)p->touched + more, cap = p->cap ? p->cap : 64;
    unsigned bits = 64 - p->slot_shift;
    uint32_t i;
    if (need <= p->cap)
        return AISIM_OK;
    if (need > (uint64_t)INT32_MAX)
        return AISIM_ENOMEM; /* block ids are int32: the simulation holds 2^31 blocks */
    while (cap < need)
        cap *= 2;
    if (cap > p->n)
        cap = p->n;
    if (cap > (uint64_t)INT32_MAX)
        cap = INT32_MAX;
    if (grow_array((void **)&p->ref, sizeof *p->ref, (uint32_t)cap) ||
        grow_array((void **)&p->hash, sizeof *p->hash, (uint32_t)cap) ||
        grow_array((void **)&p->state, sizeof *p->state, (uint32_t)cap) ||
        grow_array((void **)&p->mark, sizeof *p->mark, (uint32_t)cap) ||
        grow_array((void **)&p->lru_prev, sizeof *p->lru_prev, (uint32_t)cap) ||
        grow_array((void **)&p->lru_next, sizeof *p->lru_next, (uint32_t)cap) ||
        grow_array((void **)&p->dup_next, sizeof *p->dup_next, (uint32_t)cap) ||
        grow_array((void **)&p->free_stack, sizeof *p->free_stack, (uint32_t)cap))
        return AISIM_ENOMEM;
    while (((uint64_t)1 << bits) < 2 * cap)
        bits++;
    if (bits != 64 - p->slot_shift && index_resize(p, bits))
        return AISIM_ENOMEM;
    for (i = p->cap; i < cap; i++) {
        p->ref[i] = 0;
        p->hash[i] = 0;
        p->state[i] = BLOCK_FREE;
        p->mark[i] = 0;
        p->lru_prev[i] = p->lru_next[i] = p->dup_next[i] = NO_BLOCK;
    }
    p->cap = (uint32_t)cap;
    return AISIM_OK;
}

/* Whether k fresh blocks fit: the free ones first, then `evictable` cached
 * ones (the LRU list, less what the request itself pins). */
static int fits(const aisim_kv_pool *p, uint64_t k, uint64_t evictable)
{
    return k <= p->view.free || k - p->view.free <= evictable;
}

/* Room in the eviction log for `more` hashes beyond those it holds. */
static int reserve_log(aisim_kv_pool *p, uint64_t more)
{
    uint64_t need = (uint64_t)p->view.logged + more, cap = p->log_cap ? p->log_cap : 64;
    if (need <= p->log_cap)
        return AISIM_OK;
    if (need > (uint64_t)INT32_MAX)
        return AISIM_ENOMEM; /* take_evicted answers the count as an int status */
    while (cap < need)
        cap *= 2;
    if (cap > (uint64_t)INT32_MAX)
        cap = INT32_MAX;
    if (grow_array((void **)&p->log, sizeof *p->log, (uint32_t)cap))
        return AISIM_ENOMEM;
    p->log_cap = (uint32_t)cap;
    return AISIM_OK;
}

/* Room for k fresh blocks (which fit): those the released blocks do not
 * cover come from the untouched ids, whose state is reserved here, and
 * those the free blocks do not cover are evictions, which the log (when
 * on) gets room for. */
static int reserve_fresh(aisim_kv_pool *p, uint64_t k)
{
    uint64_t untouched = p->n - p->touched;
    if (k <= p->n_free)
        return AISIM_OK;
    if (p->log_on && k > p->view.free && reserve_log(p, k - p->view.free))
        return AISIM_ENOMEM;
    k -= p->n_free;
    return reserve_touched(p, k < untouched ? k : untouched);
}

/* ------------------------------------------------------------ LRU list */

static void lru_append(aisim_kv_pool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = NO_BLOCK;
    if (p->lru_tail != NO_BLOCK)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->view.inactive++;
}

static void lru_unlink(aisim_kv_pool *p, int32_t b)
{
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev != NO_BLOCK)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next != NO_BLOCK)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->lru_prev[b] = p->lru_next[b] = NO_BLOCK;
    p->view.inactive--;
}

/* ---------------------------------------------------------- lifecycle */

static void destroy(aisim_kv_pool *p)
{
    uint32_t i;
    if (!p)
        return;
    for (i = 0; i < p->n_seqs; i++)
        free(p->seqs[i].blocks);
    free(p->seqs);
    free(p->free_handles);
    free(p->ref);
    free(p->hash);
    free(p->state);
    free(p->mark);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->dup_next);
    free(p->free_stack);
    free(p->slot_key);
    free(p->slot_block);
    free(p->log);
    free(p);
}

int aisim_kv_new(aisim_kv_pool **out, uint64_t num_blocks)
{
    aisim_kv_pool *p;
    if (!out || num_blocks == 0)
        return AISIM_EINVAL;
    p = calloc(1, sizeof *p);
    if (!p)
        return AISIM_ENOMEM;
    p->n = num_blocks;
    p->slot_shift = 64 - 4;
    p->lru_head = p->lru_tail = NO_BLOCK;
    if (index_resize(p, 4)) {
        destroy(p);
        return AISIM_ENOMEM;
    }
    p->view.num_blocks = num_blocks;
    p->view.free = num_blocks;
    *out = p;
    return AISIM_OK;
}

int aisim_kv_free(aisim_kv_pool *p)
{
    destroy(p);
    return AISIM_OK;
}

int aisim_kv_view_of(const aisim_kv_pool *p, const aisim_kv_view **out)
{
    if (!p || !out)
        return AISIM_EINVAL;
    *out = &p->view;
    return AISIM_OK;
}

/* ----------------------------------------------------------- sequences */

static seq_table *live_seq(const aisim_kv_pool *p, int32_t seq)
{
    if (seq < 0 || (uint32_t)seq >= p->n_seqs || !p->seqs[seq].live)
        return NULL;
    return &p->seqs[seq];
}

static int reserve_table(seq_table *t, uint64_t extra)
{
    uint64_t need = (uint64_t)t->len + extra;
    uint64_t cap = t->cap ? t->cap : 8;
    int32_t *blocks;
    if (need <= t->cap)
        return AISIM_OK;
    if (need > INT32_MAX)
        return AISIM_EINVAL;
    while (cap < need)
        cap *= 2;
    if (cap > INT32_MAX)
        cap = INT32_MAX;
    blocks = realloc(t->blocks, cap * sizeof *blocks);
    if (!blocks)
        return AISIM_ENOMEM;
    t->blocks = blocks;
    t->cap = (uint32_t)cap;
    return AISIM_OK;
}

int aisim_kv_new_seq(aisim_kv_pool *p)
{
    int32_t handle;
    if (!p)
        return AISIM_EINVAL;
    if (p->n_free_handles > 0) {
        handle = p->free_handles[--p->n_free_handles];
    } else {
        if (p->n_seqs == p->seqs_cap) {
            uint32_t cap = p->seqs_cap ? p->seqs_cap * 2 : 64;
            seq_table *seqs;
            int32_t *handles;
            if (cap > INT32_MAX / 2)
                return AISIM_ENOMEM;
            seqs = realloc(p->seqs, cap * sizeof *seqs);
            if (!seqs)
                return AISIM_ENOMEM;
            p->seqs = seqs;
            /* the handle stack can never hold more than every handle */
            handles = realloc(p->free_handles, cap * sizeof *handles);
            if (!handles)
                return AISIM_ENOMEM;
            p->free_handles = handles;
            p->seqs_cap = cap;
        }
        handle = (int32_t)p->n_seqs++;
        memset(&p->seqs[handle], 0, sizeof p->seqs[handle]);
    }
    p->seqs[handle].live = 1;
    p->seqs[handle].len = 0;
    p->view.live_seqs++;
    return handle;
}

int aisim_kv_seq_len(const aisim_kv_pool *p, int32_t seq)
{
    const seq_table *t;
    if (!p)
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    return (int)t->len;
}

int aisim_kv_seq_blocks(const aisim_kv_pool *p, int32_t seq, int32_t *out, size_t cap)
{
    const seq_table *t;
    size_t n;
    if (!p || (!out && cap))
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    n = t->len < cap ? t->len : cap;
    if (n)
        memcpy(out, t->blocks, n * sizeof *out);
    return (int)t->len;
}

/* ------------------------------------------------------- prefix lookup */

int aisim_kv_match(aisim_kv_pool *p, const uint64_t *hashes, size_t n)
{
    size_t i;
    uint32_t active = 0;
    if (!p || (!hashes && n) || n > INT32_MAX)
        return AISIM_EINVAL;
    for (i = 0; i < n; i++) {
        int64_t slot = find_slot(p, hashes[i]);
        if (slot < 0)
            break;
        active += p->ref[p->slot_block[slot]] > 0;
    }
    p->view.match_active = active;
    return (int)i;
}

static int all_resident(const aisim_kv_pool *p, const uint64_t *hashes, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (find_slot(p, hashes[i]) < 0)
            return 0;
    return 1;
}

static void take_ref(aisim_kv_pool *p, seq_table *t, int32_t b)
{
    if (p->ref[b] == 0) {
        /* only CACHED blocks can be found by hash, so ref 0 means inactive */
        lru_unlink(p, b);
        p->view.active++;
    }
    p->ref[b]++;
    t->blocks[t->len++] = b;
}

static void acquire_resident(aisim_kv_pool *p, seq_table *t, const uint64_t *hashes, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        take_ref(p, t, primary_copy(p, hashes[i]));
}

int aisim_kv_acquire(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes, size_t n)
{
    seq_table *t;
    int status;
    if (!p || (!hashes && n))
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    if (!all_resident(p, hashes, n))
        return AISIM_ENOTRESIDENT;
    status = reserve_table(t, n);
    if (status)
        return status;
    acquire_resident(p, t, hashes, n);
    return AISIM_OK;
}

/* ----------------------------------------------------------- allocation */

/* Returns whether b was the hash's last copy (the hash left the index). */
static int forget_copy(aisim_kv_pool *p, int32_t b)
{
    int64_t slot = find_slot(p, p->hash[b]);
    int32_t primary = p->slot_block[slot];
    int last = 0;
    if (primary == b) {
        last = p->dup_next[b] == NO_BLOCK;
        if (last)
            index_remove_slot(p, (uint32_t)slot);
        else
            p->slot_block[slot] = p->dup_next[b];
    } else {
        int32_t prev = primary;
        while (p->dup_next[prev] != b)
            prev = p->dup_next[prev];
        p->dup_next[prev] = p->dup_next[b];
    }
    p->dup_next[b] = NO_BLOCK;
    return last;
}

/* The caller made room with reserve_fresh(k). */
static int32_t take_fresh_block(aisim_kv_pool *p)
{
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
        p->view.free--;
    } else if (p->touched < p->n) {
        b = (int32_t)p->touched++;
        p->view.free--;
    } else {
        b = p->lru_head;
        lru_unlink(p, b);
        if (forget_copy(p, b) && p->log_on)
            p->log[p->view.logged++] = p->hash[b]; /* room made by reserve_fresh */
        p->hash[b] = 0;
        p->view.cached--;
        p->view.evictions++;
    }
    p->state[b] = BLOCK_PRIVATE;
    p->ref[b] = 1;
    p->view.active++;
    return b;
}

static void append_fresh(aisim_kv_pool *p, seq_table *t, uint32_t k)
{
    uint32_t i;
    for (i = 0; i < k; i++)
        t->blocks[t->len++] = take_fresh_block(p);
}

int aisim_kv_allocate(aisim_kv_pool *p, int32_t seq, uint32_t k)
{
    seq_table *t;
    int status;
    if (!p)
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    if (!fits(p, k, p->view.inactive))
        return AISIM_NOSPACE;
    status = reserve_table(t, k);
    if (!status)
        status = reserve_fresh(p, k);
    if (status)
        return status;
    append_fresh(p, t, k);
    return AISIM_OK;
}

/* Inactive prefix hits are pinned before evicting, so they cannot be the
 * victims that make room for the same request's fresh blocks. */
static uint32_t distinct_inactive_hits(aisim_kv_pool *p, const uint64_t *hashes, size_t n)
{
    uint32_t count = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        int32_t b = primary_copy(p, hashes[i]);
        if (p->ref[b] == 0 && !p->mark[b]) {
            p->mark[b] = 1;
            count++;
        }
    }
    for (i = 0; i < n; i++)
        p->mark[primary_copy(p, hashes[i])] = 0;
    return count;
}

int aisim_kv_acquire_allocate(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes,
                              size_t n, uint32_t k)
{
    seq_table *t;
    int status;
    if (!p || (!hashes && n))
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    if (!all_resident(p, hashes, n))
        return AISIM_ENOTRESIDENT;
    /* the hits are counted only when the free blocks fall short */
    if (!fits(p, k, 0) && !fits(p, k, p->view.inactive - distinct_inactive_hits(p, hashes, n)))
        return AISIM_NOSPACE;
    status = reserve_table(t, (uint64_t)n + k);
    if (!status)
        status = reserve_fresh(p, k);
    if (status)
        return status;
    acquire_resident(p, t, hashes, n);
    append_fresh(p, t, k);
    return AISIM_OK;
}

int aisim_kv_allocate_each(aisim_kv_pool *p, const int32_t *seqs, size_t n_seqs,
                           uint32_t k_each)
{
    size_t i;
    uint64_t total;
    int status = AISIM_OK;
    if (!p || (!seqs && n_seqs))
        return AISIM_EINVAL;
    for (i = 0; i < n_seqs; i++)
        if (!live_seq(p, seqs[i]))
            return AISIM_EBADSEQ;
    if (n_seqs > UINT32_MAX)
        return AISIM_NOSPACE;
    total = (uint64_t)n_seqs * k_each;
    if (!fits(p, total, p->view.inactive))
        return AISIM_NOSPACE;
    /* Size every table before the first append so that a failed realloc
     * leaves the pool untouched; `pending` covers a handle listed twice. */
    for (i = 0; i < n_seqs; i++)
        p->seqs[seqs[i]].pending += k_each;
    for (i = 0; i < n_seqs && !status; i++)
        status = reserve_table(&p->seqs[seqs[i]], p->seqs[seqs[i]].pending);
    for (i = 0; i < n_seqs; i++)
        p->seqs[seqs[i]].pending = 0;
    if (!status)
        status = reserve_fresh(p, total);
    if (status)
        return status;
    for (i = 0; i < n_seqs; i++)
        append_fresh(p, &p->seqs[seqs[i]], k_each);
    return AISIM_OK;
}

/* --------------------------------------------------------------- commit */

int aisim_kv_commit(aisim_kv_pool *p, int32_t seq, const uint64_t *hashes,
                    uint32_t first_block, uint32_t count)
{
    seq_table *t;
    uint32_t i;
    if (!p || (!hashes && count))
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    if ((uint64_t)first_block + count > t->len)
        return AISIM_EINVAL;
    for (i = 0; i < count; i++) {
        int32_t b = t->blocks[first_block + i];
        if (p->state[b] == BLOCK_CACHED && p->hash[b] != hashes[i])
            return AISIM_EHASHMISMATCH;
    }
    for (i = 0; i < count; i++) {
        int32_t b = t->blocks[first_block + i];
        int32_t primary;
        if (p->state[b] == BLOCK_CACHED)
            continue;
        p->state[b] = BLOCK_CACHED;
        p->hash[b] = hashes[i];
        p->dup_next[b] = NO_BLOCK;
        p->view.cached++;
        primary = primary_copy(p, hashes[i]);
        if (primary == NO_BLOCK) {
            index_insert(p, hashes[i], b);
        } else {
            while (p->dup_next[primary] != NO_BLOCK)
                primary = p->dup_next[primary];
            p->dup_next[primary] = b;
        }
    }
    return AISIM_OK;
}

/* -------------------------------------------------------------- release */

int aisim_kv_release(aisim_kv_pool *p, int32_t seq)
{
    seq_table *t;
    uint32_t i;
    if (!p)
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    for (i = t->len; i-- > 0;) {
        int32_t b = t->blocks[i];
        if (--p->ref[b] > 0)
            continue;
        p->view.active--;
        if (p->state[b] == BLOCK_CACHED) {
            lru_append(p, b);
        } else {
            p->state[b] = BLOCK_FREE;
            p->free_stack[p->n_free++] = b;
            p->view.free++;
        }
    }
    t->len = 0;
    t->live = 0;
    p->free_handles[p->n_free_handles++] = seq;
    p->view.live_seqs--;
    return AISIM_OK;
}

/* ---------------------------------------------- state_cache checkpoints */

/* engine/vllm_state_cache.py's StatePool (the twin): a sequence's cached blocks lose their
 * cache identity (they stay held, private), a released block still cached under a key is
 * freed, and a key's primary copy's references. */
int aisim_kv_uncache(aisim_kv_pool *p, int32_t seq)
{
    seq_table *t;
    uint32_t i;
    if (!p)
        return AISIM_EINVAL;
    t = live_seq(p, seq);
    if (!t)
        return AISIM_EBADSEQ;
    for (i = 0; i < t->len; i++) {
        int32_t b = t->blocks[i];
        if (p->state[b] != BLOCK_CACHED)
            continue;
        forget_copy(p, b);
        p->hash[b] = 0;
        p->state[b] = BLOCK_PRIVATE;
        p->view.cached--;
    }
    return AISIM_OK;
}

int aisim_kv_discard(aisim_kv_pool *p, int32_t block, uint64_t key)
{
    if (!p || block < 0)
        return AISIM_EINVAL;
    if ((uint32_t)block >= p->touched || p->ref[block] || p->state[block] != BLOCK_CACHED ||
        p->hash[block] != key)
        return 0;
    lru_unlink(p, block);
    forget_copy(p, block);
    p->hash[block] = 0;
    p->state[block] = BLOCK_FREE;
    p->view.cached--;
    p->free_stack[p->n_free++] = block;
    p->view.free++;
    return 1;
}

int aisim_kv_key_refs(const aisim_kv_pool *p, uint64_t key)
{
    int32_t b;
    if (!p)
        return AISIM_EINVAL;
    b = primary_copy(p, key);
    if (b == NO_BLOCK)
        return -1;
    return p->ref[b] > INT32_MAX ? INT32_MAX : (int)p->ref[b];
}

/* -------------------------------------------------------- eviction log */

int aisim_kv_log_evictions(aisim_kv_pool *p, int enabled)
{
    if (!p)
        return AISIM_EINVAL;
    p->log_on = enabled != 0;
    if (!p->log_on) {
        /* what was logged is dropped with the buffer: nobody is listening */
        free(p->log);
        p->log = NULL;
        p->log_cap = 0;
        p->view.logged = 0;
    }
    return AISIM_OK;
}

int aisim_kv_take_evicted(aisim_kv_pool *p, int absent_only, uint64_t *out, size_t cap)
{
    uint32_t i, n = 0;
    if (!p || (!out && cap))
        return AISIM_EINVAL;
    if (cap < p->view.logged)
        return AISIM_EINVAL;
    for (i = 0; i < p->view.logged; i++)
        if (!absent_only || find_slot(p, p->log[i]) < 0)
            out[n++] = p->log[i];
    p->view.logged = 0;
    return (int)n;
}

/* ---------------------------------------------------------------- check */

static int check_lists(const aisim_kv_pool *p, uint32_t *seen)
{
    uint32_t i, count = 0, steps = 0;
    int32_t b, prev = NO_BLOCK;
    if (p->view.free != p->n_free + (p->n - p->touched))
        return AISIM_ECORRUPT;
    for (i = 0; i < p->n_free; i++) {
        b = p->free_stack[i];
        if (b < 0 || (uint32_t)b >= p->touched || seen[b]++ || p->state[b] != BLOCK_FREE ||
            p->ref[b] != 0)
            return AISIM_ECORRUPT;
    }
    for (b = p->lru_head; b != NO_BLOCK; b = p->lru_next[b]) {
        if (b < 0 || (uint32_t)b >= p->touched || ++steps > p->touched)
            return AISIM_ECORRUPT;
        if (seen[b]++ || p->state[b] != BLOCK_CACHED || p->ref[b] != 0 ||
            p->lru_prev[b] != prev)
            return AISIM_ECORRUPT;
        prev = b;
        count++;
    }
    if (prev != p->lru_tail || count != p->view.inactive)
        return AISIM_ECORRUPT;
    for (i = 0; i < p->touched; i++) {
        /* exactly the unreferenced blocks sit on a list; lists were typed above */
        if ((seen[i] != 0) != (p->ref[i] == 0))
            return AISIM_ECORRUPT;
        if (p->state[i] == BLOCK_PRIVATE && p->ref[i] != 1)
            return AISIM_ECORRUPT;
        if (p->state[i] == BLOCK_FREE && p->ref[i] != 0)
            return AISIM_ECORRUPT;
    }
    return AISIM_OK;
}

static int check_index(const aisim_kv_pool *p, uint32_t *seen)
{
    uint32_t i, copies = 0, keys = 0, cached = 0;
    for (i = 0; i <= p->slot_mask; i++) {
        int32_t b = p->slot_block[i];
        uint32_t steps = 0;
        if (b == NO_BLOCK)
            continue;
        keys++;
        if (find_slot(p, p->slot_key[i]) != (int64_t)i)
            return AISIM_ECORRUPT;
        for (; b != NO_BLOCK; b = p->dup_next[b]) {
            if (b < 0 || (uint32_t)b >= p->touched || ++steps > p->touched || seen[b]++)
                return AISIM_ECORRUPT;
            if (p->state[b] != BLOCK_CACHED || p->hash[b] != p->slot_key[i])
                return AISIM_ECORRUPT;
            copies++;
        }
    }
    for (i = 0; i < p->touched; i++)
        cached += p->state[i] == BLOCK_CACHED;
    if (copies != cached || cached != p->view.cached || keys > cached)
        return AISIM_ECORRUPT;
    return AISIM_OK;
}

static int check_refs(const aisim_kv_pool *p, uint32_t *seen)
{
    uint32_t i, j, active = 0, live = 0, free_handles = 0;
    for (i = 0; i < p->n_seqs; i++) {
        const seq_table *t = &p->seqs[i];
        if (!t->live) {
            if (t->len)
                return AISIM_ECORRUPT;
            continue;
        }
        live++;
        for (j = 0; j < t->len; j++) {
            int32_t b = t->blocks[j];
            if (b < 0 || (uint32_t)b >= p->touched)
                return AISIM_ECORRUPT;
            seen[b]++;
        }
    }
    for (i = 0; i < p->touched; i++) {
        if (seen[i] != p->ref[i])
            return AISIM_ECORRUPT;
        active += p->ref[i] > 0;
    }
    for (i = 0; i < p->n_free_handles; i++) {
        int32_t h = p->free_handles[i];
        if (h < 0 || (uint32_t)h >= p->n_seqs || p->seqs[h].live)
            return AISIM_ECORRUPT;
        free_handles++;
    }
    if (active != p->view.active || live != p->view.live_seqs ||
        live + free_handles != p->n_seqs)
        return AISIM_ECORRUPT;
    if ((uint64_t)p->n_free + p->view.inactive + p->view.active != p->touched)
        return AISIM_ECORRUPT;
    return AISIM_OK;
}

int aisim_kv_check(const aisim_kv_pool *p)
{
    uint32_t *seen;
    int status;
    if (!p)
        return AISIM_EINVAL;
    if (p->view.logged > p->log_cap || (!p->log_on && p->log))
        return AISIM_ECORRUPT;
    seen = calloc(p->touched ? p->touched : 1, sizeof *seen);
    if (!seen)
        return AISIM_ENOMEM;
    status = check_lists(p, seen);
    if (!status) {
        memset(seen, 0, p->touched * sizeof *seen);
        status = check_index(p, seen);
    }
    if (!status) {
        memset(seen, 0, p->touched * sizeof *seen);
        status = check_refs(p, seen);
    }
    free(seen);
    return status;
}
