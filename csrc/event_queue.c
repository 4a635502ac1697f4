/* Event queue: a binary min-heap ordered by (time_ms, seq), where seq is a
 * per-queue insertion counter so that simultaneous events pop in the order
 * they were pushed (SimPy's tie-break rule). */
#include <math.h>
#include <stdlib.h>

#include "aisim.h"

typedef struct heap_entry {
    double time_ms;
    uint64_t seq;
    int64_t ident;
    int32_t kind;
} heap_entry;

struct aisim_event_queue {
    heap_entry *heap;
    size_t capacity;
    uint64_t next_seq;
    aisim_eq_view view;
};

static int entry_before(const heap_entry *a, const heap_entry *b)
{
    if (a->time_ms != b->time_ms)
        return a->time_ms < b->time_ms;
    return a->seq < b->seq;
}

static void refresh_head(aisim_event_queue *q)
{
    q->view.head_time_ms = q->view.len ? q->heap[0].time_ms : INFINITY;
}

int aisim_eq_new(aisim_event_queue **out, size_t initial_capacity)
{
    aisim_event_queue *q;
    if (!out)
        return AISIM_EINVAL;
    if (initial_capacity < 16)
        initial_capacity = 16;
    if (initial_capacity > SIZE_MAX / sizeof(heap_entry))
        return AISIM_EINVAL;
    q = calloc(1, sizeof *q);
    if (!q)
        return AISIM_ENOMEM;
    q->heap = malloc(initial_capacity * sizeof *q->heap);
    if (!q->heap) {
        free(q);
        return AISIM_ENOMEM;
    }
    q->capacity = initial_capacity;
    q->view.head_time_ms = INFINITY;
    *out = q;
    return AISIM_OK;
}

int aisim_eq_free(aisim_event_queue *q)
{
    if (q) {
        free(q->heap);
        free(q);
    }
    return AISIM_OK;
}

int aisim_eq_view_of(const aisim_event_queue *q, const aisim_eq_view **out)
{
    if (!q || !out)
        return AISIM_EINVAL;
    *out = &q->view;
    return AISIM_OK;
}

static int grow(aisim_event_queue *q)
{
    size_t capacity = q->capacity * 2;
    heap_entry *heap;
    if (capacity > SIZE_MAX / sizeof(heap_entry))
        return AISIM_ENOMEM;
    heap = realloc(q->heap, capacity * sizeof *heap);
    if (!heap)
        return AISIM_ENOMEM;
    q->heap = heap;
    q->capacity = capacity;
    return AISIM_OK;
}

int aisim_eq_push(aisim_event_queue *q, double time_ms, int32_t kind, int64_t ident)
{
    heap_entry entry;
    size_t hole;
    if (!q || isnan(time_ms))
        return AISIM_EINVAL;
    if (q->view.len == q->capacity) {
        int status = grow(q);
        if (status)
            return status;
    }
    entry.time_ms = time_ms;
    entry.seq = q->next_seq++;
    entry.ident = ident;
    entry.kind = kind;
    /* sift the hole up instead of swapping: one write per level */
    hole = q->view.len++;
    while (hole > 0) {
        size_t parent = (hole - 1) / 2;
        if (!entry_before(&entry, &q->heap[parent]))
            break;
        q->heap[hole] = q->heap[parent];
        hole = parent;
    }
    q->heap[hole] = entry;
    refresh_head(q);
    return AISIM_OK;
}

int aisim_eq_pop(aisim_event_queue *q)
{
    heap_entry last;
    size_t hole, len;
    if (!q)
        return AISIM_EINVAL;
    if (q->view.len == 0)
        return AISIM_EEMPTY;
    q->view.popped_time_ms = q->heap[0].time_ms;
    q->view.popped_ident = q->heap[0].ident;
    q->view.popped_kind = q->heap[0].kind;
    len = --q->view.len;
    if (len > 0) {
        last = q->heap[len];
        hole = 0;
        for (;;) {
            size_t child = 2 * hole + 1;
            if (child >= len)
                break;
            if (child + 1 < len && entry_before(&q->heap[child + 1], &q->heap[child]))
                child++;
            if (!entry_before(&q->heap[child], &last))
                break;
            q->heap[hole] = q->heap[child];
            hole = child;
        }
        q->heap[hole] = last;
    }
    refresh_head(q);
    return AISIM_OK;
}
