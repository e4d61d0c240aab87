/* The boundary between an emulated kernel (C++, compiled per kernel) and the emulator runtime (C,
 * compiled once): everything a kernel calls into, with C linkage. Only C headers, so that every kernel
 * compile stays fast. */
#ifndef WM_EMU_ABI_H
#define WM_EMU_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wm_dim3_s { unsigned int x, y, z; } wm_dim3_t;

/* Per OS thread; the scheduler rewrites threadIdx before it resumes each fiber, so a kernel may
 * cache its value across a barrier but never sees another thread's index. */
extern __thread wm_dim3_t wm_thread_idx, wm_block_idx, wm_block_dim, wm_grid_dim;

void wm_syncthreads(void);
void wm_syncwarp(unsigned int mask);

/* Shuffle kinds for wm_shfl. */
enum { WM_SHFL_IDX = 0, WM_SHFL_UP = 1, WM_SHFL_DOWN = 2, WM_SHFL_XOR = 3 };
unsigned long long wm_shfl(unsigned int mask, unsigned long long value, int kind, int arg, int width);

/* Dynamic shared memory of the calling thread's block (the launch's shared_bytes, 16-byte aligned). */
unsigned char *wm_dynamic_shared(void);

/* Warp-collective tensor-core and matrix-load emulation (PTX ISA fragment layouts). */
void wm_emu_mma_m16n8k16(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                         int bf16);
void wm_emu_ldmatrix(unsigned int *regs, const void *row_address, int matrices, int transpose);

/* Asynchronous copies: queued per thread, performed when a wait retires their group. */
void wm_emu_cp_async(void *dst, const void *src, int bytes, int src_bytes);
void wm_emu_cp_async_commit(void);
void wm_emu_cp_async_wait(int pending_groups);

/* Stop the launch with a message naming the kernel, block and thread. */
void wm_emu_fault(const char *message) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#endif
