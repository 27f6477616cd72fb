/*
 * merge.cu - sdpa_merge_states on CUDA: the exact merge of partial attention
 * results,
 *   lse = log(sum_k exp(lse_k)),  out = sum_k exp(lse_k - lse) * out_k,
 * +inf (and -inf) parts empty (sdpa.h, merge_states), for any float dtypes
 * and strides of the parts and the output. (Split-KV decoding merges its
 * own partials: decode_combine.cuh, which knows their layout.)
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
 * rounding.
 */
#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/decode/decode_common.cuh"

/* The kernel's argument: the problem (backend.h: rows (i, hh) of t x h, d
 * elements each; part k of a row at out_parts + k*op_sn + i*op_st + hh*op_sh,
 * lse_parts alike; out and lse at i*o_st + hh*o_sh, i*l_st + hh*l_sh) and
 * what merge_launch works out from it. */
typedef struct sdpa_merge_args {
  sdpa_merge_problem m;
  int wpr;   /* warps per row */
  int vec4;  /* fp32 parts with 16-byte aligned rows */
  int o_vec; /* output rows aligned to 4 elements (16 / 8 bytes) */
} sdpa_merge_args;

/* MERGE_MIN_BLOCKS: the register budget (4 blocks an SM: <= 128 a thread);
 * left to itself ptxas capped the kernel at 72 registers and spilled. */
enum { MERGE_WARPS = 4, MERGE_CHUNK = 8, MERGE_MIN_BLOCKS = 4 };

/* Columns e .. e + 3 (those < d; the rest 0) of the part row at element idx. */
__device__ __forceinline__ float4 merge_load4(const sdpa_merge_args *a, int64_t idx, int64_t e) {
  if (a->vec4 && e + 4 <= a->m.d) return *(const float4 *)((const float *)a->m.out_parts + idx);
  float v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
    v[u] = e + u < a->m.d ? sdpa_load_f(a->m.out_parts, a->m.parts_dtype, idx + u) : 0.f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

/* Columns e .. e + 3 of an output row at element idx, all there and aligned
 * (a.o_vec): one 16-byte (fp32) or 8-byte (16-bit) store, rounded as
 * sdpa_store_f rounds each. */
__device__ __forceinline__ void merge_store4(const sdpa_merge_args *a, int64_t idx, const float v[4]) {
  if (a->m.out_dtype == SDPA_DTYPE_F32) {
    *(float4 *)((float *)a->m.out + idx) = make_float4(v[0], v[1], v[2], v[3]);
  } else if (a->m.out_dtype == SDPA_DTYPE_BF16) {
    *(uint2 *)((uint16_t *)a->m.out + idx) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
  } else {
    *(uint2 *)((uint16_t *)a->m.out + idx) = make_uint2(pack_f16x2(v[0], v[1]), pack_f16x2(v[2], v[3]));
  }
}

extern "C" __global__ void __launch_bounds__(MERGE_WARPS * 32, MERGE_MIN_BLOCKS)
    sdpa_merge_kernel(const __grid_constant__ sdpa_merge_args a) {
  __shared__ float4 s_acc[MERGE_WARPS][32];
  __shared__ float s_m[MERGE_WARPS], s_s[MERGE_WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wpr = a.wpr, slice = warp % wpr;
  /* grid: x over the (i, hh) rows (< 2^31) */
  const int row = (int)blockIdx.x * (MERGE_WARPS / wpr) + warp / wpr;
  const int live = row < (int)(a.m.t * a.m.h); /* whole warps: every lane or none */
  const int r = live ? row : 0, nh = (int)a.m.h;
  const int64_t hh = r % nh, i = r / nh;
  const float *lse = a.m.lse_parts + i * a.m.lp_st + hh * a.m.lp_sh;
  const int64_t pbase = i * a.m.op_st + hh * a.m.op_sh;
  const int64_t obase = i * a.m.o_st + hh * a.m.o_sh;
  /* this slice's parts: k = slice + wpr * j, 0 <= j < ns; part j's lse at
   * lse_s[j * l_step], its out row at element p_s + j * p_step */
  const int64_t ns = live && slice < a.m.n ? (a.m.n - slice + wpr - 1) / wpr : 0;
  const float *lse_s = lse + slice * a.m.lp_sn;
  const int64_t l_step = wpr * a.m.lp_sn, p_step = wpr * a.m.op_sn, p_s = pbase + slice * a.m.op_sn;
  float m = -INFINITY, s = 0.f;
  const int64_t d_pass = a.m.d > 0 ? a.m.d : 1; /* one pass even at d = 0: the lse */
  for (int64_t c0 = 0; c0 < d_pass; c0 += 128) {
    const int64_t e = c0 + 4 * lane;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    m = -INFINITY;
    s = 0.f;
    /* whole aligned fp32 columns: plain vector loads */
    const int vec = a.vec4 && e + 4 <= a.m.d;
    for (int64_t j0 = 0; j0 < ns; j0 += MERGE_CHUNK) {
      float4 x[MERGE_CHUNK];
      float l[MERGE_CHUNK];
      if (vec) {
        const float *xp = (const float *)a.m.out_parts + p_s + j0 * p_step + e;
#pragma unroll
        for (int q = 0; q < MERGE_CHUNK; ++q, xp += p_step)
          x[q] = j0 + q < ns ? *(const float4 *)xp : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
#pragma unroll
        for (int q = 0; q < MERGE_CHUNK; ++q)
          x[q] = j0 + q < ns && e < a.m.d ? merge_load4(&a, p_s + (j0 + q) * p_step + e, e)
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
      merge_rescale(&s, &acc, corr);
#pragma unroll
      for (int q = 0; q < MERGE_CHUNK; ++q) /* an empty part's out may be anything */
        if (l[q] != INFINITY && l[q] != -INFINITY) merge_add(&s, &acc, expf(l[q] - mc), x[q]);
      m = mc;
    }
    if (wpr > 1) {
      sdpa_merge_publish(&s_m[warp], &s_s[warp], &s_acc[warp][lane], lane == 0, m, s, acc);
      __syncthreads();
      if (slice == 0)
        sdpa_merge_slices(wpr, s_m + warp, s_s + warp, &s_acc[warp][lane], 32, 0, &m, &s, &acc);
      __syncthreads();
    }
    if (live && slice == 0) {
      const float inv = s > 0.f ? 1.f / s : 0.f;
      const float v[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
      if (a.o_vec && e + 4 <= a.m.d) {
        merge_store4(&a, obase + e, v);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (e + u < a.m.d) sdpa_store_f(a.m.out, a.m.out_dtype, obase + e + u, v[u]);
      }
    }
  }
  if (a.m.lse && live && slice == 0 && lane == 0)
    a.m.lse[i * a.m.l_st + hh * a.m.l_sh] = s > 0.f ? m + logf(s) : INFINITY;
}

/* Warps per row: the fewest of 1, 2, 4 that leave each warp at most
 * MERGE_CHUNK parts (one round of loads), else 4. */
static int merge_wpr(int64_t n) {
  if (n <= MERGE_CHUNK) return 1;
  if (n <= 2 * MERGE_CHUNK) return 2;
  return 4;
}

extern "C" sdpa_status sdpa_cuda_merge(const sdpa_merge_problem *m) {
  const int64_t rows = m->t * m->h;
  if (rows <= 0) return SDPA_OK;
  if (rows > 0x7fffffff)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "merge_states: %lld rows (t * h) to merge: expected "
                     "< 2^31", (long long)rows);
  sdpa_merge_args k;
  k.m = *m;
  k.wpr = merge_wpr(m->n);
  k.vec4 = m->parts_dtype == SDPA_DTYPE_F32 && ((uintptr_t)m->out_parts & 15) == 0 &&
           m->op_sn % 4 == 0 && m->op_st % 4 == 0 && m->op_sh % 4 == 0;
  /* 4 columns a store: rows (and the base) aligned to 4 elements */
  const size_t osz = m->out_dtype == SDPA_DTYPE_F32 ? 16 : 8;
  k.o_vec = ((uintptr_t)m->out & (osz - 1)) == 0 && m->o_st % 4 == 0 && m->o_sh % 4 == 0;
  const int rows_per_block = MERGE_WARPS / k.wpr;
  sdpa_merge_kernel<<<(unsigned)((rows + rows_per_block - 1) / rows_per_block), MERGE_WARPS * 32, 0,
                      (cudaStream_t)m->stream>>>(k);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "merge_states: merge kernel launch failed: %s",
                     cudaGetErrorString(e));
  return SDPA_OK;
}
