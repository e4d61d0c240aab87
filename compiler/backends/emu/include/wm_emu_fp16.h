/* __half and __nv_bfloat16 for the emulator, bit-exact with the GPU's conversions: float -> 16-bit
 * rounds to nearest, ties to even, with subnormals, overflow to infinity and NaN -> canonical 0x7fff.
 * Arithmetic is done in float and rounded once: float's 24-bit significand is at least twice the
 * 11 (half) or 8 (bfloat16) bits plus two, so this double rounding equals correct rounding for
 * + - * /, which is what the hardware's f16/bf16 instructions deliver. */
#ifndef WM_EMU_FP16_H
#define WM_EMU_FP16_H

static __forceinline__ unsigned short wm_float_to_half_bits(float f) {
    unsigned int x;
    __builtin_memcpy(&x, &f, 4);
    unsigned int sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fffu;                             /* NaN */
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);   /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                           /* half subnormal or zero */
        unsigned int e = ax >> 23;
        if (e < 102u) return (unsigned short)sign;                    /* below half the least subnormal */
        unsigned int m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        unsigned int r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (unsigned short)(sign | r);
    }
    unsigned int r = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (unsigned short)(sign | r);
}

static __forceinline__ float wm_half_bits_to_float(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0x1fu) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
        __builtin_memcpy(&bits, &v, 4);
        bits |= sign;
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    float out;
    __builtin_memcpy(&out, &bits, 4);
    return out;
}

static __forceinline__ unsigned short wm_float_to_bf16_bits(float f) {
    unsigned int x;
    __builtin_memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    x += 0x7fffu + ((x >> 16) & 1u); /* ties to even; carries into the exponent (and to inf) */
    return (unsigned short)(x >> 16);
}

static __forceinline__ float wm_bf16_bits_to_float(unsigned short h) {
    unsigned int bits = (unsigned int)h << 16;
    float out;
    __builtin_memcpy(&out, &bits, 4);
    return out;
}

/* A double rounded to float with round-to-odd: truncated toward zero, with the last bit set when
 * anything was dropped. Float keeps at least two bits more than half and bfloat16 (also at
 * bfloat16's subnormals, which float represents with 16 bits to spare), so rounding this float to
 * nearest gives the correctly rounded 16-bit value of the double: one rounding, not two. */
static __forceinline__ float wm_double_to_float_odd(double d) {
    float f = (float)d;
    if (d != d || (double)f == d) return f;
    unsigned int b;
    __builtin_memcpy(&b, &f, 4);
    if (__builtin_fabs((double)f) > __builtin_fabs(d)) b -= 1u; /* rounded away from zero: step back */
    b |= 1u;
    __builtin_memcpy(&f, &b, 4);
    return f;
}

/* One definition for both 16-bit types: NAME is the type, TO/FROM the conversions. */
#define WM_HALF_TYPE(NAME, TO, FROM)                                                                \
    struct __attribute__((aligned(2))) NAME {                                                      \
        unsigned short __x;                                                                        \
        NAME() = default;                                                                          \
        __forceinline__ NAME(float f) : __x(TO(f)) {}                                              \
        __forceinline__ NAME(double f) : __x(TO(wm_double_to_float_odd(f))) {}                     \
        __forceinline__ NAME(int i) : __x(TO(wm_double_to_float_odd((double)i))) {}               \
        __forceinline__ operator float() const { return FROM(__x); }                               \
        __forceinline__ NAME &operator+=(NAME o) { __x = TO(FROM(__x) + FROM(o.__x)); return *this; } \
        __forceinline__ NAME &operator-=(NAME o) { __x = TO(FROM(__x) - FROM(o.__x)); return *this; } \
        __forceinline__ NAME &operator*=(NAME o) { __x = TO(FROM(__x) * FROM(o.__x)); return *this; } \
        __forceinline__ NAME &operator/=(NAME o) { __x = TO(FROM(__x) / FROM(o.__x)); return *this; } \
    };                                                                                             \
    static __forceinline__ NAME wm_make_##NAME(float f) { NAME h; h.__x = TO(f); return h; }       \
    static __forceinline__ NAME operator+(NAME a, NAME b) { return wm_make_##NAME(FROM(a.__x) + FROM(b.__x)); } \
    static __forceinline__ NAME operator-(NAME a, NAME b) { return wm_make_##NAME(FROM(a.__x) - FROM(b.__x)); } \
    static __forceinline__ NAME operator*(NAME a, NAME b) { return wm_make_##NAME(FROM(a.__x) * FROM(b.__x)); } \
    static __forceinline__ NAME operator/(NAME a, NAME b) { return wm_make_##NAME(FROM(a.__x) / FROM(b.__x)); } \
    static __forceinline__ NAME operator-(NAME a) { NAME h; h.__x = (unsigned short)(a.__x ^ 0x8000u); return h; } \
    static __forceinline__ bool operator==(NAME a, NAME b) { return FROM(a.__x) == FROM(b.__x); }  \
    static __forceinline__ bool operator!=(NAME a, NAME b) { return FROM(a.__x) != FROM(b.__x); }  \
    static __forceinline__ bool operator<(NAME a, NAME b) { return FROM(a.__x) < FROM(b.__x); }    \
    static __forceinline__ bool operator>(NAME a, NAME b) { return FROM(a.__x) > FROM(b.__x); }    \
    static __forceinline__ bool operator<=(NAME a, NAME b) { return FROM(a.__x) <= FROM(b.__x); }  \
    static __forceinline__ bool operator>=(NAME a, NAME b) { return FROM(a.__x) >= FROM(b.__x); }

WM_HALF_TYPE(__half, wm_float_to_half_bits, wm_half_bits_to_float)
WM_HALF_TYPE(__nv_bfloat16, wm_float_to_bf16_bits, wm_bf16_bits_to_float)
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __half2 { __half x, y; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

/* half */
static __forceinline__ __half __float2half_rn(float f) { return wm_make___half(f); }
static __forceinline__ __half __float2half(float f) { return wm_make___half(f); }
static __forceinline__ float __half2float(__half h) { return wm_half_bits_to_float(h.__x); }
static __forceinline__ __half __int2half_rn(int i) { return __half(i); }
static __forceinline__ __half __hadd(__half a, __half b) { return a + b; }
static __forceinline__ __half __hsub(__half a, __half b) { return a - b; }
static __forceinline__ __half __hmul(__half a, __half b) { return a * b; }
static __forceinline__ __half __hdiv(__half a, __half b) { return a / b; }
static __forceinline__ __half __hneg(__half a) { return -a; }
static __forceinline__ __half __hfma(__half a, __half b, __half c) {
    /* The product is exact in double (22 bits), and so is the sum wherever its rounding to half is in
     * doubt (a long sum means a tiny addend, far below half an ulp of the result); the double then
     * goes to half with one rounding. */
    double r = (double)__half2float(a) * (double)__half2float(b) + (double)__half2float(c);
    return __half(r);
}
static __forceinline__ __half __hmax(__half a, __half b) { return wm_make___half(fmaxf(a, b)); }
static __forceinline__ __half __hmin(__half a, __half b) { return wm_make___half(fminf(a, b)); }
static __forceinline__ __half __ushort_as_half(unsigned short x) { __half h; h.__x = x; return h; }
static __forceinline__ unsigned short __half_as_ushort(__half h) { return h.__x; }
static __forceinline__ __half2 __halves2half2(__half a, __half b) { __half2 r; r.x = a; r.y = b; return r; }
static __forceinline__ __half2 __floats2half2_rn(float a, float b) {
    return __halves2half2(wm_make___half(a), wm_make___half(b));
}
static __forceinline__ __half2 __float2half2_rn(float a) { return __floats2half2_rn(a, a); }
static __forceinline__ float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static __forceinline__ __half __low2half(__half2 h) { return h.x; }
static __forceinline__ __half __high2half(__half2 h) { return h.y; }
static __forceinline__ float __low2float(__half2 h) { return __half2float(h.x); }
static __forceinline__ float __high2float(__half2 h) { return __half2float(h.y); }
static __forceinline__ __half2 operator+(__half2 a, __half2 b) { return __halves2half2(a.x + b.x, a.y + b.y); }
static __forceinline__ __half2 operator-(__half2 a, __half2 b) { return __halves2half2(a.x - b.x, a.y - b.y); }
static __forceinline__ __half2 operator*(__half2 a, __half2 b) { return __halves2half2(a.x * b.x, a.y * b.y); }
static __forceinline__ __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
static __forceinline__ __half2 __hmul2(__half2 a, __half2 b) { return a * b; }

/* bfloat16 */
static __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { return wm_make___nv_bfloat16(f); }
static __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return wm_make___nv_bfloat16(f); }
static __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return wm_bf16_bits_to_float(h.__x); }
static __forceinline__ __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
static __forceinline__ __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
static __forceinline__ __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
static __forceinline__ __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return a / b; }
static __forceinline__ __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) {
    return wm_make___nv_bfloat16(fmaxf(a, b));
}
static __forceinline__ __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) {
    return wm_make___nv_bfloat16(fminf(a, b));
}
static __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { __nv_bfloat16 h; h.__x = x; return h; }
static __forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static __forceinline__ __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
    __nv_bfloat162 r; r.x = a; r.y = b; return r;
}
static __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __halves2bfloat162(wm_make___nv_bfloat16(a), wm_make___nv_bfloat16(b));
}
static __forceinline__ __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static __forceinline__ float2 __bfloat1622float2(__nv_bfloat162 h) {
    return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}
static __forceinline__ __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static __forceinline__ __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static __forceinline__ float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static __forceinline__ float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

#endif
