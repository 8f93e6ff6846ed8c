/* Decode attention that reads the paged K/V cache in place (backend ``sdpa_cpu``).
 *
 * For each query row and each query head: softmax(scale * q . k) v over
 * the keys its row sees, which sit in cache blocks [block_size, kv_heads,
 * head_size] named by its sequence's row of the block table. Each block is
 * contiguous; blocks are k_block (v_block) floats apart, which may be more
 * than a block: an engine's hybrid cache lays a layer's K and V blocks in
 * larger pages, and the rest of a page is not ours to read or write. A
 * decode is one row seeing its whole sequence; a prefill's token at
 * position t is one row seeing keys 0..t (its own just written), so causal
 * prefills, with or without context, take the same path. The portable ``sdpa`` first gathers every block into a
 * [n, keys, kv_heads, D] copy and runs scaled_dot_product_attention with a
 * length mask; here each key and value is read once, from where it lies.
 *
 * One work item is one sequence and a range of its kv heads (all of them
 * unless the threads need more items than there are sequences); the G =
 * heads / kv_heads query heads of a kv head share every key they read.
 * Keys are taken 64 at a time with an online softmax (running maximum m,
 * sum l, accumulator acc rescaled when m grows), the arithmetic of flash
 * attention, in float32.
 *
 * A prefill's rows come in runs (one sequence, consecutive positions). A
 * run of at least RUN_MIN rows takes a tiled path instead (attend_run): the
 * run's keys of one kv head are laid once as panels of 16 keys [D][16], and
 * QT query vectors (rows x the group's heads) are scored against 16 keys at
 * a time with one FMA per (query, d) and no sum over lanes; their values
 * are accumulated the same way, 16 queries per value load. Causality is a
 * mask on the tile's last keys. No window, no soft-cap (those runs take the
 * row path).
 *
 * Threads: OpenMP over work items, on the libgomp torch loaded (the wrapper
 * imports torch first). Instruction sets: GCC compiles the work item for
 * AVX-512, AVX2 and plain x86-64 and picks one at load time (target_clones).
 *
 * The element type of the cache, q and out (kv_t): float here; bfloat16
 * where this file is built as _paged_decode_bf16 (that file defines KV_BF16
 * and includes this one). Keys, values and q are widened to float as they
 * are read, so the arithmetic is float32 either way, and each output is
 * rounded to bfloat16 once, as it is stored (to nearest even, as torch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "mixboard_vec.h"

#define MAX_GROUP 64   /* query heads per kv head (the backend's check says so) */
#define MAX_HEAD 256   /* head size */
#define KEYS 64        /* keys scored at a time */
#define KEY_SUMS 4     /* most accumulators per query head (see attend) */
/* Below this many (key, head, dim) products a step runs on the calling thread: waking a team costs
 * more than it saves there, and far more when another process holds the other cores (an engine's
 * scheduler beside its worker), where a team waits for a core; benchmarks/README.md has the numbers. */
#define TEAM_MIN_WORK (1L << 18)

#ifdef KV_BF16
#include "mixboard_bf16.h"
typedef uint16_t kv_t;
#define MODULE_NAME "_paged_decode_bf16"
#define MODULE_INIT PyInit__paged_decode_bf16
INLINE vec load_kv(const kv_t *p) { return widen_vec(p); }
INLINE float kv_float(kv_t x) { return widen(x); }
INLINE kv_t kv_store(float x) { return narrow(x); }
#define Q_COPIED 1  /* the row path scores a float copy of q */
#else
typedef float kv_t;
#define MODULE_NAME "_paged_decode"
#define MODULE_INIT PyInit__paged_decode
INLINE vec load_kv(const kv_t *p) { return load(p); }
INLINE float kv_float(kv_t x) { return x; }
INLINE kv_t kv_store(float x) { return x; }
#define Q_COPIED 0
#endif

/* Vector b of a row of D elements, in the order the row path keeps q and its accumulators in: a
 * float32 row as it lies; a bfloat16 row whose D is a multiple of 32 in pairs (a 32-bit lane holds
 * two bfloat16, the even element in its low half): vector 2g holds group g's even elements, 2g + 1
 * its odd ones, each a shift or an AND of the same load, with no shuffle (load_kv's widening is one,
 * on the port the lane sums use). */
#ifdef KV_BF16
#define PAIRED(D) ((D) % (2 * LANES) == 0)
INLINE vec kv_lanes(const kv_t *row, long b) {
    uvec u;
    memcpy(&u, row + (b >> 1) * 2 * LANES, sizeof u);
    return (vec)((b & 1) ? u & 0xffff0000u : u << 16);
}
#else
#define PAIRED(D) 0
INLINE vec kv_lanes(const kv_t *row, long b) { return load(row + b * LANES); }
#endif
/* where element d of a row sits in that order */
INLINE long paired_at(long d) { return d / (2 * LANES) * 2 * LANES + d % 2 * LANES + d % (2 * LANES) / 2; }

typedef struct {
    const kv_t *q;          /* [n, heads, D], rows q_stride apart */
    long q_stride, heads, kv_heads, D;
    const kv_t *k, *v;      /* blocks of [block_size, kv_heads, D], each contiguous */
    long k_block, v_block;  /* elements from one block to the next (>= block_size * kv_heads * D) */
    long block_size;
    const int32_t *table;   /* [sequences, table_stride] */
    long table_stride;
    const int32_t *rows;    /* [n]: the table row of each query row; NULL: row i is table row i */
    const int32_t *seq_lens; /* [n]: the keys query row i sees (a query at position t: t + 1) */
    kv_t *out;              /* [n, heads, D], rows out_stride apart */
    long out_stride;
    float scale, cap;       /* cap 0: no soft-cap */
    long window;            /* 0: every key */
} problem;

/* e^x for x <= 0 (scores minus their maximum), sixteen at a time:
 * 2^(x log2 e) = 2^n 2^f, n an integer, |f| <= 1/2, 2^f by its Taylor
 * series to the 7th power (relative error < 2e-7, a few float32 ulps at
 * most; the conformance kit holds the outputs to 1e-5). */
static inline vec exp_nonpositive(vec x) {
    x = pick(x < -87.0f, splat(-87.0f), x);
    const vec y = x * 1.44269504088896341f;
    const ivec n = __builtin_convertvector(y - 0.5f, ivec);  /* y <= 0: truncation rounds to nearest */
    const vec f = (y - __builtin_convertvector(n, vec)) * 0.693147180559945309f;
    const vec e = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720
                  + f * (1.0f / 5040)))))));
    return e * (vec)((n + 127) << 23);
}

/* One chunk of an online softmax: s[0 .. padded) are scores (-inf where masked), padded a
 * multiple of LANES. s becomes the weights e^(s - m'), for m' the new running maximum; m and l
 * move to it; returns the factor the accumulator is rescaled by (0 on the first keys, m = -inf). */
static inline float softmax_chunk(float *s, long padded, float *m, float *l) {
    vec top = load(s);
    for (long t = LANES; t < padded; t += LANES) top = pick(load(s + t) > top, load(s + t), top);
    float best = *m;
    for (long k = 0; k < LANES; k++) best = top[k] > best ? top[k] : best;
    const float rescale = expf(*m - best);
    vec sum = {0};
    for (long t = 0; t < padded; t += LANES) {
        const vec w = pick(load(s + t) == -INFINITY, splat(0.0f), exp_nonpositive(load(s + t) - best));
        __builtin_memcpy(s + t, &w, sizeof w);
        sum += w;
    }
    *l = *l * rescale + lane_sum(sum);
    *m = best;
    return rescale;
}

/* q . k over D elements: sixteen lanes of partial sums, then the lanes. */
static inline float dot(const float *q, const kv_t *k, const long D) {
    vec part = {0};
    long d = 0;
    for (; d + LANES <= D; d += LANES) part += load(q + d) * load_kv(k + d);
    float sum = lane_sum(part);
    for (; d < D; d++) sum += q[d] * kv_float(k[d]);
    return sum;
}

/* q . k with q in kv_lanes' order, D a multiple of 32 */
static inline float dot_paired(const float *q, const kv_t *k, const long D) {
    vec part = {0};
    for (long b = 0; b < D / LANES; b++) part += load(q + b * LANES) * kv_lanes(k, b);
    return lane_sum(part);
}

/* One work item: sequence i, kv heads [h0, h0 + H) and their H * G query
 * heads, for head size D and group G (constants where attend_one
 * instantiates them, so that an accumulator row stays in registers). Keys
 * are walked a row at a time (a row: every kv head of one position,
 * contiguous), so an item reads its part of each block front to back. */
static inline __attribute__((always_inline)) void attend(const problem *p, long i, long h0, long H, const long D,
                                                         const long G) {
    const long len = p->seq_lens[i], bs = p->block_size, row = p->kv_heads * D, QH = H * G, DV = D / LANES;
    const long first = p->window > 0 && len > p->window ? len - p->window : 0;
    const int32_t *table = p->table + (p->rows ? p->rows[i] : i) * p->table_stride;
    const kv_t *qrow = p->q + i * p->q_stride + h0 * G * D;
    float m[MAX_GROUP], l[MAX_GROUP], acc[MAX_GROUP][MAX_HEAD], s[MAX_GROUP][KEYS];
    const kv_t *values[KEYS];
    const int paired = PAIRED(D), copied = paired || Q_COPIED;  /* paired: q and acc in kv_lanes' order */
    float qp[copied ? QH * D : 1];
    for (long c = 0; c < QH; c++) {
        m[c] = -INFINITY, l[c] = 0.0f;
        for (long d = 0; d < D; d++) acc[c][d] = 0.0f;
        if (copied)
            for (long d = 0; d < D; d++) qp[c * D + (paired ? paired_at(d) : d)] = kv_float(qrow[c * D + d]);
    }
    const float *q = copied ? qp : (const float *)qrow;  /* a float build's q as it lies */
    for (long j0 = first; j0 < len; j0 += KEYS) {
        const long count = len - j0 < KEYS ? len - j0 : KEYS;
        for (long t = 0; t < count;) {  /* scores, a block run at a time: one table lookup per block */
            const long j = j0 + t, off = j % bs, run = bs - off < count - t ? bs - off : count - t;
            const long block = table[j / bs], at = off * row + h0 * D;
            const kv_t *key = p->k + block * p->k_block + at, *value = p->v + block * p->v_block + at;
            for (long u = 0; u < run; u++, t++, key += row, value += row) {
                values[t] = value;
                for (long d = 0; d < H * D; d += LANES) __builtin_prefetch(value + d);  /* read next */
                for (long c = 0; c < QH; c++)
                    s[c][t] = (paired ? dot_paired(q + c * D, key + c / G * D, D) : dot(q + c * D, key + c / G * D, D))
                              * p->scale;
            }
        }
        if (p->cap > 0.0f)
            for (long c = 0; c < QH; c++)
                for (long t = 0; t < count; t++) s[c][t] = p->cap * tanhf(s[c][t] / p->cap);
        const long padded = (count + LANES - 1) / LANES * LANES;
        for (long c = 0; c < QH; c++) {  /* online softmax, then the values */
            for (long t = count; t < padded; t++) s[c][t] = -INFINITY;
            const float rescale = softmax_chunk(s[c], padded, &m[c], &l[c]);
            /* U keys' values at a time into U accumulators, so that about eight independent sums are
             * in flight where a head of few vectors would otherwise wait on each add */
            const long U = DV >= 8 ? 1 : DV >= 4 ? 2 : KEY_SUMS, at = c / G * D;
            vec a[KEY_SUMS][MAX_HEAD / LANES];
            for (long u = 0; u < U; u++)
                for (long b = 0; b < DV; b++) a[u][b] = u ? splat(0.0f) : load(acc[c] + b * LANES) * rescale;
            for (long d = DV * LANES; d < D; d++) acc[c][d] *= rescale;
            for (long t = 0; t < count; t += U)
                for (long u = 0; u < U && t + u < count; u++) {
                    const kv_t *value = values[t + u] + at;
                    const vec w = splat(s[c][t + u]);
                    for (long b = 0; b < DV; b++) a[u][b] += w * (paired ? kv_lanes(value, b) : load_kv(value + b * LANES));
                    for (long d = DV * LANES; d < D; d++) acc[c][d] += s[c][t + u] * kv_float(value[d]);
                }
            for (long b = 0; b < DV; b++) {
                for (long u = 1; u < U; u++) a[0][b] += a[u][b];
                put(acc[c] + b * LANES, a[0][b]);
            }
        }
    }
    for (long c = 0; c < QH; c++) {
        kv_t *o = p->out + i * p->out_stride + (h0 * G + c) * D;
        const float inv = l[c] > 0.0f ? 1.0f / l[c] : 0.0f;  /* no key (len 0): zeros, never NaN */
        for (long d = 0; d < D; d++) o[d] = kv_store(acc[c][paired ? paired_at(d) : d] * inv);
    }
}

#define QT 16       /* query vectors a tile scores together: 16 accumulators in registers */
#define RUN_MIN 8   /* rows of one run below which the row path is as fast */
#define TILE_KEYS 128  /* keys a tile scores before its softmax and values */

/* A run's keys of kv head h as panels: key j's d-th float at kp[(j / 16) * D * 16 + d * 16 + j % 16],
 * zeros past the last key, so that a tile reads 16 keys' d-th floats as one vector. */
static inline __attribute__((always_inline)) void lay_keys(const problem *p, const int32_t *table, long len, long h,
                                                           const long D, float *kp) {
    const long bs = p->block_size, row = p->kv_heads * D, padded = (len + LANES - 1) / LANES * LANES;
    for (long j = 0; j < padded; j++) {
        float *dst = kp + j / LANES * D * LANES + j % LANES;
        if (j < len) {
            const kv_t *key = p->k + table[j / bs] * p->k_block + (j % bs) * row + h * D;
            for (long d = 0; d < D; d++) dst[d * LANES] = kv_float(key[d]);
        } else {
            for (long d = 0; d < D; d++) dst[d * LANES] = 0.0f;
        }
    }
}

/* Rows i0 .. i0 + n - 1 of one sequence at consecutive positions (row r sees seq_lens[i0] + r keys), kv
 * head h, its G query heads: tiles of QT / G rows x G heads. kp: room for the panels (see attend_all). */
static inline __attribute__((always_inline)) void attend_run(const problem *p, long i0, long n, long h, const long D,
                                                             const long G, float *kp) {
    const long R = QT / G, bs = p->block_size, row = p->kv_heads * D, DV = D / LANES;
    const int32_t *table = p->table + p->rows[i0] * p->table_stride;
    lay_keys(p, table, p->seq_lens[i0 + n - 1], h, D, kp);
    float Q[QT][MAX_HEAD] __attribute__((aligned(64))), acc[QT][MAX_HEAD] __attribute__((aligned(64)));
    float s[QT][TILE_KEYS] __attribute__((aligned(64))), m[QT], l[QT], rescale[QT];
    long lens[QT];
    const kv_t *values[TILE_KEYS];
    for (long r0 = 0; r0 < n; r0 += R) {
        const long here = n - r0 < R ? n - r0 : R;
        for (long c = 0; c < QT; c++) {  /* query c: row r0 + c / G (the last one again past the run), head c % G */
            const long i = i0 + r0 + (c / G < here ? c / G : here - 1);
            const kv_t *q = p->q + i * p->q_stride + (h * G + c % G) * D;
            for (long d = 0; d < D; d++) Q[c][d] = kv_float(q[d]) * p->scale, acc[c][d] = 0.0f;
            lens[c] = p->seq_lens[i], m[c] = -INFINITY, l[c] = 0.0f;
        }
        for (long r = r0 + R; r < r0 + 2 * R && r < n; r++)  /* the next tile's queries, read while this one works */
            for (long d = 0; d < G * D; d += LANES) __builtin_prefetch(p->q + (i0 + r) * p->q_stride + h * G * D + d);
        const long lo = lens[0], hi = lens[QT - 1];  /* the tile's first and last row see lo and hi keys */
        for (long j0 = 0; j0 < hi; j0 += TILE_KEYS) {
            const long count = hi - j0 < TILE_KEYS ? hi - j0 : TILE_KEYS, padded = (count + LANES - 1) / LANES * LANES;
            for (long t = 0; t < padded; t += LANES) {  /* scores of 16 keys for every query */
                const float *panel = kp + (j0 + t) / LANES * D * LANES;
                vec a[QT];
                for (long c = 0; c < QT; c++) a[c] = splat(0.0f);
                for (long d = 0; d < D; d++) {
                    const vec key = load(panel + d * LANES);
                    for (long c = 0; c < QT; c++) a[c] += Q[c][d] * key;
                }
                for (long c = 0; c < QT; c++) __builtin_memcpy(s[c] + t, &a[c], sizeof a[c]);
            }
            if (j0 + padded > lo) {  /* keys past a row's own position (and past the last key): masked */
                for (long c = 0; c < QT; c++)
                    for (long t = lens[c] - j0 > 0 ? lens[c] - j0 : 0; t < padded; t++) s[c][t] = -INFINITY;
            }
            for (long t = 0; t < count; t++) {
                const long j = j0 + t;
                values[t] = p->v + table[j / bs] * p->v_block + (j % bs) * row + h * D;
            }
            for (long c = 0; c < QT; c++)  /* every row sees key 0, so m is finite after the first chunk */
                rescale[c] = softmax_chunk(s[c], padded, &m[c], &l[c]);
            for (long b = 0; b < DV; b++) {  /* values: 16 queries' accumulators per value load */
                vec a[QT];
                for (long c = 0; c < QT; c++) a[c] = load(acc[c] + b * LANES) * rescale[c];
                for (long t = 0; t < count; t++) {
                    const vec value = load_kv(values[t] + b * LANES);
                    for (long c = 0; c < QT; c++) a[c] += s[c][t] * value;
                }
                for (long c = 0; c < QT; c++) __builtin_memcpy(acc[c] + b * LANES, &a[c], sizeof a[c]);
            }
        }
        for (long c = 0; c < here * G; c++) {
            kv_t *o = p->out + (i0 + r0 + c / G) * p->out_stride + (h * G + c % G) * D;
            const float inv = 1.0f / l[c];
            for (long d = 0; d < D; d++) o[d] = kv_store(acc[c][d] * inv);
        }
    }
}

#define RUN_GROUPS(D) \
    switch (G) { \
    case 1: attend_run(p, i0, n, h, D, 1, kp); break; \
    case 2: attend_run(p, i0, n, h, D, 2, kp); break; \
    case 4: attend_run(p, i0, n, h, D, 4, kp); break; \
    case 8: attend_run(p, i0, n, h, D, 8, kp); break; \
    case 16: attend_run(p, i0, n, h, D, 16, kp); break; \
    }

/* The tiled path serves head sizes of whole vectors, groups that divide QT, no window and no soft-cap. */
static int tiles_serve(const problem *p) {
    const long G = p->heads / p->kv_heads;
    return p->rows && p->window == 0 && p->cap == 0.0f && (p->D == 32 || p->D == 64 || p->D == 128) && QT % G == 0;
}

CLONES static void attend_run_one(const problem *p, long i0, long n, long h, float *kp) {
    const long G = p->heads / p->kv_heads;
    switch (p->D) {
    case 32: RUN_GROUPS(32) break;
    case 64: RUN_GROUPS(64) break;
    case 128: RUN_GROUPS(128) break;
    }
}

#define GROUPS(D) \
    switch (G) { \
    case 1: attend(p, i, h0, H, D, 1); break; \
    case 2: attend(p, i, h0, H, D, 2); break; \
    case 4: attend(p, i, h0, H, D, 4); break; \
    case 8: attend(p, i, h0, H, D, 8); break; \
    default: attend(p, i, h0, H, D, G); break; \
    }

CLONES static void attend_one(const problem *p, long i, long h0, long H) {
    const long G = p->heads / p->kv_heads;
    switch (p->D) {  /* the common head sizes and groups unrolled, any other as it comes */
    case 32: GROUPS(32) break;
    case 64: GROUPS(64) break;
    case 128: GROUPS(128) break;
    default: attend(p, i, h0, H, p->D, G); break;
    }
}

/* Row work items: each row's kv heads in `split` equal ranges. Whole rows
 * read front to back are the fastest (one head's slice of each row, rows 1 KB
 * apart, was read at ~15 GB/s where whole rows reach ~28), so a sequence is
 * split only as far as the threads need items to share. Run work items (the
 * tiled path): one kv head of a run's rows, a run cut into equal pieces only
 * where there would be fewer items than twice the threads. */
typedef struct { long i, n, h0, H; } item;  /* n > 0: a run's rows i .. i + n - 1, kv head h0; else row i */

/* The end of the run that row i starts: rows of one sequence at consecutive positions (i + 1 unless tiled). */
static long run_end(const problem *p, long i, long n, long tiled) {
    long j = i + 1;
    while (tiled && j < n && p->rows[j] == p->rows[j - 1] && p->seq_lens[j] == p->seq_lens[j - 1] + 1) j++;
    return j;
}

static int attend_all(const problem *p, long n) {
    const long G = p->heads / p->kv_heads, threads = omp_get_max_threads(), tiled = tiles_serve(p);
    long runs = 0, run_rows = 0, longest = 0;
    for (long i = 0, j; tiled && i < n; i = j) {  /* count the runs that take the tiled path */
        j = run_end(p, i, n, tiled);
        if (j - i >= RUN_MIN) {
            runs++, run_rows += j - i;
            if (p->seq_lens[j - 1] > longest) longest = p->seq_lens[j - 1];
        }
    }
    const long singles = n - run_rows;
    long products = 0;  /* keys x query heads x D over the rows: the step's size */
    for (long i = 0; i < n; i++) products += (long)p->seq_lens[i] * p->heads * p->D;
    const int team = products >= TEAM_MIN_WORK;
    long split = 1;
    while (split < p->kv_heads && ((p->kv_heads / split) * G > MAX_GROUP || singles * split < 4 * threads))
        split++;
    while (p->kv_heads % split) split++;
    long pieces = 1;
    while (runs && runs * p->kv_heads * pieces < 2 * threads && pieces < RUN_MIN) pieces++;
    const long H = p->kv_heads / split;
    item *items = malloc((runs * p->kv_heads * pieces + singles * split) * sizeof *items);
    if (!items) return -1;
    long work = 0;
    for (long i = 0, j; i < n; i = j) {
        j = run_end(p, i, n, tiled);
        if (j - i >= RUN_MIN) {
            for (long h = 0; h < p->kv_heads; h++)
                for (long k = 0; k < pieces; k++) {
                    const long a = i + (j - i) * k / pieces, b = i + (j - i) * (k + 1) / pieces;
                    if (b > a) items[work++] = (item){a, b - a, h, 1};
                }
        } else {
            for (long r = i; r < j; r++)
                for (long k = 0; k < split; k++) items[work++] = (item){r, 0, k * H, H};
        }
    }
    /* panels for the longest run's keys, per thread */
    const size_t panel_floats = (size_t)(longest + LANES - 1) / LANES * LANES * p->D;
    float *panels = runs ? aligned_alloc(64, (panel_floats * threads * sizeof(float) + 63) / 64 * 64) : NULL;
    if (runs && !panels) {
        free(items);
        return -1;
    }
#pragma omp parallel for schedule(dynamic, 1) if (team && work > 1)
    for (long w = 0; w < work; w++) {
        const item it = items[w];
        if (it.n) attend_run_one(p, it.i, it.n, it.h0, panels + panel_floats * omp_get_thread_num());
        else attend_one(p, it.i, it.h0, it.H);
    }
    free(panels);
    free(items);
    return 0;
}

/* decode(q, q_stride, n, heads, kv_heads, D, k, k_block, v, v_block, block_size, table, table_stride, seq_lens,
 *        out, out_stride, scale, window, cap, rows): addresses as ints (tensor.data_ptr(); rows 0 for none),
 *        q and out in the cache's element type, k_block and v_block the pools' stride(0); the impl has checked
 *        shapes, strides and block ids (mixboard.ops.paged.check_paged_inputs) before it calls. */
static PyObject *py_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 20) {
        PyErr_SetString(PyExc_TypeError, "decode() takes 20 arguments");
        return NULL;
    }
    long long v[18];
    int ints[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 19};
    for (int i = 0; i < 18; i++) {
        v[i] = PyLong_AsLongLong(args[ints[i]]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    double scale = PyFloat_AsDouble(args[16]), cap = PyFloat_AsDouble(args[18]);
    if (PyErr_Occurred()) return NULL;
    problem p = {.q = (const kv_t *)(intptr_t)v[0], .q_stride = v[1], .heads = v[3], .kv_heads = v[4], .D = v[5],
                 .k = (const kv_t *)(intptr_t)v[6], .v = (const kv_t *)(intptr_t)v[8], .k_block = v[7],
                 .v_block = v[9], .block_size = v[10], .table = (const int32_t *)(intptr_t)v[11],
                 .table_stride = v[12], .rows = (const int32_t *)(intptr_t)v[17],
                 .seq_lens = (const int32_t *)(intptr_t)v[13], .out = (kv_t *)(intptr_t)v[14], .out_stride = v[15],
                 .scale = (float)scale, .cap = (float)cap, .window = v[16]};
    if (p.kv_heads <= 0 || p.heads % p.kv_heads || p.heads / p.kv_heads > MAX_GROUP || p.D <= 0 || p.D > MAX_HEAD
        || p.block_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "decode(): heads, kv_heads, head size or block size out of range");
        return NULL;
    }
    if (p.k_block < p.block_size * p.kv_heads * p.D || p.v_block < p.block_size * p.kv_heads * p.D) {
        PyErr_SetString(PyExc_ValueError, "decode(): blocks closer than a block apart (k_block, v_block)");
        return NULL;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = attend_all(&p, v[2]);
    Py_END_ALLOW_THREADS
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* write(k_cache, k_block, v_cache, v_block, block_size, slots, n, row, k, ldk, v, ldv): token i's k and v rows
 * (row elements of the cache's type: every kv head, contiguous) into cache slot slots[i] (int64; block *
 * block_size + offset), blocks k_block (v_block) elements apart. What write_kv does, without its dispatch (~10 us a layer of a decode step).
 * The impl has checked the slots' blocks against the pool before it calls. */
static PyObject *py_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long long v[12];
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "write() takes 12 arguments");
        return NULL;
    }
    for (int i = 0; i < 12; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    kv_t *kc = (kv_t *)(intptr_t)v[0], *vc = (kv_t *)(intptr_t)v[2];
    const int64_t *slots = (const int64_t *)(intptr_t)v[5];
    const kv_t *k = (const kv_t *)(intptr_t)v[8], *vv = (const kv_t *)(intptr_t)v[10];
    const long k_block = v[1], v_block = v[3], bs = v[4], n = v[6], row = v[7], ldk = v[9], ldv = v[11];
    if (bs <= 0 || k_block < bs * row || v_block < bs * row) {
        PyErr_SetString(PyExc_ValueError, "write(): block size out of range, or blocks closer than a block apart");
        return NULL;
    }
    for (long i = 0; i < n; i++) {
        const long block = slots[i] / bs, at = slots[i] % bs * row;
        memcpy(kc + block * k_block + at, k + i * ldk, row * sizeof(kv_t));
        memcpy(vc + block * v_block + at, vv + i * ldv, row * sizeof(kv_t));
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))py_decode, METH_FASTCALL,
     "decode(q, q_stride, n, heads, kv_heads, D, k, k_block, v, v_block, block_size, table, table_stride, seq_lens, "
     "out, out_stride, scale, window, cap, rows): attention of query rows over the paged cache, q and out in the "
     "cache's element type (addresses as ints, k_block and v_block the pools' block strides in elements)."},
    {"write", (PyCFunction)(void (*)(void))py_write, METH_FASTCALL,
     "write(k_cache, k_block, v_cache, v_block, block_size, slots, n, row, k, ldk, v, ldv): the step's k and v rows "
     "into their cache slots (addresses as ints, block strides in elements)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, MODULE_NAME, NULL, -1, methods};

PyMODINIT_FUNC MODULE_INIT(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "MAX_GROUP", MAX_GROUP) < 0
              || PyModule_AddIntConstant(m, "MAX_HEAD", MAX_HEAD) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
