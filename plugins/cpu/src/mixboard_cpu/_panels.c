/* Float32 products on a weight stored as panels (backends ``linear_cpu`` and
 * ``embedding_cpu``'s LM head; the layout in panels.py).
 *
 * y[M, N] = x[M, K] @ W[N, K]^T (+ bias), with W stored once as panels:
 * P[p][k][j] = W[16 p + j][k], the last panel zero-padded. Every step of the
 * inner loop reads 16 consecutive floats of the weight and adds them, times
 * one broadcast input value, into 16 consecutive outputs: the weight streams
 * from memory exactly once per call (a decode step's product is bound by that
 * stream), a panel stays in L1/L2 while it serves 8 or 16 rows at a time (a
 * prefill's products are bound by the FMAs), and nothing needs a horizontal
 * sum. Each output is summed by one thread in an order fixed by the row count
 * (k in order; for a single row, four interleaved partial sums), so the
 * thread count never changes a bit.
 *
 * Gated products (gated_linear: SwiGLU's silu(x G^T) * (x U^T)) store the
 * panels of G and U interleaved, G's panel p then U's, and apply the gate to
 * each pair of tiles while they are still in L1: no [M, 2N] intermediate, no
 * separate silu and multiply over it.
 *
 * Threads: OpenMP, linked by soname against the libgomp torch has already
 * loaded (panels.py imports torch first), so the products share torch's
 * thread pool instead of fighting a second one for the cores.
 * Instruction sets: the tile loop is compiled for AVX-512, AVX2 and plain C
 * (explicit targets rather than the header's CLONES, so that use_isa can run
 * each one: the tests compare them), one picked for this CPU at import.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mixboard_vec.h"

#define NR LANES   /* outputs per panel: one 512-bit or two 256-bit registers */
#define MR_MAX 16  /* rows per tile at most (see KERNELS) */
#define PREFETCH 128 /* weight rows (of 64 bytes) ahead to prefetch in a tile: 8 KB */
#define TR 16      /* rows per packed tile of x */
#define KB 64      /* columns of x packed at a time */
#define PACK_MIN 12  /* products of PACK_MIN to PACK_MAX rows pack x first (see products) */
#define PACK_MAX 32
#define MC 64      /* rows per chunk: one chunk of x stays in L2 while every panel passes */

/* e^x, sixteen at a time, for x clamped to [-87, 88] (where 2^n below stays
 * a normal float): 2^(x log2 e) = 2^n 2^f, n the nearest integer, |f| <= 1/2,
 * 2^f by its Taylor series to the 7th power (relative error < 1e-8 before
 * rounding: a few float32 ulps at most). */
INLINE vec exp16(vec x) {
    const ivec low = x < -87.0f, high = x > 88.0f;
    x = (vec)(((ivec)x & ~(low | high)) | ((ivec)splat(-87.0f) & low) | ((ivec)splat(88.0f) & high));
    const vec y = x * 1.44269504088896341f;
    const vec n = (y + 12582912.0f) - 12582912.0f;  /* 1.5 * 2^23: rounds to the nearest integer */
    const vec f = (y - n) * 0.693147180559945309f;
    const vec e = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720
                  + f * (1.0f / 5040)))))));
    return e * (vec)((__builtin_convertvector(n, ivec) + 127) << 23);
}

/* y = silu(g) * u = g / (1 + e^-g) * u for the rows of one pair of tiles (rows NR apart). */
INLINE void swiglu(const float *g, const float *u, long rows, float *y, long ldy, long ncols) {
    for (long r = 0; r < rows; r++) {
        const vec a = load(g + r * NR);
        put_n(y + r * ldy, a / (1.0f + exp16(-a)) * load(u + r * NR), ncols);
    }
}

/* One tile row's outputs, plus bias, into y (ncols of them: the last panel may be partial). */
INLINE void store(float *y, vec acc, const float *bias, long ncols) {
    if (ncols == NR) {
        if (bias) acc += load(bias);
        put(y, acc);
    } else {
        put_n(y, acc + (bias ? load_n(bias, ncols) : (vec){0}), ncols);
    }
}

/* mr (a constant after inlining) rows of x against one panel: row r's value k at x[r * rs + k * ks],
 * rows ldx apart (rs = ldx, ks = 1) or packed in a tile (rs = 1, ks = TR: each step of the tile then
 * broadcasts from one cache line, not one value from each of mr rows). */
INLINE void tile(int mr, const float *x, long rs, long ks, const float *w, long K, float *y, long ldy,
                 const float *bias, long ncols) {
    vec acc[MR_MAX];
    for (int r = 0; r < mr; r++) acc[r] = (vec){0};
    for (long k = 0; k < K; k++) {
        /* the panel 8 KB ahead, over page boundaries where the hardware prefetcher
         * stops, into L2 only (prefetcht1): a packed tile of 16 rows of x is most of
         * L1, and weight lines brought into L1 that early would evict it (the
         * measurements are in the plugin's README) */
        __builtin_prefetch(w + (k + PREFETCH) * NR, 0, 2);
        const vec b = load(w + k * NR);
        for (int r = 0; r < mr; r++) acc[r] += x[r * rs + k * ks] * b;
    }
    for (int r = 0; r < mr; r++) store(y + r * ldy, acc[r], bias, ncols);
}

/* One row (a batch-1 decode) against one panel: bound by the weight stream,
 * so four chains keep enough loads in flight. */
INLINE void row(const float *x, const float *w, long K, float *y, const float *bias, long ncols) {
    vec a0 = (vec){0}, a1 = (vec){0}, a2 = (vec){0}, a3 = (vec){0};
    long k = 0;
    for (; k + 4 <= K; k += 4) {
        a0 += x[k] * load(w + k * NR);
        a1 += x[k + 1] * load(w + (k + 1) * NR);
        a2 += x[k + 2] * load(w + (k + 2) * NR);
        a3 += x[k + 3] * load(w + (k + 3) * NR);
    }
    for (; k < K; k++) a0 += x[k] * load(w + k * NR);
    store(y, (a0 + a1) + (a2 + a3), bias, ncols);
}

#define TAIL(n) case n: tile(n, x + r * ldx, ldx, 1, w, K, y + r * ldy, ldy, bias, ncols); break;
#define PACKED_TAIL(n) case n: tile(n, at(xp, r, K), 1, TR, w, K, y + r * ldy, ldy, bias, ncols); break;

/* Row r of x packed in tiles of TR rows. */
static inline const float *at(const float *xp, long r, long K) { return xp + (r / TR) * K * TR + r % TR; }

/* Every row of a chunk of x against one panel, in tiles of mr_max rows: as
 * many accumulators as the instruction set has registers for (AVX-512: 32 of
 * 16 floats, so 16 rows; AVX2: 16 of 8 floats, so 8 rows of two registers);
 * and a single row against one panel. */
#define KERNELS(suffix, attr, mr_max)                                                                      \
    attr static void rows_##suffix(const float *x, long rows, long K, long ldx, const float *w, float *y,  \
                                   long ldy, const float *bias, long ncols) {                              \
        long r = 0;                                                                                        \
        for (; r + mr_max <= rows; r += mr_max)                                                            \
            tile(mr_max, x + r * ldx, ldx, 1, w, K, y + r * ldy, ldy, bias, ncols);                        \
        switch (rows - r) {                                                                                \
            TAIL(15) TAIL(14) TAIL(13) TAIL(12) TAIL(11) TAIL(10) TAIL(9) TAIL(8)                          \
            TAIL(7) TAIL(6) TAIL(5) TAIL(4) TAIL(3) TAIL(2) TAIL(1) default: break;                        \
        }                                                                                                  \
    }                                                                                                      \
    attr static void packed_##suffix(const float *xp, long rows, long K, const float *w, float *y,        \
                                     long ldy, const float *bias, long ncols) {                            \
        long r = 0;                                                                                        \
        for (; r + mr_max <= rows; r += mr_max)                                                            \
            tile(mr_max, at(xp, r, K), 1, TR, w, K, y + r * ldy, ldy, bias, ncols);                        \
        switch (rows - r) {                                                                                \
            PACKED_TAIL(15) PACKED_TAIL(14) PACKED_TAIL(13) PACKED_TAIL(12) PACKED_TAIL(11)                \
            PACKED_TAIL(10) PACKED_TAIL(9) PACKED_TAIL(8) PACKED_TAIL(7) PACKED_TAIL(6) PACKED_TAIL(5)     \
            PACKED_TAIL(4) PACKED_TAIL(3) PACKED_TAIL(2) PACKED_TAIL(1) default: break;                    \
        }                                                                                                  \
    }                                                                                                      \
    attr static void row_##suffix(const float *x, long K, const float *w, float *y, const float *bias,     \
                                  long ncols) {                                                            \
        row(x, w, K, y, bias, ncols);                                                                      \
    }                                                                                                      \
    attr static void glu_##suffix(const float *g, const float *u, long rows, float *y, long ldy,          \
                                  long ncols) {                                                            \
        swiglu(g, u, rows, y, ldy, ncols);                                                                 \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
KERNELS(avx512, __attribute__((target("arch=x86-64-v4"))), 16)
KERNELS(avx2, __attribute__((target("arch=x86-64-v3"))), 8)
#endif
KERNELS(generic, , 8)

typedef struct {
    const char *name;
    void (*rows)(const float *, long, long, long, const float *, float *, long, const float *, long);
    void (*packed)(const float *, long, long, const float *, float *, long, const float *, long);
    void (*row)(const float *, long, const float *, float *, const float *, long);
    void (*glu)(const float *, const float *, long, float *, long, long);
} kernels;

static kernels use = {"generic", rows_generic, packed_generic, row_generic, glu_generic};

/* The instruction sets this CPU runs, best first. */
static int supported(kernels *out) {
    int n = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512dq"))
        out[n++] = (kernels){"avx512", rows_avx512, packed_avx512, row_avx512, glu_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (kernels){"avx2", rows_avx2, packed_avx2, row_avx2, glu_avx2};
#endif
    out[n++] = (kernels){"generic", rows_generic, packed_generic, row_generic, glu_generic};
    return n;
}

/* One panel's outputs for rows [m0, m0 + rows) of x (as linear() laid it out) into out, ldo apart. */
static inline void panel(const float *xs, long ld, const float *packed, long M, long m0, long rows, long K,
                         const float *wp, float *out, long ldo, const float *bias, long ncols) {
    if (M == 1)
        use.row(xs, K, wp, out, bias, ncols);
    else if (packed)
        use.packed(packed + m0 * K, rows, K, wp, out, ldo, bias, ncols);
    else
        use.rows(xs + m0 * ld, rows, K, ld, wp, out, ldo, bias, ncols);
}

/* y = x W^T + bias; gated: y = silu(x G^T + bias[:N]) * (x U^T + bias[N:]), w holding G's and U's panels
 * interleaved. copy / packed: where x is first re-laid (see products), else NULL. */
static void linear(const float *x, long M, long K, long ldx, const float *w, long N, const float *bias,
                   float *y, long ldy, float *copy, long ldc, float *packed, int gated) {
    long panels = (N + NR - 1) / NR, chunks = (M + MC - 1) / MC, kblocks = (K + KB - 1) / KB;
    long work = M == 1 ? panels : chunks * panels;
#pragma omp parallel if (M * N * K > 65536)
    {
        if (packed) {
            /* x in tiles of TR rows, k-major (see products); the threads pack a block of k each */
#pragma omp for schedule(static)
            for (long i = 0; i < kblocks; i++) {
                long k1 = (i + 1) * KB < K ? (i + 1) * KB : K;
                for (long t = 0; t * TR < M; t++) {
                    long n = M - t * TR < TR ? M - t * TR : TR;
                    const float *src = x + t * TR * ldx;
                    float *dst = packed + t * K * TR;
                    for (long k = i * KB; k < k1; k++)
                        for (long r = 0; r < n; r++) dst[k * TR + r] = src[r * ldx + k];
                }
            }
        } else if (copy) {
            /* the rows of x at a stride that is no multiple of 4 KB (see products) */
#pragma omp for schedule(static)
            for (long r = 0; r < M; r++) memcpy(copy + r * ldc, x + r * ldx, K * sizeof(float));
        }
        const float *xs = copy ? copy : x;
        long ld = copy ? ldc : ldx;
        float g[MC * NR], u[MC * NR];  /* a gated product's pair of tiles */
        /* chunk-major: each thread takes a contiguous run of (chunk, panel) pairs */
#pragma omp for schedule(static)
        for (long i = 0; i < work; i++) {
            long c = i / panels, p = i % panels, m0 = c * MC, n0 = p * NR;
            long rows = M - m0 < MC ? M - m0 : MC, ncols = N - n0 < NR ? N - n0 : NR;
            if (gated) {
                const float *wp = w + 2 * p * K * NR;
                panel(xs, ld, packed, M, m0, rows, K, wp, g, NR, bias ? bias + n0 : NULL, ncols);
                panel(xs, ld, packed, M, m0, rows, K, wp + K * NR, u, NR, bias ? bias + N + n0 : NULL, ncols);
                use.glu(g, u, rows, y + m0 * ldy + n0, ldy, ncols);
            } else {
                panel(xs, ld, packed, M, m0, rows, K, w + p * K * NR, y + m0 * ldy + n0, ldy,
                      bias ? bias + n0 : NULL, ncols);
            }
        }
    }
}

/* The first `want` arguments as integers (addresses and sizes), or -1 with a Python error set. */
static int read_ints(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage, long long *out) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", usage, want);
        return -1;
    }
    for (Py_ssize_t i = 0; i < want; i++) {
        out[i] = PyLong_AsLongLong(args[i]);
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* linear(x, M, K, ldx, w, N, bias, y, ldy) and gated_linear(the same): addresses as ints
 * (tensor.data_ptr(), 0 for no bias). */
static PyObject *products(PyObject *const *args, Py_ssize_t nargs, int gated) {
    long long v[9];
    if (read_ints(args, nargs, 9, gated ? "gated_linear(x, M, K, ldx, w, N, bias, y, ldy)"
                                        : "linear(x, M, K, ldx, w, N, bias, y, ldy)", v) < 0) return NULL;
    if (v[1] < 0 || v[2] < 0 || v[5] < 0 || (v[1] > 1 && !v[0])) {
        PyErr_SetString(PyExc_ValueError, "linear(): negative size or missing input");
        return NULL;
    }
    /* A tile reads its rows of x side by side, ldx apart. Rows a multiple of
     * 4 KB apart (K = 1024, 2048, ...) fall into one L1 set and evict each
     * other and the weight's lines; such rows are first copied one cache line
     * further apart each. (2 KB apart, K = 512, was measured no slower.) */
    float *copy = NULL, *packed = NULL;
    long ldc = v[2] + NR;
    if (v[1] >= PACK_MIN && v[1] <= PACK_MAX) {
        /* The decodes of a batch: packed k-major in tiles, so that each step of a tile broadcasts from one
         * cache line. Fewer rows are bound by the weight stream, which packing only delays; more gain
         * nothing. */
        packed = malloc((size_t)((v[1] + TR - 1) / TR) * TR * v[2] * sizeof(float));
        if (!packed) return PyErr_NoMemory();
    } else if (v[1] > 1 && v[3] % 1024 == 0) {
        copy = malloc((size_t)v[1] * ldc * sizeof(float));
        if (!copy) return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    linear((const float *)(intptr_t)v[0], v[1], v[2], v[3], (const float *)(intptr_t)v[4], v[5],
           (const float *)(intptr_t)v[6], (float *)(intptr_t)v[7], v[8], copy, ldc, packed, gated);
    Py_END_ALLOW_THREADS
    free(copy);
    free(packed);
    Py_RETURN_NONE;
}

static PyObject *py_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return products(args, nargs, 0);
}

static PyObject *py_gated_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return products(args, nargs, 1);
}

/* use_isa(name): run the products with that instruction set (tests compare every one); "" picks the best. */
static PyObject *py_use_isa(PyObject *self, PyObject *arg) {
    (void)self;
    const char *want = PyUnicode_AsUTF8(arg);
    kernels all[3];
    if (!want) return NULL;
    int n = supported(all);
    for (int i = 0; i < n; i++) {
        if (!*want || !strcmp(want, all[i].name)) {
            use = all[i];
            return PyUnicode_FromString(use.name);
        }
    }
    PyErr_Format(PyExc_ValueError, "instruction set %s is not run by this CPU or not compiled in", want);
    return NULL;
}

static PyObject *py_supported(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    kernels all[3];
    int n = supported(all);
    PyObject *out = PyTuple_New(n);
    for (int i = 0; out && i < n; i++) PyTuple_SET_ITEM(out, i, PyUnicode_FromString(all[i].name));
    return out;
}

static PyObject *py_isa(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(use.name);
}

static PyMethodDef methods[] = {
    {"linear", (PyCFunction)(void (*)(void))py_linear, METH_FASTCALL,
     "linear(x, M, K, ldx, w, N, bias, y, ldy): y = x @ W.T + bias, W in 16-column panels (addresses as ints)."},
    {"gated_linear", (PyCFunction)(void (*)(void))py_gated_linear, METH_FASTCALL,
     "gated_linear(x, M, K, ldx, w, N, bias, y, ldy): y = silu(x @ G.T + bias[:N]) * (x @ U.T + bias[N:]), "
     "G's and U's panels interleaved (addresses as ints)."},
    {"use_isa", py_use_isa, METH_O, "use_isa(name) -> name: the instruction set to run ('' for the best here)."},
    {"supported", py_supported, METH_NOARGS, "supported() -> the instruction sets this CPU runs, best first."},
    {"isa", py_isa, METH_NOARGS, "isa() -> the instruction set in use."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_panels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__panels(void) {
    PyObject *m = PyModule_Create(&module);
    kernels all[3];
    supported(all);
    use = all[0];
    if (m && PyModule_AddIntConstant(m, "PANEL", NR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
