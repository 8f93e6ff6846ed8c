/* LFM2's gated short conv for a whole step in one call (backend ``short_conv_cpu``):
 *
 *     y[t, c] = C[t, c] * (bias_c + sum_k w[c, k] bx[t - (W - 1) + k, c]),   bx = B * x
 *
 * for every sequence of the step, decodes and prefills alike: positions before
 * a sequence's first new token come from its slot's state (the last W - 1
 * values of bx, oldest first; zeros for a sequence without context), and the
 * slot then holds its last W - 1. Read and written where the slots lie (no
 * gather and scatter of the batch's records; records `stride` elements apart,
 * which may be more than a record where an engine lays them in larger
 * pages), B * x and the gate applied on the
 * way in and out (no [T, hidden] temporaries). Work items: (sequence, 64
 * channels); sixteen channels go through the sequence's tokens at a time with
 * their window in registers, float32, GCC's vector extension (target_clones
 * picks AVX-512, AVX2 or SSE at load time).
 *
 * Built twice: here over float32 (B, C, x, the states and y), and as
 * _gated_conv_bf16 over bfloat16 (that file defines CONV_BF16 and includes
 * this one; vLLM keeps a bfloat16 model's conv states in bfloat16). There
 * each element is widened as read and narrowed as written, the sums float32;
 * bx is rounded to bfloat16 as it is made, so the window holds what the state
 * will (a prefill in chunks equals one prefill) and what a bfloat16 B * x is.
 * The weight and bias are float32 in both builds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "mixboard_vec.h"

#ifdef CONV_BF16
#include "mixboard_bf16.h"
typedef uint16_t elem_t;
#define MODULE_NAME "_gated_conv_bf16"
#define MODULE_INIT PyInit__gated_conv_bf16
INLINE vec read_n(const elem_t *p, long count) { return widen_n(p, count); }
INLINE void write_n(elem_t *p, vec v, long count) { narrow_n(p, v, count); }
INLINE float read_1(elem_t e) { return widen(e); }
INLINE elem_t write_1(float f) { return narrow(f); }
INLINE vec as_kept(vec v) { return round_vec(v); }
#else
typedef float elem_t;
#define MODULE_NAME "_gated_conv"
#define MODULE_INIT PyInit__gated_conv
INLINE vec read_n(const elem_t *p, long count) { return load_n(p, count); }
INLINE void write_n(elem_t *p, vec v, long count) { put_n(p, v, count); }
INLINE float read_1(elem_t e) { return e; }
INLINE elem_t write_1(float f) { return f; }
INLINE vec as_kept(vec v) { return v; }
#endif

#define BLOCK 64
#define MAX_WIDTH 8

typedef struct {
    const elem_t *B, *C, *x; /* [T, D] each, rows ldb / ldc / ldx apart */
    long ldb, ldc, ldx, D, W;
    const float *wt;         /* [W, D]: the conv weight transposed */
    const float *bias;       /* [D] or NULL */
    elem_t *pool;            /* records [D, W - 1], each contiguous */
    long stride;             /* elements from one record to the next (>= D * (W - 1)) */
    elem_t *y;               /* [T, D], rows ldy apart */
    long ldy;
    const int64_t *seqs;     /* [n, 4]: first token, end token, slot, has context */
} conv_args;

INLINE void block_width(const conv_args *a, long i, long c0, const long W) {
    const long keep = W - 1, first = a->seqs[4 * i], end = a->seqs[4 * i + 1];
    const int context = a->seqs[4 * i + 3] != 0;
    elem_t *state = a->pool + a->seqs[4 * i + 2] * a->stride;
    for (long c = c0; c < c0 + BLOCK && c < a->D; c += LANES) {
        const long cc = a->D - c < LANES ? a->D - c : LANES;
        vec w[MAX_WIDTH], window[MAX_WIDTH];  /* window[k]: bx keep - k tokens back */
        for (long k = 0; k < W; k++) w[k] = load_n(a->wt + k * a->D + c, cc);
        const vec b = a->bias ? load_n(a->bias + c, cc) : (vec){0};
        for (long k = 0; k < keep; k++) {
            float t[LANES] = {0};
            if (context)
                for (long j = 0; j < cc; j++) t[j] = read_1(state[(c + j) * keep + k]);
            window[k] = load_n(t, LANES);
        }
        for (long t = first; t < end; t++) {
            const vec v = as_kept(read_n(a->B + t * a->ldb + c, cc) * read_n(a->x + t * a->ldx + c, cc));
            vec acc = b + w[keep] * v;
            for (long k = 0; k < keep; k++) acc += w[k] * window[k];
            for (long k = 0; k + 1 < keep; k++) window[k] = window[k + 1];
            if (keep) window[keep - 1] = v;
            write_n(a->y + t * a->ldy + c, acc * read_n(a->C + t * a->ldc + c, cc), cc);
        }
        for (long k = 0; k < keep; k++) {
            float t[LANES];
            put_n(t, window[k], LANES);
            for (long j = 0; j < cc; j++) state[(c + j) * keep + k] = write_1(t[j]);
        }
    }
}

/* LFM2's width (3) and its neighbours as constants (no loops per token), any other as it comes. */
CLONES static void conv_block(const conv_args *a, long i, long c0) {
    switch (a->W) {
    case 3: block_width(a, i, c0, 3); break;
    case 4: block_width(a, i, c0, 4); break;
    case 2: block_width(a, i, c0, 2); break;
    default: block_width(a, i, c0, a->W); break;
    }
}

/* step(B, ldb, C, ldc, x, ldx, D, W, wt, bias, pool, stride, y, ldy, seqs, n): addresses as ints
 * (tensor.data_ptr(), 0 for no bias), strides in elements; the impl has checked shapes,
 * dtypes, record layout and slots (check_inputs) before it calls. */
static PyObject *py_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[16];
    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError, "step() takes 16 arguments");
        return NULL;
    }
    for (int k = 0; k < 16; k++) {
        v[k] = PyLong_AsLongLong(args[k]);
        if (v[k] == -1 && PyErr_Occurred()) return NULL;
    }
    conv_args a = {
        .B = (const elem_t *)(intptr_t)v[0], .ldb = v[1], .C = (const elem_t *)(intptr_t)v[2], .ldc = v[3],
        .x = (const elem_t *)(intptr_t)v[4], .ldx = v[5], .D = v[6], .W = v[7], .wt = (const float *)(intptr_t)v[8],
        .bias = (const float *)(intptr_t)v[9], .pool = (elem_t *)(intptr_t)v[10], .stride = v[11],
        .y = (elem_t *)(intptr_t)v[12], .ldy = v[13], .seqs = (const int64_t *)(intptr_t)v[14],
    };
    const long n = v[15];
    if (a.D <= 0 || a.W < 1 || a.W > MAX_WIDTH || n < 0 || a.stride < a.D * (a.W - 1)) {
        PyErr_Format(PyExc_ValueError, "step(): channels or conv width out of range (width 1 to %d), or records "
                     "closer than a record apart", MAX_WIDTH);
        return NULL;
    }
    const long blocks = (a.D + BLOCK - 1) / BLOCK, work = n * blocks;
    long tokens = 0;
    for (long i = 0; i < n; i++) tokens += a.seqs[4 * i + 1] - a.seqs[4 * i];
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(dynamic, 1) if (tokens * a.D > 32768)
    for (long w = 0; w < work; w++) conv_block(&a, w / blocks, (w % blocks) * BLOCK);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"step", (PyCFunction)(void (*)(void))py_step, METH_FASTCALL,
     "step(B, ldb, C, ldc, x, ldx, D, W, wt, bias, pool, stride, y, ldy, seqs, n): y = C * conv(B * x) for a "
     "step's sequences, conv states read and written in the pool (addresses as ints, strides in elements)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, MODULE_NAME, NULL, -1, methods};

PyMODINIT_FUNC MODULE_INIT(void) { return PyModule_Create(&module); }
