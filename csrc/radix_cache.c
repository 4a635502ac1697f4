/*
 * radix_cache.c: SGLang's radix-tree KV cache (kv/radix_cache.py's RadixCache is the twin:
 * the same operations in the same order, so the same tree, stamps and counts).
 *
 * Nodes live in one array, reused through a free list under a new generation. Each node owns
 * a copy of its edge's tokens (`tok` holds depths tok_base.. of the path; a split leaves the
 * lower part's buffer in place and copies the upper part). Children are found through one
 * open-addressing table keyed by (parent, first page of the edge), linear probing with
 * backward-shift deletion. Evictable leaves sit in an indexed binary min-heap on (access,
 * seq): the twin's heap with lazy deletion pops the same live entries in the same order, seq
 * being bumped at each (re)indexing as the twin's.
 */
#include <stdlib.h>
#include <string.h>

#include "aisim.h"
#include "radix_cache.cdef.h"

#define NO_NODE (-1)

typedef struct rx_node {
    int64_t start, end;        /* the edge: depths [start, end) */
    int64_t lock;
    int64_t access;
    uint64_t seq;              /* heap key tie-break, set at each indexing */
    uint64_t key;              /* hash of (parent, first page of the edge) */
    uint32_t *tok;             /* tokens of depths [tok_base, tok_base + tok_len) */
    int64_t tok_base;
    int64_t tok_len;
    int32_t parent;
    int32_t children;
    int32_t heap_pos;          /* -1: not an indexed leaf */
    uint32_t gen;
    int32_t live;
    int32_t next_free;
} rx_node;

struct aisim_radix {
    aisim_radix_view view;
    rx_node *nodes;
    size_t n_nodes, cap_nodes;
    int32_t free_list;
    /* child table */
    int32_t *slots;            /* node index or NO_NODE */
    size_t mask;
    size_t used;
    /* eviction heap of node indices */
    int32_t *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    /* eviction log */
    int64_t *log_spans;
    size_t cap_log;
    uint32_t *log_tokens;
    size_t n_log_tokens, cap_log_tokens;
};

/* ------------------------------------------------------------------ helpers */

static int64_t handle_of(const aisim_radix *c, int32_t i)
{
    return ((int64_t)c->nodes[i].gen << 32) | (int64_t)i;
}

/* the index of a live handle, or NO_NODE */
static int32_t index_of(const aisim_radix *c, int64_t handle)
{
    if (handle < 0)
        return NO_NODE;
    uint64_t i = (uint64_t)handle & 0xFFFFFFFFull;
    uint32_t gen = (uint32_t)((uint64_t)handle >> 32);
    if (i >= c->n_nodes || !c->nodes[i].live || c->nodes[i].gen != gen)
        return NO_NODE;
    return (int32_t)i;
}

static const uint32_t *edge_at(const rx_node *n, int64_t depth)
{
    return n->tok + (depth - n->tok_base);
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t page_key(const aisim_radix *c, int32_t parent, const uint32_t *page)
{
    uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(parent + 1);
    int64_t ps = c->view.page_size;
    for (int64_t i = 0; i < ps; i++)
        h = mix(h ^ page[i]) + (uint64_t)i;
    return mix(h);
}

static int same_page(const aisim_radix *c, const uint32_t *a, const uint32_t *b)
{
    return memcmp(a, b, sizeof(uint32_t) * (size_t)c->view.page_size) == 0;
}

/* ------------------------------------------------------------------ child table */

static size_t slot_find(const aisim_radix *c, int32_t parent, const uint32_t *page, uint64_t key)
{
    size_t i = (size_t)key & c->mask;
    for (;;) {
        int32_t s = c->slots[i];
        if (s == NO_NODE)
            return i;
        const rx_node *n = &c->nodes[s];
        if (n->key == key && n->parent == parent && same_page(c, edge_at(n, n->start), page))
            return i;
        i = (i + 1) & c->mask;
    }
}

static int32_t find_child(const aisim_radix *c, int32_t parent, const uint32_t *page)
{
    uint64_t key = page_key(c, parent, page);
    return c->slots[slot_find(c, parent, page, key)];
}

static int table_grow(aisim_radix *c)
{
    size_t cap = (c->mask + 1) * 2;
    int32_t *slots = malloc(cap * sizeof(int32_t));
    if (!slots)
        return AISIM_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        slots[i] = NO_NODE;
    for (size_t i = 0; i <= c->mask; i++) {
        int32_t s = c->slots[i];
        if (s == NO_NODE)
            continue;
        size_t j = (size_t)c->nodes[s].key & (cap - 1);
        while (slots[j] != NO_NODE)
            j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    free(c->slots);
    c->slots = slots;
    c->mask = cap - 1;
    return AISIM_OK;
}

/* room for one more entry (done before any change, so that a failure changes nothing) */
static int table_reserve(aisim_radix *c)
{
    if (2 * (c->used + 1) > c->mask + 1)
        return table_grow(c);
    return AISIM_OK;
}

/* enter node i (its parent and key set) */
static void table_put(aisim_radix *c, int32_t i)
{
    rx_node *n = &c->nodes[i];
    size_t j = slot_find(c, n->parent, edge_at(n, n->start), n->key);
    c->slots[j] = i;
    c->used++;
}

static void table_delete_at(aisim_radix *c, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & c->mask;
        int32_t s = c->slots[j];
        if (s == NO_NODE)
            break;
        size_t home = (size_t)c->nodes[s].key & c->mask;
        /* move s back into the hole unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            c->slots[i] = s;
            i = j;
        }
    }
    c->slots[i] = NO_NODE;
    c->used--;
}

/* the slot holding node i */
static size_t table_slot_of(const aisim_radix *c, int32_t i)
{
    size_t j = (size_t)c->nodes[i].key & c->mask;
    while (c->slots[j] != i)
        j = (j + 1) & c->mask;
    return j;
}

/* ------------------------------------------------------------------ eviction heap */

static int heap_less(const aisim_radix *c, int32_t a, int32_t b)
{
    const rx_node *x = &c->nodes[a], *y = &c->nodes[b];
    if (x->access != y->access)
        return x->access < y->access;
    return x->seq < y->seq;
}

static void heap_set(aisim_radix *c, size_t pos, int32_t i)
{
    c->heap[pos] = i;
    c->nodes[i].heap_pos = (int32_t)pos;
}

static void sift_up(aisim_radix *c, size_t pos)
{
    int32_t i = c->heap[pos];
    while (pos > 0) {
        size_t up = (pos - 1) / 2;
        if (!heap_less(c, i, c->heap[up]))
            break;
        heap_set(c, pos, c->heap[up]);
        pos = up;
    }
    heap_set(c, pos, i);
}

static void sift_down(aisim_radix *c, size_t pos)
{
    int32_t i = c->heap[pos];
    size_t n = c->n_heap;
    for (;;) {
        size_t l = 2 * pos + 1;
        if (l >= n)
            break;
        size_t m = l;
        if (l + 1 < n && heap_less(c, c->heap[l + 1], c->heap[l]))
            m = l + 1;
        if (!heap_less(c, c->heap[m], i))
            break;
        heap_set(c, pos, c->heap[m]);
        pos = m;
    }
    heap_set(c, pos, i);
}

static void heap_remove(aisim_radix *c, int32_t i)
{
    int32_t pos = c->nodes[i].heap_pos;
    if (pos < 0)
        return;
    c->nodes[i].heap_pos = -1;
    c->n_heap--;
    if ((size_t)pos == c->n_heap)
        return;
    int32_t moved = c->heap[c->n_heap];
    heap_set(c, (size_t)pos, moved);
    sift_up(c, (size_t)pos);
    sift_down(c, (size_t)c->nodes[moved].heap_pos);
}

/* the heap holds at most one entry per node: room for every node is reserved with it */
static int heap_reserve(aisim_radix *c, size_t nodes)
{
    if (nodes <= c->cap_heap)
        return AISIM_OK;
    size_t cap = c->cap_heap ? c->cap_heap : 64;
    while (cap < nodes)
        cap *= 2;
    int32_t *heap = realloc(c->heap, cap * sizeof(int32_t));
    if (!heap)
        return AISIM_ENOMEM;
    c->heap = heap;
    c->cap_heap = cap;
    return AISIM_OK;
}

/* RadixCache._index_leaf: (re)enter node i with a new seq */
static void index_leaf(aisim_radix *c, int32_t i)
{
    rx_node *n = &c->nodes[i];
    n->seq = ++c->seq;
    if (n->heap_pos >= 0) {
        /* the new key is larger than the old only by seq, or changed access: move either way */
        size_t pos = (size_t)n->heap_pos;
        sift_up(c, pos);
        sift_down(c, (size_t)c->nodes[i].heap_pos);
        return;
    }
    size_t pos = c->n_heap++;
    heap_set(c, pos, i);
    sift_up(c, pos);
}

static void touch(aisim_radix *c, int32_t i, int64_t access)
{
    c->nodes[i].access = access;
    if (c->nodes[i].heap_pos >= 0)
        index_leaf(c, i);
}

/* ------------------------------------------------------------------ nodes */

/* a node index free for use (capacity for it, its heap entry and its table entry reserved) */
static int reserve_node(aisim_radix *c)
{
    int status = table_reserve(c);
    if (status)
        return status;
    if (c->free_list == NO_NODE && c->n_nodes == c->cap_nodes) {
        size_t cap = c->cap_nodes * 2;
        if (cap > 0x7FFFFFFF)
            return AISIM_ENOMEM;
        rx_node *nodes = realloc(c->nodes, cap * sizeof(rx_node));
        if (!nodes)
            return AISIM_ENOMEM;
        c->nodes = nodes;
        c->cap_nodes = cap;
    }
    return heap_reserve(c, c->cap_nodes);
}

/* a new node with a copy of tokens [start, end) (reserve_node done); NO_NODE on ENOMEM */
static int32_t new_node(aisim_radix *c, int32_t parent, const uint32_t *tokens, int64_t start,
                        int64_t end, int64_t access)
{
    uint32_t *tok = malloc(sizeof(uint32_t) * (size_t)(end > start ? end - start : 1));
    if (!tok)
        return NO_NODE;
    memcpy(tok, tokens, sizeof(uint32_t) * (size_t)(end - start));
    int32_t i;
    uint32_t gen;
    if (c->free_list != NO_NODE) {
        i = c->free_list;
        c->free_list = c->nodes[i].next_free;
        gen = c->nodes[i].gen + 1;
        if (gen == 0)
            gen = 1;
    } else {
        i = (int32_t)c->n_nodes++;
        gen = 1;
    }
    rx_node *n = &c->nodes[i];
    memset(n, 0, sizeof(*n));
    n->start = start;
    n->end = end;
    n->access = access;
    n->tok = tok;
    n->tok_base = start;
    n->tok_len = end - start;
    n->parent = parent;
    n->heap_pos = -1;
    n->gen = gen;
    n->live = 1;
    n->key = page_key(c, parent, tok);
    c->view.nodes++;
    return i;
}

static void drop_node(aisim_radix *c, int32_t i)
{
    rx_node *n = &c->nodes[i];
    free(n->tok);
    n->tok = NULL;
    n->live = 0;
    n->next_free = c->free_list;
    c->free_list = i;
    c->view.nodes--;
}

/* tokens (whole pages) of node i's edge that `tokens` repeats, up to depth limit */
static int64_t common_pages(const aisim_radix *c, int32_t i, const uint32_t *tokens,
                            int64_t limit)
{
    const rx_node *n = &c->nodes[i];
    int64_t hi = n->end < limit ? n->end : limit;
    if (hi <= n->start)
        return 0;
    const uint32_t *a = edge_at(n, n->start);
    const uint32_t *b = tokens + n->start;
    int64_t len = hi - n->start, k = 0;
    while (k < len && a[k] == b[k])
        k++;
    return k - k % c->view.page_size;
}

/* RadixCache._split: cut child i's edge after `common` tokens; the new upper node */
static int split(aisim_radix *c, int32_t child, int64_t common, int32_t *out)
{
    int status = reserve_node(c);
    if (status)
        return status;
    rx_node *n = &c->nodes[child];
    int32_t upper = new_node(c, n->parent, edge_at(n, n->start), n->start, n->start + common,
                             n->access);
    if (upper == NO_NODE)
        return AISIM_ENOMEM;
    n = &c->nodes[child];
    rx_node *u = &c->nodes[upper];
    u->lock = n->lock;
    u->children = 1;
    /* the upper node takes the child's place under the parent (the same key) */
    c->slots[table_slot_of(c, child)] = upper;
    n->start += common;
    n->parent = upper;
    n->key = page_key(c, upper, edge_at(n, n->start));
    table_put(c, child);
    *out = upper;
    return AISIM_OK;
}

/* RadixCache._create_child */
static int create_child(aisim_radix *c, int32_t parent, const uint32_t *tokens, int64_t start,
                        int64_t end, int64_t access, int32_t *out)
{
    int status = reserve_node(c);
    if (status)
        return status;
    int32_t i = new_node(c, parent, tokens + start, start, end, access);
    if (i == NO_NODE)
        return AISIM_ENOMEM;
    c->view.inserts++;
    heap_remove(c, parent);
    c->nodes[parent].children++;
    table_put(c, i);
    index_leaf(c, i);
    c->view.evictable_size += end - start;
    *out = i;
    return AISIM_OK;
}

/* RadixCache._extend_leaf: the edge becomes tokens [start, end) */
static int extend_leaf(aisim_radix *c, int32_t i, const uint32_t *tokens, int64_t end,
                       int64_t access)
{
    rx_node *n = &c->nodes[i];
    int64_t len = end - n->start;
    if (len > n->tok_len || n->tok_base != n->start) {
        uint32_t *tok = malloc(sizeof(uint32_t) * (size_t)(len > 0 ? len : 1));
        if (!tok)
            return AISIM_ENOMEM;
        free(n->tok);
        n->tok = tok;
        n->tok_len = len;
        n->tok_base = n->start;
    }
    if (len > 0)
        memcpy(n->tok, tokens + n->start, sizeof(uint32_t) * (size_t)len);
    c->view.inserts++;
    int64_t added = end - n->end;
    n->end = end;
    n->access = access;
    if (n->lock == 0) {
        c->view.evictable_size += added;
        if (n->heap_pos >= 0)
            index_leaf(c, i);
    } else {
        c->view.protected_size += added;
    }
    return AISIM_OK;
}

static void lock_path(aisim_radix *c, int32_t i)
{
    while (i != 0) {
        rx_node *n = &c->nodes[i];
        if (n->lock == 0) {
            heap_remove(c, i);
            int64_t size = n->end - n->start;
            c->view.evictable_size -= size;
            c->view.protected_size += size;
        }
        n->lock++;
        i = n->parent;
    }
}

static void unlock_path(aisim_radix *c, int32_t i)
{
    while (i != 0) {
        rx_node *n = &c->nodes[i];
        n->lock--;
        if (n->lock == 0) {
            int64_t size = n->end - n->start;
            c->view.protected_size -= size;
            c->view.evictable_size += size;
            if (n->children == 0)
                index_leaf(c, i);
        }
        i = c->nodes[i].parent;
    }
}

static void touch_path(aisim_radix *c, int32_t i, int64_t access)
{
    while (i != 0) {
        if (access > c->nodes[i].access)
            touch(c, i, access);
        i = c->nodes[i].parent;
    }
}

/* ------------------------------------------------------------------ eviction log */

static int log_span(aisim_radix *c, int32_t i, int64_t lo, int64_t hi)
{
    if (c->view.n_log + 1 > c->cap_log) {
        size_t cap = c->cap_log ? 2 * c->cap_log : 16;
        int64_t *spans = realloc(c->log_spans, 3 * cap * sizeof(int64_t));
        if (!spans)
            return AISIM_ENOMEM;
        c->log_spans = spans;
        c->cap_log = cap;
    }
    size_t need = c->n_log_tokens + (size_t)hi;
    if (need > c->cap_log_tokens) {
        size_t cap = c->cap_log_tokens ? c->cap_log_tokens : 1024;
        while (cap < need)
            cap *= 2;
        uint32_t *tokens = realloc(c->log_tokens, cap * sizeof(uint32_t));
        if (!tokens)
            return AISIM_ENOMEM;
        c->log_tokens = tokens;
        c->cap_log_tokens = cap;
    }
    uint32_t *path = c->log_tokens + c->n_log_tokens;
    /* node i's edge up to hi, then its ancestors' edges (each parent ends where its child starts) */
    int64_t top = hi;
    for (int32_t j = i; j != 0; j = c->nodes[j].parent) {
        const rx_node *n = &c->nodes[j];
        memcpy(path + n->start, edge_at(n, n->start), sizeof(uint32_t) * (size_t)(top - n->start));
        top = n->start;
    }
    int64_t *span = c->log_spans + 3 * c->view.n_log;
    span[0] = lo;
    span[1] = hi;
    span[2] = (int64_t)c->n_log_tokens;
    c->n_log_tokens = need;
    c->view.n_log++;
    c->view.log_spans = c->log_spans;
    c->view.log_tokens = c->log_tokens;
    return AISIM_OK;
}

/* ------------------------------------------------------------------ public */

int aisim_radix_new(aisim_radix **out, int64_t total_tokens, int64_t page_size,
                    int32_t trim_partial_leaf)
{
    if (!out || page_size < 1 || page_size > 0x10000 || total_tokens < 0)
        return AISIM_EINVAL;
    aisim_radix *c = calloc(1, sizeof(*c));
    if (!c)
        return AISIM_ENOMEM;
    c->cap_nodes = 64;
    c->nodes = malloc(c->cap_nodes * sizeof(rx_node));
    c->mask = 127;
    c->slots = malloc((c->mask + 1) * sizeof(int32_t));
    if (!c->nodes || !c->slots || heap_reserve(c, c->cap_nodes)) {
        free(c->nodes);
        free(c->slots);
        free(c->heap);
        free(c);
        return AISIM_ENOMEM;
    }
    for (size_t i = 0; i <= c->mask; i++)
        c->slots[i] = NO_NODE;
    c->free_list = NO_NODE;
    /* the root: index 0, generation 0 (handle 0), no edge */
    rx_node *root = &c->nodes[0];
    memset(root, 0, sizeof(*root));
    root->parent = NO_NODE;
    root->heap_pos = -1;
    root->live = 1;
    c->n_nodes = 1;
    c->view.page_size = page_size;
    c->view.total_tokens = (total_tokens / page_size) * page_size;
    c->view.free_tokens = c->view.total_tokens;
    c->view.nodes = 1;
    c->view.trim_partial_leaf = trim_partial_leaf ? 1 : 0;
    *out = c;
    return AISIM_OK;
}

int aisim_radix_free(aisim_radix *c)
{
    if (!c)
        return AISIM_OK;
    for (size_t i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].live)
            free(c->nodes[i].tok);
    free(c->nodes);
    free(c->slots);
    free(c->heap);
    free(c->log_spans);
    free(c->log_tokens);
    free(c);
    return AISIM_OK;
}

int aisim_radix_view_of(const aisim_radix *c, const aisim_radix_view **out)
{
    if (!c || !out)
        return AISIM_EINVAL;
    *out = &c->view;
    return AISIM_OK;
}

int aisim_radix_allocate(aisim_radix *c, int64_t tokens)
{
    if (!c)
        return AISIM_EINVAL;
    if (tokens > c->view.free_tokens)
        return AISIM_NOSPACE;
    c->view.free_tokens -= tokens;
    return AISIM_OK;
}

int aisim_radix_release(aisim_radix *c, int64_t tokens)
{
    if (!c)
        return AISIM_EINVAL;
    c->view.free_tokens += tokens;
    return AISIM_OK;
}

int aisim_radix_set_free(aisim_radix *c, int64_t tokens)
{
    if (!c)
        return AISIM_EINVAL;
    c->view.free_tokens = tokens;
    return AISIM_OK;
}

int aisim_radix_match(const aisim_radix *c, const uint32_t *tokens, size_t n, int64_t limit,
                      int64_t *out)
{
    if (!c || !out || limit < 0 || (uint64_t)limit > n || (n && !tokens))
        return AISIM_EINVAL;
    int64_t ps = c->view.page_size;
    int32_t node = 0;
    int64_t depth = 0;
    limit -= limit % ps;
    while (depth < limit) {
        int32_t child = find_child(c, node, tokens + depth);
        if (child == NO_NODE)
            break;
        int64_t common = common_pages(c, child, tokens, limit);
        if (common == 0)
            break;
        depth += common;
        node = child;
        if (c->nodes[child].end > depth)
            break;
    }
    out[0] = depth;
    out[1] = handle_of(c, node);
    return AISIM_OK;
}

int aisim_radix_still_matches(const aisim_radix *c, int64_t matched, int64_t node,
                              int64_t inserts)
{
    if (!c)
        return AISIM_EINVAL;
    if (inserts != c->view.inserts)
        return 0;
    if (matched == 0)
        return 1;
    int32_t i = index_of(c, node);
    return i != NO_NODE && c->nodes[i].end >= matched;
}

int aisim_radix_match_and_lock(aisim_radix *c, const uint32_t *tokens, size_t n, int64_t limit,
                               int64_t access, int64_t *out)
{
    if (!c || !out || limit < 0 || (uint64_t)limit > n || (n && !tokens))
        return AISIM_EINVAL;
    int64_t ps = c->view.page_size;
    int32_t node = 0, last_full = NO_NODE;
    int64_t depth = 0;
    limit -= limit % ps;
    /* a split may fail for memory: reserve first so that nothing changes on error */
    int status = reserve_node(c);
    if (status)
        return status;
    while (depth < limit) {
        int32_t child = find_child(c, node, tokens + depth);
        if (child == NO_NODE)
            break;
        if (last_full != NO_NODE) {
            touch(c, last_full, access);
            last_full = NO_NODE;
        }
        int64_t common = common_pages(c, child, tokens, limit);
        if (c->nodes[child].start + common < c->nodes[child].end) {
            if (common > 0) {
                status = split(c, child, common, &node);
                if (status)
                    return status;   /* (not reached: reserved above) */
            }
            depth += common;
            break;
        }
        depth += common;
        node = child;
        last_full = child;
    }
    if (last_full != NO_NODE) {
        /* stamped while out of the leaf index, then locked */
        heap_remove(c, last_full);
        c->nodes[last_full].access = access;
    }
    lock_path(c, node);
    out[0] = depth;
    out[1] = handle_of(c, node);
    return AISIM_OK;
}

int aisim_radix_lock(aisim_radix *c, int64_t node)
{
    int32_t i = c ? index_of(c, node) : NO_NODE;
    if (i == NO_NODE)
        return c ? AISIM_EBADSEQ : AISIM_EINVAL;
    lock_path(c, i);
    return AISIM_OK;
}

int aisim_radix_unlock(aisim_radix *c, int64_t node)
{
    int32_t i = c ? index_of(c, node) : NO_NODE;
    if (i == NO_NODE)
        return c ? AISIM_EBADSEQ : AISIM_EINVAL;
    for (int32_t j = i; j != 0; j = c->nodes[j].parent)
        if (c->nodes[j].lock <= 0)
            return AISIM_EINVAL;      /* an unlock without its lock */
    unlock_path(c, i);
    return AISIM_OK;
}

int aisim_radix_touch_path(aisim_radix *c, int64_t node, int64_t access)
{
    int32_t i = c ? index_of(c, node) : NO_NODE;
    if (i == NO_NODE)
        return c ? AISIM_EBADSEQ : AISIM_EINVAL;
    touch_path(c, i, access);
    return AISIM_OK;
}

int aisim_radix_insert(aisim_radix *c, int64_t start_node, const uint32_t *tokens, size_t n,
                       int64_t start, int64_t end, int64_t access, int64_t create_access,
                       int32_t allow_locked_tail, int64_t *out)
{
    if (!c || !out || start < 0 || (end > start && ((uint64_t)end > n || !tokens)))
        return AISIM_EINVAL;
    if (end > start && (start % c->view.page_size || end % c->view.page_size))
        return AISIM_EINVAL;          /* whole pages only */
    int32_t first = index_of(c, start_node);
    if (first == NO_NODE)
        return AISIM_EBADSEQ;
    if (end <= start) {
        out[0] = start_node;
        out[1] = 0;
        return AISIM_OK;
    }
    /* at most one split and one new node: reserve both first so that nothing changes on error */
    int status = reserve_node(c);
    if (status)
        return status;
    if (2 * (c->used + 2) > c->mask + 1 && (status = table_grow(c)))
        return status;
    if (c->free_list == NO_NODE && c->n_nodes + 2 > c->cap_nodes) {
        rx_node *nodes = realloc(c->nodes, 2 * c->cap_nodes * sizeof(rx_node));
        if (!nodes)
            return AISIM_ENOMEM;
        c->nodes = nodes;
        c->cap_nodes *= 2;
        if ((status = heap_reserve(c, c->cap_nodes)))
            return status;
    }
    touch_path(c, first, access);
    int32_t node = first;
    int64_t depth = start, present = 0;
    int32_t result = NO_NODE;
    while (depth < end) {
        rx_node *nd = &c->nodes[node];
        if (node != 0 && nd->children == 0
            && (nd->lock == 0 || (allow_locked_tail && node == first && nd->lock == 1))) {
            status = extend_leaf(c, node, tokens, end, access);
            if (status)
                return status;
            result = node;
            break;
        }
        int32_t child = find_child(c, node, tokens + depth);
        if (child == NO_NODE) {
            status = create_child(c, node, tokens, depth, end, create_access, &result);
            if (status)
                return status;
            break;
        }
        int64_t common = common_pages(c, child, tokens, end);
        if (c->nodes[child].start + common == c->nodes[child].end) {
            depth += common;
            present += common;
            node = child;
            touch(c, child, access);
            continue;
        }
        if (common > 0) {
            int32_t upper;
            status = split(c, child, common, &upper);
            if (status)
                return status;
            depth += common;
            present += common;
            if (depth < end) {
                status = create_child(c, upper, tokens, depth, end, create_access, &result);
                if (status)
                    return status;
            } else {
                result = upper;
            }
            break;
        }
        result = node;
        break;
    }
    if (result == NO_NODE)
        result = node;
    out[0] = handle_of(c, result);
    out[1] = present;
    return AISIM_OK;
}

int aisim_radix_evict(aisim_radix *c, int64_t tokens, int64_t *out)
{
    if (!c || !out)
        return AISIM_EINVAL;
    int64_t evicted = 0, ps = c->view.page_size;
    int status = AISIM_OK;
    while (evicted < tokens && c->n_heap) {
        int32_t i = c->heap[0];
        rx_node *n = &c->nodes[i];
        int64_t size = n->end - n->start;
        int64_t want = tokens - evicted;
        want = ((want + ps - 1) / ps) * ps;
        if (c->view.trim_partial_leaf && want < size) {
            if (c->view.logging && (status = log_span(c, i, n->end - want, n->end)))
                break;
            heap_remove(c, i);
            n = &c->nodes[i];
            n->end -= want;
            c->view.evictable_size -= want;
            c->view.free_tokens += want;
            evicted += want;
            index_leaf(c, i);
            continue;
        }
        if (c->view.logging && (status = log_span(c, i, n->start, n->end)))
            break;
        heap_remove(c, i);
        n = &c->nodes[i];
        int32_t parent = n->parent;
        table_delete_at(c, table_slot_of(c, i));
        c->nodes[parent].children--;
        drop_node(c, i);
        c->view.evictable_size -= size;
        c->view.free_tokens += size;
        evicted += size;
        const rx_node *p = &c->nodes[parent];
        if (parent != 0 && p->children == 0 && p->lock == 0)
            index_leaf(c, parent);
    }
    *out = evicted;
    return status;
}

int aisim_radix_log_evictions(aisim_radix *c, int32_t on)
{
    if (!c)
        return AISIM_EINVAL;
    c->view.logging = on ? 1 : 0;
    if (!on)
        aisim_radix_log_clear(c);
    return AISIM_OK;
}

int aisim_radix_log_clear(aisim_radix *c)
{
    if (!c)
        return AISIM_EINVAL;
    c->view.n_log = 0;
    c->n_log_tokens = 0;
    return AISIM_OK;
}

int aisim_radix_node(const aisim_radix *c, int64_t node, int64_t *out)
{
    if (!c || !out)
        return AISIM_EINVAL;
    int32_t i = index_of(c, node);
    if (i == NO_NODE)
        return AISIM_EBADSEQ;
    const rx_node *n = &c->nodes[i];
    out[0] = n->start;
    out[1] = n->end;
    out[2] = n->access;
    out[3] = n->lock;
    out[4] = n->children;
    out[5] = n->heap_pos >= 0;
    return AISIM_OK;
}

int aisim_radix_dump(const aisim_radix *c, int64_t *rows, size_t cap_rows, uint32_t *tokens,
                     size_t cap_tokens)
{
    if (!c || (cap_rows && !rows) || (cap_tokens && !tokens))
        return AISIM_EINVAL;
    size_t want_rows = (size_t)(c->view.nodes - 1);
    size_t want_tokens = (size_t)(c->view.evictable_size + c->view.protected_size);
    if (cap_rows < want_rows || cap_tokens < want_tokens)
        return AISIM_EINVAL;
    size_t r = 0, t = 0;
    for (size_t i = 1; i < c->n_nodes; i++) {
        const rx_node *n = &c->nodes[i];
        if (!n->live)
            continue;
        int64_t len = n->end - n->start;
        if (r >= want_rows || len < 0 || t + (size_t)len > want_tokens)
            return AISIM_ECORRUPT;
        int64_t *row = rows + 6 * r++;
        row[0] = handle_of(c, (int32_t)i);
        row[1] = handle_of(c, n->parent);
        row[2] = n->start;
        row[3] = n->end;
        row[4] = n->access;
        row[5] = n->lock;
        memcpy(tokens + t, edge_at(n, n->start), sizeof(uint32_t) * (size_t)len);
        t += (size_t)len;
    }
    return (int)r;
}

int aisim_radix_check(const aisim_radix *c)
{
    if (!c)
        return AISIM_EINVAL;
    int64_t evictable = 0, protected_ = 0, live = 1;
    size_t entries = 0;
    int32_t *children = calloc(c->n_nodes, sizeof(int32_t));
    if (!children)
        return AISIM_ENOMEM;
    int bad = 0;
    for (size_t i = 1; i < c->n_nodes && !bad; i++) {
        const rx_node *n = &c->nodes[i];
        if (!n->live)
            continue;
        live++;
        int32_t p = n->parent;
        if (p < 0 || (size_t)p >= c->n_nodes || !c->nodes[p].live
            || (p != 0 && c->nodes[p].end != n->start) || (p == 0 && n->start != 0)
            || n->end <= n->start || n->tok_base > n->start
            || n->tok_base + n->tok_len < n->end || n->lock < 0) {
            bad = 1;
            break;
        }
        children[p]++;
        if (n->lock)
            protected_ += n->end - n->start;
        else
            evictable += n->end - n->start;
        if (n->heap_pos >= 0 && (n->lock || (size_t)n->heap_pos >= c->n_heap
                                 || c->heap[n->heap_pos] != (int32_t)i))
            bad = 1;
        if (n->key != page_key(c, p, edge_at(n, n->start))
            || c->slots[slot_find(c, p, edge_at(n, n->start), n->key)] != (int32_t)i)
            bad = 1;
    }
    for (size_t i = 0; i < c->n_nodes && !bad; i++)
        if (c->nodes[i].live && c->nodes[i].children != children[i])
            bad = 1;
    for (size_t i = 0; i <= c->mask; i++)
        entries += c->slots[i] != NO_NODE;
    free(children);
    if (bad || live != c->view.nodes || evictable != c->view.evictable_size
        || protected_ != c->view.protected_size || entries != c->used
        || entries != (size_t)(live - 1))
        return AISIM_ECORRUPT;
    for (size_t k = 1; k < c->n_heap; k++)
        if (heap_less(c, c->heap[k], c->heap[(k - 1) / 2]))
            return AISIM_ECORRUPT;
    return AISIM_OK;
}
