/* The vector helpers every first-party CPU kernel shares (each plugin's
 * setup.py puts this folder on its include path).
 *
 * Sixteen floats at a time, written once for every instruction set: GCC's
 * vector extension lowers a 64-byte vector to one AVX-512 register, two AVX2
 * ones or four SSE ones, and CLONES compiles a function for each of them and
 * picks one at load time.
 */
#ifndef MIXBOARD_VEC_H
#define MIXBOARD_VEC_H

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif
#define INLINE static inline __attribute__((always_inline))

typedef float vec __attribute__((vector_size(64)));
typedef int ivec __attribute__((vector_size(64)));
#define LANES 16

#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (ivec){__VA_ARGS__})
#endif

INLINE vec load(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
INLINE void put(float *p, vec v) { memcpy(p, &v, sizeof v); }
INLINE vec splat(float x) { return (vec){0} + x; }
INLINE vec pick(ivec mask, vec a, vec b) { return (vec)(((ivec)a & mask) | ((ivec)b & ~mask)); }

/* The first count floats at p, zeros after them (all sixteen where count >= LANES); and the converse store. */
INLINE vec load_n(const float *p, long count) {
    if (count >= LANES) return load(p);
    float t[LANES] = {0};
    memcpy(t, p, count * sizeof(float));
    return load(t);
}

INLINE void put_n(float *p, vec v, long count) {
    if (count >= LANES) {
        put(p, v);
    } else {
        float t[LANES];
        put(t, v);
        memcpy(p, t, count * sizeof(float));
    }
}

/* The sum of the lanes, in four steps of halving rather than a dependent chain of 15 scalar adds. */
INLINE float lane_sum(vec v) {
    v += SHUFFLE(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    v += SHUFFLE(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v += SHUFFLE(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v += SHUFFLE(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    return v[0];
}

#endif
