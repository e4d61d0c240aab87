/* warpmap's tensor-core and asynchronous-copy wrappers: the only way generated kernels reach mma,
 * ldmatrix and cp.async. Two definitions of every function live here:
 *   - CUDA (NVRTC, sm_80 and newer): inline PTX on plain integer registers, so no CUDA header is
 *     needed and compiles stay fast;
 *   - emulation (WARPMAP_EMU, set by the CPU emulator's forced include): calls into the emulator,
 *     which gathers the fragments of all 32 lanes and follows the PTX ISA fragment layouts exactly.
 *
 * Signatures (every function is warp-collective unless noted; all 32 lanes must call it together):
 *
 *   void wm_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);
 *   void wm_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]);
 *       D = A * B + C with A 16x16 (row), B 16x8 (col), f32 C and D; a/b hold two 16-bit elements per
 *       register, the lower-indexed element in the low half. With g = lane / 4 and t = lane % 4:
 *       a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9];
 *       b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g];
 *       c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1] (same for d). d may alias c.
 *
 *   void wm_ldmatrix_x1(unsigned r[1], const void* smem_row);   (and _x2 with r[2], _x4 with r[4])
 *   void wm_ldmatrix_x1_trans(unsigned r[1], const void* smem_row);   (_x2_trans, _x4_trans)
 *       Loads 1, 2 or 4 8x8 matrices of 16-bit elements from shared memory. Lane 8i + j passes the
 *       16-byte-aligned address of row j of matrix i (lanes beyond 8 * count pass any address). Lane l
 *       receives in r[i] row l/4, elements 2(l%4) and 2(l%4)+1 of matrix i; with _trans, elements
 *       (2(l%4), l/4) and (2(l%4)+1, l/4), i.e. the fragment of the transposed matrix.
 *
 *   void wm_cp_async_4(void* smem, const void* gmem, int src_bytes);   (per thread, not collective)
 *   void wm_cp_async_8(void* smem, const void* gmem, int src_bytes);
 *   void wm_cp_async_16(void* smem, const void* gmem, int src_bytes);
 *       Starts copying N bytes global -> shared: the first src_bytes (0..N) come from gmem, the rest
 *       are zero-filled (src_bytes = 0 reads nothing, so gmem may then point anywhere). Both addresses
 *       must be N-byte aligned. The data is there only after a wm_cp_async_wait retires its group.
 *   void wm_cp_async_commit();          (per thread) closes the current group of copies.
 *   template <int N> void wm_cp_async_wait();   (per thread) waits until at most N committed groups
 *       are still in flight. Follow it with __syncthreads() before reading other threads' copies.
 */
#ifndef WARPMAP_PRIMS_CUH
#define WARPMAP_PRIMS_CUH

#ifdef WARPMAP_EMU

static __forceinline__ void wm_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                                const float c[4]) {
    wm_emu_mma_m16n8k16(d, a, b, c, 0);
}
static __forceinline__ void wm_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                 const float c[4]) {
    wm_emu_mma_m16n8k16(d, a, b, c, 1);
}
static __forceinline__ void wm_ldmatrix_x1(unsigned r[1], const void *p) { wm_emu_ldmatrix(r, p, 1, 0); }
static __forceinline__ void wm_ldmatrix_x2(unsigned r[2], const void *p) { wm_emu_ldmatrix(r, p, 2, 0); }
static __forceinline__ void wm_ldmatrix_x4(unsigned r[4], const void *p) { wm_emu_ldmatrix(r, p, 4, 0); }
static __forceinline__ void wm_ldmatrix_x1_trans(unsigned r[1], const void *p) { wm_emu_ldmatrix(r, p, 1, 1); }
static __forceinline__ void wm_ldmatrix_x2_trans(unsigned r[2], const void *p) { wm_emu_ldmatrix(r, p, 2, 1); }
static __forceinline__ void wm_ldmatrix_x4_trans(unsigned r[4], const void *p) { wm_emu_ldmatrix(r, p, 4, 1); }
static __forceinline__ void wm_cp_async_4(void *s, const void *g, int n) { wm_emu_cp_async(s, g, 4, n); }
static __forceinline__ void wm_cp_async_8(void *s, const void *g, int n) { wm_emu_cp_async(s, g, 8, n); }
static __forceinline__ void wm_cp_async_16(void *s, const void *g, int n) { wm_emu_cp_async(s, g, 16, n); }
static __forceinline__ void wm_cp_async_commit() { wm_emu_cp_async_commit(); }
template <int N> static __forceinline__ void wm_cp_async_wait() { wm_emu_cp_async_wait(N); }

#else /* CUDA */

static __device__ __forceinline__ unsigned wm_smem_addr(const void *p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

static __device__ __forceinline__ void wm_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                                           const float c[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}
static __device__ __forceinline__ void wm_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                            const float c[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

static __device__ __forceinline__ void wm_ldmatrix_x1(unsigned r[1], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(wm_smem_addr(p)));
}
static __device__ __forceinline__ void wm_ldmatrix_x2(unsigned r[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(wm_smem_addr(p)));
}
static __device__ __forceinline__ void wm_ldmatrix_x4(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(wm_smem_addr(p)));
}
static __device__ __forceinline__ void wm_ldmatrix_x1_trans(unsigned r[1], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(wm_smem_addr(p)));
}
static __device__ __forceinline__ void wm_ldmatrix_x2_trans(unsigned r[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(wm_smem_addr(p)));
}
static __device__ __forceinline__ void wm_ldmatrix_x4_trans(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(wm_smem_addr(p)));
}

static __device__ __forceinline__ void wm_cp_async_4(void *s, const void *g, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(wm_smem_addr(s)), "l"(g), "r"(n) : "memory");
}
static __device__ __forceinline__ void wm_cp_async_8(void *s, const void *g, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(wm_smem_addr(s)), "l"(g), "r"(n) : "memory");
}
static __device__ __forceinline__ void wm_cp_async_16(void *s, const void *g, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(wm_smem_addr(s)), "l"(g), "r"(n)
                 : "memory");
}
static __device__ __forceinline__ void wm_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wm_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
#endif
