/* Row operations of a step that torch runs as several dispatched operators
 * each (backends ``rms_norm_cpu``, ``rotary_cpu`` and ``argmax_cpu``): one
 * call, one pass over the rows. F.rms_norm on CPU is eight operators; the
 * rotary embedding a gather, a flip, a multiply and an addcmul, on a rotated
 * copy; argmax a reduction torch does not vectorize over a row of logits.
 *
 * Float32. Each function is compiled for AVX-512, AVX2 and plain C (the
 * header's CLONES), one picked at load time; OpenMP over rows where the work
 * is large enough to pay for waking the threads, sharing torch's runtime
 * (kernels.py imports torch first). Each row is computed by one thread, so
 * the thread count never changes a bit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "mixboard_vec.h"

/* out = x / sqrt(mean(x^2) + eps) * weight, row by row (float32 statistics, as the reference models). */
CLONES static void rms_norm_row(const float *x, long dim, const float *weight, float eps, float *out) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (long d = 0; d < dim; d++) ss += x[d] * x[d];
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma omp simd
    for (long d = 0; d < dim; d++) out[d] = x[d] * r * weight[d];
}

/* sum += x, then out = rms_norm(sum): a block's residual add and the next norm in one pass over the row
 * (the same arithmetic as the add, then rms_norm_row). */
CLONES static void add_rms_norm_row(float *sum, const float *x, long dim, const float *weight, float eps,
                                    float *out) {
#pragma omp simd
    for (long d = 0; d < dim; d++) sum[d] += x[d];
    rms_norm_row(sum, dim, weight, eps, out);
}

/* The index of the first largest value of a row; a NaN counts as the largest, as torch.argmax has it. */
CLONES static long argmax_row(const float *x, long n) {
    float top = -INFINITY;
    int nan = 0;
#pragma omp simd reduction(max : top) reduction(| : nan)
    for (long i = 0; i < n; i++) {
        top = x[i] > top ? x[i] : top;
        nan |= x[i] != x[i];
    }
    for (long i = 0; i < n; i++)
        if (nan ? x[i] != x[i] : x[i] == top) return i;
    return 0;
}

/* Rotary embedding, rotate-half convention, in place on one head's first 2 * half channels: with the
 * table's sin signed (first half negated), x_i cos_i + x_(i+half) sin_i and x_(i+half) cos_(i+half) +
 * x_i sin_(i+half), the arithmetic of x * cos + rotate_half(x) * sin. */
CLONES static void rotate_head(float *x, long half, const float *c, const float *s) {
#pragma omp simd
    for (long i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * c[i] + b * s[i];
        x[i + half] = b * c[i + half] + a * s[i + half];
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

/* A norm's arguments: `want` integers (addresses and sizes), then eps as a float; -1 with a Python error set. */
static int read_norm_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage, long long *out,
                          float *eps) {
    if (nargs != want + 1) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", usage, want + 1);
        return -1;
    }
    if (read_ints(args, want, want, usage, out) < 0) return -1;
    *eps = (float)PyFloat_AsDouble(args[want]);
    return PyErr_Occurred() ? -1 : 0;
}

/* rms_norm(x, rows, heads, ldx, dim, weight, out, ldo, eps): RMSNorm of each head's dim floats, heads dim
 * apart within a row, rows ldx apart in x and ldo in out (out == x: in place, as rms_norm_row allows). One
 * head a row: a step's rows; several: the q or k heads of a fused qkv product. Addresses as ints. */
static PyObject *py_rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[8];
    float eps;
    if (read_norm_args(args, nargs, 8, "rms_norm(x, rows, heads, ldx, dim, weight, out, ldo, eps)", v, &eps) < 0)
        return NULL;
    const float *x = (const float *)(intptr_t)v[0], *w = (const float *)(intptr_t)v[5];
    float *out = (float *)(intptr_t)v[6];
    long rows = v[1], heads = v[2], ldx = v[3], dim = v[4], ldo = v[7];
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows * heads * dim > 65536)
    for (long r = 0; r < rows; r++)
        for (long h = 0; h < heads; h++) rms_norm_row(x + r * ldx + h * dim, dim, w, eps, out + r * ldo + h * dim);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* add_rms_norm(sum, rows, dim, lds, x, ldx, weight, out, ldo, eps): sum += x in place, out = RMSNorm(sum). */
static PyObject *py_add_rms_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[9];
    float eps;
    if (read_norm_args(args, nargs, 9, "add_rms_norm(sum, rows, dim, lds, x, ldx, weight, out, ldo, eps)", v, &eps) < 0)
        return NULL;
    float *sum = (float *)(intptr_t)v[0], *out = (float *)(intptr_t)v[7];
    const float *x = (const float *)(intptr_t)v[4], *w = (const float *)(intptr_t)v[6];
    long rows = v[1], dim = v[2], lds = v[3], ldx = v[5], ldo = v[8];
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows * dim > 65536)
    for (long r = 0; r < rows; r++) add_rms_norm_row(sum + r * lds, x + r * ldx, dim, w, eps, out + r * ldo);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* argmax(x, rows, n, ldx, out): out[r] (int64) = the first index of row r's largest value. */
static PyObject *py_argmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[5];
    if (read_ints(args, nargs, 5, "argmax(x, rows, n, ldx, out)", v) < 0) return NULL;
    const float *x = (const float *)(intptr_t)v[0];
    int64_t *out = (int64_t *)(intptr_t)v[4];
    long rows = v[1], n = v[2], ldx = v[3];
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows > 1)
    for (long r = 0; r < rows; r++) out[r] = argmax_row(x + r * ldx, n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* rotary(x, tokens, heads, ldt, ldh, dim, cos, sin, ldtab, table_rows, positions): x[t, h, :dim] (floats
 * ldt apart per token, ldh per head) rotated in place by row positions[t] (int64) of the cos and sin tables. */
static PyObject *py_rotary(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[11];
    if (read_ints(args, nargs, 11, "rotary(x, tokens, heads, ldt, ldh, dim, cos, sin, ldtab, table_rows, positions)",
                  v) < 0)
        return NULL;
    float *x = (float *)(intptr_t)v[0];
    const float *cos_t = (const float *)(intptr_t)v[6], *sin_t = (const float *)(intptr_t)v[7];
    const int64_t *pos = (const int64_t *)(intptr_t)v[10];
    long tokens = v[1], heads = v[2], ldt = v[3], ldh = v[4], half = v[5] / 2, ldtab = v[8], table_rows = v[9];
    for (long t = 0; t < tokens; t++) {
        if (pos[t] < 0 || pos[t] >= table_rows)
            return PyErr_Format(PyExc_ValueError, "rotary(): position %lld is outside the table's %ld rows",
                                (long long)pos[t], table_rows);
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (tokens * heads * half > 65536)
    for (long t = 0; t < tokens; t++)
        for (long h = 0; h < heads; h++)
            rotate_head(x + t * ldt + h * ldh, half, cos_t + pos[t] * ldtab, sin_t + pos[t] * ldtab);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rms_norm", (PyCFunction)(void (*)(void))py_rms_norm, METH_FASTCALL,
     "rms_norm(x, rows, heads, ldx, dim, weight, out, ldo, eps): RMSNorm of each float32 head of each row "
     "(heads dim apart; out may be x; addresses as ints)."},
    {"add_rms_norm", (PyCFunction)(void (*)(void))py_add_rms_norm, METH_FASTCALL,
     "add_rms_norm(sum, rows, dim, lds, x, ldx, weight, out, ldo, eps): sum += x in place, then RMSNorm of "
     "the float32 rows of sum into out (addresses as ints)."},
    {"argmax", (PyCFunction)(void (*)(void))py_argmax, METH_FASTCALL,
     "argmax(x, rows, n, ldx, out): first index of each float32 row's largest value into int64 out."},
    {"rotary", (PyCFunction)(void (*)(void))py_rotary, METH_FASTCALL,
     "rotary(x, tokens, heads, ldt, ldh, dim, cos, sin, ldtab, table_rows, positions): rotate-half rotary "
     "embedding in place (addresses as ints)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }
