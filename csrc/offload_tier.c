/*
 * offload_tier.c: the block pool of a KV offload tier (G2 host, G3 storage),
 * see offload_tier.cdef.h. Entries live in a growing array (a free list
 * reuses the slots of removed ones) and are found through an open-addressing
 * table of (hash, entry index) slots (linear probing, backward-shift
 * deletion, at most half full): a probe compares hashes inside the table, so
 * a lookup costs one cache miss there, not one per probed entry (a prompt's
 * keys are thousands of random hashes per call; the batch loops also prefetch
 * the slots a few keys ahead); the LRU of resident unpinned entries is a doubly linked list
 * through the entries, oldest at the head. A shared epoch (a completed
 * transfer) appends its keys in ascending hash order, which is the order
 * (epoch, hash) of the reference's recency set. The Python twin is
 * aisimulate_core/kv/offload_tier.py's PyOffloadTier; both give the same
 * answers for every sequence of operations.
 */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "offload_tier.cdef.h"

enum { ABSENT = 0, PENDING = 1, RESIDENT = 2 };
#define NIL (-1)

typedef struct ot_entry {
    uint64_t h;
    int64_t pins;
    int32_t prev, next;   /* LRU links, or the free list's next */
    uint8_t state;        /* ABSENT marks a free entry */
    uint8_t in_lru;
} ot_entry;

typedef struct ot_slot {
    uint64_t h;
    int32_t e;            /* entry index + 1, 0 empty */
    int32_t unused;
} ot_slot;

/* how many keys ahead the batch loops prefetch their table slots */
#define AHEAD 8

struct aisim_offload_tier {
    aisim_ot_view view;
    ot_entry *entries;
    int32_t n_entries;    /* entries handed out so far (free ones included) */
    int32_t cap_entries;
    int32_t free_head;
    ot_slot *table;
    size_t mask;
    int32_t lru_head, lru_tail;
    uint64_t *scratch;    /* sorted copies of argument arrays */
    size_t scratch_cap;
};

static size_t home(const aisim_offload_tier *t, uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return (size_t)h & t->mask;
}

/* the table slot of h, or of the empty slot where it would go */
static size_t slot_of(const aisim_offload_tier *t, uint64_t h)
{
    size_t i = home(t, h);
    while (t->table[i].e && t->table[i].h != h)
        i = (i + 1) & t->mask;
    return i;
}

static inline void prefetch_slot(const aisim_offload_tier *t, uint64_t h)
{
    __builtin_prefetch(&t->table[home(t, h)]);
}

/* prefetch the slot of keys[i + AHEAD] (of the walk's order: reversed when `reverse`) */
static inline void prefetch_ahead(const aisim_offload_tier *t, const uint64_t *keys, size_t n,
                                  size_t i, int reverse)
{
    if (i + AHEAD < n)
        prefetch_slot(t, keys[reverse ? n - 1 - (i + AHEAD) : i + AHEAD]);
}

static int32_t find(const aisim_offload_tier *t, uint64_t h)
{
    int32_t e = t->table[slot_of(t, h)].e;
    return e ? e - 1 : NIL;
}

static int grow_table(aisim_offload_tier *t, size_t slots)
{
    ot_slot *table = calloc(slots, sizeof(ot_slot));
    if (!table)
        return AISIM_ENOMEM;
    ot_slot *old = t->table;
    size_t old_slots = t->table ? t->mask + 1 : 0;
    t->table = table;
    t->mask = slots - 1;
    for (size_t i = 0; i < old_slots; i++)
        if (old[i].e)
            t->table[slot_of(t, old[i].h)] = old[i];
    free(old);
    return AISIM_OK;
}

/* room for `extra` more entries, entries array and table both */
static int make_room(aisim_offload_tier *t, uint64_t extra)
{
    uint64_t need = t->view.entries + extra;
    if (need > (uint64_t)INT32_MAX / 4)
        return AISIM_ENOMEM;
    size_t slots = t->mask + 1;
    if (2 * need > slots) {
        while (2 * need > slots)
            slots *= 2;
        int status = grow_table(t, slots);
        if (status)
            return status;
    }
    /* free entries first; then new ones at the end */
    uint64_t free_count = (uint64_t)t->n_entries - t->view.entries;
    if (extra > free_count) {
        uint64_t want = (uint64_t)t->n_entries + (extra - free_count);
        if (want > (uint64_t)t->cap_entries) {
            uint64_t cap = t->cap_entries ? (uint64_t)t->cap_entries : 16;
            while (cap < want)
                cap *= 2;
            ot_entry *entries = realloc(t->entries, cap * sizeof(ot_entry));
            if (!entries)
                return AISIM_ENOMEM;
            t->entries = entries;
            t->cap_entries = (int32_t)cap;
        }
    }
    return AISIM_OK;
}

static uint64_t *scratch(aisim_offload_tier *t, size_t n)
{
    if (n > t->scratch_cap) {
        size_t cap = t->scratch_cap ? t->scratch_cap : 16;
        while (cap < n)
            cap *= 2;
        uint64_t *s = realloc(t->scratch, cap * sizeof(uint64_t));
        if (!s)
            return NULL;
        t->scratch = s;
        t->scratch_cap = cap;
    }
    return t->scratch;
}

/* `a` sorted ascending, `tmp` (n values) as the other buffer: insertion sort for a few keys,
 * else an LSD radix sort by bytes (every histogram from one read), which for hundreds of
 * random hashes is several times quicker than qsort's compare calls */
static void sort_u64(uint64_t *a, uint64_t *tmp, size_t n)
{
    if (n < 32) {
        for (size_t i = 1; i < n; i++) {
            uint64_t x = a[i];
            size_t j = i;
            while (j && a[j - 1] > x) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    size_t counts[8][256];
    memset(counts, 0, sizeof(counts));
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 8; d++)
            counts[d][(a[i] >> (8 * d)) & 0xFF]++;
    uint64_t *src = a, *dst = tmp;
    for (int d = 0; d < 8; d++) {
        size_t *c = counts[d];
        size_t sum = 0;
        for (int v = 0; v < 256; v++) {
            size_t k = c[v];
            c[v] = sum;
            sum += k;
        }
        for (size_t i = 0; i < n; i++)
            dst[c[(src[i] >> (8 * d)) & 0xFF]++] = src[i];
        uint64_t *swap = src;
        src = dst;
        dst = swap;
    }
    /* (an even number of passes: the sorted keys are back in `a`) */
}

/* keys sorted into scratch; AISIM_EINVAL when one repeats */
static int sorted_distinct(aisim_offload_tier *t, const uint64_t *keys, size_t n, uint64_t **out)
{
    uint64_t *s = scratch(t, 2 * n);
    if (n && !s)
        return AISIM_ENOMEM;
    if (n) {
        memcpy(s, keys, n * sizeof(uint64_t));
        sort_u64(s, s + n, n);
    }
    *out = s;
    for (size_t i = 1; i < n; i++)
        if (s[i] == s[i - 1])
            return AISIM_EINVAL;
    return AISIM_OK;
}

static int contains_sorted(const uint64_t *s, size_t n, uint64_t h)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid] < h)
            lo = mid + 1;
        else if (s[mid] > h)
            hi = mid;
        else
            return 1;
    }
    return 0;
}

static void lru_unlink(aisim_offload_tier *t, int32_t e)
{
    ot_entry *x = &t->entries[e];
    if (!x->in_lru)
        return;
    if (x->prev != NIL)
        t->entries[x->prev].next = x->next;
    else
        t->lru_head = x->next;
    if (x->next != NIL)
        t->entries[x->next].prev = x->prev;
    else
        t->lru_tail = x->prev;
    x->prev = x->next = NIL;
    x->in_lru = 0;
}

static void lru_append(aisim_offload_tier *t, int32_t e)
{
    ot_entry *x = &t->entries[e];
    x->prev = t->lru_tail;
    x->next = NIL;
    if (t->lru_tail != NIL)
        t->entries[t->lru_tail].next = e;
    else
        t->lru_head = e;
    t->lru_tail = e;
    x->in_lru = 1;
}

static int32_t new_entry(aisim_offload_tier *t, uint64_t h)
{
    int32_t e;
    if (t->free_head != NIL) {
        e = t->free_head;
        t->free_head = t->entries[e].next;
    } else {
        e = t->n_entries++;
    }
    ot_entry *x = &t->entries[e];
    x->h = h;
    x->pins = 0;
    x->prev = x->next = NIL;
    x->state = PENDING;
    x->in_lru = 0;
    ot_slot *slot = &t->table[slot_of(t, h)];
    slot->h = h;
    slot->e = e + 1;
    t->view.entries++;
    t->view.pending++;
    return e;
}

static void remove_entry(aisim_offload_tier *t, int32_t e)
{
    ot_entry *x = &t->entries[e];
    lru_unlink(t, e);
    if (x->state == PENDING)
        t->view.pending--;
    /* backward-shift deletion */
    size_t i = slot_of(t, x->h);
    size_t j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        if (!t->table[j].e)
            break;
        size_t k = home(t, t->table[j].h);
        /* move j back to i when its home k is not cyclically in (i, j] */
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            t->table[i] = t->table[j];
            i = j;
        }
    }
    t->table[i].e = 0;
    x->state = ABSENT;
    x->next = t->free_head;
    t->free_head = e;
    t->view.entries--;
}

int aisim_ot_new(aisim_offload_tier **out, uint64_t capacity)
{
    if (!out || capacity == 0)
        return AISIM_EINVAL;
    aisim_offload_tier *t = calloc(1, sizeof(*t));
    if (!t)
        return AISIM_ENOMEM;
    t->view.capacity = capacity;
    t->free_head = t->lru_head = t->lru_tail = NIL;
    if (grow_table(t, 32)) {
        free(t);
        return AISIM_ENOMEM;
    }
    *out = t;
    return AISIM_OK;
}

int aisim_ot_free(aisim_offload_tier *t)
{
    if (t) {
        free(t->entries);
        free(t->table);
        free(t->scratch);
        free(t);
    }
    return AISIM_OK;
}

int aisim_ot_view_of(const aisim_offload_tier *t, const aisim_ot_view **out)
{
    if (!t || !out)
        return AISIM_EINVAL;
    *out = &t->view;
    return AISIM_OK;
}

int aisim_ot_state(const aisim_offload_tier *t, uint64_t h, int64_t *pins)
{
    if (!t)
        return AISIM_EINVAL;
    int32_t e = find(t, h);
    if (pins)
        *pins = e == NIL ? 0 : t->entries[e].pins;
    return e == NIL ? ABSENT : t->entries[e].state;
}

int64_t aisim_ot_absent(const aisim_offload_tier *t, const uint64_t *hashes, size_t n,
                        int64_t *absent)
{
    if (!t || (n && (!hashes || !absent)))
        return AISIM_EINVAL;
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(t, hashes, n, i, 0);
        if (find(t, hashes[i]) == NIL)
            absent[k++] = (int64_t)i;
    }
    return k;
}

int64_t aisim_ot_leading(const aisim_offload_tier *t, const uint64_t *hashes, size_t n)
{
    if (!t || (n && !hashes))
        return AISIM_EINVAL;
    size_t i = 0;
    while (i < n && find(t, hashes[i]) != NIL)
        i++;
    return (int64_t)i;
}

static int64_t touch_one(aisim_offload_tier *t, uint64_t h)
{
    int32_t e = find(t, h);
    if (e == NIL)
        return 0;
    if (t->entries[e].in_lru) {
        lru_unlink(t, e);
        lru_append(t, e);
    }
    return 1;
}

int64_t aisim_ot_touch(aisim_offload_tier *t, const uint64_t *hashes, size_t n, int reverse)
{
    if (!t || (n && !hashes))
        return AISIM_EINVAL;
    int64_t present = 0;
    for (size_t i = 0; i < n; i++) {
        /* two stages ahead: the slot of the key 2 * AHEAD on, then the entry of the key
         * AHEAD on, whose slot came in meanwhile (a home slot that holds another key is
         * left to the probe) */
        prefetch_ahead(t, hashes, n, i + AHEAD, reverse);
        if (i + AHEAD < n) {
            uint64_t h = hashes[reverse ? n - 1 - (i + AHEAD) : i + AHEAD];
            const ot_slot *slot = &t->table[home(t, h)];
            if (slot->e && slot->h == h)
                __builtin_prefetch(&t->entries[slot->e - 1]);
        }
        present += touch_one(t, hashes[reverse ? n - 1 - i : i]);
    }
    return present;
}

int aisim_ot_reserve(aisim_offload_tier *t, const uint64_t *keys, size_t n,
                     const uint64_t *protect, size_t n_protect,
                     uint64_t *evicted, int64_t *n_evicted)
{
    if (!t || (n && (!keys || !evicted)) || (n_protect && !protect) || !n_evicted)
        return AISIM_EINVAL;
    *n_evicted = 0;
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(t, keys, n, i, 0);
        if (find(t, keys[i]) != NIL)
            return AISIM_EINVAL;
    }
    uint64_t *prot = NULL;
    if (n > 1) {
        /* repeated keys, on a sorted copy (a cohort is a prompt's new blocks: hundreds, too
         * many to compare pairwise); the scratch it sorts in is the protect set's next */
        int status = sorted_distinct(t, keys, n, &prot);
        if (status)
            return status;
        prot = NULL;
    }
    if (n_protect) {
        int status = sorted_distinct(t, protect, n_protect, &prot);
        if (status == AISIM_EINVAL) {   /* repeats are harmless in a protect set: dedupe */
            size_t m = 1;
            for (size_t i = 1; i < n_protect; i++)
                if (prot[i] != prot[m - 1])
                    prot[m++] = prot[i];
            n_protect = m;
        } else if (status) {
            return status;
        }
    }
    uint64_t free_slots = t->view.capacity - t->view.entries;
    uint64_t need = n > free_slots ? n - free_slots : 0;
    /* count the victims first: nothing changes on refusal */
    uint64_t found = 0;
    for (int32_t e = t->lru_head; e != NIL && found < need; e = t->entries[e].next)
        if (!n_protect || !contains_sorted(prot, n_protect, t->entries[e].h))
            found++;
    if (found < need)
        return AISIM_NOSPACE;
    int status = make_room(t, n > need ? n - need : 0);
    if (status)
        return status;
    int32_t e = t->lru_head;
    int64_t k = 0;
    while ((uint64_t)k < need) {
        int32_t next = t->entries[e].next;
        if (!n_protect || !contains_sorted(prot, n_protect, t->entries[e].h)) {
            evicted[k++] = t->entries[e].h;
            remove_entry(t, e);
        }
        e = next;
    }
    t->view.evictions += (uint64_t)k;
    *n_evicted = k;
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(t, keys, n, i, 0);
        new_entry(t, keys[i]);
    }
    return AISIM_OK;
}

/* the state change `want` of every key, checked first (nothing changes on
 * misuse): 1 complete (pending), 2 pin (resident), 3 unpin (resident pinned),
 * 4 discard (pending); an entry joining the LRU joins in ascending hash order
 * when `shared`, else in the given order */
static int change_state(aisim_offload_tier *t, const uint64_t *keys, size_t n, int shared, int want)
{
    if (!t || (n && !keys))
        return AISIM_EINVAL;
    uint64_t *s;
    int status = sorted_distinct(t, keys, n, &s);
    if (status)
        return status;
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(t, keys, n, i, 0);
        int32_t e = find(t, keys[i]);
        if (e == NIL)
            return AISIM_EINVAL;
        const ot_entry *x = &t->entries[e];
        int pending = want == 1 || want == 4;
        if ((pending && x->state != PENDING) || (!pending && x->state != RESIDENT)
            || (want == 3 && x->pins == 0))
            return AISIM_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        prefetch_ahead(t, shared ? s : keys, n, i, 0);
        uint64_t h = shared ? s[i] : keys[i];
        int32_t e = find(t, h);
        ot_entry *x = &t->entries[e];
        if (want == 4) {
            remove_entry(t, e);
        } else if (want == 1) {
            x->state = RESIDENT;
            t->view.pending--;
            lru_append(t, e);
        } else if (want == 2) {
            if (x->pins == 0) {
                lru_unlink(t, e);
                t->view.pinned++;
            }
            x->pins++;
        } else {
            x->pins--;
            if (x->pins == 0) {
                t->view.pinned--;
                lru_append(t, e);
            }
        }
    }
    return AISIM_OK;
}

int aisim_ot_complete(aisim_offload_tier *t, const uint64_t *keys, size_t n, int shared)
{
    return change_state(t, keys, n, shared, 1);
}

int aisim_ot_pin(aisim_offload_tier *t, const uint64_t *keys, size_t n)
{
    return change_state(t, keys, n, 0, 2);
}

int aisim_ot_unpin(aisim_offload_tier *t, const uint64_t *keys, size_t n, int shared)
{
    return change_state(t, keys, n, shared, 3);
}

int aisim_ot_discard(aisim_offload_tier *t, const uint64_t *keys, size_t n)
{
    return change_state(t, keys, n, 0, 4);
}

int64_t aisim_ot_lru(const aisim_offload_tier *t, uint64_t *out, size_t cap)
{
    if (!t || (cap && !out))
        return AISIM_EINVAL;
    int64_t n = 0;
    for (int32_t e = t->lru_head; e != NIL; e = t->entries[e].next) {
        if ((size_t)n < cap)
            out[n] = t->entries[e].h;
        n++;
    }
    return n;
}

int aisim_ot_check(const aisim_offload_tier *t)
{
    if (!t)
        return AISIM_EINVAL;
    uint64_t entries = 0, pending = 0, pinned = 0, in_lru = 0, lru_len = 0;
    for (int32_t e = 0; e < t->n_entries; e++) {
        const ot_entry *x = &t->entries[e];
        if (x->state == ABSENT)
            continue;
        entries++;
        if (find(t, x->h) != e)
            return AISIM_ECORRUPT;
        if (x->state == PENDING && (x->pins || x->in_lru))
            return AISIM_ECORRUPT;
        pending += x->state == PENDING;
        pinned += x->state == RESIDENT && x->pins > 0;
        if (x->state == RESIDENT && (x->pins > 0) == (x->in_lru != 0))
            return AISIM_ECORRUPT;
        in_lru += x->in_lru;
    }
    int32_t prev = NIL;
    for (int32_t e = t->lru_head; e != NIL; e = t->entries[e].next) {
        if (t->entries[e].prev != prev || !t->entries[e].in_lru || ++lru_len > entries)
            return AISIM_ECORRUPT;
        prev = e;
    }
    if (prev != t->lru_tail || lru_len != in_lru || entries != t->view.entries
        || pending != t->view.pending || pinned != t->view.pinned
        || entries > t->view.capacity)
        return AISIM_ECORRUPT;
    return AISIM_OK;
}
