/* CPU float32 products for the runner's projections (mixboard_runner.models.linear).
 *
 * y[M, N] = x[M, K] @ W[N, K]^T (+ bias), with W stored once in "panels":
 * P[p][k][j] = W[16 p + j][k], the last panel zero-padded. Every step of the
 * inner loop then reads 16 consecutive floats of the weight and adds them,
 * times one broadcast input value, into 16 consecutive outputs: the weight
 * streams from memory exactly once per call (a decode step's product is bound
 * by that stream), a panel stays in L1/L2 while it serves up to 8 rows at a
 * time (the products of prefills are bound by the FMAs), and nothing needs a
 * horizontal sum, so plain C vectorizes. Each output is summed by one thread
 * in an order fixed by the row count (k in order; for a single row, four
 * interleaved partial sums), so the thread count never changes a bit.
 *
 * Threads: OpenMP, linked by soname against the libgomp that torch has
 * already loaded (the wrapper imports torch first), so these products share
 * torch's thread pool instead of fighting a second one for the cores.
 * Instruction sets: the tile loop is compiled for AVX-512, AVX2 and plain C,
 * and the module picks one for this CPU when it is imported (ISA says which).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define NR 16      /* outputs per panel: one 512-bit or two 256-bit registers */
#define MR_MAX 16  /* rows per tile at most (see PANEL_ROWS) */
#ifndef PREFETCH
#define PREFETCH 64  /* weight rows ahead to prefetch: across 4 KB pages, which hardware prefetchers do not cross */
#endif
#define MC 64      /* rows per chunk: one chunk of x stays in L2 while every panel passes */

typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4)));


static inline __attribute__((always_inline)) void store(float *y, vec acc, const float *bias, long ncols) {
    if (ncols == NR) {
        if (bias) acc += *(const vec_u *)bias;
        *(vec_u *)y = acc;
    } else {
        for (long j = 0; j < ncols; j++) y[j] = acc[j] + (bias ? bias[j] : 0.0f);
    }
}

/* mr (a constant after inlining) rows of x against one panel. */
static inline __attribute__((always_inline)) void tile(int mr, const float *x, long ldx, const float *w, long K,
                                                        float *y, long ldy, const float *bias, long ncols) {
    vec acc[MR_MAX];
    for (int r = 0; r < mr; r++) acc[r] = (vec){0};
    if (mr == 1) {
        /* one row: bound by the weight stream; four chains keep enough loads in flight */
        vec a1 = (vec){0}, a2 = (vec){0}, a3 = (vec){0};
        long k = 0;
        for (; k + 4 <= K; k += 4) {
            __builtin_prefetch(w + (k + PREFETCH) * NR);
            __builtin_prefetch(w + (k + PREFETCH + 4) * NR);
            acc[0] += x[k] * *(const vec_u *)(w + k * NR);
            a1 += x[k + 1] * *(const vec_u *)(w + (k + 1) * NR);
            a2 += x[k + 2] * *(const vec_u *)(w + (k + 2) * NR);
            a3 += x[k + 3] * *(const vec_u *)(w + (k + 3) * NR);
        }
        for (; k < K; k++) acc[0] += x[k] * *(const vec_u *)(w + k * NR);
        acc[0] += (a1 + a2) + a3;
    } else {
        for (long k = 0; k < K; k++) {
            __builtin_prefetch(w + (k + PREFETCH) * NR);
            vec b = *(const vec_u *)(w + k * NR);
            for (int r = 0; r < mr; r++) acc[r] += x[r * ldx + k] * b;
        }
    }
    for (int r = 0; r < mr; r++) store(y + r * ldy, acc[r], bias, ncols);
}

#define TAIL(n) case n: tile(n, x + r * ldx, ldx, w, K, y + r * ldy, ldy, bias, ncols); break;

/* Every row of a chunk against one panel, in tiles of mr_max rows: as many
 * accumulators as the instruction set has registers for (AVX-512: 32 of 16
 * floats, so 16 rows; AVX2: 16 of 8 floats, so 8 rows of two registers). */
#define PANEL_ROWS(name, attr, mr_max)                                                                     \
    attr static void name(const float *x, long rows, long K, long ldx, const float *w, float *y, long ldy,  \
                          const float *bias, long ncols) {                                                 \
        long r = 0;                                                                                        \
        for (; r + mr_max <= rows; r += mr_max)                                                            \
            tile(mr_max, x + r * ldx, ldx, w, K, y + r * ldy, ldy, bias, ncols);                           \
        switch (rows - r) {                                                                                \
            TAIL(15) TAIL(14) TAIL(13) TAIL(12) TAIL(11) TAIL(10) TAIL(9) TAIL(8)                          \
            TAIL(7) TAIL(6) TAIL(5) TAIL(4) TAIL(3) TAIL(2) TAIL(1) default: break;                        \
        }                                                                                                  \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
PANEL_ROWS(panel_rows_avx512, __attribute__((target("arch=x86-64-v4"))), 16)
PANEL_ROWS(panel_rows_avx2, __attribute__((target("arch=x86-64-v3"))), 8)
#endif
PANEL_ROWS(panel_rows_generic, , 8)

typedef void (*panel_rows_fn)(const float *, long, long, long, const float *, float *, long, const float *, long);
static panel_rows_fn panel_rows = panel_rows_generic;
static const char *isa = "generic";

/* The instruction sets this CPU runs, best first: (name, tile loop). */
static int supported(const char **names, panel_rows_fn *fns) {
    int n = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512dq"))
        names[n] = "avx512", fns[n++] = panel_rows_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        names[n] = "avx2", fns[n++] = panel_rows_avx2;
#endif
    names[n] = "generic", fns[n++] = panel_rows_generic;
    return n;
}

/* use_isa(name): run the products with that instruction set (tests compare every one); "" picks the best. */
static PyObject *py_use_isa(PyObject *self, PyObject *arg) {
    (void)self;
    const char *want = PyUnicode_AsUTF8(arg), *names[3];
    panel_rows_fn fns[3];
    if (!want) return NULL;
    int n = supported(names, fns);
    for (int i = 0; i < n; i++) {
        if (!*want || !strcmp(want, names[i])) {
            panel_rows = fns[i], isa = names[i];
            return PyUnicode_FromString(isa);
        }
    }
    PyErr_Format(PyExc_ValueError, "instruction set %s is not run by this CPU or not compiled in", want);
    return NULL;
}

static PyObject *py_supported(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    const char *names[3];
    panel_rows_fn fns[3];
    int n = supported(names, fns);
    PyObject *out = PyTuple_New(n);
    for (int i = 0; out && i < n; i++) PyTuple_SET_ITEM(out, i, PyUnicode_FromString(names[i]));
    return out;
}

static void linear(const float *x, long M, long K, long ldx, const float *w, long N, const float *bias,
                   float *y, long ldy) {
    long panels = (N + NR - 1) / NR, chunks = (M + MC - 1) / MC, work = chunks * panels;
    /* chunk-major: each thread takes a contiguous run of (chunk, panel) pairs */
#pragma omp parallel for schedule(static) if (M * N * K > 65536)
    for (long i = 0; i < work; i++) {
        long c = i / panels, p = i % panels, m0 = c * MC, n0 = p * NR;
        long rows = M - m0 < MC ? M - m0 : MC, ncols = N - n0 < NR ? N - n0 : NR;
        panel_rows(x + m0 * ldx, rows, K, ldx, w + p * K * NR, y + m0 * ldy + n0, ldy, bias ? bias + n0 : NULL,
                   ncols);
    }
}

/* linear(x, M, K, ldx, w, N, bias, y, ldy): addresses as ints (tensor.data_ptr(), 0 for no bias). */
static PyObject *py_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "linear() takes 9 arguments: x, M, K, ldx, w, N, bias, y, ldy");
        return NULL;
    }
    long long v[9];
    for (int i = 0; i < 9; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    linear((const float *)(intptr_t)v[0], v[1], v[2], v[3], (const float *)(intptr_t)v[4], v[5],
           (const float *)(intptr_t)v[6], (float *)(intptr_t)v[7], v[8]);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_isa(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(isa);
}

static PyMethodDef methods[] = {
    {"linear", (PyCFunction)(void (*)(void))py_linear, METH_FASTCALL,
     "linear(x, M, K, ldx, w, N, bias, y, ldy): y = x @ W.T + bias, W in 16-column panels (addresses as ints)."},
    {"use_isa", py_use_isa, METH_O, "use_isa(name) -> name: the instruction set to run ('' for the best here)."},
    {"supported", py_supported, METH_NOARGS, "supported() -> the instruction sets this CPU runs, best first."},
    {"isa", py_isa, METH_NOARGS, "isa() -> the instruction set in use."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) {
    PyObject *m = PyModule_Create(&module);
    const char *names[3];
    panel_rows_fn fns[3];
    supported(names, fns);
    panel_rows = fns[0], isa = names[0];
    if (m && PyModule_AddIntConstant(m, "PANEL", NR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
