/* The CPU kernels of backend ``mamba2_cpu``: the SSD scan of a step's
 * prefills (ssd), the ragged causal conv (conv) and the gated RMSNorm with
 * the D skip (gated_norm), each one pass over its rows in one C call.
 *
 * ssd: Mamba-2's scan in chunks that stay in cache.
 *
 * Per sequence and head h (group g), for tokens t with log-decay
 * dA_t = dt_t A_h (<= 0), the recurrence of ssd.py:
 *
 *     h_t = exp(dA_t) h_(t-1) + dt_t x_t (outer) B_t,   y_t = h_t C_t
 *
 * in chunks of Q tokens, as ssd.py's "attention-like" dual: within a chunk
 *
 *     y_i = sum_(j <= i) exp(cum_i - cum_j) (C_i . B_j) dt_j x_j + exp(cum_i) h_start C_i
 *
 * (cum: the chunk's running sum of dA), then the chunk's end state is passed
 * on. ssd.py materializes these products for every head and chunk at once
 * ([heads, chunks, Q, Q] tensors, tens of MB, several passes over each);
 * here one (sequence, head) runs its chunks one after another with every
 * operand in L1/L2 (Q = 64: a chunk's scores are 16 KB).
 *
 * Precision: cum is summed in double, so exp(cum_i - cum_j) is exact to
 * float32 even where a long run of strong decays makes cum large (the
 * difference of two float32 prefix sums would lose the digits that matter);
 * every exponent is <= 0. The rest is float32, sixteen lanes at a time
 * (GCC's vector extension; target_clones picks the instruction set).
 *
 * Two phases in one OpenMP region: C_i . B_j for every (sequence, group,
 * chunk), shared by the group's heads; then the scan per (sequence, head).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mixboard_bf16.h"
#include "mixboard_vec.h"

#define Q 64  /* tokens per chunk */

/* e^x for x <= 0, clamped at -87 (2^n stays a normal float; the result is then ~1e-38, never a
 * denormal): 2^(x log2 e) = 2^n 2^f, n the nearest integer, 2^f by its Taylor series to the 7th
 * power (relative error < 1e-8 before rounding). */
INLINE vec exp_nonpositive(vec x) {
    x = pick(x < -87.0f, splat(-87.0f), x);
    const vec y = x * 1.44269504088896341f;
    const vec n = (y + 12582912.0f) - 12582912.0f;  /* 1.5 * 2^23: rounds to the nearest integer */
    const vec f = (y - n) * 0.693147180559945309f;
    const vec e = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720
                  + f * (1.0f / 5040)))))));
    return e * (vec)((__builtin_convertvector(n, ivec) + 127) << 23);
}

/* silu(v) = v / (1 + e^-v): e^-v for v > 0 is e^(-|v|); for v <= 0 it is 1 / e^(-|v|) (inf past 87 in
 * magnitude, where silu is -0 as torch has it). */
INLINE vec sigmoid(vec v) {
    const ivec positive = v > 0.0f;
    const vec e = exp_nonpositive(pick(positive, -v, v));  /* e^-|v| */
    return pick(positive, 1.0f / (1.0f + e), e / (1.0f + e));
}

typedef struct {
    const float *x;   /* x[t, h, p] at x + t * ldx + h * P + p */
    const float *B;   /* B[t, g, n] at B + t * ldbc + g * N + n */
    const float *C;   /* C[t, g, n] at C + t * ldbc + g * N + n */
    const float *dt;  /* dt[t, h] at dt + t * lddt + h (softplus'ed, clamped) */
    const float *A;   /* [H] */
    long ldx, ldbc, lddt, H, P, G, N;
    float *ssm;       /* state pool: records [H, P, N], each contiguous, ssm_stride floats apart */
    long ssm_stride;  /* >= H * P * N: an engine may lay records in larger pages */
    float *y;         /* y[t, h, p] at y + t * ldy + h * P + p */
    long ldy;
    const int64_t *runs;  /* [nruns, 4]: first token, end token, slot, continues (start from the slot's state) */
    long nruns;
    float *cb;            /* [sum over runs of G * chunks][Q][Q]: C_i . B_j (phase 1) */
    const long *cb_first; /* each run's first block in cb */
} ssd_args;

/* C_i . B_j for i, j < q of one chunk of one group, j <= i (the rest is never read). */
CLONES static void chunk_scores(const ssd_args *a, long t0, long q, long g, float *out) {
    const long N = a->N;
    float bt[Q * LANES];  /* B transposed, LANES states at a time: [n][j] */
    vec acc[Q][Q / LANES];
    memset(acc, 0, sizeof acc);
    for (long n0 = 0; n0 < N; n0 += LANES) {
        const long cn = N - n0 < LANES ? N - n0 : LANES;
        for (long j = 0; j < Q; j++)
            for (long n = 0; n < LANES; n++)
                bt[n * Q + j] = j < q && n < cn ? a->B[(t0 + j) * a->ldbc + g * N + n0 + n] : 0.0f;
        for (long i = 0; i < q; i++) {
            const float *ci = a->C + (t0 + i) * a->ldbc + g * N + n0;
            for (long n = 0; n < cn; n++)
                for (long jv = 0; jv <= i / LANES; jv++) acc[i][jv] += ci[n] * load(bt + n * Q + jv * LANES);
        }
    }
    for (long i = 0; i < q; i++)
        for (long jv = 0; jv <= i / LANES; jv++) put(out + i * Q + jv * LANES, acc[i][jv]);
}

/* One (run, head): its chunks in order, the state carried from one to the next.
 * Work space: xdt [Q][P], scores [Q][Q], hT [N][P] (the state transposed, so that both
 * h_start C_i and the update run along p), C [Q][N] and the weighted B [N][Q] of the chunk.
 * The products take four rows (or four states) at a time: four independent sums, so the
 * additions' latency does not bound them. */
CLONES static void scan_head(const ssd_args *a, long r, long h, float *work) {
    const long P = a->P, N = a->N, g = h / (a->H / a->G);
    const long first = a->runs[4 * r], end = a->runs[4 * r + 1], slot = a->runs[4 * r + 2];
    const int continues = a->runs[4 * r + 3] != 0;
    float *xdt = work, *s = xdt + Q * P, *hT = s + Q * Q, *cq = hT + N * P, *wb = cq + Q * N;
    float *h0 = a->ssm + slot * a->ssm_stride + h * P * N;
    for (long n = 0; n < N; n++)
        for (long p = 0; p < P; p++) hT[n * P + p] = continues ? h0[p * N + n] : 0.0f;
    const float A = a->A[h];
    const float *cb = a->cb + a->cb_first[r] * Q * Q;
    for (long t0 = first, c = 0; t0 < end; t0 += Q, c++) {
        const long q = end - t0 < Q ? end - t0 : Q;
        const float *scores = cb + (g * ((end - first + Q - 1) / Q) + c) * Q * Q;
        double cum[Q];
        float decay[Q], to_end[Q];
        double run = 0.0;
        /* rows past q stay zero: the four-row blocks below then need no edge cases */
        memset(xdt, 0, Q * P * sizeof(float));
        memset(s, 0, Q * Q * sizeof(float));
        memset(cq, 0, Q * N * sizeof(float));
        for (long i = 0; i < q; i++) {
            const float dt = a->dt[(t0 + i) * a->lddt + h];
            run += (double)(dt * A);
            cum[i] = run;
            const float *xi = a->x + (t0 + i) * a->ldx + h * P;
            for (long p = 0; p < P; p++) xdt[i * P + p] = xi[p] * dt;
            memcpy(cq + i * N, a->C + (t0 + i) * a->ldbc + g * N, N * sizeof(float));
        }
        for (long i = 0; i < q; i++) {
            decay[i] = expf((float)cum[i]);                /* chunk start -> i */
            to_end[i] = expf((float)(cum[q - 1] - cum[i])); /* i -> chunk end */
        }
        for (long n = 0; n < N; n++)
            for (long j = 0; j < Q; j++) wb[n * Q + j] = j < q ? to_end[j] * a->B[(t0 + j) * a->ldbc + g * N + n] : 0.0f;
        /* scores: (C_i . B_j) exp(cum_i - cum_j) for j <= i, zero above the diagonal */
        for (long i = 0; i < q; i++) {
            for (long j0 = 0; j0 <= i; j0 += LANES) {
                float diff[LANES];
                for (long k = 0; k < LANES; k++) diff[k] = j0 + k <= i ? (float)(cum[i] - cum[j0 + k]) : -INFINITY;
                const vec e = exp_nonpositive(load(diff));
                const ivec live = load(diff) > -INFINITY;
                put(s + i * Q + j0, pick(live, load(scores + i * Q + j0) * e, splat(0.0f)));
            }
        }
        /* y_i = sum_j scores_ij xdt_j + decay_i (h_start C_i), four rows and sixteen channels at a time */
        for (long p0 = 0; p0 < P; p0 += LANES) {
            const long cp = P - p0 < LANES ? P - p0 : LANES;
            for (long i = 0; i < q; i += 4) {
                vec acc[4] = {{0}}, from_start[4] = {{0}};
                const long last = i + 3 < q ? i + 3 : q - 1;
                for (long j = 0; j <= last; j++) {
                    const vec xj = load_n(xdt + j * P + p0, cp);
                    for (int k = 0; k < 4; k++) acc[k] += s[(i + k) * Q + j] * xj;
                }
                for (long n = 0; n < N; n++) {
                    const vec hn = load_n(hT + n * P + p0, cp);
                    for (int k = 0; k < 4; k++) from_start[k] += cq[(i + k) * N + n] * hn;
                }
                for (long k = 0; k < 4 && i + k < q; k++)
                    put_n(a->y + (t0 + i + k) * a->ldy + h * P + p0, acc[k] + decay[i + k] * from_start[k], cp);
            }
        }
        /* the end state: exp(cum_end) h_start + sum_j exp(cum_end - cum_j) B_j (outer) xdt_j, four states at a time */
        const float whole = decay[q - 1];
        for (long p0 = 0; p0 < P; p0 += LANES) {
            const long cp = P - p0 < LANES ? P - p0 : LANES;
            for (long n = 0; n < N; n += 4) {
                const long rows = N - n < 4 ? N - n : 4;
                vec acc[4] = {{0}};
                for (long k = 0; k < rows; k++) acc[k] = load_n(hT + (n + k) * P + p0, cp) * whole;
                for (long j = 0; j < q; j++) {
                    const vec xj = load_n(xdt + j * P + p0, cp);
                    for (long k = 0; k < 4; k++) acc[k] += (n + k < N ? wb[(n + k) * Q + j] : 0.0f) * xj;
                }
                for (long k = 0; k < rows; k++) put_n(hT + (n + k) * P + p0, acc[k], cp);
            }
        }
    }
    for (long p = 0; p < P; p++)
        for (long n = 0; n < N; n++) h0[p * N + n] = hT[n * P + p];
}

static int scan(const ssd_args *a, long blocks) {
    long *chunk_of = malloc((size_t)(blocks + 1) * 3 * sizeof(long));  /* per cb block: run, group, chunk */
    if (!chunk_of) return -1;
    long k = 0;
    for (long r = 0; r < a->nruns; r++) {
        const long chunks = (a->runs[4 * r + 1] - a->runs[4 * r] + Q - 1) / Q;
        for (long g = 0; g < a->G; g++)
            for (long c = 0; c < chunks; c++, k++) chunk_of[3 * k] = r, chunk_of[3 * k + 1] = g, chunk_of[3 * k + 2] = c;
    }
    const long work = a->nruns * a->H, per_item = Q * a->P + Q * Q + a->N * a->P + 2 * Q * a->N + LANES;
    int failed = 0;
#pragma omp parallel
    {
        float *space = malloc((size_t)per_item * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (long b = 0; b < blocks; b++) {
            const long r = chunk_of[3 * b], g = chunk_of[3 * b + 1], c = chunk_of[3 * b + 2];
            const long t0 = a->runs[4 * r] + c * Q, end = a->runs[4 * r + 1];
            chunk_scores(a, t0, end - t0 < Q ? end - t0 : Q, g, a->cb + b * Q * Q);
        }
#pragma omp for schedule(dynamic, 1)
        for (long w = 0; w < work; w++) {
            if (space) scan_head(a, w / a->H, w % a->H, space);
        }
        if (!space) {
#pragma omp atomic write
            failed = 1;
        }
        free(space);
    }
    free(chunk_of);
    return failed ? -1 : 0;
}

/* ssd(x, ldx, B, C, ldbc, dt, lddt, A, H, P, G, N, ssm, ssm_stride, y, ldy, runs, nruns): addresses as ints
 * (tensor.data_ptr()), ssm_stride the pool's record stride in floats; the impl has checked shapes, dtypes,
 * record layout and slots before it calls. */
static PyObject *py_ssd(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[18];
    if (nargs != 18) {
        PyErr_SetString(PyExc_TypeError, "ssd() takes 18 arguments");
        return NULL;
    }
    for (int i = 0; i < 18; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    ssd_args a = {
        .x = (const float *)(intptr_t)v[0], .ldx = v[1], .B = (const float *)(intptr_t)v[2],
        .C = (const float *)(intptr_t)v[3], .ldbc = v[4], .dt = (const float *)(intptr_t)v[5], .lddt = v[6],
        .A = (const float *)(intptr_t)v[7], .H = v[8], .P = v[9], .G = v[10], .N = v[11],
        .ssm = (float *)(intptr_t)v[12], .ssm_stride = v[13], .y = (float *)(intptr_t)v[14], .ldy = v[15],
        .runs = (const int64_t *)(intptr_t)v[16], .nruns = v[17],
    };
    if (a.H <= 0 || a.P <= 0 || a.G <= 0 || a.N <= 0 || a.H % a.G || a.nruns < 0
        || a.ssm_stride < a.H * a.P * a.N) {
        PyErr_SetString(PyExc_ValueError, "ssd(): sizes out of range, or records closer than a record apart");
        return NULL;
    }
    long blocks = 0;
    long *first = malloc((size_t)(a.nruns + 1) * sizeof(long));
    if (!first) return PyErr_NoMemory();
    for (long r = 0; r < a.nruns; r++) {
        first[r] = blocks;
        blocks += a.G * ((a.runs[4 * r + 1] - a.runs[4 * r] + Q - 1) / Q);
    }
    a.cb_first = first;
    a.cb = malloc((size_t)(blocks + 1) * Q * Q * sizeof(float));
    int status = a.cb ? 0 : -1;
    if (a.cb) {
        Py_BEGIN_ALLOW_THREADS
        status = scan(&a, blocks);
        Py_END_ALLOW_THREADS
    }
    free(a.cb);
    free(first);
    if (status) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* conv: out[t, c] = silu(bias_c + sum_k w[k, c] in[t - (W - 1) + k, c]) for every sequence of a step,
 * the positions before its first token from its slot's state (zeros when it has no context); the
 * slot then holds its last W - 1 inputs. Work items: (sequence, 64 channels); sixteen channels go
 * through the sequence's tokens at a time with their window in registers. (A token's 256 channels at
 * a time, windows in L1, measured 15-20 % slower.) The pool is float32 (conv) or bfloat16 (conv_bf16:
 * vLLM keeps a bfloat16 model's conv states so); the sums are float32 either way. */
#define CONV_BLOCK 64
#define MAX_WIDTH 8

typedef struct {
    const float *x;       /* [T, D], rows ldx apart */
    long ldx, D, W;
    const float *wt;      /* [W, D]: the conv weight transposed */
    const float *bias;    /* [D] or NULL */
    void *pool;           /* records [D, W - 1], each contiguous, stride elements apart */
    int pool_bf16;        /* the pool's elements: bfloat16 (1) or float32 (0) */
    long stride;          /* >= D * (W - 1): an engine may lay records in larger pages */
    float *out;           /* [T, D], rows ldo apart */
    long ldo;
    const int64_t *seqs;  /* [n, 4]: first token, end token, slot, has context */
    long n;
} conv_args;

INLINE vec silu(vec v) { return v * sigmoid(v); }

/* The conv states hold raw inputs, already bfloat16 in a bfloat16 model; a float32 layer may keep them
 * in bfloat16 (conv_state_dtype): widened and narrowed by mixboard_bf16.h, one element at a time for
 * the channels past the last sixteen, sixteen at a time otherwise. */

/* Element e of a record as float (zero for a sequence without context); and the converse store. */
INLINE float state_get(const conv_args *a, const void *record, long e) {
    return a->pool_bf16 ? widen(((const uint16_t *)record)[e]) : ((const float *)record)[e];
}

INLINE void state_put(const conv_args *a, void *record, long e, float v) {
    if (a->pool_bf16)
        ((uint16_t *)record)[e] = narrow(v);
    else
        ((float *)record)[e] = v;
}

/* Sixteen channels' windows (16 * keep contiguous elements of a record, from at) into keep vectors,
 * and back: mixboard_vec.h's shuffles, over a float32 copy where the pool is bfloat16. */
INLINE void window_in(const conv_args *a, const char *at, vec window[], const long keep) {
    if (!a->pool_bf16) {
        load_interleaved((const float *)at, window, keep);
        return;
    }
    float wide[LANES * MAX_WIDTH];
    for (long v = 0; v < keep; v++) put(wide + v * LANES, widen_vec((const uint16_t *)at + v * LANES));
    load_interleaved(wide, window, keep);
}

INLINE void window_out(const conv_args *a, char *at, const vec window[], const long keep) {
    if (!a->pool_bf16) {
        put_interleaved((float *)at, window, keep);
        return;
    }
    float wide[LANES * MAX_WIDTH];
    put_interleaved(wide, window, keep);
    for (long v = 0; v < keep; v++) narrow_vec((uint16_t *)at + v * LANES, load(wide + v * LANES));
}

INLINE void conv_width(const conv_args *a, long i, long c0, const long W) {
    const long keep = W - 1, first = a->seqs[4 * i], end = a->seqs[4 * i + 1];
    const int context = a->seqs[4 * i + 3] != 0;
    const long element = a->pool_bf16 ? 2 : 4;
    char *record = (char *)a->pool + a->seqs[4 * i + 2] * a->stride * element;
    for (long c = c0; c < c0 + CONV_BLOCK && c < a->D; c += LANES) {
        const long cc = a->D - c < LANES ? a->D - c : LANES;
        vec w[MAX_WIDTH], window[MAX_WIDTH];  /* window[k]: the input keep - k tokens back */
        for (long k = 0; k < W; k++) w[k] = load_n(a->wt + k * a->D + c, cc);
        const vec b = a->bias ? load_n(a->bias + c, cc) : splat(0.0f);
        if (context && cc == LANES) {
            window_in(a, record + c * keep * element, window, keep);
        } else {
            for (long k = 0; k < keep; k++) {
                float t[LANES] = {0};
                if (context)
                    for (long j = 0; j < cc; j++) t[j] = state_get(a, record, (c + j) * keep + k);
                window[k] = load(t);
            }
        }
        for (long t = first; t < end; t++) {
            const vec v = load_n(a->x + t * a->ldx + c, cc);
            vec acc = b + w[keep] * v;
            for (long k = 0; k < keep; k++) acc += w[k] * window[k];
            for (long k = 0; k + 1 < keep; k++) window[k] = window[k + 1];
            if (keep) window[keep - 1] = v;
            put_n(a->out + t * a->ldo + c, silu(acc), cc);
        }
        if (cc == LANES) {
            window_out(a, record + c * keep * element, window, keep);
        } else {
            for (long k = 0; k < keep; k++) {
                float t[LANES];
                put(t, window[k]);
                for (long j = 0; j < cc; j++) state_put(a, record, (c + j) * keep + k, t[j]);
            }
        }
    }
}

/* The common widths as constants (no loops per token), any other as it comes. */
CLONES static void conv_block(const conv_args *a, long i, long c0) {
    switch (a->W) {
    case 4: conv_width(a, i, c0, 4); break;
    case 3: conv_width(a, i, c0, 3); break;
    case 2: conv_width(a, i, c0, 2); break;
    default: conv_width(a, i, c0, a->W); break;
    }
}

static PyObject *conv_over(PyObject *const *args, Py_ssize_t nargs, int pool_bf16) {
    long long v[12];
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, pool_bf16 ? "conv_bf16() takes 12 arguments" : "conv() takes 12 arguments");
        return NULL;
    }
    for (int i = 0; i < 12; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    conv_args a = {.x = (const float *)(intptr_t)v[0], .ldx = v[1], .D = v[2], .W = v[3],
                   .wt = (const float *)(intptr_t)v[4], .bias = (const float *)(intptr_t)v[5],
                   .pool = (void *)(intptr_t)v[6], .pool_bf16 = pool_bf16,
                   .stride = v[7], .out = (float *)(intptr_t)v[8], .ldo = v[9],
                   .seqs = (const int64_t *)(intptr_t)v[10], .n = v[11]};
    if (a.D <= 0 || a.W < 1 || a.W > MAX_WIDTH || a.n < 0 || a.stride < a.D * (a.W - 1)) {
        PyErr_Format(PyExc_ValueError, "conv(): channels or width out of range (width 1 to %d), or records closer "
                     "than a record apart", MAX_WIDTH);
        return NULL;
    }
    const long blocks = (a.D + CONV_BLOCK - 1) / CONV_BLOCK, work = a.n * blocks;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(dynamic, 1) if (work > 1)
    for (long w = 0; w < work; w++) conv_block(&a, w / blocks, (w % blocks) * CONV_BLOCK);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_conv(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return conv_over(args, nargs, 0);
}

static PyObject *py_conv_bf16(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return conv_over(args, nargs, 1);
}

/* gated_norm: out = rmsnorm((y + D x) * silu(z)) * weight, the mean of squares over groups of
 * `group` channels (transformers' MambaRMSNormGated after the D skip); float32, one row at a time.
 * D is given per channel (each head's D repeated over its head_dim channels). */
CLONES static void gated_row(const float *y, const float *x, const float *Dc, const float *z,
                             const float *weight, long DI, long group, float eps, float *out) {
    for (long g0 = 0; g0 < DI; g0 += group) {
        vec sq = {0};
        for (long c = g0; c < g0 + group; c += LANES) {
            const long cc = g0 + group - c < LANES ? g0 + group - c : LANES;
            const vec g = (load_n(y + c, cc) + load_n(Dc + c, cc) * load_n(x + c, cc)) * silu(load_n(z + c, cc));
            put_n(out + c, g, cc);
            sq += g * g;
        }
        float t[LANES], total = 0.0f;
        put(t, sq);
        for (int k = 0; k < LANES; k++) total += t[k];
        const float scale = 1.0f / sqrtf(total / (float)group + eps);
        for (long c = g0; c < g0 + group; c += LANES) {
            const long cc = g0 + group - c < LANES ? g0 + group - c : LANES;
            put_n(out + c, load_n(out + c, cc) * scale * load_n(weight + c, cc), cc);
        }
    }
}

/* gated_norm(y, ldy, x, ldx, D, z, ldz, weight, DI, group, eps, out, ldo, T): D per channel [DI] */
static PyObject *py_gated_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[14];
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "gated_norm() takes 14 arguments");
        return NULL;
    }
    for (int i = 0; i < 14; i++) {
        if (i == 10) continue;
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    const float eps = (float)PyFloat_AsDouble(args[10]);
    if (PyErr_Occurred()) return NULL;
    const float *y = (const float *)(intptr_t)v[0], *x = (const float *)(intptr_t)v[2];
    const float *Dc = (const float *)(intptr_t)v[4], *z = (const float *)(intptr_t)v[5];
    const float *weight = (const float *)(intptr_t)v[7];
    float *out = (float *)(intptr_t)v[11];
    const long ldy = v[1], ldx = v[3], ldz = v[6], DI = v[8], group = v[9], ldo = v[12], T = v[13];
    if (DI <= 0 || group <= 0 || DI % group || T < 0) {
        PyErr_SetString(PyExc_ValueError, "gated_norm(): sizes out of range");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (T * DI > 65536)
    for (long t = 0; t < T; t++) gated_row(y + t * ldy, x + t * ldx, Dc, z + t * ldz, weight, DI, group, eps,
                                           out + t * ldo);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"ssd", (PyCFunction)(void (*)(void))py_ssd, METH_FASTCALL,
     "ssd(x, ldx, B, C, ldbc, dt, lddt, A, H, P, G, N, ssm, ssm_stride, y, ldy, runs, nruns): the SSD scan of a "
     "step's prefills, y and the final states written in place (addresses as ints, record stride in floats)."},
    {"conv", (PyCFunction)(void (*)(void))py_conv, METH_FASTCALL,
     "conv(x, ldx, D, W, wt, bias, pool, stride, out, ldo, seqs, n): the ragged causal conv + silu of a step, "
     "conv states read and written in the pool (addresses as ints, record stride in floats)."},
    {"conv_bf16", (PyCFunction)(void (*)(void))py_conv_bf16, METH_FASTCALL,
     "conv_bf16(x, ldx, D, W, wt, bias, pool, stride, out, ldo, seqs, n): conv over a bfloat16 pool (x, the "
     "weights and out float32; record stride in bfloat16 elements)."},
    {"gated_norm", (PyCFunction)(void (*)(void))py_gated_norm, METH_FASTCALL,
     "gated_norm(y, ldy, x, ldx, D, z, ldz, weight, DI, group, eps, out, ldo, T): rmsnorm((y + D x) * "
     "silu(z)) * weight by groups (addresses as ints)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_prefill", NULL, -1, methods};

PyMODINIT_FUNC PyInit__prefill(void) { return PyModule_Create(&module); }
