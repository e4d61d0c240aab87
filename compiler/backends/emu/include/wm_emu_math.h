/* Float math as a GPU delivers it, not as the host's libm does. Included by wm_emu.h.
 *
 * CUDA bounds the error of each math function (CUDA C++ Programming Guide, "Mathematical Functions":
 * the standard functions in ulps from the correctly rounded result, the __-prefixed intrinsics in ulps
 * or as an absolute error). A host libm is nearly exact, so a kernel that is right only with exact
 * math would pass here and fail on a GPU. Each function therefore returns the correctly rounded value
 * moved as far as its bound allows, up or down as a hash of the operand bits decides (deterministic,
 * and not a uniform bias that a normalisation such as softmax's could cancel). Results that are
 * floats already (zero, infinity, NaN, and exact values such as exp2f(3), cosf(0), __log2f(4),
 * tanhf(20) = 1) are returned unmoved: the hardware's tables and range reductions hit those
 * exactly, and kernels may rely on it (powers of two built with exp2f).
 *
 * The bounds assume NVRTC's defaults (-ftz=false, -prec-div=true, -prec-sqrt=true, no fast math):
 * sqrtf, division and fmaf stay IEEE-exact, and subnormals are kept. */
#ifndef WM_EMU_MATH_H
#define WM_EMU_MATH_H

static __forceinline__ unsigned int wm_mix_bits(unsigned int h) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}
static __forceinline__ unsigned int wm_seed1(float x) { return wm_mix_bits(__float_as_uint(x)); }
static __forceinline__ unsigned int wm_seed2(float x, float y) {
    return wm_mix_bits(__float_as_uint(x) ^ wm_mix_bits(__float_as_uint(y) + 0x9e3779b9u));
}

/* r moved by `steps` representable floats (negative: downwards), stopping at the largest finite
 * magnitude; this is the distance that "ulp error" counts. */
static __forceinline__ float wm_f32_step(float r, long long steps) {
    unsigned int b = __float_as_uint(r);
    long long o = (b >> 31) ? -(long long)(b & 0x7fffffffu) : (long long)b;
    o += steps;
    if (o > 0x7f7fffffLL) o = 0x7f7fffffLL;
    if (o < -0x7f7fffffLL) o = -0x7f7fffffLL;
    return __uint_as_float(o < 0 ? 0x80000000u | (unsigned int)(-o) : (unsigned int)o);
}

/* The correctly rounded `exact`, `ulps` floats away from it; the other way where that way would
 * change the sign or, with `limit` > 0, leave [-limit, limit] (tanh(20) must not exceed 1). */
static __forceinline__ float wm_push_ulps(double exact, long long ulps, unsigned int seed, double limit = 0.0) {
    float r = (float)exact;
    if (r == 0.0f || !__builtin_isfinite(r) || (double)r == exact) return r;
    float out = wm_f32_step(r, (seed & 1u) ? ulps : -ulps);
    bool flipped_sign = (out < 0.0f) != (r < 0.0f) || out == 0.0f;
    if (flipped_sign || (limit > 0.0 && __builtin_fabs((double)out) > limit)) {
        out = wm_f32_step(r, (seed & 1u) ? -ulps : ulps);
    }
    return out;
}

/* The float farthest from `exact`, on the side the seed picks, that is within `err` of it; `clamp`
 * (when positive) keeps the result within [-clamp, clamp], as sine and cosine stay. */
static __forceinline__ float wm_push_abs(double exact, double err, unsigned int seed, double clamp) {
    float r0 = (float)exact;
    if (r0 == 0.0f || !__builtin_isfinite(r0) || (double)r0 == exact) return r0;
    double target = (seed & 1u) ? exact + err : exact - err;
    if (clamp > 0.0 && __builtin_fabs(target) > clamp) target = 2.0 * exact - target;
    float r = (float)target;
    while (__builtin_fabs((double)r - exact) > err && r != r0) r = wm_f32_step(r, (double)r > exact ? -1 : 1);
    return r;
}

/* The bounds the guide states as powers of two; GCC folds the call at compile time. */
#define WM_2_POW(e) __builtin_exp2(e)

static __forceinline__ bool wm_in_half_to_two(float x) { return x >= 0.5f && x <= 2.0f; }

/* ---- standard functions: maximum ulp error from the Programming Guide's table ---------------- */
static __forceinline__ float expf(float x) { return wm_push_ulps(__builtin_exp((double)x), 2, wm_seed1(x)); }
static __forceinline__ float exp2f(float x) { return wm_push_ulps(__builtin_exp2((double)x), 2, wm_seed1(x)); }
static __forceinline__ float logf(float x) { return wm_push_ulps(__builtin_log((double)x), 1, wm_seed1(x)); }
static __forceinline__ float log2f(float x) { return wm_push_ulps(__builtin_log2((double)x), 1, wm_seed1(x)); }
static __forceinline__ float sinf(float x) { return wm_push_ulps(__builtin_sin((double)x), 2, wm_seed1(x), 1.0); }
static __forceinline__ float cosf(float x) { return wm_push_ulps(__builtin_cos((double)x), 2, wm_seed1(x), 1.0); }
static __forceinline__ float tanhf(float x) { return wm_push_ulps(__builtin_tanh((double)x), 2, wm_seed1(x), 1.0); }
static __forceinline__ float erff(float x) { return wm_push_ulps(__builtin_erf((double)x), 2, wm_seed1(x), 1.0); }
static __forceinline__ float powf(float x, float y) {
    return wm_push_ulps(__builtin_pow((double)x, (double)y), 4, wm_seed2(x, y));
}
static __forceinline__ float rsqrtf(float x) {
    return wm_push_ulps(1.0 / __builtin_sqrt((double)x), 2, wm_seed1(x));
}

/* IEEE round-to-nearest 1/sqrt(x). The double quotient is off by at most an ulp of double, which
 * can mislead the rounding to float only next to a midpoint m of two floats; settle those exactly:
 * 1/sqrt(x) > m  <=>  m*m*x < 1, where m*m is exact in double and fma gives m*m*x's rounding error. */
static __forceinline__ float __frsqrt_rn(float x) {
    double q = 1.0 / __builtin_sqrt((double)x);
    float r = (float)q;
    if (!(x > 0.0f) || !__builtin_isfinite(x)) return r;
    float other = wm_f32_step(r, (double)r < q ? 1 : -1);
    double m = 0.5 * ((double)r + (double)other), mm = m * m, p = mm * (double)x;
    double below_one = (1.0 - p) - __builtin_fma(mm, (double)x, -p); /* sign of 1 - m*m*x, exactly */
    bool exact_above_m = below_one > 0.0;
    bool r_above_m = (double)r > m;
    return exact_above_m == r_above_m ? r : other;
}

/* ---- intrinsics (the Programming Guide's "Intrinsic Functions" table) ------------------------- */
/* __expf: 2 + floor(|1.173 x|) ulps (ex2.approx of x * log2(e): the product's rounding grows with x). */
static __forceinline__ float __expf(float x) {
    long long ulps = 2 + (long long)__builtin_floor(__builtin_fabs(1.173 * (double)x));
    return wm_push_ulps(__builtin_exp((double)x), ulps, wm_seed1(x));
}
static __forceinline__ float __exp10f(float x) {
    long long ulps = 2 + (long long)__builtin_floor(__builtin_fabs(2.97 * (double)x));
    return wm_push_ulps(__builtin_exp10((double)x), ulps, wm_seed1(x));
}
/* __logf: absolute error 2^-21.41 for x in [0.5, 2], else 3 ulps; __log2f: 2^-22, else 2 ulps;
 * __log10f: 2^-24, else 3 ulps. */
static __forceinline__ float __logf(float x) {
    double exact = __builtin_log((double)x);
    return wm_in_half_to_two(x) ? wm_push_abs(exact, WM_2_POW(-21.41), wm_seed1(x), 0.0)
                                : wm_push_ulps(exact, 3, wm_seed1(x));
}
static __forceinline__ float __log2f(float x) {
    double exact = __builtin_log2((double)x);
    return wm_in_half_to_two(x) ? wm_push_abs(exact, 0x1p-22, wm_seed1(x), 0.0) : wm_push_ulps(exact, 2, wm_seed1(x));
}
static __forceinline__ float __log10f(float x) {
    double exact = __builtin_log10((double)x);
    return wm_in_half_to_two(x) ? wm_push_abs(exact, 0x1p-24, wm_seed1(x), 0.0) : wm_push_ulps(exact, 3, wm_seed1(x));
}
/* __sinf / __cosf: absolute error 2^-21.41 / 2^-21.19 for |x| <= pi, "larger otherwise". The guide
 * gives no figure beyond pi; the hardware's range reduction loses accuracy in proportion to |x|, so
 * the emulator scales the bound by |x| / pi there. */
static __forceinline__ double wm_trig_bound(float x, double within_pi) {
    double ax = __builtin_fabs((double)x);
    return ax <= 3.14159265358979323846 ? within_pi : within_pi * ax / 3.14159265358979323846;
}
static __forceinline__ float __sinf(float x) {
    if (!__builtin_isfinite(x)) return __uint_as_float(0x7fffffffu);
    return wm_push_abs(__builtin_sin((double)x), wm_trig_bound(x, WM_2_POW(-21.41)), wm_seed1(x), 1.0);
}
static __forceinline__ float __cosf(float x) {
    if (!__builtin_isfinite(x)) return __uint_as_float(0x7fffffffu);
    return wm_push_abs(__builtin_cos((double)x), wm_trig_bound(x, WM_2_POW(-21.19)), wm_seed1(x), 1.0);
}
/* __tanf and __powf are specified by their implementations: __sinf(x) * (1 / __cosf(x)), and
 * exp2(y * __log2f(x)) on ex2.approx (2 ulps): so __powf of a negative base is NaN, as on a GPU. */
static __forceinline__ float __tanf(float x) { return __sinf(x) * (1.0f / __cosf(x)); }
static __forceinline__ float __powf(float x, float y) {
    float t = y * __log2f(x);
    return wm_push_ulps(__builtin_exp2((double)t), 2, wm_seed1(t));
}
/* __fdividef: 2 ulps for |y| in [2^-126, 2^126]; for 2^126 < |y| < 2^128 it is x * rcp(y) with the
 * reciprocal flushed to zero, i.e. 0 for finite x and NaN for infinite x. */
static __forceinline__ float __fdividef(float x, float y) {
    float ay = __builtin_fabsf(y);
    if (ay > 0x1p126f && ay < __builtin_inff()) {
        float zero = __uint_as_float(__float_as_uint(y) & 0x80000000u);
        return x * zero;
    }
    double exact = (double)x / (double)y;
    return ay >= 0x1p-126f && ay <= 0x1p126f ? wm_push_ulps(exact, 2, wm_seed2(x, y)) : (float)exact;
}

#endif
