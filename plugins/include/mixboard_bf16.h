/* bfloat16 <-> float32 for the first-party CPU kernels (no compiler support for the type needed).
 *
 * A bfloat16 is the upper half of a float32: widening is exact (a shift); narrowing rounds to
 * nearest even, as torch does. A NaN stays a quiet NaN with its sign and the top of its payload
 * (torch's vectorized narrowing writes every NaN as 0xffff instead: the same NaN positions, other
 * bits). Sixteen at a time (a vec of mixboard_vec.h) or one at a time.
 */
#ifndef MIXBOARD_BF16_H
#define MIXBOARD_BF16_H

#include <stdint.h>
#include <string.h>

#include "mixboard_vec.h"

typedef uint16_t bf16_vec __attribute__((vector_size(32)));    /* sixteen bfloat16 */
typedef unsigned int uvec __attribute__((vector_size(64)));    /* sixteen 32-bit lanes, shifted unsigned */

INLINE vec widen_vec(const uint16_t *p) {
    bf16_vec h;
    memcpy(&h, p, sizeof h);
    return (vec)(__builtin_convertvector(h, uvec) << 16);
}

/* Each lane of v as the bfloat16 it rounds to, in the lane's low 16 bits: the one rounding rule that
 * narrow_vec and round_vec share (narrow, scalar, is the same rule one value at a time). */
INLINE uvec bf16_bits(vec v) {
    const uvec u = (uvec)v;
    const uvec nan = (uvec)((u & 0x7fffffffu) > 0x7f800000u);
    return (nan & ((u >> 16) | 0x40u)) | (~nan & ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
}

INLINE void narrow_vec(uint16_t *p, vec v) {
    const bf16_vec h = __builtin_convertvector(bf16_bits(v), bf16_vec);
    memcpy(p, &h, sizeof h);
}

/* v rounded to bfloat16 and widened back, in registers: what narrow_vec then widen_vec would give. */
INLINE vec round_vec(vec v) { return (vec)(bf16_bits(v) << 16); }

INLINE float widen(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

INLINE uint16_t narrow(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* The first count bfloat16 at p widened, zeros after them (all sixteen where count >= LANES); and the
 * converse store, narrowing. */
INLINE vec widen_n(const uint16_t *p, long count) {
    if (count >= LANES) return widen_vec(p);
    uint16_t t[LANES] = {0};
    memcpy(t, p, count * sizeof(uint16_t));
    return widen_vec(t);
}

INLINE void narrow_n(uint16_t *p, vec v, long count) {
    if (count >= LANES) {
        narrow_vec(p, v);
    } else {
        uint16_t t[LANES];
        narrow_vec(t, v);
        memcpy(p, t, count * sizeof(uint16_t));
    }
}

#endif
