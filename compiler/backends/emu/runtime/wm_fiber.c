/* Fiber context switch. On x86-64 a switch saves the six callee-saved registers on the old stack and
 * swaps stack pointers (a few nanoseconds, no system call); elsewhere it falls back to ucontext, which
 * is portable but about ten times slower because swapcontext saves the signal mask with a system
 * call. */
#include "wm_internal.h"

#if WM_ASM_FIBERS

/* void wm_ctx_switch(void **save_sp, void *load_sp) */
__asm__(
    ".text\n"
    ".globl wm_ctx_switch\n"
    ".hidden wm_ctx_switch\n"
    ".type wm_ctx_switch,@function\n"
    "wm_ctx_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size wm_ctx_switch, .-wm_ctx_switch\n");

void wm_ctx_switch(void **save_sp, void *load_sp);

void wm_fiber_prepare(wm_worker *w, wm_fiber *f, size_t stack_bytes) {
    (void)w;
    uintptr_t top = ((uintptr_t)f->stack_lo + stack_bytes) & ~(uintptr_t)15;
    void **sp = (void **)top;
    /* The first switch pops six zero registers and "returns" into wm_fiber_main with the stack
     * aligned as after a call (rsp % 16 == 8 at entry). */
    *--sp = 0;
    *--sp = (void *)wm_fiber_main;
    for (int i = 0; i < 6; i++) *--sp = 0;
    f->sp = sp;
}

void wm_switch_to(wm_worker *w, wm_fiber *from, wm_fiber *to) {
    (void)w;
    wm_ctx_switch(&from->sp, to->sp);
}

void wm_switch_from_main(wm_worker *w, wm_fiber *to) { wm_ctx_switch(&w->main_sp, to->sp); }

void wm_switch_to_main(wm_worker *w, wm_fiber *from) { wm_ctx_switch(&from->sp, w->main_sp); }

#else /* portable fallback */

#include <stdlib.h>
#include <ucontext.h>

static void wm_ucontext_entry(void) { wm_fiber_main(); }

void wm_fiber_prepare(wm_worker *w, wm_fiber *f, size_t stack_bytes) {
    if (!f->uctx) f->uctx = calloc(1, sizeof(ucontext_t));
    if (!w->main_uctx) w->main_uctx = calloc(1, sizeof(ucontext_t));
    if (!f->uctx || !w->main_uctx) wm_fail(WM_ERR_CRASH, "out of memory for fiber contexts");
    ucontext_t *u = (ucontext_t *)f->uctx;
    getcontext(u);
    u->uc_stack.ss_sp = f->stack_lo;
    u->uc_stack.ss_size = stack_bytes;
    u->uc_link = NULL;
    makecontext(u, wm_ucontext_entry, 0);
}

void wm_switch_to(wm_worker *w, wm_fiber *from, wm_fiber *to) {
    (void)w;
    swapcontext((ucontext_t *)from->uctx, (ucontext_t *)to->uctx);
}

void wm_switch_from_main(wm_worker *w, wm_fiber *to) {
    swapcontext((ucontext_t *)w->main_uctx, (ucontext_t *)to->uctx);
}

void wm_switch_to_main(wm_worker *w, wm_fiber *from) {
    swapcontext((ucontext_t *)from->uctx, (ucontext_t *)w->main_uctx);
}

#endif
