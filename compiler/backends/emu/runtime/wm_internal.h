/* Emulator runtime internals shared by its C files. */
#ifndef WM_INTERNAL_H
#define WM_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>

#include "wm_emu_abi.h"

/* The assembly context switch exists for x86-64; -DWM_PORTABLE_FIBERS (or any other architecture)
 * selects the ucontext fallback. */
#if defined(__x86_64__) && !defined(WM_PORTABLE_FIBERS)
#define WM_ASM_FIBERS 1
#else
#define WM_ASM_FIBERS 0
#endif

#define WM_WARP 32
#define WM_SLOT_BYTES 32 /* per lane and exchange: mma sends 24 bytes (a[4], b[2]) */
#define WM_CP_QUEUE 64   /* outstanding cp.async copies per thread before the oldest is forced */

/* Status codes shared with launch.py (keep in sync). */
enum {
    WM_OK = 0,
    WM_ERR_LOAD = 1,
    WM_ERR_BARRIER = 2,
    WM_ERR_BOUNDS = 3,
    WM_ERR_DEADLOCK = 4,
    WM_ERR_STACK = 5,
    WM_ERR_CRASH = 6,
    WM_ERR_KERNEL = 7, /* misuse reported by the emulation (bad shuffle width, misaligned cp.async, ...) */
    WM_ERR_RACE = 8,
};

/* Written by the launch child, read by Python: the first page of the launch's shared region. */
typedef struct wm_status {
    volatile int32_t code;
    int32_t reserved;
    double elapsed_s; /* running blocks, wall */
    double cpu_s;     /* the child's CPU time, all worker threads */
    char message[2048];
} wm_status;

/* One global-memory argument as laid out by Python: data ends at `data + alloc_bytes`, which is
 * page-aligned when guards are on, with an inaccessible guard region on either side. In the shared
 * region every pointer below is an offset from the region's start; the child relocates them. */
typedef struct wm_buffer {
    char *data;
    uint64_t nbytes;
    uint64_t alloc_bytes;
    uint64_t elem_bytes;
    char *guard_lo; /* guard_bytes inaccessible bytes before the data's first page */
    char *guard_hi; /* guard_bytes inaccessible bytes from data + alloc_bytes on */
    uint64_t guard_bytes;
    const char *name;
    const char *dtype;
} wm_buffer;

/* A launch as Python writes it at WM_DESC_OFFSET of the shared region (mirrored in abi.py). */
typedef struct wm_launch_desc {
    const char *so_path; /* set by the child: the kernel library's received descriptor */
    const char *entry_symbol;
    const char *kernel_name;
    uint32_t grid[3];
    uint32_t block[3];
    uint64_t dyn_shared;
    void **argv; /* nargs pointers: to each buffer's data, or to an 8-byte scalar slot */
    int32_t nargs;
    int32_t nbufs;
    wm_buffer *bufs;
    int32_t check_bounds;
    int32_t workers;
    int32_t detect_races;
    int32_t reserved;
    uint64_t stack_bytes;
    wm_status *status;
    const uint32_t *block_ids; /* nblock_ids linear block indices to run, or all blocks when 0 */
    int32_t nblock_ids;
    int32_t reserved2;
} wm_launch_desc;

#define WM_DESC_OFFSET 4096u

/* What the launch server receives with each request, besides three descriptors (the shared region,
 * the kernel library, the reply socket). The sizes guard against a Python mirror out of step. */
typedef struct wm_request {
    uint32_t magic;
    uint32_t desc_bytes;
    uint32_t buffer_bytes;
    uint32_t workers; /* OS threads the launch asks for (already at most its blocks) */
    uint32_t threads; /* per block: each worker needs one fiber stack per thread */
    uint32_t reserved;
    uint64_t stack_bytes;
} wm_request;

#define WM_REQUEST_MAGIC 0x776d3032u /* "wm02" */

typedef struct wm_cp {
    char *dst;
    const char *src;
    uint32_t bytes, src_bytes, group;
} wm_cp;

typedef struct wm_fiber {
    void *sp;
    struct wm_fiber *next, *prev;
    wm_dim3_t tid;
    uint32_t linear;
    int32_t waiting; /* 0 running, 1 __syncthreads, 2 warp-level op */
    uint32_t cp_head, cp_len, cp_group;
    wm_cp cp[WM_CP_QUEUE];
    char *stack_lo; /* lowest usable byte; the guard page lies just below */
#if !WM_ASM_FIBERS
    void *uctx; /* ucontext_t, allocated by the portable switch */
#endif
} wm_fiber;

typedef struct wm_warp {
    uint32_t arrived, gen, mask, present;
    unsigned char slot[2][WM_WARP][WM_SLOT_BYTES];
} wm_warp;

typedef struct wm_race_word wm_race_word;

/* One OS thread of the launch; it runs whole blocks, one at a time, as fibers. */
typedef struct wm_worker {
    const wm_launch_desc *desc;
    void (*entry)(void **);
    void *main_sp;
#if !WM_ASM_FIBERS
    void *main_uctx;
#endif
    wm_fiber *fibers;
    wm_fiber *current;
    char *stacks;
    size_t stacks_bytes;
    uint32_t nthreads, live, exited;
    uint32_t bar_arrived, bar_gen;
    uint32_t stall;
    wm_warp *warps;
    uint32_t nwarps;
    unsigned char *dyn_shared; /* the launch's shared_bytes, ending at dyn_guard */
    char *dyn_guard;           /* one inaccessible page */
    unsigned char *static_shared;
    size_t static_shared_bytes;
    /* race detection: one shadow record per 2 bytes of shared memory */
    wm_race_word *race_static, *race_dyn;
    uint32_t epoch;
    void *altstack;
} wm_worker;

extern __thread wm_worker *wm_self;

/* Fiber switching (wm_fiber.c). */
void wm_fiber_prepare(wm_worker *w, wm_fiber *f, size_t stack_bytes);
void wm_switch_to(wm_worker *w, wm_fiber *from, wm_fiber *to);
void wm_switch_from_main(wm_worker *w, wm_fiber *to);
void wm_switch_to_main(wm_worker *w, wm_fiber *from);
void wm_fiber_main(void) __attribute__((noreturn));

/* Scheduling (wm_sched.c). */
void wm_yield(wm_worker *w, wm_fiber *f);
void wm_run_block(wm_worker *w, uint32_t block_linear);
const unsigned char *wm_warp_exchange(wm_worker *w, wm_fiber *f, unsigned int mask, const void *data,
                                      size_t bytes);
void wm_cp_retire(wm_worker *w, wm_fiber *f, uint32_t keep_groups);

/* Launching (wm_launch.c): the child's entry, given the shared region and the kernel library, and the
 * fiber stack pool the server maps before each fork. */
void wm_launch_child(int region_fd, int kernel_fd) __attribute__((noreturn));
int wm_pool_reserve(uint32_t workers, uint32_t threads, size_t stack_bytes);

/* Faults (wm_launch.c): record the first one, then end the child process. */
void wm_fail(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
const char *wm_where(char *buf, size_t len);

/* Race detection (wm_race.c). */
void wm_race_begin_block(wm_worker *w);
void wm_race_barrier(wm_worker *w);
void wm_race_access(uintptr_t addr, size_t bytes, int is_write);
int wm_race_setup(wm_worker *w);

#endif
