/*
 * hash_counts.c: an open-addressing map u64 -> int64 (linear probing,
 * backward-shift deletion, at most half full), with the whole-chain updates
 * of the KV router's per-scheduler state. The Python twin is
 * aisimulate_core/kv/hash_counts.py (a dict); both give the same answers for
 * every sequence of operations, including the odd ones (duplicate hashes in
 * a chain, counts reaching 0), which is why presence is a flag of its own.
 */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "hash_counts.cdef.h"

/* one slot per cache line fetch: key, count and flag side by side */
typedef struct hc_slot {
    uint64_t key;
    int64_t count;
    uint8_t used;       /* 0 empty, 1 present, 2 present and marked by the operation running */
} hc_slot;

struct aisim_hash_counts {
    aisim_hc_view view;
    size_t mask;        /* slots - 1 */
    hc_slot *slots;
    int64_t *scratch;   /* new counts of a chain update, read before any is written */
    size_t scratch_cap;
};

static size_t home(const aisim_hash_counts *m, uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return (size_t)h & m->mask;
}

/* the slot of h, or of the empty slot where it would go */
static size_t find(const aisim_hash_counts *m, uint64_t h)
{
    size_t i = home(m, h);
    while (m->slots[i].used && m->slots[i].key != h)
        i = (i + 1) & m->mask;
    return i;
}

static int allocate(aisim_hash_counts *m, size_t slots)
{
    m->slots = calloc(slots, sizeof(hc_slot));
    if (!m->slots)
        return AISIM_ENOMEM;
    m->mask = slots - 1;
    return AISIM_OK;
}

/* room for `extra` more keys, keeping the table at most half full */
static int reserve(aisim_hash_counts *m, uint64_t extra)
{
    uint64_t need = m->view.len + extra;
    size_t slots = m->mask + 1;
    if (need * 2 <= slots)
        return AISIM_OK;
    while (need * 2 > slots) {
        if (slots > ((size_t)-1) / 4)
            return AISIM_ENOMEM;
        slots *= 2;
    }
    aisim_hash_counts old = *m;
    if (allocate(m, slots) != AISIM_OK) {
        *m = old;
        return AISIM_ENOMEM;
    }
    for (size_t i = 0; i <= old.mask; i++) {
        if (old.slots[i].used)
            m->slots[find(m, old.slots[i].key)] = old.slots[i];
    }
    free(old.slots);
    return AISIM_OK;
}

static void put(aisim_hash_counts *m, uint64_t h, int64_t count)
{
    hc_slot *slot = &m->slots[find(m, h)];
    if (!slot->used) {
        slot->used = 1;
        slot->key = h;
        m->view.len++;
    }
    slot->count = count;
}

static void erase_slot(aisim_hash_counts *m, size_t i)
{
    /* backward shift: pull later members of the probe run into the hole */
    size_t j = i;
    hc_slot *slots = m->slots;
    slots[i].used = 0;
    m->view.len--;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!slots[j].used)
            return;
        size_t k = home(m, slots[j].key);
        /* j's entry may move to i only if its home is not in (i, j] cyclically */
        int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            slots[i] = slots[j];   /* with its mark, if the running operation set one */
            slots[j].used = 0;
            i = j;
        }
    }
}

static int scratch(aisim_hash_counts *m, size_t n)
{
    if (n <= m->scratch_cap)
        return AISIM_OK;
    int64_t *fresh = realloc(m->scratch, n * sizeof(int64_t));
    if (!fresh)
        return AISIM_ENOMEM;
    m->scratch = fresh;
    m->scratch_cap = n;
    return AISIM_OK;
}

int aisim_hc_new(aisim_hash_counts **out)
{
    if (!out)
        return AISIM_EINVAL;
    aisim_hash_counts *m = calloc(1, sizeof(*m));
    if (!m)
        return AISIM_ENOMEM;
    if (allocate(m, 16) != AISIM_OK) {
        free(m);
        return AISIM_ENOMEM;
    }
    *out = m;
    return AISIM_OK;
}

int aisim_hc_free(aisim_hash_counts *m)
{
    if (m) {
        free(m->slots);
        free(m->scratch);
        free(m);
    }
    return AISIM_OK;
}

int aisim_hc_view_of(const aisim_hash_counts *m, const aisim_hc_view **out)
{
    if (!m || !out)
        return AISIM_EINVAL;
    *out = &m->view;
    return AISIM_OK;
}

int aisim_hc_get(const aisim_hash_counts *m, uint64_t h, int64_t *out)
{
    if (!m || !out)
        return AISIM_EINVAL;
    const hc_slot *slot = &m->slots[find(m, h)];
    if (!slot->used)
        return 0;
    *out = slot->count;
    return 1;
}

int aisim_hc_items(const aisim_hash_counts *m, uint64_t *keys, int64_t *counts, size_t cap)
{
    if (!m || ((!keys || !counts) && cap))
        return AISIM_EINVAL;
    size_t n = 0;
    for (size_t i = 0; i <= m->mask && n < cap; i++) {
        if (m->slots[i].used) {
            keys[n] = m->slots[i].key;
            counts[n] = m->slots[i].count;
            n++;
        }
    }
    return (int)n;
}

int64_t aisim_hc_held_prefix(const aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    size_t low = 0, high = n;
    while (low < high) {
        size_t middle = (low + high) / 2;
        if (m->slots[find(m, hashes[middle])].used)
            low = middle + 1;
        else
            high = middle;
    }
    return (int64_t)low;
}

int aisim_hc_add_chain(aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    size_t held = (size_t)aisim_hc_held_prefix(m, hashes, n);
    if (scratch(m, held) != AISIM_OK || reserve(m, n - held) != AISIM_OK)
        return AISIM_ENOMEM;
    for (size_t i = 0; i < held; i++) {
        const hc_slot *slot = &m->slots[find(m, hashes[i])];
        if (!slot->used)
            return AISIM_EINVAL;   /* not a union of whole chains: the twin's lookup fails */
        m->scratch[i] = slot->count + 1;
    }
    for (size_t i = 0; i < held; i++)
        put(m, hashes[i], m->scratch[i]);
    for (size_t i = held; i < n; i++)
        put(m, hashes[i], 1);
    return AISIM_OK;
}

int aisim_hc_drop_chain(aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    size_t low = 0, high = n;
    while (low < high) {
        size_t middle = (low + high) / 2;
        const hc_slot *slot = &m->slots[find(m, hashes[middle])];
        if (!slot->used)
            return AISIM_EINVAL;
        if (slot->count > 1)
            low = middle + 1;
        else
            high = middle;
    }
    if (scratch(m, low) != AISIM_OK)
        return AISIM_ENOMEM;
    /* check before changing anything: every hash read or removed is present, once */
    for (size_t i = 0; i < low; i++) {
        const hc_slot *slot = &m->slots[find(m, hashes[i])];
        if (!slot->used)
            return AISIM_EINVAL;
        m->scratch[i] = slot->count - 1;
    }
    /* each removed hash present and listed once: marked 2 while checking */
    int status = AISIM_OK;
    size_t marked = low;
    for (; marked < n; marked++) {
        hc_slot *slot = &m->slots[find(m, hashes[marked])];
        if (slot->used != 1) {
            status = AISIM_EINVAL;   /* absent, or a repeat the twin could not delete twice */
            break;
        }
        slot->used = 2;
    }
    if (status != AISIM_OK) {
        for (size_t i = low; i < marked; i++)
            m->slots[find(m, hashes[i])].used = 1;
        return status;
    }
    for (size_t i = 0; i < low; i++)
        put(m, hashes[i], m->scratch[i]);   /* keeps the mark of a hash also in the tail */
    for (size_t i = low; i < n; i++)
        erase_slot(m, find(m, hashes[i]));  /* marks travel with moved slots, then go */
    return AISIM_OK;
}

int aisim_hc_insert_all(aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    if (reserve(m, n) != AISIM_OK)
        return AISIM_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        hc_slot *slot = &m->slots[find(m, hashes[i])];
        if (!slot->used) {
            slot->used = 1;
            slot->key = hashes[i];
            slot->count = 1;
            m->view.len++;
        }
    }
    return AISIM_OK;
}

int aisim_hc_remove_all(aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t slot = find(m, hashes[i]);
        if (m->slots[slot].used)
            erase_slot(m, slot);
    }
    return AISIM_OK;
}

int64_t aisim_hc_leading(const aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    size_t i = 0;
    while (i < n && m->slots[find(m, hashes[i])].used)
        i++;
    return (int64_t)i;
}

int64_t aisim_hc_leading_absent(const aisim_hash_counts *m, const uint64_t *hashes, size_t n)
{
    if (!m || (!hashes && n))
        return AISIM_EINVAL;
    size_t i = 0;
    while (i < n && !m->slots[find(m, hashes[i])].used)
        i++;
    return (int64_t)i;
}

int aisim_hc_clear(aisim_hash_counts *m)
{
    if (!m)
        return AISIM_EINVAL;
    if (m->view.len)
        memset(m->slots, 0, (m->mask + 1) * sizeof(hc_slot));
    m->view.len = 0;
    return AISIM_OK;
}

int aisim_hc_set(aisim_hash_counts *m, uint64_t h, int64_t count)
{
    if (!m)
        return AISIM_EINVAL;
    if (reserve(m, 1) != AISIM_OK)
        return AISIM_ENOMEM;
    put(m, h, count);
    return AISIM_OK;
}

int aisim_hc_remove(aisim_hash_counts *m, uint64_t h)
{
    if (!m)
        return AISIM_EINVAL;
    size_t slot = find(m, h);
    if (!m->slots[slot].used)
        return 0;
    erase_slot(m, slot);
    return 1;
}

int aisim_hc_intern(aisim_hash_counts *m, const uint64_t *raw, size_t n, uint32_t *out)
{
    if (!m || ((!raw || !out) && n))
        return AISIM_EINVAL;
    /* room for the ids up front (regrowing from a small table costs more than the
     * interning), but at most 2^16 at once: a large trace's ids repeat */
    if (reserve(m, n < 65536 ? n : 65536) != AISIM_OK)
        return AISIM_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        hc_slot *slot = &m->slots[find(m, raw[k])];
        if (!slot->used) {
            if (m->view.len > UINT32_MAX)
                return AISIM_EINVAL;   /* (dense ids are u32: no trace holds 2^32 blocks) */
            /* grown one key at a time: a trace's ids repeat, room for all n would waste */
            if ((m->view.len + 1) * 2 > m->mask + 1) {
                if (reserve(m, 1) != AISIM_OK)
                    return AISIM_ENOMEM;
                slot = &m->slots[find(m, raw[k])];
            }
            slot->used = 1;
            slot->key = raw[k];
            slot->count = (int64_t)m->view.len++;
        }
        out[k] = (uint32_t)slot->count;
    }
    return AISIM_OK;
}
