/* Tensor-core (mma.sync m16n8k16), matrix-load (ldmatrix) and asynchronous-copy (cp.async)
 * emulation. Fragment layouts follow the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating
 * point type" and "Warp-level matrix load instruction: ldmatrix"): with g = lane / 4 and t = lane % 4,
 *   A (16x16, four .b32 regs of two 16-bit elements, low half first):
 *     a0 -> (g, 2t..2t+1), a1 -> (g+8, 2t..2t+1), a2 -> (g, 2t+8..2t+9), a3 -> (g+8, 2t+8..2t+9)
 *   B (16x8, k x n, two regs):  b0 -> (k = 2t..2t+1, n = g), b1 -> (k = 2t+8..2t+9, n = g)
 *   C/D (16x8 f32, four regs):  c0,c1 -> (g, 2t..2t+1), c2,c3 -> (g+8, 2t..2t+1)
 *   ldmatrix: lanes 8i..8i+7 give the row addresses of matrix i (eight 16-bit elements per row);
 *     lane l receives row l/4, elements 2(l%4)..2(l%4)+1 of each matrix, or with .trans
 *     element (2(l%4), l/4) in the low half and (2(l%4)+1, l/4) in the high half. */
#include "wm_internal.h"

#include <stdio.h>
#include <string.h>


static float wm_half_bits_to_float(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        float v = (float)man * 5.9604644775390625e-08f; /* 2^-24: exact for every subnormal */
        memcpy(&bits, &v, 4);
        bits |= sign;
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

static float wm_bf16_bits_to_float(uint32_t h) {
    uint32_t bits = h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

static void wm_require_full_warp(wm_worker *w, wm_fiber *f, const char *what) {
    if (w->warps[f->linear / WM_WARP].present != 0xffffffffu) {
        char where[160];
        wm_fail(WM_ERR_KERNEL, "%s in %s needs all 32 lanes of the warp (lanes present: 0x%08x)", what,
                wm_where(where, sizeof where), w->warps[f->linear / WM_WARP].present);
    }
}

void wm_emu_mma_m16n8k16(float d[4], const unsigned int a[4], const unsigned int b[2], const float c[4],
                         int bf16) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    wm_require_full_warp(w, f, bf16 ? "mma.m16n8k16.bf16" : "mma.m16n8k16.f16");
    uint32_t payload[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const unsigned char *slots = wm_warp_exchange(w, f, 0xffffffffu, payload, sizeof payload);
    float (*cvt)(uint32_t) = bf16 ? wm_bf16_bits_to_float : wm_half_bits_to_float;
    uint32_t lane = f->linear % WM_WARP, g = lane >> 2, t = lane & 3u;
    float acc[4];
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t row = g + 8u * (i >> 1), col = 2u * t + (i & 1u);
        float sum = c[i];
        for (uint32_t k = 0; k < 16; k++) {
            uint32_t a_lane = (row & 7u) * 4u + ((k & 7u) >> 1);
            uint32_t a_reg = (row >> 3) + 2u * (k >> 3);
            uint32_t b_lane = col * 4u + ((k & 7u) >> 1);
            uint32_t b_reg = 4u + (k >> 3);
            uint32_t a_word, b_word;
            memcpy(&a_word, slots + (size_t)a_lane * WM_SLOT_BYTES + 4u * a_reg, 4);
            memcpy(&b_word, slots + (size_t)b_lane * WM_SLOT_BYTES + 4u * b_reg, 4);
            uint32_t shift = 16u * (k & 1u);
            sum += cvt((a_word >> shift) & 0xffffu) * cvt((b_word >> shift) & 0xffffu);
        }
        acc[i] = sum;
    }
    for (uint32_t i = 0; i < 4; i++) d[i] = acc[i];
}

void wm_emu_ldmatrix(unsigned int *regs, const void *row_address, int matrices, int transpose) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    wm_require_full_warp(w, f, "ldmatrix");
    uintptr_t mine = (uintptr_t)row_address;
    const unsigned char *slots = wm_warp_exchange(w, f, 0xffffffffu, &mine, sizeof mine);
    uint32_t lane = f->linear % WM_WARP;
    uintptr_t rows[WM_WARP];
    for (int r = 0; r < 8 * matrices; r++) {
        memcpy(&rows[r], slots + (size_t)r * WM_SLOT_BYTES, sizeof rows[r]);
        if (rows[r] & 15u) {
            char where[160];
            wm_fail(WM_ERR_KERNEL, "ldmatrix in %s: row address %p given by lane %d is not 16-byte aligned",
                    wm_where(where, sizeof where), (void *)rows[r], r);
        }
    }
    for (int m = 0; m < matrices; m++) {
        if (!transpose) {
            const unsigned char *row = (const unsigned char *)rows[8 * m + lane / 4];
            if (w->desc->detect_races) wm_race_access((uintptr_t)(row + 4 * (lane % 4)), 4, 0);
            memcpy(&regs[m], row + 4 * (lane % 4), 4);
        } else {
            const unsigned char *r0 = (const unsigned char *)rows[8 * m + 2 * (lane % 4)];
            const unsigned char *r1 = (const unsigned char *)rows[8 * m + 2 * (lane % 4) + 1];
            uint16_t lo, hi;
            if (w->desc->detect_races) {
                wm_race_access((uintptr_t)(r0 + 2 * (lane / 4)), 2, 0);
                wm_race_access((uintptr_t)(r1 + 2 * (lane / 4)), 2, 0);
            }
            memcpy(&lo, r0 + 2 * (lane / 4), 2);
            memcpy(&hi, r1 + 2 * (lane / 4), 2);
            regs[m] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}

static void wm_cp_perform(wm_worker *w, const wm_cp *c) {
    if (w->desc->detect_races) wm_race_access((uintptr_t)c->dst, c->bytes, 1);
    if (c->src_bytes) memcpy(c->dst, c->src, c->src_bytes);
    if (c->src_bytes < c->bytes) memset(c->dst + c->src_bytes, 0, c->bytes - c->src_bytes);
}

void wm_cp_retire(wm_worker *w, wm_fiber *f, uint32_t keep_groups) {
    while (f->cp_len) {
        const wm_cp *c = &f->cp[f->cp_head];
        if (f->cp_group - c->group <= keep_groups) break; /* c's group is among the newest kept */
        wm_cp_perform(w, c);
        f->cp_head = (f->cp_head + 1) % WM_CP_QUEUE;
        f->cp_len--;
    }
}

void wm_emu_cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    wm_worker *w = wm_self;
    wm_fiber *f = w->current;
    char where[160];
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        wm_fail(WM_ERR_KERNEL, "cp.async in %s copies %d bytes: it must be 4, 8 or 16",
                wm_where(where, sizeof where), bytes);
    }
    if (src_bytes < 0 || src_bytes > bytes) {
        wm_fail(WM_ERR_KERNEL, "cp.async in %s: source size %d is outside [0, %d]", wm_where(where, sizeof where),
                src_bytes, bytes);
    }
    if (((uintptr_t)dst | (src_bytes ? (uintptr_t)src : 0)) & (uintptr_t)(bytes - 1)) {
        wm_fail(WM_ERR_KERNEL, "cp.async in %s: addresses %p <- %p are not %d-byte aligned",
                wm_where(where, sizeof where), dst, src, bytes);
    }
    if (f->cp_len == WM_CP_QUEUE) {
        /* The hardware may finish a copy at any time before the wait; finishing the oldest early
         * keeps the queue bounded without changing what a correct kernel sees. */
        wm_cp_perform(w, &f->cp[f->cp_head]);
        f->cp_head = (f->cp_head + 1) % WM_CP_QUEUE;
        f->cp_len--;
    }
    wm_cp *c = &f->cp[(f->cp_head + f->cp_len) % WM_CP_QUEUE];
    c->dst = (char *)dst;
    c->src = (const char *)src;
    c->bytes = (uint32_t)bytes;
    c->src_bytes = (uint32_t)src_bytes;
    c->group = f->cp_group;
    f->cp_len++;
}

void wm_emu_cp_async_commit(void) { wm_self->current->cp_group++; }

void wm_emu_cp_async_wait(int pending_groups) {
    wm_worker *w = wm_self;
    /* Uncommitted copies (group == cp_group) never retire here: cp_group - group is 0 <= keep. Only
     * committed groups older than the newest `pending_groups` retire. */
    wm_cp_retire(w, w->current, pending_groups < 0 ? 0u : (uint32_t)pending_groups);
}
