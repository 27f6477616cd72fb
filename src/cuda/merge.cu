/*
 * merge.cu - the exact merge of partial attention results on the GPU:
 *   lse = log(sum_k exp(lse_k)),  out = sum_k exp(lse_k - lse) * out_k,
 * +inf parts empty (sdpa.h, merge_states). One kernel serves both
 * sdpa_merge_states on CUDA (sdpa_cuda_merge, any float dtypes for the parts
 * and the output) and the combine step of the split-KV decoding forward
 * (decode_plan.cu, fp32 partials), through sdpa_merge_args. One warp per
 * output row: the lanes read the part lse values together and reduce them
 * by shuffles (sdpa_merge_total_warp), then stream the parts' columns,
 * coalesced, 8 columns of 32 lanes at a time so any head dim works, with
 * each part's weight broadcast from the lane that computed it.
 */
#include <cuda_runtime.h>

#include "../error.h"
#include "decode_common.cuh"

enum { MERGE_WARPS = 4, MERGE_COLS = 8 };

extern "C" __global__ void __launch_bounds__(MERGE_WARPS * 32)
    sdpa_merge_kernel(const __grid_constant__ sdpa_merge_args a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * MERGE_WARPS + (threadIdx.x >> 5);
  if (row >= a.nb * a.ni * a.nh) return;
  const int64_t hh = row % a.nh, bi = row / a.nh, i = bi % a.ni, bb = bi / a.ni;
  const float *lse = a.lse_parts + bb * a.l_sb + i * a.l_si + hh * a.l_sh;
  const int64_t pbase = bb * a.p_sb + i * a.p_si + hh * a.p_sh;
  const int64_t obase = bb * a.o_sb + i * a.o_si + hh * a.o_sh;
  const float total = sdpa_merge_total_warp(lse, a.n, a.l_sn, lane);
  for (int64_t c0 = 0; c0 < a.d; c0 += 32 * MERGE_COLS) {
    float acc[MERGE_COLS];
#pragma unroll
    for (int u = 0; u < MERGE_COLS; ++u) acc[u] = 0.f;
    for (int64_t k0 = 0; k0 < a.n; k0 += 32) {
      /* lane j holds the weight of part k0 + j; the loop broadcasts it, and
       * the part loads carry no dependence on one another */
      const float wl = k0 + lane < a.n ? sdpa_merge_weight(lse[(k0 + lane) * a.l_sn], total) : 0.f;
      const int cnt = a.n - k0 < 32 ? (int)(a.n - k0) : 32;
#pragma unroll 4
      for (int j = 0; j < cnt; ++j) {
        const float w = __shfl_sync(0xffffffffu, wl, j);
        const int64_t pk = pbase + (k0 + j) * a.p_sn;
#pragma unroll
        for (int u = 0; u < MERGE_COLS; ++u) {
          const int64_t e = c0 + u * 32 + lane;
          if (e < a.d) {
            const float x = sdpa_load_f(a.parts, a.parts_dtype, pk + e);
            acc[u] += w != 0.f ? w * x : 0.f; /* an empty part's out may be anything */
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < MERGE_COLS; ++u) {
      const int64_t e = c0 + u * 32 + lane;
      if (e < a.d) sdpa_store_f(a.out, a.out_dtype, obase + e, acc[u]);
    }
  }
  if (a.lse && lane == 0) a.lse[bb * a.lo_sb + i * a.lo_si + hh * a.lo_sh] = total;
}

sdpa_status sdpa_cuda_merge_launch(const sdpa_merge_args *a, cudaStream_t stream,
                                   const char *who) {
  const int64_t rows = a->nb * a->ni * a->nh;
  if (rows <= 0) return SDPA_OK;
  const int64_t blocks = (rows + MERGE_WARPS - 1) / MERGE_WARPS;
  if (blocks > 0x7fffffff)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "%s: %lld rows to merge: expected < 2^33", who,
                     (long long)rows);
  sdpa_merge_kernel<<<(unsigned)blocks, MERGE_WARPS * 32, 0, stream>>>(*a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: merge kernel launch failed: %s", who,
                     cudaGetErrorString(e));
  return SDPA_OK;
}

extern "C" sdpa_status sdpa_cuda_merge(const sdpa_merge_problem *m) {
  sdpa_merge_args a;
  a.n = m->n;
  a.nb = 1;
  a.ni = m->t;
  a.nh = m->h;
  a.d = m->d;
  a.parts = m->out_parts;
  a.parts_dtype = m->parts_dtype;
  a.p_sn = m->op_sn;
  a.p_sb = 0;
  a.p_si = m->op_st;
  a.p_sh = m->op_sh;
  a.lse_parts = m->lse_parts;
  a.l_sn = m->lp_sn;
  a.l_sb = 0;
  a.l_si = m->lp_st;
  a.l_sh = m->lp_sh;
  a.out = m->out;
  a.out_dtype = m->out_dtype;
  a.o_sb = 0;
  a.o_si = m->o_st;
  a.o_sh = m->o_sh;
  a.lse = m->lse;
  a.lo_sb = 0;
  a.lo_si = m->l_st;
  a.lo_sh = m->l_sh;
  return sdpa_cuda_merge_launch(&a, (cudaStream_t)m->stream, "merge_states");
}
