/* Block scheduling: the threads of one block are fibers on one OS thread, resumed round-robin.
 * A fiber runs until it waits (barrier, warp rendezvous) or returns; waiting fibers yield to the
 * next live fiber, so no fiber ever runs concurrently with another of its block and a block never
 * migrates between OS threads (its static __shared__ arrays are that thread's TLS). */
#include "wm_internal.h"

#include <stdio.h>
#include <string.h>


__thread wm_dim3_t wm_thread_idx, wm_block_idx, wm_block_dim, wm_grid_dim;
__thread wm_worker *wm_self;

static void wm_resume(wm_worker *w, wm_fiber *from, wm_fiber *to) {
    w->current = to;
    wm_thread_idx = to->tid;
    wm_switch_to(w, from, to);
}

static void wm_describe_waiters(wm_worker *w, char *buf, size_t len) {
    uint32_t at_bar = 0, at_warp = 0;
    wm_fiber *f = w->current;
    for (uint32_t i = 0; i < w->live; i++, f = f->next) {
        if (f->waiting == 1) at_bar++;
        if (f->waiting == 2) at_warp++;
    }
    snprintf(buf, len, "%u threads wait at __syncthreads, %u in warp-level operations, %u returned", at_bar,
             at_warp, w->exited);
}

void wm_yield(wm_worker *w, wm_fiber *f) {
    /* stall counts consecutive resumptions that changed nothing; a full round of them means that
     * every live thread waits for something no other thread will do. */
    if (++w->stall > 2 * w->live + 2 || f->next == f) {
        char where[160], waiters[160];
        wm_describe_waiters(w, waiters, sizeof waiters);
        wm_fail(WM_ERR_DEADLOCK, "deadlock in %s: %s (a barrier or warp-level operation that not every "
                "thread reaches)", wm_where(where, sizeof where), waiters);
    }
    wm_resume(w, f, f->next);
}

static void wm_fiber_exit(wm_worker *w, wm_fiber *f) {
    char where[160];
    w->live--;
    w->exited++;
    w->stall = 0;
    if (w->bar_arrived) {
        wm_fail(WM_ERR_BARRIER, "barrier divergence in %s: the thread returned while %u of %u threads wait "
                "at __syncthreads", wm_where(where, sizeof where), w->bar_arrived, w->nthreads);
    }
    wm_warp *wp = &w->warps[f->linear / WM_WARP];
    uint32_t bit = 1u << (f->linear % WM_WARP);
    wp->present &= ~bit;
    if (wp->arrived && (wp->mask & bit)) {
        wm_fail(WM_ERR_BARRIER, "warp divergence in %s: the thread returned while %u lanes of its warp wait "
                "for it in a warp-level operation (mask 0x%08x)", wm_where(where, sizeof where),
                wp->arrived, wp->mask);
    }
    if (w->live == 0) {
        wm_switch_to_main(w, f);
    } else {
        wm_fiber *next = f->next;
        f->prev->next = f->next;
        f->next->prev = f->prev;
        wm_resume(w, f, next);
    }
    __builtin_unreachable();
}

void wm_fiber_main(void) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    w->entry(w->desc->argv);
    wm_fiber_exit(w, f);
    __builtin_unreachable();
}

void wm_run_block(wm_worker *w, uint32_t linear) {
    const wm_launch_desc *d = w->desc;
    wm_block_idx.x = linear % d->grid[0];
    wm_block_idx.y = (linear / d->grid[0]) % d->grid[1];
    wm_block_idx.z = linear / (d->grid[0] * d->grid[1]);
    uint32_t n = w->nthreads;
    w->live = n;
    w->exited = 0;
    w->bar_arrived = 0;
    w->stall = 0;
    for (uint32_t i = 0; i < w->nwarps; i++) {
        wm_warp *wp = &w->warps[i];
        uint32_t lanes = n - i * WM_WARP < WM_WARP ? n - i * WM_WARP : WM_WARP;
        wp->arrived = 0;
        wp->mask = 0;
        wp->present = lanes == WM_WARP ? 0xffffffffu : (1u << lanes) - 1u;
    }
    size_t stride = (size_t)d->stack_bytes + 4096;
    for (uint32_t i = 0; i < n; i++) {
        wm_fiber *f = &w->fibers[i];
        f->linear = i;
        f->tid.x = i % d->block[0];
        f->tid.y = (i / d->block[0]) % d->block[1];
        f->tid.z = i / (d->block[0] * d->block[1]);
        f->next = &w->fibers[(i + 1) % n];
        f->prev = &w->fibers[(i + n - 1) % n];
        f->waiting = 0;
        f->cp_head = f->cp_len = f->cp_group = 0;
        f->stack_lo = w->stacks + (size_t)i * stride + 4096;
        wm_fiber_prepare(w, f, d->stack_bytes);
    }
    /* Shared memory starts as all-ones bytes (a NaN for floats) in every block, so a kernel that
     * reads shared memory it never wrote shows it in its output instead of passing by luck. */
    if (w->static_shared_bytes) memset(w->static_shared, 0xff, w->static_shared_bytes);
    if (d->dyn_shared) memset(w->dyn_shared, 0xff, d->dyn_shared);
    if (d->detect_races) wm_race_begin_block(w);
    w->current = &w->fibers[0];
    wm_thread_idx = w->fibers[0].tid;
    wm_switch_from_main(w, &w->fibers[0]);
}

void wm_syncthreads(void) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    if (w->exited) {
        char where[160];
        wm_fail(WM_ERR_BARRIER, "barrier divergence in %s: __syncthreads reached after %u of %u threads of "
                "the block returned", wm_where(where, sizeof where), w->exited, w->nthreads);
    }
    uint32_t gen = w->bar_gen;
    w->stall = 0;
    if (++w->bar_arrived == w->nthreads) {
        w->bar_arrived = 0;
        w->bar_gen = gen + 1;
        if (w->desc->detect_races) wm_race_barrier(w);
        return;
    }
    f->waiting = 1;
    do wm_yield(w, f);
    while (w->bar_gen == gen);
    f->waiting = 0;
    w->stall = 0;
}

const unsigned char *wm_warp_exchange(wm_worker *w, wm_fiber *f, unsigned int mask, const void *data,
                                      size_t bytes) {
    wm_warp *wp = &w->warps[f->linear / WM_WARP];
    uint32_t lane = f->linear % WM_WARP;
    char where[160];
    if (!(mask >> lane & 1u)) {
        wm_fail(WM_ERR_KERNEL, "warp-level operation in %s with mask 0x%08x, which excludes the calling "
                "lane %u", wm_where(where, sizeof where), mask, lane);
    }
    uint32_t expect = mask & wp->present;
    uint32_t gen = wp->gen;
    unsigned char(*slots)[WM_SLOT_BYTES] = wp->slot[gen & 1u];
    if (bytes) memcpy(slots[lane], data, bytes);
    if (wp->arrived == 0) {
        wp->mask = expect;
    } else if (wp->mask != expect) {
        wm_fail(WM_ERR_KERNEL, "warp-level operations with different masks meet in %s: 0x%08x and 0x%08x",
                wm_where(where, sizeof where), wp->mask, expect);
    }
    w->stall = 0;
    if (++wp->arrived == (uint32_t)__builtin_popcount(expect)) {
        wp->arrived = 0;
        wp->gen = gen + 1;
        return &slots[0][0];
    }
    f->waiting = 2;
    do wm_yield(w, f);
    while (wp->gen == gen);
    f->waiting = 0;
    w->stall = 0;
    /* Lanes leave in turn; the next exchange of this warp writes the other parity, and the one after
     * cannot start before this lane has arrived there, so these slots stay intact while read. */
    return &slots[0][0];
}

void wm_syncwarp(unsigned int mask) {
    wm_worker *w = wm_self;
    wm_warp_exchange(w, w->current, mask, NULL, 0);
}

unsigned long long wm_shfl(unsigned int mask, unsigned long long value, int kind, int arg, int width) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    char where[160];
    if (width < 1 || width > WM_WARP || (width & (width - 1))) {
        wm_fail(WM_ERR_KERNEL, "shuffle in %s with width %d: it must be a power of two in [1, 32]",
                wm_where(where, sizeof where), width);
    }
    uint32_t expect = mask & w->warps[f->linear / WM_WARP].present;
    const unsigned char *slots = wm_warp_exchange(w, f, mask, &value, sizeof value);
    int lane = (int)(f->linear % WM_WARP);
    int base = lane & ~(width - 1);
    int src = lane;
    switch (kind) {
    case WM_SHFL_IDX: src = base + (arg & (width - 1)); break;
    case WM_SHFL_UP: src = (unsigned)arg > (unsigned)(lane - base) ? lane : lane - arg; break;
    case WM_SHFL_DOWN: src = (unsigned)(lane - base) + (unsigned)arg >= (unsigned)width ? lane : lane + arg; break;
    case WM_SHFL_XOR: {
        /* A lane may read an earlier group of `width` lanes but not a later one. */
        int x = lane ^ arg;
        src = (x < 0 || x >= base + width) ? lane : x;
        break;
    }
    default: wm_fail(WM_ERR_KERNEL, "unknown shuffle kind %d", kind);
    }
    if (!(expect >> src & 1u)) {
        wm_fail(WM_ERR_KERNEL, "shuffle in %s reads lane %d, which is not among the participating lanes "
                "0x%08x", wm_where(where, sizeof where), src, expect);
    }
    unsigned long long out;
    memcpy(&out, slots + (size_t)src * WM_SLOT_BYTES, sizeof out);
    return out;
}

unsigned char *wm_dynamic_shared(void) { return wm_self->dyn_shared; }
