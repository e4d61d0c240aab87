/* One launch = one child process of the launch server (wm_server.c). Python lays out the arguments in
 * a shared memory file, the server forks, and the child maps the file, loads the kernel, runs every
 * block on a pool of OS threads and exits. A fault anywhere (a guard page hit, a fiber stack overflow,
 * barrier divergence) is written to the shared status record and ends the child at once, so Python
 * always gets a message and never a corrupted interpreter. */
#include "wm_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>


#define WM_PAGE 4096u
#define WM_ALTSTACK (64u * 1024u)

static const wm_launch_desc *g_desc;
/* Fiber stacks with their guard pages, mapped once in the (single-threaded) server and reused by every
 * launch: a forked child inherits the mapping and its guards (so it makes no mmap or mprotect call),
 * and because the mapping is private and never touched by the server, each child writes its own fresh
 * pages, so concurrent launches cannot disturb each other. */
static char *g_pool;
static size_t g_pool_bytes, g_pool_stride, g_pool_stacks;
static char g_so_path[64];
static void *g_handle;
static uint32_t g_next_block;
static uint32_t g_num_blocks;

const char *wm_where(char *buf, size_t len) {
    wm_worker *w = wm_self;
    const char *name = g_desc ? g_desc->kernel_name : "?";
    if (w && w->current) {
        snprintf(buf, len, "kernel '%s' block (%u,%u,%u) thread (%u,%u,%u)", name, wm_block_idx.x,
                 wm_block_idx.y, wm_block_idx.z, w->current->tid.x, w->current->tid.y, w->current->tid.z);
    } else {
        snprintf(buf, len, "kernel '%s'", name);
    }
    return buf;
}

void wm_fail(int code, const char *fmt, ...) {
    wm_status *st = g_desc->status;
    int32_t unclaimed = 0;
    if (__atomic_compare_exchange_n(&st->reserved, &unclaimed, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->message, sizeof st->message, fmt, ap);
        va_end(ap);
        __atomic_store_n(&st->code, code, __ATOMIC_SEQ_CST);
        _exit(10 + code);
    }
    for (;;) pause(); /* another thread is reporting; it ends the process */
}

static int wm_in(uintptr_t addr, const char *lo, size_t bytes) {
    return lo && addr >= (uintptr_t)lo && addr < (uintptr_t)lo + bytes;
}

static void wm_report_bounds(uintptr_t addr, const wm_buffer *b, int is_write) {
    char where[160];
    long long off = (long long)(addr - (uintptr_t)b->data);
    long long elem = off >= 0 ? off / (long long)b->elem_bytes : -((-off + (long long)b->elem_bytes - 1) /
                                                                    (long long)b->elem_bytes);
    wm_fail(WM_ERR_BOUNDS, "out-of-bounds %s of parameter '%s' in %s: element %lld (byte offset %lld), but "
            "it holds %llu %s elements", is_write == 1 ? "write" : is_write == 0 ? "read" : "access", b->name,
            wm_where(where, sizeof where), elem, off, (unsigned long long)(b->nbytes / b->elem_bytes), b->dtype);
}

static void wm_on_signal(int sig, siginfo_t *si, void *uc_void) {
    char where[160];
    int is_write = -1;
#ifdef __x86_64__
    ucontext_t *uc = (ucontext_t *)uc_void;
    is_write = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#else
    (void)uc_void;
#endif
    if (sig == SIGSEGV || sig == SIGBUS) {
        uintptr_t addr = (uintptr_t)si->si_addr;
        const wm_launch_desc *d = g_desc;
        for (int i = 0; d->check_bounds && i < d->nbufs; i++) {
            const wm_buffer *b = &d->bufs[i];
            if (wm_in(addr, b->guard_lo, b->guard_bytes) || wm_in(addr, b->guard_hi, b->guard_bytes)) {
                wm_report_bounds(addr, b, is_write);
            }
        }
        wm_worker *w = wm_self;
        if (w && wm_in(addr, w->dyn_guard, WM_PAGE)) {
            wm_fail(WM_ERR_BOUNDS, "out-of-bounds %s of dynamic shared memory in %s: byte %llu, but the launch "
                    "has shared_bytes = %llu", is_write == 1 ? "write" : "read", wm_where(where, sizeof where),
                    (unsigned long long)(addr - (uintptr_t)w->dyn_shared), (unsigned long long)d->dyn_shared);
        }
        if (w && w->stacks && wm_in(addr, w->stacks, w->stacks_bytes)) {
            size_t stride = (size_t)d->stack_bytes + WM_PAGE;
            if ((addr - (uintptr_t)w->stacks) % stride < WM_PAGE) {
                wm_fail(WM_ERR_STACK, "stack overflow in %s: each emulated thread has a %llu KiB stack (local "
                        "arrays too large, or deep recursion)", wm_where(where, sizeof where),
                        (unsigned long long)(d->stack_bytes / 1024));
            }
        }
        wm_fail(WM_ERR_CRASH, "segmentation fault (%s address %p) in %s", is_write == 1 ? "writing" : "reading",
                (void *)addr, wm_where(where, sizeof where));
    }
    if (sig == SIGFPE) wm_fail(WM_ERR_CRASH, "arithmetic exception (integer division by zero?) in %s",
                               wm_where(where, sizeof where));
    wm_fail(WM_ERR_CRASH, "signal %d (%s) in %s", sig, strsignal(sig), wm_where(where, sizeof where));
}

static void wm_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = wm_on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* The kernel module's static TLS block holds exactly its static __shared__ arrays. */
typedef struct { size_t modid, memsz; } wm_tls_query;

static int wm_find_tls(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    wm_tls_query *q = (wm_tls_query *)arg;
    if (info->dlpi_tls_modid != q->modid) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_TLS) q->memsz = info->dlpi_phdr[i].p_memsz;
    }
    return 1;
}

typedef struct { unsigned long ti_module, ti_offset; } wm_tls_index;
extern void *__tls_get_addr(wm_tls_index *);

static void wm_module_tls(wm_worker *w) {
    size_t modid = 0;
    if (dlinfo(g_handle, RTLD_DI_TLS_MODID, &modid) != 0 || modid == 0) return;
    wm_tls_query q = {modid, 0};
    dl_iterate_phdr(wm_find_tls, &q);
    wm_tls_index ti = {modid, 0};
    w->static_shared = (unsigned char *)__tls_get_addr(&ti);
    w->static_shared_bytes = q.memsz;
}

static void *wm_worker_main(void *arg) {
    (void)arg;
    const wm_launch_desc *d = g_desc;
    wm_worker *w = (wm_worker *)calloc(1, sizeof *w);
    if (!w) wm_fail(WM_ERR_CRASH, "out of memory for a worker");
    w->desc = d;
    w->entry = (void (*)(void **))dlsym(g_handle, d->entry_symbol);
    w->nthreads = d->block[0] * d->block[1] * d->block[2];
    w->nwarps = (w->nthreads + WM_WARP - 1) / WM_WARP;
    w->fibers = (wm_fiber *)calloc(w->nthreads, sizeof(wm_fiber));
    w->warps = (wm_warp *)calloc(w->nwarps, sizeof(wm_warp));
    w->stacks_bytes = (size_t)w->nthreads * g_pool_stride;
    w->stacks = g_pool + (size_t)(uintptr_t)arg * w->stacks_bytes;
    w->altstack = malloc(WM_ALTSTACK);
    if (!w->fibers || !w->warps || !w->altstack) {
        wm_fail(WM_ERR_CRASH, "out of memory for %u fibers", w->nthreads);
    }
    stack_t ss = {.ss_sp = w->altstack, .ss_size = WM_ALTSTACK, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    {
        /* Dynamic shared memory ends at an inaccessible page, so indexing past the launch's
         * shared_bytes (a wrong size computed by the host side, say) is reported, not absorbed. */
        size_t bytes = ((size_t)d->dyn_shared + 15) & ~(size_t)15;
        size_t pages = (bytes + WM_PAGE - 1) & ~(size_t)(WM_PAGE - 1);
        char *base = (char *)mmap(NULL, pages + WM_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED || mprotect(base + pages, WM_PAGE, PROT_NONE) != 0) {
            wm_fail(WM_ERR_CRASH, "out of memory for %llu bytes of dynamic shared memory",
                    (unsigned long long)d->dyn_shared);
        }
        w->dyn_shared = (unsigned char *)base + pages - bytes;
        w->dyn_guard = base + pages;
    }
    wm_block_dim.x = d->block[0];
    wm_block_dim.y = d->block[1];
    wm_block_dim.z = d->block[2];
    wm_grid_dim.x = d->grid[0];
    wm_grid_dim.y = d->grid[1];
    wm_grid_dim.z = d->grid[2];
    wm_self = w;
    wm_module_tls(w);
    if (d->detect_races && wm_race_setup(w) != 0) wm_fail(WM_ERR_CRASH, "out of memory for the race detector");
    for (;;) {
        uint32_t b = __atomic_fetch_add(&g_next_block, 1u, __ATOMIC_RELAXED);
        if (b >= g_num_blocks) break;
        wm_run_block(w, d->nblock_ids ? d->block_ids[b] : b);
    }
    w->current = NULL;
    return NULL;
}

static double wm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static __attribute__((noreturn)) void wm_child(const wm_launch_desc *d) {
    g_desc = d;
    wm_install_signals();
    for (int i = 0; d->check_bounds && i < d->nbufs; i++) {
        const wm_buffer *b = &d->bufs[i];
        if (mprotect(b->guard_lo, b->guard_bytes, PROT_NONE) || mprotect(b->guard_hi, b->guard_bytes, PROT_NONE)) {
            wm_fail(WM_ERR_CRASH, "cannot protect the guard pages of parameter '%s': %s", b->name, strerror(errno));
        }
    }
    g_handle = dlopen(d->so_path, RTLD_NOW | RTLD_LOCAL);
    if (!g_handle) wm_fail(WM_ERR_LOAD, "cannot load kernel '%s': %s", d->kernel_name, dlerror());
    if (!dlsym(g_handle, d->entry_symbol)) {
        wm_fail(WM_ERR_LOAD, "kernel library has no symbol '%s'", d->entry_symbol);
    }
    g_num_blocks = d->nblock_ids ? (uint32_t)d->nblock_ids : d->grid[0] * d->grid[1] * d->grid[2];
    g_next_block = 0;
    /* As many workers as asked for (launch.py asks for at most one per block) and as the stack pool
     * holds (the server sized it under the mapping limit). */
    size_t capacity = g_pool_stacks / ((size_t)d->block[0] * d->block[1] * d->block[2]);
    size_t workers = d->workers < 1 ? 1 : (size_t)d->workers;
    if (workers > g_num_blocks) workers = g_num_blocks;
    if (workers > capacity) workers = capacity;
    pthread_t *threads = (pthread_t *)calloc(workers, sizeof *threads);
    if (!threads || !workers) wm_fail(WM_ERR_CRASH, "no fiber stacks for a worker (pool of %zu)", g_pool_stacks);
    double t0 = wm_now();
    for (size_t i = 1; i < workers; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1u << 20);
        if (pthread_create(&threads[i], &attr, wm_worker_main, (void *)(uintptr_t)i) != 0) {
            wm_fail(WM_ERR_CRASH, "cannot start worker thread %zu", i);
        }
        pthread_attr_destroy(&attr);
    }
    wm_worker_main((void *)(uintptr_t)0);
    for (size_t i = 1; i < workers; i++) pthread_join(threads[i], NULL);
    d->status->elapsed_s = wm_now() - t0;
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    d->status->cpu_s = (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec;
    __atomic_store_n(&d->status->code, WM_OK, __ATOMIC_SEQ_CST);
    _exit(0);
}

/* Each fiber stack with its guard page is two mappings, and the kernel refuses any past
 * vm.max_map_count (65530 by default, which 32 workers of 1024-thread blocks already pass). So the pool
 * holds as many workers' stacks as fit under that limit, beside the server's own mappings and those
 * each child adds (below), and a launch runs on at most that many workers. Every stack keeps its
 * guard page: an overflow must be a fault, never a silent write into a neighbour's frames. */
#define WM_CHILD_MAPS 1024u /* per child, beside its workers': the shared file split by guard pages,
                             * the kernel library and what it loads */
#define WM_WORKER_MAPS 16u  /* per worker, beside its fiber stacks: thread stack and guard, allocator
                             * arena, fiber records, dynamic shared memory and guard, race shadow */

static size_t g_map_budget; /* mappings the pool and the child may add; measured once */

static size_t wm_map_budget(void) {
    size_t limit = 65530, used = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        unsigned long long value;
        if (fscanf(f, "%llu", &value) == 1) limit = (size_t)value;
        fclose(f);
    }
    f = fopen("/proc/self/maps", "r");
    if (f) {
        for (int c; (c = fgetc(f)) != EOF;) used += c == '\n';
        fclose(f);
    }
    return limit > used + WM_CHILD_MAPS ? limit - used - WM_CHILD_MAPS : 0;
}

int wm_pool_reserve(uint32_t workers, uint32_t threads, size_t stack_bytes) {
    if (workers < 1 || threads < 1) return -EINVAL;
    if (!g_map_budget) g_map_budget = wm_map_budget(); /* before any pool: the server's own mappings */
    size_t fit = g_map_budget / (2u * (size_t)threads + WM_WORKER_MAPS);
    if (fit < 1) return -ENOMEM;
    size_t stacks = (workers < fit ? workers : fit) * (size_t)threads;
    size_t stride = stack_bytes + WM_PAGE;
    /* Reused while it is big enough and not much bigger: every fork copies the pool's mappings, so a
     * pool left from a launch of 30 workers x 1024 threads made each later small launch ten times
     * slower (220 ms instead of 23 ms measured); remapping a small pool is cheap. */
    if (g_pool && g_pool_stride == stride && g_pool_stacks >= stacks && g_pool_stacks <= 2 * stacks + 1024) {
        return 0;
    }
    if (g_pool) munmap(g_pool, g_pool_bytes);
    g_pool = NULL;
    g_pool_stacks = 0;
    size_t bytes = stacks * stride;
    char *pool = (char *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                              -1, 0);
    if (pool == MAP_FAILED) return -ENOMEM;
    for (size_t i = 0; i < stacks; i++) {
        if (mprotect(pool + i * stride, WM_PAGE, PROT_NONE) != 0) {
            int err = errno;
            munmap(pool, bytes);
            return -err;
        }
    }
    g_pool = pool;
    g_pool_bytes = bytes;
    g_pool_stride = stride;
    g_pool_stacks = stacks;
    return 0;
}

#define WM_AT(base, offset) ((void *)((base) + (uintptr_t)(offset)))

/* Offsets from the region's start become addresses in this process's mapping of it. */
static void wm_relocate(wm_launch_desc *d, char *base) {
    d->status = (wm_status *)WM_AT(base, d->status);
    d->entry_symbol = (const char *)WM_AT(base, d->entry_symbol);
    d->kernel_name = (const char *)WM_AT(base, d->kernel_name);
    d->argv = (void **)WM_AT(base, d->argv);
    d->bufs = (wm_buffer *)WM_AT(base, d->bufs);
    d->block_ids = (const uint32_t *)WM_AT(base, d->block_ids);
    for (int i = 0; i < d->nargs; i++) d->argv[i] = WM_AT(base, d->argv[i]);
    for (int i = 0; i < d->nbufs; i++) {
        wm_buffer *b = &d->bufs[i];
        b->data = (char *)WM_AT(base, b->data);
        b->name = (const char *)WM_AT(base, b->name);
        b->dtype = (const char *)WM_AT(base, b->dtype);
        if (d->check_bounds) {
            b->guard_lo = (char *)WM_AT(base, b->guard_lo);
            b->guard_hi = (char *)WM_AT(base, b->guard_hi);
        }
    }
}

/* Exit codes before the status record is reachable; launch.py reports them as a wait status. */
void wm_launch_child(int region_fd, int kernel_fd) {
    struct stat st;
    if (fstat(region_fd, &st) != 0 || (size_t)st.st_size < WM_DESC_OFFSET + sizeof(wm_launch_desc)) _exit(3);
    char *base = (char *)mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
    if (base == MAP_FAILED) _exit(4);
    close(region_fd);
    wm_launch_desc *d = (wm_launch_desc *)(base + WM_DESC_OFFSET);
    wm_relocate(d, base);
    snprintf(g_so_path, sizeof g_so_path, "/proc/self/fd/%d", kernel_fd);
    d->so_path = g_so_path;
    wm_child(d);
}
