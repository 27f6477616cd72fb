/*
 * decode_common.cuh - what the split-KV decoding forward (decode_body.cuh
 * and fwd_sm90_split_o_body.cuh instances and their combines), the KV append
 * (kv_append.cu), merge_states (merge.cu) and the host planning
 * (decode_plan.cu) share: the kernel parameter struct, 16-bit / fp32
 * element conversions, the rotary rotation of one element, a packed query
 * row's 16-byte chunk, the exact merge rule of partial (out, lse) rows
 * (total and weights, in base 2: the warps of a decode block use it
 * directly; the combines and merge.cu walk the parts online with the same
 * rule), and the host-side entry points of those files.
 * CUDA C only; included by .cu files.
 */
#ifndef SDPA_DECODE_COMMON_CUH
#define SDPA_DECODE_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "problem.h"
#include "registry.h"
#include "cuda/decode/kv_append.h"
#include "cuda/fastdiv.cuh"
#include "cuda/ptx/ptx_mma.cuh"

/* Keys per warp tile: one k16 step of P V. Every tile starts at a multiple
 * of 16, so with a page size that is a multiple of 16 a tile never crosses a
 * page: one block_table lookup per tile, rows at the cache's row stride. */
#define SDPA_DECODE_TILE 16
/* Automatic split counts stop here; a forced num_splits is capped at
 * SDPA_DECODE_MAX_FORCED (each split is a grid slice and a workspace slot;
 * more would only add empty splits, never change the result). */
#define SDPA_DECODE_MAX_SPLITS 128
#define SDPA_DECODE_MAX_FORCED 256

/* Passed by value (__grid_constant__) to every decode kernel. */
typedef struct sdpa_decode_params {
  sdpa_problem p;
  /* the divisors (d) and their multipliers: the block index is divided by
   * splits, m_blocks and h_k, packed query rows by group */
  sdpa_fastdiv group;    /* h / h_k: query heads packed per kv head */
  sdpa_fastdiv m_blocks; /* ceil(rows / BLOCK_M) */
  sdpa_fastdiv splits;   /* key splits (1: the kernel writes out and lse itself) */
  sdpa_fastdiv h_k;
  int rows;           /* group * s_q: packed query rows of one (batch, kv head) */
  float score_mul;    /* scale * log2(e); with softcap 2 * log2(e) * scale / softcap */
  float softcap_post; /* softcap * log2(e) */
  int has_softcap;
  int q_vec;          /* q rows unrotated and 16-byte aligned: whole chunks load as vectors */
  float *part_out;    /* splits > 1: [splits, b, s_q, h, the shape's hd] fp32, normalized */
  float *part_lse;    /* splits > 1: [splits, b, s_q, h] base-2 lse, -inf empty */
} sdpa_decode_params;

/* ---- elements ----------------------------------------------------------------- */

__device__ __forceinline__ float sdpa_h2f(uint16_t x, int is_bf16) {
  if (is_bf16) return __uint_as_float((uint32_t)x << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x));
  return f;
}

__device__ __forceinline__ float sdpa_load_f(const void *base, sdpa_dtype t, int64_t idx) {
  if (t == SDPA_DTYPE_F32) return ((const float *)base)[idx];
  return sdpa_h2f(((const uint16_t *)base)[idx], t == SDPA_DTYPE_BF16);
}

__device__ __forceinline__ void sdpa_store_f(void *base, sdpa_dtype t, int64_t idx, float x) {
  if (t == SDPA_DTYPE_F32)
    ((float *)base)[idx] = x;
  else
    store_cvt_16((uint16_t *)base + idx, x, t == SDPA_DTYPE_BF16);
}

/* Rotary pairs (sdpa.h: (2k, 2k+1) interleaved, (k, k + rd/2) half-split):
 * element e < rotary_dim pairs with *partner, uses column *k of the tables
 * and is the pair's first (x c - y s) or second (y s + x c). */
__device__ __forceinline__ void sdpa_rotary_pair(const sdpa_problem *p, int e, int *k,
                                                 int *partner, int *first) {
  if (p->rotary_interleaved) {
    *k = e >> 1;
    *partner = e ^ 1;
    *first = !(e & 1);
  } else {
    const int half = (int)(p->rotary_dim / 2);
    *first = e < half;
    *k = *first ? e : e - half;
    *partner = *first ? e + half : e - half;
  }
}

/* Products and sums rounded separately (no FMA contraction), in the CPU
 * backend's order, so that rotated values are bit for bit the CPU's. */
__device__ __forceinline__ float sdpa_rotary_mix(const sdpa_problem *p, float x, float y, int k,
                                                 int first, int64_t pos) {
  const float c = p->rot_cos[pos * p->rot_stride + k];
  const float s = p->rot_sin[pos * p->rot_stride + k];
  return first ? __fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s))
               : __fadd_rn(__fmul_rn(y, s), __fmul_rn(x, c));
}

/* Element e of a 16-bit row after rotary at position pos; e >= rotary_dim is
 * returned as is. */
__device__ __forceinline__ float sdpa_rotary_elem(const sdpa_problem *p, const uint16_t *row,
                                                  int e, int64_t pos, int is_bf16) {
  const float x = sdpa_h2f(row[e], is_bf16);
  if (e >= p->rotary_dim) return x;
  int k, partner, first;
  sdpa_rotary_pair(p, e, &k, &partner, &first);
  return sdpa_rotary_mix(p, x, sdpa_h2f(row[partner], is_bf16), k, first, pos);
}

/* The same for a row of any storage dtype (f32 too). */
__device__ __forceinline__ float sdpa_rotary_elem_any(const sdpa_problem *p, const void *row,
                                                      int e, int64_t pos) {
  const float x = sdpa_load_f(row, p->dtype, e);
  if (e >= p->rotary_dim) return x;
  int k, partner, first;
  sdpa_rotary_pair(p, e, &k, &partner, &first);
  return sdpa_rotary_mix(p, x, sdpa_load_f(row, p->dtype, partner), k, first, pos);
}

/* 16-byte chunk c (elements 8c .. 8c + 7) of packed query row `row`, rotated
 * at sdpa_rotary_q_pos for the cache layout; zeros past the rows or the
 * head dim. Whole chunks of unrotated, 16-byte aligned rows (prm->q_vec) are
 * one vector load, so a thread's chunks are all in flight at once; the rest
 * go element by element. is_bf16: a literal (the instance's dtype);
 * may_rotate: a literal, 0 for rows that refuse rotary (the rotation's code
 * left out keeps the chunk loads together). The decode rows and the split-O
 * rows load their Q tiles through it. */
__device__ __forceinline__ uint4 sdpa_decode_q_chunk(const sdpa_decode_params *prm, int b, int hk,
                                                     int row, int c, const int is_bf16,
                                                     const int may_rotate) {
  const sdpa_problem *p = &prm->p;
  const int d = (int)p->d;
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (row >= prm->rows || c * 8 >= d) return v;
  int gi;
  const int i = sdpa_divmod(row, prm->group, &gi), hh = hk * (int)prm->group.d + gi;
  const uint16_t *qrow = (const uint16_t *)p->q + sdpa_q_offset(p, p->q_st, b, i, hh);
  if (prm->q_vec && c * 8 + 8 <= d) return *(const uint4 *)(qrow + c * 8);
  const int64_t pos = may_rotate && p->rotary_dim > 0 ? sdpa_rotary_q_pos(p, b, i) : 0;
  float x[8];
#pragma unroll
  for (int u = 0; u < 8; ++u)
    x[u] = c * 8 + u >= d ? 0.f
           : may_rotate   ? sdpa_rotary_elem(p, qrow, c * 8 + u, pos, is_bf16)
                          : sdpa_h2f(qrow[c * 8 + u], is_bf16);
  v.x = is_bf16 ? pack_bf16x2(x[0], x[1]) : pack_f16x2(x[0], x[1]);
  v.y = is_bf16 ? pack_bf16x2(x[2], x[3]) : pack_f16x2(x[2], x[3]);
  v.z = is_bf16 ? pack_bf16x2(x[4], x[5]) : pack_f16x2(x[4], x[5]);
  v.w = is_bf16 ? pack_bf16x2(x[6], x[7]) : pack_f16x2(x[6], x[7]);
  return v;
}

/* ---- the exact merge -------------------------------------------------------------- */

/* The weights w[k] = 2^(lse2_k - total2) of n parts whose lse are in the
 * base-2 domain of the kernels' scores (lse2 = lse / ln 2; +inf parts are
 * empty and weigh 0), lse2_k at lse2[k * stride]; returns total2 = log2(sum_k
 * 2^lse2_k), +inf when no part has mass (every weight 0). The rule of the
 * CPU's merge.c, in base 2 so that each exponential and logarithm is one
 * hardware approximation (exp2f / log2f instead of expf / logf): a decode
 * block merges its warps at its end, on its critical path. A weight is
 * 2^(lse2_k - max) / sum: the exponentials of the total reused, one
 * reciprocal. */
__device__ __forceinline__ float sdpa_merge_weights2(const float *lse2, int n, int stride,
                                                     float *w) {
  float mx = -INFINITY;
  for (int k = 0; k < n; ++k) {
    const float l = lse2[k * stride];
    if (l != INFINITY && l > mx) mx = l;
  }
  float sum = 0.f;
  for (int k = 0; k < n; ++k) {
    const float l = lse2[k * stride];
    w[k] = l != INFINITY && mx != -INFINITY ? exp2f(l - mx) : 0.f;
    sum += w[k];
  }
  if (mx == -INFINITY) return INFINITY;
  const float inv = 1.f / sum;
  for (int k = 0; k < n; ++k) w[k] *= inv;
  return mx + log2f(sum);
}

/* acc += w * x and acc *= c, a float4 of four output columns */
__device__ __forceinline__ void f4_fma(float4 *acc, float w, float4 x) {
  acc->x += w * x.x;
  acc->y += w * x.y;
  acc->z += w * x.z;
  acc->w += w * x.w;
}

__device__ __forceinline__ void f4_scale(float4 *acc, float c) {
  acc->x *= c;
  acc->y *= c;
  acc->z *= c;
  acc->w *= c;
}

/* A merge's running sum of weights s and weighted columns acc: rescaled by c
 * when its max moves, a part x of weight w added. */
__device__ __forceinline__ void merge_rescale(float *s, float4 *acc, float c) {
  *s *= c;
  f4_scale(acc, c);
}

__device__ __forceinline__ void merge_add(float *s, float4 *acc, float w, float4 x) {
  *s += w;
  f4_fma(acc, w, x);
}

/* A slice's running max, sum and columns to where sdpa_merge_slices reads
 * them (the leader, one thread of the slice, writes m and s). */
__device__ __forceinline__ void sdpa_merge_publish(float *sm, float *ss, float4 *sacc, int leader,
                                                   float m, float s, float4 acc) {
  *sacc = acc;
  if (leader) {
    *sm = m;
    *ss = s;
  }
}

/* Where the slices of a row meet (merge.cu; decode_combine.cuh): slice t's
 * running max, sum and weighted columns at sm[t], ss[t] and
 * sacc[t * acc_stride], in base 2 (exp2) or natural-log (exp) units; *m, *s,
 * *acc get those of all nslices. A slice with no mass (m = -inf, s = 0)
 * weighs 0; so do all when none has any (*m = -inf, *s = 0). */
__device__ __forceinline__ void sdpa_merge_slices(int nslices, const float *sm, const float *ss,
                                                  const float4 *sacc, int acc_stride, int base2,
                                                  float *m, float *s, float4 *acc) {
  float mx = -INFINITY;
  for (int t = 0; t < nslices; ++t) mx = fmaxf(mx, sm[t]);
  const float mu = mx == -INFINITY ? 0.f : mx;
  float sum = 0.f;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int t = 0; t < nslices; ++t) {
    const float c = base2 ? exp2f(sm[t] - mu) : expf(sm[t] - mu);
    sum += c * ss[t];
    f4_fma(&a, c, sacc[t * acc_stride]);
  }
  *m = mx;
  *s = sum;
  *acc = a;
}

/* ---- host side ---------------------------------------------------------------------- */

/* What an instance tells the planner about itself. */
typedef struct sdpa_decode_shape {
  const char *name;
  int hd;            /* floats of a partial row: the head-dim bucket (V's columns in a split-O row) */
  int block_m;       /* packed query rows per block */
  int warps;         /* 16-key tiles a block streams at once (its warps' one each) */
  int blocks_per_sm; /* occupancy of the instance's kernel */
} sdpa_decode_shape;

typedef sdpa_status (*sdpa_decode_launch_fn)(const sdpa_decode_params *prm, unsigned grid,
                                             cudaStream_t stream);

extern "C" {
/* decode_plan.cu */
int sdpa_decode_num_splits(const sdpa_problem *p, const sdpa_decode_shape *sh);
/* whether the _wide row of a d 128 row (sh: the base row's shape) takes the problem */
int sdpa_decode_wants_wide(const sdpa_problem *p, const sdpa_decode_shape *sh);
/* the split count a _lean row runs a d 128 row's problem (sh: its shape) at (lean_bps blocks an
 * SM), or 0: the _lean row plans its own */
int sdpa_decode_lean_splits(const sdpa_problem *p, const sdpa_decode_shape *sh, int lean_bps);
size_t sdpa_decode_workspace(const sdpa_problem *p, const sdpa_decode_shape *sh);
/* an instance's combine kernel (threads a block; waits[SDPA_MAX_DEVICES] its
 * sdpa_cuda_waits_for_grid cache) on grid rows, as the attention kernel's
 * programmatic dependent where its code holds the wait */
sdpa_status sdpa_decode_launch_combine(const void *kernel, int threads, unsigned char *waits,
                                       const sdpa_decode_params *prm, unsigned grid,
                                       cudaStream_t stream, const char *name);
/* launch: the attention kernel (grid = its blocks); combine: with more than
 * one split, the combine (grid = b * s_q * h rows) after it */
sdpa_status sdpa_decode_execute(const sdpa_problem *p, const sdpa_decode_shape *sh,
                                sdpa_decode_launch_fn launch, sdpa_decode_launch_fn combine);
}

#endif /* SDPA_DECODE_COMMON_CUH */
