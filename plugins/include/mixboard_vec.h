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

/* Lane k of the result: the sum of r[k]'s lanes, for 16 vectors at once.
 * Each level adds the two halves of pairs of vectors, packing both pairs'
 * halves into one vector (15 adds and 30 shuffles for the 16 sums instead
 * of 64 of each one sum at a time); the sums land in bit-reversed lane
 * order, which the last shuffle undoes. */
INLINE vec lane_sums(const vec r[LANES]) {
    vec t[8], u[4], v[2];
    for (int j = 0; j < 8; j++)
        t[j] = SHUFFLE(r[2 * j], r[2 * j + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
             + SHUFFLE(r[2 * j], r[2 * j + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int j = 0; j < 4; j++)
        u[j] = SHUFFLE(t[2 * j], t[2 * j + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
             + SHUFFLE(t[2 * j], t[2 * j + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int j = 0; j < 2; j++)
        v[j] = SHUFFLE(u[2 * j], u[2 * j + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
             + SHUFFLE(u[2 * j], u[2 * j + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    const vec w = SHUFFLE(v[0], v[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
                + SHUFFLE(v[0], v[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    return SHUFFLE(w, w, 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
}

/* Sixteen records of `keep` floats each, back to back at p (lane j's record at p + j * keep), as `keep`
 * vectors: lane j of out[k] is p[j * keep + k]; put_interleaved is the converse. A conv keeps each
 * channel's window so, and reads sixteen channels' windows at a time. The floats are shuffled across
 * the keep vectors that hold them: copied one by one through a buffer and read back as a vector, the
 * wide load would wait for sixteen narrow stores it cannot be forwarded from. */
#if defined(__clang__)
INLINE void load_interleaved(const float *p, vec out[], const long keep) {
    for (long k = 0; k < keep; k++) {
        float t[LANES];
        for (long j = 0; j < LANES; j++) t[j] = p[j * keep + k];
        out[k] = load(t);
    }
}

INLINE void put_interleaved(float *p, const vec in[], const long keep) {
    for (long k = 0; k < keep; k++) {
        float t[LANES];
        put(t, in[k]);
        for (long j = 0; j < LANES; j++) p[j * keep + k] = t[j];
    }
}
#else
#define LANE_INDEX ((ivec){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})

INLINE void load_interleaved(const float *p, vec out[], const long keep) {
    if (keep == 1) {
        out[0] = load(p);
        return;
    }
    for (long k = 0; k < keep; k++) {
        const ivec at = LANE_INDEX * (int)keep + (int)k;  /* lane j's float: vector at / 16, lane at % 16 */
        vec t = __builtin_shuffle(load(p), load(p + LANES), at);  /* right where at < 32; indices are mod 32 */
        for (long v = 2; v < keep; v++) {
            const ivec here = (at >> 4) == (int)v;
            t = __builtin_shuffle(t, load(p + v * LANES), (here & ((at & 15) + 16)) | (~here & LANE_INDEX));
        }
        out[k] = t;
    }
}

INLINE void put_interleaved(float *p, const vec in[], const long keep) {
    if (keep == 1) {
        put(p, in[0]);
        return;
    }
    for (long v = 0; v < keep; v++) {
        const ivec at = LANE_INDEX + (int)(v * LANES);  /* the float each lane of vector v holds: record, then k */
        /* at / keep in float: (at + 0.5) / keep is at least 0.5 / keep from an integer, far past rounding */
        const ivec record = __builtin_convertvector((__builtin_convertvector(at, vec) + 0.5f) * (1.0f / keep), ivec);
        const ivec k = at - record * (int)keep;
        vec t = in[0];
        for (long m = 0; m < keep; m++) {
            const ivec here = k == (int)m;
            t = __builtin_shuffle(t, in[m], (here & (record + 16)) | (~here & LANE_INDEX));
        }
        put(p + v * LANES, t);
    }
}
#endif

#endif
