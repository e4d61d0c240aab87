/* Shared-memory race detection (opt-in). The kernel is compiled with GCC's kernel-address
 * instrumentation in call mode, so every load and store calls __asan_{load,store}N_noabort(addr);
 * this file provides those hooks. For each 2-byte unit of shared memory a shadow record keeps the
 * last writer and the readers of the current barrier interval ("epoch"). Two accesses by different
 * threads to one unit in the same epoch, at least one a write, race unless both threads are lanes of
 * one warp and a warp-level synchronisation (__syncwarp, a shuffle, mma, ldmatrix) lies between them.
 *
 * Example: thread 0 writes s[0]; thread 1 reads s[0] before the next __syncthreads -> reported as
 * "thread (1,0,0) reads ... which thread (0,0,0) wrote". With a __syncthreads between, the epoch
 * differs and nothing is reported. */
#include "wm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define WM_MULTI_ANY 0xffffu
#define WM_MULTI_WARP 0x8000u /* | warp index: several readers, all lanes of that warp */

struct wm_race_word {
    uint32_t w_epoch;
    uint16_t writer; /* linear thread index + 1 */
    uint16_t w_wgen;
    uint32_t r_epoch;
    uint16_t reader; /* linear thread index + 1, or a WM_MULTI_* code */
    uint16_t r_wgen; /* warp generation of the latest reader */
};

int wm_race_setup(wm_worker *w) {
    size_t s_units = (w->static_shared_bytes + 1) / 2, d_units = (w->desc->dyn_shared + 1) / 2;
    w->race_static = s_units ? (wm_race_word *)calloc(s_units, sizeof(wm_race_word)) : NULL;
    w->race_dyn = d_units ? (wm_race_word *)calloc(d_units, sizeof(wm_race_word)) : NULL;
    w->epoch = 1;
    return (s_units && !w->race_static) || (d_units && !w->race_dyn) ? -1 : 0;
}

/* Epochs only grow, so the shadow needs no clearing between blocks or barriers. */
void wm_race_begin_block(wm_worker *w) { w->epoch++; }
void wm_race_barrier(wm_worker *w) { w->epoch++; }

static uint32_t wm_warp_of(uint32_t tid1) { return (tid1 - 1) / WM_WARP; }

static void wm_tid_text(const wm_worker *w, uint32_t tid1, char *buf, size_t len) {
    const wm_launch_desc *d = w->desc;
    if (tid1 == WM_MULTI_ANY || (tid1 & WM_MULTI_WARP)) {
        snprintf(buf, len, "several other threads");
        return;
    }
    uint32_t i = tid1 - 1;
    snprintf(buf, len, "thread (%u,%u,%u)", i % d->block[0], (i / d->block[0]) % d->block[1],
             i / (d->block[0] * d->block[1]));
}

static void wm_race_report(wm_worker *w, const char *region, size_t offset, int is_write, uint32_t other,
                           int other_wrote) {
    char where[160], them[64];
    wm_tid_text(w, other, them, sizeof them);
    wm_fail(WM_ERR_RACE, "shared-memory race in %s: it %s [%s+%zu], which %s %s with no barrier between",
            wm_where(where, sizeof where), is_write ? "writes" : "reads", region, offset, them,
            other_wrote ? "wrote" : "read");
}

void wm_race_access(uintptr_t addr, size_t bytes, int is_write) {
    wm_worker *w = wm_self;
    if (!w || !w->current || !w->desc->detect_races) return;
    wm_race_word *shadow;
    uintptr_t base;
    const char *region;
    if (w->static_shared && addr >= (uintptr_t)w->static_shared &&
        addr < (uintptr_t)w->static_shared + w->static_shared_bytes) {
        base = (uintptr_t)w->static_shared;
        shadow = w->race_static;
        region = "static";
    } else if (w->dyn_shared && addr >= (uintptr_t)w->dyn_shared &&
               addr < (uintptr_t)w->dyn_shared + w->desc->dyn_shared) {
        base = (uintptr_t)w->dyn_shared;
        shadow = w->race_dyn;
        region = "dynamic";
    } else {
        return;
    }
    const wm_fiber *f = w->current;
    uint32_t me = f->linear + 1, warp = f->linear / WM_WARP;
    uint16_t wgen = (uint16_t)w->warps[warp].gen;
    uint32_t epoch = w->epoch;
    size_t first = (addr - base) / 2, last = (addr + bytes - 1 - base) / 2;
    for (size_t u = first; u <= last; u++) {
        wm_race_word *r = &shadow[u];
        int w_mine = r->w_epoch != epoch || r->writer == me ||
                     (wm_warp_of(r->writer) == warp && r->w_wgen != wgen);
        uint32_t rd = r->reader;
        int r_ordered = r->r_epoch != epoch || rd == me ||
                        (rd != WM_MULTI_ANY && r->r_wgen != wgen &&
                         ((rd & WM_MULTI_WARP) ? (rd & ~WM_MULTI_WARP) == warp : wm_warp_of(rd) == warp));
        if (!w_mine) wm_race_report(w, region, addr - base, is_write, r->writer, 1);
        if (is_write) {
            if (!r_ordered) wm_race_report(w, region, addr - base, 1, rd, 0);
            r->w_epoch = epoch;
            r->writer = (uint16_t)me;
            r->w_wgen = wgen;
        } else if (r->r_epoch != epoch || rd == me || r_ordered) {
            r->r_epoch = epoch;
            r->reader = (uint16_t)me;
            r->r_wgen = wgen;
        } else {
            uint32_t same_warp = (rd & WM_MULTI_WARP) ? (rd & ~WM_MULTI_WARP) == warp
                                                      : rd != WM_MULTI_ANY && wm_warp_of(rd) == warp;
            r->reader = (uint16_t)(same_warp ? (WM_MULTI_WARP | warp) : WM_MULTI_ANY);
            r->r_wgen = wgen;
        }
    }
}

/* GCC's call-mode instrumentation entry points. */
#define WM_HOOK(n)                                                                                     \
    __attribute__((visibility("default"))) void __asan_load##n##_noabort(uintptr_t a) {               \
        wm_race_access(a, n, 0);                                                                       \
    }                                                                                                  \
    __attribute__((visibility("default"))) void __asan_store##n##_noabort(uintptr_t a) {              \
        wm_race_access(a, n, 1);                                                                       \
    }
WM_HOOK(1)
WM_HOOK(2)
WM_HOOK(4)
WM_HOOK(8)
WM_HOOK(16)

__attribute__((visibility("default"))) void __asan_loadN_noabort(uintptr_t a, size_t n) {
    wm_race_access(a, n, 0);
}
__attribute__((visibility("default"))) void __asan_storeN_noabort(uintptr_t a, size_t n) {
    wm_race_access(a, n, 1);
}
__attribute__((visibility("default"))) void __asan_handle_no_return(void) {}
