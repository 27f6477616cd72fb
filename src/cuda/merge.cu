/*
 * merge.cu - sdpa_merge_states on CUDA: the exact merge of partial attention
 * results,
 *   lse = log(sum_k exp(lse_k)),  out = sum_k exp(lse_k - lse) * out_k,
 * +inf (and -inf) parts empty (sdpa.h, merge_states), for any float dtypes
 * and strides of the parts and the output. (Until 2026-11-21 this kernel
 * also combined the split-KV decoding partials; each decode instance now
 * has its own combine, decode_combine.cuh, which knows their layout.)
 *
 * A row's parts are dealt to 1, 2 or 4 warps of a block (wpr slices: part k
 * to slice k % wpr), each lane owning 4 adjacent columns (a float4 for
 * aligned fp32 parts), 128 columns a pass. A warp walks its slice
 * MERGE_CHUNK parts at a time, issuing every part load and every lse load
 * of the chunk before the first use, and keeps its slice's merge online
 * (running max m, sum s = sum exp(lse_k - m), acc = sum exp(lse_k - m) out_k),
 * so a slice of up to MERGE_CHUNK parts costs one memory round trip: no
 * separate pass for the total, no shuffles. The slices meet in shared memory
 * (m = max m_i, s = sum s_i exp(m_i - m), out = sum acc_i exp(m_i - m) / s,
 * lse = m + log s), in a fixed order. The same sums as merge.c up to
 * rounding. (2026-11-21: the previous kernel, one warp a row with a
 * shuffle-reduced total, then weights, then the parts, spent 8.6 us merging
 * 32 parts of 32 rows at d = 128.)
 */
#include <cuda_runtime.h>

#include "../error.h"
#include "../registry.h"
#include "decode_common.cuh"

/* One merge: rows (i, hh) of ni x nh, d elements each; part k of a row at
 * parts + k*p_sn + i*p_si + hh*p_sh (lse_parts alike); out at i*o_si +
 * hh*o_sh; lse (optional) alike. */
typedef struct sdpa_merge_args {
  int64_t n, ni, nh, d;
  const void *parts;
  sdpa_dtype parts_dtype;
  int64_t p_sn, p_si, p_sh;
  const float *lse_parts;
  int64_t l_sn, l_si, l_sh;
  void *out;
  sdpa_dtype out_dtype;
  int64_t o_si, o_sh;
  float *lse; /* NULL = not asked */
  int64_t lo_si, lo_sh;
  int wpr;   /* set by merge_launch: warps per row */
  int vec4;  /* ... and: fp32 parts with 16-byte aligned rows */
  int o_vec; /* ... and: output rows aligned to 4 elements (16 / 8 bytes) */
} sdpa_merge_args;

/* MERGE_MIN_BLOCKS: the register budget (4 blocks an SM: <= 128 a thread);
 * left to itself ptxas capped the kernel at 72 registers and spilled. */
enum { MERGE_WARPS = 4, MERGE_CHUNK = 8, MERGE_MIN_BLOCKS = 4 };

/* Columns e .. e + 3 (those < d; the rest 0) of the part row at element idx. */
__device__ __forceinline__ float4 merge_load4(const sdpa_merge_args *a, int64_t idx, int64_t e) {
  if (a->vec4 && e + 4 <= a->d) return *(const float4 *)((const float *)a->parts + idx);
  float v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
    v[u] = e + u < a->d ? sdpa_load_f(a->parts, a->parts_dtype, idx + u) : 0.f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

/* Columns e .. e + 3 of an output row at element idx, all there and aligned
 * (a.o_vec): one 16-byte (fp32) or 8-byte (16-bit) store, rounded as
 * sdpa_store_f rounds each. */
__device__ __forceinline__ void merge_store4(const sdpa_merge_args *a, int64_t idx, const float v[4]) {
  if (a->out_dtype == SDPA_DTYPE_F32) {
    *(float4 *)((float *)a->out + idx) = make_float4(v[0], v[1], v[2], v[3]);
  } else if (a->out_dtype == SDPA_DTYPE_BF16) {
    *(uint2 *)((uint16_t *)a->out + idx) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
  } else {
    *(uint2 *)((uint16_t *)a->out + idx) = make_uint2(pack_f16x2(v[0], v[1]), pack_f16x2(v[2], v[3]));
  }
}

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

extern "C" __global__ void __launch_bounds__(MERGE_WARPS * 32, MERGE_MIN_BLOCKS)
    sdpa_merge_kernel(const __grid_constant__ sdpa_merge_args a) {
  __shared__ float4 s_acc[MERGE_WARPS][32];
  __shared__ float s_m[MERGE_WARPS], s_s[MERGE_WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wpr = a.wpr, slice = warp % wpr;
  /* grid: x over the (i, hh) rows (< 2^31) */
  const int row = (int)blockIdx.x * (MERGE_WARPS / wpr) + warp / wpr;
  const int live = row < (int)(a.ni * a.nh); /* whole warps: every lane or none */
  const int r = live ? row : 0, nh = (int)a.nh;
  const int64_t hh = r % nh, i = r / nh;
  const float *lse = a.lse_parts + i * a.l_si + hh * a.l_sh;
  const int64_t pbase = i * a.p_si + hh * a.p_sh;
  const int64_t obase = i * a.o_si + hh * a.o_sh;
  /* this slice's parts: k = slice + wpr * j, 0 <= j < ns; part j's lse at
   * lse_s[j * l_step], its out row at element p_s + j * p_step */
  const int64_t ns = live && slice < a.n ? (a.n - slice + wpr - 1) / wpr : 0;
  const float *lse_s = lse + slice * a.l_sn;
  const int64_t l_step = wpr * a.l_sn, p_step = wpr * a.p_sn, p_s = pbase + slice * a.p_sn;
  float m = -INFINITY, s = 0.f;
  const int64_t d_pass = a.d > 0 ? a.d : 1; /* one pass even at d = 0: the lse */
  for (int64_t c0 = 0; c0 < d_pass; c0 += 128) {
    const int64_t e = c0 + 4 * lane;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    m = -INFINITY;
    s = 0.f;
    /* whole aligned fp32 columns: plain vector loads (the decode combine) */
    const int vec = a.vec4 && e + 4 <= a.d;
    for (int64_t j0 = 0; j0 < ns; j0 += MERGE_CHUNK) {
      float4 x[MERGE_CHUNK];
      float l[MERGE_CHUNK];
      if (vec) {
        const float *xp = (const float *)a.parts + p_s + j0 * p_step + e;
#pragma unroll
        for (int q = 0; q < MERGE_CHUNK; ++q, xp += p_step)
          x[q] = j0 + q < ns ? *(const float4 *)xp : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
#pragma unroll
        for (int q = 0; q < MERGE_CHUNK; ++q)
          x[q] = j0 + q < ns && e < a.d ? merge_load4(&a, p_s + (j0 + q) * p_step + e, e)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      const float *lp = lse_s + j0 * l_step;
#pragma unroll
      for (int q = 0; q < MERGE_CHUNK; ++q, lp += l_step) l[q] = j0 + q < ns ? *lp : INFINITY;
      float mc = m;
#pragma unroll
      for (int q = 0; q < MERGE_CHUNK; ++q)
        if (l[q] != INFINITY && l[q] != -INFINITY) mc = fmaxf(mc, l[q]);
      if (mc == -INFINITY) continue; /* nothing with mass yet */
      const float corr = expf(m - mc); /* 0 while m = -inf */
      s *= corr;
      f4_scale(&acc, corr);
#pragma unroll
      for (int q = 0; q < MERGE_CHUNK; ++q) {
        if (l[q] == INFINITY || l[q] == -INFINITY) continue; /* empty: its out may be anything */
        const float w = expf(l[q] - mc);
        s += w;
        f4_fma(&acc, w, x[q]);
      }
      m = mc;
    }
    if (wpr > 1) {
      s_acc[warp][lane] = acc;
      if (lane == 0) {
        s_m[warp] = m;
        s_s[warp] = s;
      }
      __syncthreads();
      if (slice == 0) {
        float mm = -INFINITY;
        for (int t = 0; t < wpr; ++t) mm = fmaxf(mm, s_m[warp + t]);
        acc = make_float4(0.f, 0.f, 0.f, 0.f);
        s = 0.f;
        if (mm != -INFINITY)
          for (int t = 0; t < wpr; ++t) {
            const float c = expf(s_m[warp + t] - mm); /* 0 for an empty slice */
            s += c * s_s[warp + t];
            f4_fma(&acc, c, s_acc[warp + t][lane]);
          }
        m = mm;
      }
      __syncthreads();
    }
    if (live && slice == 0) {
      const float inv = s > 0.f ? 1.f / s : 0.f;
      const float v[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
      if (a.o_vec && e + 4 <= a.d) {
        merge_store4(&a, obase + e, v);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (e + u < a.d) sdpa_store_f(a.out, a.out_dtype, obase + e + u, v[u]);
      }
    }
  }
  if (a.lse && live && slice == 0 && lane == 0)
    a.lse[i * a.lo_si + hh * a.lo_sh] = s > 0.f ? m + logf(s) : INFINITY;
}

/* Warps per row: the fewest of 1, 2, 4 that leave each warp at most
 * MERGE_CHUNK parts (one round of loads), else 4. */
static int merge_wpr(int64_t n) {
  if (n <= MERGE_CHUNK) return 1;
  if (n <= 2 * MERGE_CHUNK) return 2;
  return 4;
}

static sdpa_status merge_launch(const sdpa_merge_args *a, cudaStream_t stream) {
  const int64_t rows = a->ni * a->nh;
  if (rows <= 0) return SDPA_OK;
  if (rows > 0x7fffffff)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "merge_states: %lld rows (t * h) to merge: expected "
                     "< 2^31", (long long)rows);
  sdpa_merge_args k = *a;
  k.wpr = merge_wpr(a->n);
  k.vec4 = a->parts_dtype == SDPA_DTYPE_F32 && ((uintptr_t)a->parts & 15) == 0 &&
           a->p_sn % 4 == 0 && a->p_si % 4 == 0 && a->p_sh % 4 == 0;
  /* 4 columns a store: rows (and the base) aligned to 4 elements */
  const size_t osz = a->out_dtype == SDPA_DTYPE_F32 ? 16 : 8;
  k.o_vec = ((uintptr_t)a->out & (osz - 1)) == 0 && a->o_si % 4 == 0 && a->o_sh % 4 == 0;
  const int rows_per_block = MERGE_WARPS / k.wpr;
  sdpa_merge_kernel<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block), MERGE_WARPS * 32, 0,
                      stream>>>(k);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "merge_states: merge kernel launch failed: %s",
                     cudaGetErrorString(e));
  return SDPA_OK;
}

extern "C" sdpa_status sdpa_cuda_merge(const sdpa_merge_problem *m) {
  sdpa_merge_args a;
  a.n = m->n;
  a.ni = m->t;
  a.nh = m->h;
  a.d = m->d;
  a.parts = m->out_parts;
  a.parts_dtype = m->parts_dtype;
  a.p_sn = m->op_sn;
  a.p_si = m->op_st;
  a.p_sh = m->op_sh;
  a.lse_parts = m->lse_parts;
  a.l_sn = m->lp_sn;
  a.l_si = m->lp_st;
  a.l_sh = m->lp_sh;
  a.out = m->out;
  a.out_dtype = m->out_dtype;
  a.o_si = m->o_st;
  a.o_sh = m->o_sh;
  a.lse = m->lse;
  a.lo_si = m->l_st;
  a.lo_sh = m->l_sh;
  return merge_launch(&a, (cudaStream_t)m->stream);
}
