/* The decodes' state update of backend ``mamba2_cpu``: one new token for
 * each of n sequences, every state read and written where it is in the pool.
 *
 * For decode row i (the sequence in slot s = slots[i]) and head h (group
 * g = h / (H / G)), what ssd.py's ``discretize`` and ``ssd_decode`` compute:
 *
 *     dt = clamp(softplus(dt_raw[i, h] + dt_bias[h]), dt_min, dt_max)
 *     S  = exp(dt A[h]) S + dt x[i, h] (outer) B[i, g]      S: record s, head h, [P, N]
 *     y[i, h] = S C[i, g]                                  (the D skip is the caller's)
 *
 * ssd_decode gathers the batch's records from the pool (index_select) and
 * scatters them back (index_copy_) unless the slots are consecutive, and
 * passes over each state three times (scale, rank-1 add, read-out). Here a
 * record is addressed at s * ssm_stride, which may exceed a record where an
 * engine lays them in larger pages, and each state row of N floats is
 * updated and read against C while it is in registers: one read and one
 * write of each state, nothing else. Sixteen state rows at a time, their
 * sixteen dot products with C summed across lanes together (lane_sums).
 *
 * Work items: (row, head), over OpenMP threads where the states are large
 * enough to pay for waking them. Arithmetic in float32.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "mixboard_vec.h"

typedef struct {
    const float *x;       /* x[i, h, p] at x + i * ldx + h * P + p */
    const float *B, *C;   /* B[i, g, n] at B + i * ldbc + g * N + n; C likewise */
    const float *dt;      /* dt_raw[i, h] at dt + i * lddt + h: before dt_bias and softplus */
    const float *dt_bias, *A;  /* [H] */
    float dt_min, dt_max;
    long ldx, ldbc, lddt, n, H, P, G, N;
    float *ssm;           /* state pool: records [H, P, N], each contiguous, ssm_stride floats apart */
    long ssm_stride;      /* >= H * P * N: an engine may lay records in larger pages */
    const int64_t *slots; /* [n] */
    float *y;             /* y[i, h, p] at y + i * ldy + h * P + p */
    long ldy;
} decode_args;

/* dt of row i, head h: torch's softplus (beta 1, threshold 20: v itself above 20), then the clamp. With
 * the spec's defaults (0, inf) the clamp changes nothing, as discretize skips it. */
INLINE float step_size(const decode_args *a, long i, long h) {
    const float v = a->dt[i * a->lddt + h] + a->dt_bias[h];
    const float dt = v > 20.0f ? v : log1pf(expf(v));
    return fminf(fmaxf(dt, a->dt_min), a->dt_max);
}

/* State rows [p0, p0 + rows) of one (row, head): each updated and read against C while in registers,
 * then the rows' sums across lanes at once. rows is LANES (a constant: the sums stay in registers) but
 * for the last rows of a head_dim off the lanes, whose missing rows sum to zero. */
INLINE void rows_n(float *restrict S, const float *restrict x, const float *restrict B, const float *restrict C,
                   float dt, float decay, float *restrict y, long p0, const long rows, const long N) {
    vec read[LANES];
    for (long k = 0; k < LANES; k++) {
        if (k >= rows) {
            read[k] = splat(0.0f);
            continue;
        }
        float *row = S + (p0 + k) * N;
        const float u = dt * x[p0 + k];
        vec acc = {0};
        for (long m = 0; m < N; m += LANES) {
            const long cm = N - m < LANES ? N - m : LANES;
            const vec s = load_n(row + m, cm) * decay + u * load_n(B + m, cm);
            put_n(row + m, s, cm);
            acc += s * load_n(C + m, cm);
        }
        read[k] = acc;
    }
    put_n(y + p0, lane_sums(read), rows);
}

/* One (row, head). N a constant where head() instantiates it: a row of the state is then a fixed number
 * of vectors, and B and C stay in registers across the rows (rows_n's restrict: the state writes cannot
 * change them). */
INLINE void head_n(const decode_args *a, long i, long h, const long N) {
    const long P = a->P, g = h / (a->H / a->G);
    const float dt = step_size(a, i, h), decay = expf(dt * a->A[h]);
    const float *x = a->x + i * a->ldx + h * P;
    const float *B = a->B + i * a->ldbc + g * N, *C = a->C + i * a->ldbc + g * N;
    float *S = a->ssm + a->slots[i] * a->ssm_stride + h * P * N, *y = a->y + i * a->ldy + h * P;
    long p0 = 0;
    for (; p0 + LANES <= P; p0 += LANES) rows_n(S, x, B, C, dt, decay, y, p0, LANES, N);
    if (p0 < P) rows_n(S, x, B, C, dt, decay, y, p0, P - p0, N);
}

/* The usual d_state as constants, any other as it comes. */
CLONES static void head(const decode_args *a, long i, long h) {
    switch (a->N) {
    case 16: head_n(a, i, h, 16); break;
    case 32: head_n(a, i, h, 32); break;
    case 64: head_n(a, i, h, 64); break;
    case 128: head_n(a, i, h, 128); break;
    default: head_n(a, i, h, a->N); break;
    }
}

/* step(x, ldx, B, C, ldbc, dt, lddt, dt_bias, A, dt_min, dt_max, n, H, P, G, N, ssm, ssm_stride, slots, y,
 * ldy): addresses as ints (tensor.data_ptr()), ssm_stride the pool's record stride in floats; the impl has
 * checked shapes, dtypes, record layout and slots (InputChecks) before it calls. */
#define NARGS 21

static PyObject *py_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[NARGS];
    double limits[2];
    if (nargs != NARGS) {
        PyErr_SetString(PyExc_TypeError, "step() takes 21 arguments");
        return NULL;
    }
    for (int k = 0; k < NARGS; k++) {
        if (k == 9 || k == 10) {  /* dt_min, dt_max: floats (dt_max may be inf) */
            limits[k - 9] = PyFloat_AsDouble(args[k]);
            if (limits[k - 9] == -1.0 && PyErr_Occurred()) return NULL;
            continue;
        }
        v[k] = PyLong_AsLongLong(args[k]);
        if (v[k] == -1 && PyErr_Occurred()) return NULL;
    }
    decode_args a = {
        .x = (const float *)(intptr_t)v[0], .ldx = v[1], .B = (const float *)(intptr_t)v[2],
        .C = (const float *)(intptr_t)v[3], .ldbc = v[4], .dt = (const float *)(intptr_t)v[5], .lddt = v[6],
        .dt_bias = (const float *)(intptr_t)v[7], .A = (const float *)(intptr_t)v[8],
        .dt_min = (float)limits[0], .dt_max = (float)limits[1], .n = v[11], .H = v[12], .P = v[13], .G = v[14],
        .N = v[15], .ssm = (float *)(intptr_t)v[16], .ssm_stride = v[17], .slots = (const int64_t *)(intptr_t)v[18],
        .y = (float *)(intptr_t)v[19], .ldy = v[20],
    };
    if (a.n < 0 || a.H <= 0 || a.P <= 0 || a.G <= 0 || a.N <= 0 || a.H % a.G || a.ssm_stride < a.H * a.P * a.N) {
        PyErr_SetString(PyExc_ValueError, "step(): sizes out of range, or records closer than a record apart");
        return NULL;
    }
    const long items = a.n * a.H;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (items * a.P * a.N > 16384)
    for (long w = 0; w < items; w++) head(&a, w / a.H, w % a.H);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"step", (PyCFunction)(void (*)(void))py_step, METH_FASTCALL,
     "step(x, ldx, B, C, ldbc, dt, lddt, dt_bias, A, dt_min, dt_max, n, H, P, G, N, ssm, ssm_stride, slots, y, "
     "ldy): the SSM state update of n decode rows, in place in the pool, and their y before the D skip "
     "(addresses as ints, record stride in floats)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }
