/* One decode step of a Mamba-1 layer for a batch of sequences, read from and
 * written to the state pools in place (backend ``mamba1_cpu``).
 *
 * For each decode row i (one new token of the sequence in slot s_i) and each
 * channel d, what mamba1_torch's decode path computes with ~15 torch
 * operators:
 *
 *   conv:  xc = silu(b_d + sum_k w_dk window_k), window = the slot's last
 *          W - 1 inputs then x; the slot's record shifts by one
 *   proj:  [dt_raw, B, C] = x_proj xc;  with norms (Jamba's dt_bc_norms) each of
 *          the three RMS-normalized and scaled by its weight;
 *          dt = softplus(dt_proj dt_raw + dt_b)
 *   scan:  h = 2^(dt A log2 e) h + dt xc B;  y = (C . h + D xc) silu(z)
 *
 * Slots are read where they are (no gather of the batch's records and no
 * scatter back; records conv_stride / ssm_stride elements apart, which may be
 * more than a record where an engine lays them in larger pages), and the state record of a channel (N floats) is updated in
 * registers while it is read for y. Three phases in one OpenMP region:
 * conv over (row, block of channels), projection per row, scan over (row,
 * block of channels). Arithmetic in float32, sixteen lanes at a time, with
 * GCC's vector extension (one AVX-512 register, two AVX2 or four SSE ones;
 * target_clones picks at load time).
 *
 * The conv pool is float32 (step) or bfloat16 (step_bf16: vLLM keeps a
 * bfloat16 model's conv states so, its SSM states float32); each element
 * widened as read and narrowed to nearest even as written (mixboard_bf16.h).
 * A bfloat16 model's inputs are bfloat16 already, so its states hold them
 * exactly. Everything else is float32 in both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mixboard_bf16.h"
#include "mixboard_vec.h"

#define BLOCK 64  /* channels per work item of the conv and scan phases */
#define LOG2E 1.44269504088896341f

/* Lane k of v in every lane. */
INLINE vec broadcast(vec v, int k) {
#if defined(__clang__)
    float t[LANES];
    put(t, v);
    return splat(t[k]);
#else
    return __builtin_shuffle(v, (ivec){0} + k);
#endif
}

/* 2^y for y clamped to [-126, 127] (2^n stays a normal float): 2^n 2^f, n
 * the nearest integer, 2^f = e^(f ln 2) by its Taylor series to the 7th
 * power (|f ln 2| <= 0.35: relative error < 1e-8 before rounding). */
INLINE vec exp2v(vec y) {
    y = pick(y < -126.0f, splat(-126.0f), pick(y > 127.0f, splat(127.0f), y));
    const vec n = (y + 12582912.0f) - 12582912.0f;  /* 1.5 * 2^23: rounds to the nearest integer */
    const vec f = (y - n) * 0.693147180559945309f;
    const vec e = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720
                  + f * (1.0f / 5040)))))));
    return e * (vec)((__builtin_convertvector(n, ivec) + 127) << 23);
}

INLINE vec silu(vec v) { return v / (1.0f + exp2v(-v * LOG2E)); }

/* torch's softplus (beta 1, threshold 20: v itself above 20): max(v, 0) +
 * log1p(e^-|v|), with log1p(t) = 2 atanh(t / (2 + t)) by its odd series
 * (t <= 1, so s <= 1/3: eight terms, error < 1e-9). */
INLINE vec softplus(vec v) {
    const vec a = pick(v < 0.0f, -v, v), t = exp2v(-a * LOG2E);
    const vec s = t / (2.0f + t), s2 = s * s;
    const vec l = 2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 * (1.0f / 11
                  + s2 * (1.0f / 13 + s2 * (1.0f / 15))))))));
    return pick(v > 20.0f, v, pick(v > 0.0f, v, splat(0.0f)) + l);
}

typedef struct {
    const float *x, *z;     /* [n, D], rows ldx / ldz apart */
    long ldx, ldz, n, D, N, R, W;
    const float *conv_w;    /* [D, W] */
    const float *conv_b;    /* [D] or NULL */
    const float *xproj_t;   /* [D, R + 2N]: x_proj transposed */
    const float *dt_p;      /* [ceil(D / 16), R, 16]: dt_proj in panels of 16 channels, zero-padded */
    const float *dt_b;      /* [D] */
    const float *A2;        /* [D, N]: A log2 e */
    const float *Dskip;     /* [D] */
    const float *dt_norm, *b_norm, *c_norm;  /* [R], [N], [N]; all NULL without dt_bc_norms */
    float eps;              /* the norms' epsilon */
    void *conv;             /* pool of records [D, W - 1], each contiguous: float32 or bfloat16 (conv_bf16) */
    int conv_bf16;
    float *ssm;             /* pool of records [D, N], each contiguous */
    long conv_stride, ssm_stride;  /* elements from one record to the next */
    const int64_t *slots;   /* [n] */
    float *y;               /* [n, D], rows ldy apart */
    long ldy;
    float *xc, *xdbl;       /* scratch [n, D] and [n, R + 2N] */
} step_args;

/* Row i, channels [d0, d1): the conv window and its shift, then silu (W and
 * the pool's element type constants where conv_rows instantiates it: no
 * loops or branches per channel). */
INLINE void conv_width(const step_args *a, long i, long d0, long d1, const long W, const int bf16) {
    const long keep = W - 1;
    const float *x = a->x + i * a->ldx;
    float *xc = a->xc + i * a->D;
    const long record = a->slots[i] * a->conv_stride;  /* elements, of the pool's type */
    for (long d = d0; d < d1; d++) {
        const float *w = a->conv_w + d * W;
        float acc = (a->conv_b ? a->conv_b[d] : 0.0f) + x[d] * w[keep];
        if (bf16) {  /* the shift moves bits as they are; only the new input is narrowed */
            uint16_t *s = (uint16_t *)a->conv + record + d * keep;
            for (long k = 0; k < keep; k++) acc += widen(s[k]) * w[k];
            for (long k = 0; k + 1 < keep; k++) s[k] = s[k + 1];
            if (keep) s[keep - 1] = narrow(x[d]);
        } else {
            float *s = (float *)a->conv + record + d * keep;
            for (long k = 0; k < keep; k++) acc += s[k] * w[k];
            for (long k = 0; k + 1 < keep; k++) s[k] = s[k + 1];
            if (keep) s[keep - 1] = x[d];
        }
        xc[d] = acc;
    }
    for (long d = d0; d < d1; d += LANES) {
        const long count = d1 - d < LANES ? d1 - d : LANES;
        put_n(xc + d, silu(load_n(xc + d, count)), count);
    }
}

CLONES static void conv_rows(const step_args *a, long i, long d0, long d1) {
    const int bf16 = a->conv_bf16;
    switch (a->W * 2 + bf16) {
    case 8: conv_width(a, i, d0, d1, 4, 0); break;
    case 9: conv_width(a, i, d0, d1, 4, 1); break;
    case 6: conv_width(a, i, d0, d1, 3, 0); break;
    case 7: conv_width(a, i, d0, d1, 3, 1); break;
    case 4: conv_width(a, i, d0, d1, 2, 0); break;
    case 5: conv_width(a, i, d0, d1, 2, 1); break;
    default: conv_width(a, i, d0, d1, a->W, bf16); break;
    }
}

/* Rows [i0, i0 + rows) (rows <= 4): [dt_raw, B, C] = x_proj xc, 64 outputs
 * at a time, each weight row read once for all the rows. */
CLONES static void project_rows(const step_args *a, long i0, long rows) {
    const long J = a->R + 2 * a->N, D = a->D;
    for (long j0 = 0; j0 < J; j0 += 4 * LANES) {
        const long width = J - j0 < 4 * LANES ? J - j0 : 4 * LANES;
        vec acc[4][4] = {{{0}}};
        if (width == 4 * LANES && rows == 4) {  /* the common case, in registers */
            for (long d = 0; d < D; d++) {
                const float *w = a->xproj_t + d * J + j0;
                const vec w0 = load(w), w1 = load(w + LANES), w2 = load(w + 2 * LANES), w3 = load(w + 3 * LANES);
                for (int r = 0; r < 4; r++) {
                    const float v = a->xc[(i0 + r) * D + d];
                    acc[r][0] += v * w0, acc[r][1] += v * w1, acc[r][2] += v * w2, acc[r][3] += v * w3;
                }
            }
        } else {
            for (long d = 0; d < D; d++) {
                const float *w = a->xproj_t + d * J + j0;
                for (long c = 0; c * LANES < width; c++) {
                    const long count = width - c * LANES < LANES ? width - c * LANES : LANES;
                    const vec wc = load_n(w + c * LANES, count);
                    for (long r = 0; r < rows; r++) acc[r][c] += a->xc[(i0 + r) * D + d] * wc;
                }
            }
        }
        for (long r = 0; r < rows; r++)
            for (long c = 0; c * LANES < width; c++) {
                const long count = width - c * LANES < LANES ? width - c * LANES : LANES;
                put_n(a->xdbl + (i0 + r) * J + j0 + c * LANES, acc[r][c], count);
            }
    }
}

/* v[0:len) = v / sqrt(mean(v^2) + eps) * w, the sum of squares in double (len is a rank or d_state: short). */
static void rms_norm(float *v, long len, const float *w, float eps) {
    double squares = 0.0;
    for (long k = 0; k < len; k++) squares += (double)v[k] * v[k];
    const float scale = (float)(1.0 / sqrt(squares / len + eps));
    for (long k = 0; k < len; k++) v[k] = v[k] * scale * w[k];
}

/* Rows [i0, i0 + rows): dt_raw, B and C each RMS-normalized in place (dt_bc_norms). */
static void norm_rows(const step_args *a, long i0, long rows) {
    const long R = a->R, N = a->N;
    for (long i = i0; i < i0 + rows; i++) {
        float *dt_raw = a->xdbl + i * (R + 2 * N);
        rms_norm(dt_raw, R, a->dt_norm, a->eps);
        rms_norm(dt_raw + R, N, a->b_norm, a->eps);
        rms_norm(dt_raw + R + N, N, a->c_norm, a->eps);
    }
}

/* Row i, channels [d0, d1), sixteen at a time: dt, the state update and y. */
CLONES static void scan_rows(const step_args *a, long i, long d0, long d1) {
    const long D = a->D, N = a->N, R = a->R;
    const float *dt_raw = a->xdbl + i * (R + 2 * N), *B = dt_raw + R, *C = B + N;
    const float *xc = a->xc + i * D, *z = a->z + i * a->ldz;
    float *h0 = a->ssm + a->slots[i] * a->ssm_stride, *y = a->y + i * a->ldy;
    for (long d = d0; d < d1; d += LANES) {
        const long count = d1 - d < LANES ? d1 - d : LANES;
        const float *panel = a->dt_p + d * R;  /* d / 16 * R * 16 */
        vec v0 = load_n(a->dt_b + d, count), v1 = {0};
        long r = 0;
        for (; r + 1 < R; r += 2) {  /* two chains: the adds' latency, not their number, bounds one chain */
            v0 += dt_raw[r] * load(panel + r * LANES);
            v1 += dt_raw[r + 1] * load(panel + (r + 1) * LANES);
        }
        if (r < R) v0 += dt_raw[r] * load(panel + r * LANES);
        const vec dtv = softplus(v0 + v1), xv = load_n(xc + d, count);
        vec yv;
        if (N == LANES && count == LANES) {  /* Mamba's d_state 16: one channel's record is one vector */
            const vec Bv = load(B), Cv = load(C);
            vec read[LANES];
            for (int k = 0; k < LANES; k++) {
                const vec dk = broadcast(dtv, k);
                float *h = h0 + (d + k) * LANES;
                const vec hv = load(h) * exp2v(dk * load(a->A2 + (d + k) * LANES)) + dk * broadcast(xv, k) * Bv;
                put(h, hv);
                read[k] = hv * Cv;
            }
            yv = lane_sums(read);
        } else {
            float dt[LANES], u[LANES], out[LANES] = {0};
            put(dt, dtv);
            put(u, xv);
            for (long k = 0; k < count; k++) {
                const float *A2 = a->A2 + (d + k) * N;
                float *h = h0 + (d + k) * N;
                vec read = {0};
                for (long m = 0; m < N; m += LANES) {
                    const long cm = N - m < LANES ? N - m : LANES;
                    const vec hv = load_n(h + m, cm) * exp2v(dt[k] * load_n(A2 + m, cm))
                                 + dt[k] * u[k] * load_n(B + m, cm);
                    put_n(h + m, hv, cm);
                    read += hv * load_n(C + m, cm);
                }
                out[k] = lane_sum(read);
            }
            yv = load(out);
        }
        put_n(y + d, (yv + load_n(a->Dskip + d, count) * xv) * silu(load_n(z + d, count)), count);
    }
}

static void step(const step_args *a) {
    const long blocks = (a->D + BLOCK - 1) / BLOCK, items = a->n * blocks;
#pragma omp parallel if (a->n * a->D * a->N > 16384)
    {
#pragma omp for schedule(static)
        for (long w = 0; w < items; w++) {
            const long d0 = (w % blocks) * BLOCK;
            conv_rows(a, w / blocks, d0, d0 + BLOCK < a->D ? d0 + BLOCK : a->D);
        }
#pragma omp for schedule(static)
        for (long i = 0; i < a->n; i += 4) {
            project_rows(a, i, a->n - i < 4 ? a->n - i : 4);
            if (a->dt_norm) norm_rows(a, i, a->n - i < 4 ? a->n - i : 4);
        }
#pragma omp for schedule(static)
        for (long w = 0; w < items; w++) {
            const long d0 = (w % blocks) * BLOCK;
            scan_rows(a, w / blocks, d0, d0 + BLOCK < a->D ? d0 + BLOCK : a->D);
        }
    }
}

/* step(x, ldx, z, ldz, n, D, N, R, W, conv_w, conv_b, xproj_t, dt_p, dt_b, A2, Dskip, conv, conv_stride, ssm,
 * ssm_stride, slots, y, ldy, dt_norm, b_norm, c_norm, eps): addresses as ints (tensor.data_ptr(), 0 for no
 * conv bias and for no norms), the pools' record strides in elements, eps a float; the impl has checked shapes,
 * dtypes, record layout and slots (InputChecks) before it calls. step_bf16 takes the same over a bfloat16
 * conv pool. */
static PyObject *step_over(PyObject *const *args, Py_ssize_t nargs, int conv_bf16) {
    long long v[26];
    if (nargs != 27) {
        PyErr_SetString(PyExc_TypeError, conv_bf16 ? "step_bf16() takes 27 arguments" : "step() takes 27 arguments");
        return NULL;
    }
    const double eps = PyFloat_AsDouble(args[26]);
    if (eps == -1.0 && PyErr_Occurred()) return NULL;
    for (int k = 0; k < 26; k++) {
        v[k] = PyLong_AsLongLong(args[k]);
        if (v[k] == -1 && PyErr_Occurred()) return NULL;
    }
    step_args a = {
        .x = (const float *)(intptr_t)v[0], .ldx = v[1], .z = (const float *)(intptr_t)v[2], .ldz = v[3],
        .n = v[4], .D = v[5], .N = v[6], .R = v[7], .W = v[8],
        .conv_w = (const float *)(intptr_t)v[9], .conv_b = (const float *)(intptr_t)v[10],
        .xproj_t = (const float *)(intptr_t)v[11], .dt_p = (const float *)(intptr_t)v[12],
        .dt_b = (const float *)(intptr_t)v[13], .A2 = (const float *)(intptr_t)v[14],
        .Dskip = (const float *)(intptr_t)v[15], .conv = (void *)(intptr_t)v[16], .conv_bf16 = conv_bf16,
        .conv_stride = v[17],
        .ssm = (float *)(intptr_t)v[18], .ssm_stride = v[19], .slots = (const int64_t *)(intptr_t)v[20],
        .y = (float *)(intptr_t)v[21], .ldy = v[22], .dt_norm = (const float *)(intptr_t)v[23],
        .b_norm = (const float *)(intptr_t)v[24], .c_norm = (const float *)(intptr_t)v[25], .eps = (float)eps,
    };
    if (a.n < 0 || a.D <= 0 || a.N <= 0 || a.R <= 0 || a.W <= 0 || a.conv_stride < a.D * (a.W - 1)
        || a.ssm_stride < a.D * a.N || (!a.dt_norm != !a.b_norm) || (!a.dt_norm != !a.c_norm)) {
        PyErr_SetString(PyExc_ValueError, "step(): sizes out of range, records closer than a record apart, or some "
                        "of the three norms' weights given and not all");
        return NULL;
    }
    a.xc = malloc((size_t)(a.n * a.D + a.n * (a.R + 2 * a.N) + 1) * sizeof(float));
    if (!a.xc) return PyErr_NoMemory();
    a.xdbl = a.xc + a.n * a.D;
    Py_BEGIN_ALLOW_THREADS
    step(&a);
    Py_END_ALLOW_THREADS
    free(a.xc);
    Py_RETURN_NONE;
}

static PyObject *py_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return step_over(args, nargs, 0);
}

static PyObject *py_step_bf16(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return step_over(args, nargs, 1);
}

static PyMethodDef methods[] = {
    {"step", (PyCFunction)(void (*)(void))py_step, METH_FASTCALL,
     "step(x, ldx, z, ldz, n, D, N, R, W, conv_w, conv_b, xproj_t, dt_p, dt_b, A2, Dskip, conv, conv_stride, ssm, "
     "ssm_stride, slots, y, ldy, dt_norm, b_norm, c_norm, eps): one Mamba-1 decode step over the state pools, "
     "in place (addresses as ints, 0 for no conv bias or no norms; record strides in elements)."},
    {"step_bf16", (PyCFunction)(void (*)(void))py_step_bf16, METH_FASTCALL,
     "step_bf16(...): step() over a bfloat16 conv pool (widened as read, narrowed to nearest even as written)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode_step", NULL, -1, methods};

PyMODINIT_FUNC PyInit__decode_step(void) { return PyModule_Create(&module); }
