/* CUDA C++ on the CPU: the header force-included before every emulated kernel. It maps CUDA's
 * qualifiers, built-in variables, barriers, shuffles, atomics, math and vector types onto the
 * emulator runtime (wm_emu_abi.h). It includes no C++ standard header: each kernel compile pays for
 * every line included here, and <cmath> alone makes a compile several times slower; math goes
 * through GCC builtins instead. */
#ifndef WM_EMU_H
#define WM_EMU_H

#include "wm_emu_abi.h"

#define WARPMAP_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* Static __shared__ arrays are thread-local to the OS thread that runs the block; a block never
 * migrates, so all of its fibers (and only they) see the same arrays. `used` makes the compiler
 * assume that code it cannot see (the barrier, in another library) reads and writes them: a static
 * whose address never escapes could otherwise be proven untouched by every call, and a store that
 * only other threads read would be dead to the optimiser. */
#define __shared__ static __thread __attribute__((used))
#define __align__(n) __attribute__((aligned(n)))
/* Atomics must not look like shared-memory races to the race detector's instrumentation. */
#define WM_NOSAN static inline __attribute__((no_sanitize_address))

#define threadIdx wm_thread_idx
#define blockIdx wm_block_idx
#define blockDim wm_block_dim
#define gridDim wm_grid_dim
#define warpSize 32

/* ---- vector types --------------------------------------------------------------------------- */
#define WM_VEC2(T, name, al)                                                                        \
    struct __attribute__((aligned(al))) name { T x, y; };                                          \
    static __forceinline__ name make_##name(T x, T y) { name v; v.x = x; v.y = y; return v; }
#define WM_VEC3(T, name)                                                                            \
    struct name { T x, y, z; };                                                                     \
    static __forceinline__ name make_##name(T x, T y, T z) { name v; v.x = x; v.y = y; v.z = z; return v; }
#define WM_VEC4(T, name, al)                                                                        \
    struct __attribute__((aligned(al))) name { T x, y, z, w; };                                    \
    static __forceinline__ name make_##name(T x, T y, T z, T w) {                                  \
        name v; v.x = x; v.y = y; v.z = z; v.w = w; return v;                                      \
    }
WM_VEC2(float, float2, 8)
WM_VEC3(float, float3)
WM_VEC4(float, float4, 16)
WM_VEC2(int, int2, 8)
WM_VEC3(int, int3)
WM_VEC4(int, int4, 16)
WM_VEC2(unsigned int, uint2, 8)
WM_VEC3(unsigned int, uint3)
WM_VEC4(unsigned int, uint4, 16)
WM_VEC2(short, short2, 4)
WM_VEC2(unsigned short, ushort2, 4)
WM_VEC4(unsigned char, uchar4, 4)
WM_VEC4(signed char, char4, 4)
WM_VEC2(double, double2, 16)
typedef wm_dim3_t dim3;

/* ---- barriers, fences, shuffles ------------------------------------------------------------- */
static __forceinline__ void __syncthreads(void) { wm_syncthreads(); }
static __forceinline__ void __syncwarp(unsigned int mask = 0xffffffffu) { wm_syncwarp(mask); }
static __forceinline__ void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static __forceinline__ void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T>
static __forceinline__ T wm_shfl_any(unsigned int mask, T var, int kind, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    unsigned long long bits = 0;
    __builtin_memcpy(&bits, &var, sizeof(T));
    bits = wm_shfl(mask, bits, kind, arg, width);
    T out;
    __builtin_memcpy(&out, &bits, sizeof(T));
    return out;
}
/* shfl.sync reads only the low five bits of its lane or offset operand (PTX ISA: b[4:0]), and
 * CUDA's wrappers pass the argument through unmasked: __shfl_xor_sync(m, v, 33) exchanges with
 * lane ^ 1, and an offset of 32 (or -32) reads the lane itself. */
template <typename T>
static __forceinline__ T __shfl_sync(unsigned int mask, T var, int src_lane, int width = 32) {
    return wm_shfl_any(mask, var, WM_SHFL_IDX, src_lane & 31, width);
}
template <typename T>
static __forceinline__ T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
    return wm_shfl_any(mask, var, WM_SHFL_UP, (int)(delta & 31u), width);
}
template <typename T>
static __forceinline__ T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
    return wm_shfl_any(mask, var, WM_SHFL_DOWN, (int)(delta & 31u), width);
}
template <typename T>
static __forceinline__ T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = 32) {
    return wm_shfl_any(mask, var, WM_SHFL_XOR, lane_mask & 31, width);
}

/* ---- atomics (real atomics: blocks run on several OS threads) -------------------------------- */
WM_NOSAN int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
WM_NOSAN unsigned int atomicAdd(unsigned int *p, unsigned int v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
WM_NOSAN unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
WM_NOSAN float atomicAdd(float *p, float v) {
    unsigned int *u = (unsigned int *)p;
    unsigned int old = __atomic_load_n(u, __ATOMIC_RELAXED), next;
    float f;
    do {
        __builtin_memcpy(&f, &old, 4);
        f += v;
        __builtin_memcpy(&next, &f, 4);
    } while (!__atomic_compare_exchange_n(u, &old, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    __builtin_memcpy(&f, &old, 4);
    return f;
}
WM_NOSAN int atomicMax(int *p, int v) {
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
WM_NOSAN unsigned int atomicMax(unsigned int *p, unsigned int v) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
WM_NOSAN int atomicMin(int *p, int v) {
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
WM_NOSAN int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
WM_NOSAN int atomicCAS(int *p, int expected, int desired) {
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return expected;
}

/* ---- math ------------------------------------------------------------------------------------ */
#define WM_MINMAX(T)                                                                                \
    static __forceinline__ T min(T a, T b) { return b < a ? b : a; }                              \
    static __forceinline__ T max(T a, T b) { return a < b ? b : a; }
WM_MINMAX(int)
WM_MINMAX(unsigned int)
WM_MINMAX(long long)
WM_MINMAX(unsigned long long)
/* Mixed signedness compares as unsigned, as CUDA's overloads do. */
static __forceinline__ unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
static __forceinline__ unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
static __forceinline__ unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
static __forceinline__ unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }

static __forceinline__ float __int_as_float(int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static __forceinline__ int __float_as_int(float x) { int i; __builtin_memcpy(&i, &x, 4); return i; }
static __forceinline__ unsigned int __float_as_uint(float x) { unsigned int i; __builtin_memcpy(&i, &x, 4); return i; }
static __forceinline__ float __uint_as_float(unsigned int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }

/* PTX min/max: a NaN operand yields the other one (two NaNs the canonical NaN), and -0 orders below
 * +0. C's fminf may return either zero, so a kernel could come to depend on an order that the GPU
 * does not have. Equal operands differ only
 * when they are zeros of opposite signs: OR-ing the bits picks -0, AND-ing picks +0. */
static __forceinline__ float fminf(float a, float b) {
    if (a != a) return b != b ? __uint_as_float(0x7fffffffu) : b;
    if (b != b) return a;
    return a == b ? __uint_as_float(__float_as_uint(a) | __float_as_uint(b)) : (a < b ? a : b);
}
static __forceinline__ float fmaxf(float a, float b) {
    if (a != a) return b != b ? __uint_as_float(0x7fffffffu) : b;
    if (b != b) return a;
    return a == b ? __uint_as_float(__float_as_uint(a) & __float_as_uint(b)) : (a < b ? b : a);
}
static __forceinline__ float min(float a, float b) { return fminf(a, b); }
static __forceinline__ float max(float a, float b) { return fmaxf(a, b); }

#include "wm_emu_math.h"

#define WM_F1(name, builtin) static __forceinline__ float name(float x) { return builtin(x); }
#define WM_F2(name, builtin) static __forceinline__ float name(float x, float y) { return builtin(x, y); }
#define WM_D1(name, builtin) static __forceinline__ double name(double x) { return builtin(x); }
WM_F1(sqrtf, __builtin_sqrtf)
WM_F1(fabsf, __builtin_fabsf)
WM_F1(floorf, __builtin_floorf)
WM_F1(ceilf, __builtin_ceilf)
WM_F1(truncf, __builtin_truncf)
WM_F1(roundf, __builtin_roundf)
WM_F2(fmodf, __builtin_fmodf)
WM_D1(exp, __builtin_exp)
WM_D1(log, __builtin_log)
WM_D1(sqrt, __builtin_sqrt)
WM_D1(fabs, __builtin_fabs)
static __forceinline__ float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static __forceinline__ float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static __forceinline__ int __popc(unsigned int x) { return __builtin_popcount(x); }
static __forceinline__ int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static __forceinline__ int __ffs(int x) { return __builtin_ffs(x); }
static __forceinline__ unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static __forceinline__ unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
template <typename T> static __forceinline__ T __ldg(const T *p) { return *p; }

#include "wm_emu_fp16.h"

#endif
