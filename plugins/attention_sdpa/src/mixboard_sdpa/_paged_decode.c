/* Decode attention that reads the paged K/V cache in place (backend ``sdpa_cpu``).
 *
 * For each decode row (one new token per sequence) and each query head:
 * softmax(scale * q . k) v over the sequence's keys, which sit in cache
 * blocks [num_blocks, block_size, kv_heads, head_size] named by its row of
 * the block table. The portable ``sdpa`` first gathers every block into a
 * [n, keys, kv_heads, D] copy and runs scaled_dot_product_attention with a
 * length mask; here each key and value is read once, from where it lies.
 *
 * One work item is one (sequence, kv head): its G = heads / kv_heads query
 * heads share every key they read. Keys are taken 64 at a time with an
 * online softmax (running maximum m, sum l, accumulator acc rescaled when m
 * grows), the arithmetic of flash attention, in float32.
 *
 * Threads: OpenMP over work items, on the libgomp torch loaded (the wrapper
 * imports torch first). Instruction sets: GCC compiles the work item for
 * AVX-512, AVX2 and plain x86-64 and picks one at load time (target_clones).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define MAX_GROUP 64   /* query heads per kv head (the backend's check says so) */
#define MAX_HEAD 256   /* head size */
#define KEYS 64        /* keys scored at a time */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

typedef struct {
    const float *q;         /* [n, heads, D], rows q_stride apart */
    long q_stride, heads, kv_heads, D;
    const float *k, *v;     /* [blocks, block_size, kv_heads, D] */
    long block_size;
    const int32_t *table;   /* [n, table_stride] */
    long table_stride;
    const int32_t *seq_lens;
    float *out;             /* [n, heads, D], rows out_stride apart */
    long out_stride;
    float scale, cap;       /* cap 0: no soft-cap */
    long window;            /* 0: every key */
} problem;

/* e^x for x <= 0 (scores minus their maximum), in plain arithmetic so that a
 * loop of it vectorizes: 2^(x log2 e) = 2^n 2^f, n an integer, |f| <= 1/2,
 * 2^f by its Taylor series to the 7th power (relative error < 2e-7, a few
 * float32 ulps at most; the conformance kit holds the outputs to 1e-5). */
static inline float exp_nonpositive(float x) {
    float y = (x < -87.0f ? -87.0f : x) * 1.44269504088896341f;
    int n = (int)(y - 0.5f);  /* y <= 0: rounds to nearest */
    float f = (y - (float)n) * 0.693147180559945309f;
    float e = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720
              + f * (1.0f / 5040)))))));
    union { int i; float f; } scale = {.i = (n + 127) << 23};
    return e * scale.f;
}

/* One (sequence i, kv head h) for head size D (a constant where the macro
 * below instantiates it, so that a key, a query and an accumulator row stay
 * in registers). */
static inline __attribute__((always_inline)) void attend(const problem *p, long i, long h, const long D) {
    const long G = p->heads / p->kv_heads, len = p->seq_lens[i];
    const long first = p->window > 0 && len > p->window ? len - p->window : 0;
    float m[MAX_GROUP], l[MAX_GROUP], acc[MAX_GROUP][MAX_HEAD], s[MAX_GROUP][KEYS];
    const float *q = p->q + i * p->q_stride + h * G * D;
    for (long g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
        for (long d = 0; d < D; d++) acc[g][d] = 0.0f;
    }
    for (long j0 = first; j0 < len; j0 += KEYS) {
        const long count = len - j0 < KEYS ? len - j0 : KEYS;
        for (long t = 0; t < count; t++) {
            long j = j0 + t, block = p->table[i * p->table_stride + j / p->block_size];
            const float *key = p->k + ((block * p->block_size + j % p->block_size) * p->kv_heads + h) * D;
            for (long g = 0; g < G; g++) {
                const float *qg = q + g * D;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (long d = 0; d < D; d++) dot += qg[d] * key[d];
                dot *= p->scale;
                s[g][t] = p->cap > 0.0f ? p->cap * tanhf(dot / p->cap) : dot;
            }
        }
        for (long g = 0; g < G; g++) {
            float top = m[g], sum = 0.0f;
            for (long t = 0; t < count; t++) top = s[g][t] > top ? s[g][t] : top;
            const float rescale = expf(m[g] - top);  /* 0 on the first keys (m = -inf) */
            for (long d = 0; d < D; d++) acc[g][d] *= rescale;
#pragma omp simd reduction(+ : sum)
            for (long t = 0; t < count; t++) {
                s[g][t] = exp_nonpositive(s[g][t] - top);
                sum += s[g][t];
            }
            l[g] = l[g] * rescale + sum;
            m[g] = top;
        }
        for (long t = 0; t < count; t++) {
            long j = j0 + t, block = p->table[i * p->table_stride + j / p->block_size];
            const float *value = p->v + ((block * p->block_size + j % p->block_size) * p->kv_heads + h) * D;
            for (long g = 0; g < G; g++) {
                const float w = s[g][t];
                for (long d = 0; d < D; d++) acc[g][d] += w * value[d];
            }
        }
    }
    for (long g = 0; g < G; g++) {
        float *o = p->out + i * p->out_stride + (h * G + g) * D;
        const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;  /* no key (len 0): zeros, never NaN */
        for (long d = 0; d < D; d++) o[d] = acc[g][d] * inv;
    }
}

CLONES static void attend_one(const problem *p, long i, long h) {
    switch (p->D) {  /* the common head sizes unrolled, any other as it comes */
    case 64: attend(p, i, h, 64); break;
    case 128: attend(p, i, h, 128); break;
    default: attend(p, i, h, p->D); break;
    }
}

static void attend_all(const problem *p, long n) {
    const long work = n * p->kv_heads;
#pragma omp parallel for schedule(static) if (work > 1)
    for (long w = 0; w < work; w++) attend_one(p, w / p->kv_heads, w % p->kv_heads);
}

/* decode(q, q_stride, n, heads, kv_heads, D, k, v, block_size, table, table_stride, seq_lens, out, out_stride,
 *        scale, window, cap): addresses as ints (tensor.data_ptr()); the impl has checked shapes, strides and
 *        block ids (mixboard.ops.paged.check_paged_inputs) before it calls. */
static PyObject *py_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 17) {
        PyErr_SetString(PyExc_TypeError, "decode() takes 17 arguments");
        return NULL;
    }
    long long v[15];
    int ints[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15};
    for (int i = 0; i < 15; i++) {
        v[i] = PyLong_AsLongLong(args[ints[i]]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    double scale = PyFloat_AsDouble(args[14]), cap = PyFloat_AsDouble(args[16]);
    if (PyErr_Occurred()) return NULL;
    problem p = {(const float *)(intptr_t)v[0], v[1], v[3], v[4], v[5],
                 (const float *)(intptr_t)v[6], (const float *)(intptr_t)v[7], v[8],
                 (const int32_t *)(intptr_t)v[9], v[10], (const int32_t *)(intptr_t)v[11],
                 (float *)(intptr_t)v[12], v[13], (float)scale, (float)cap, v[14]};
    if (p.kv_heads <= 0 || p.heads % p.kv_heads || p.heads / p.kv_heads > MAX_GROUP || p.D <= 0 || p.D > MAX_HEAD
        || p.block_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "decode(): heads, kv_heads, head size or block size out of range");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    attend_all(&p, v[2]);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))py_decode, METH_FASTCALL,
     "decode(q, q_stride, n, heads, kv_heads, D, k, v, block_size, table, table_stride, seq_lens, out, out_stride, "
     "scale, window, cap): decode attention over the paged cache (addresses as ints)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_paged_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__paged_decode(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "MAX_GROUP", MAX_GROUP) < 0
              || PyModule_AddIntConstant(m, "MAX_HEAD", MAX_HEAD) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
