/*
 * bwd_bias.cuh - the additive bias and its gradient in the 16-bit backwards'
 * bias kernels (feat 2 of bwd_sm80_body.cuh's _bias instance and of the
 * bwd_sm90_body.cuh bias rows): each step's [BM, BN] bias tile staged in
 * shared memory (cp.async, double-buffered by the body) and read in the S^T
 * accumulator layout by ldmatrix.trans; dbias (= dS before the softcap
 * derivative: the gradient of the post-softcap score) gathered by bwd_p_ds
 * in a shared [BM, BN] tile and written out by whole rows after each step;
 * the dbias of the tiles the masks keep a key block from visiting zeroed.
 * Both tiles are [BM][BN] 16-bit, rows = queries, chunks swizzled by bswz
 * (a layout of their own: the wgmma tiles' 128-byte swizzle is not needed,
 * no tensor-core instruction reads them). A body includes it after its
 * geometry, which defines BM (queries a step), BN (keys a block), NTHREADS,
 * BCH = BN / 8 (16-byte chunks a bias row) and BCH8 = BCH & ~7.
 */
#ifndef SDPA_BWD_BIAS_CUH
#define SDPA_BWD_BIAS_CUH

#include <stdint.h>

#include "problem.h"
#include "cuda/bwd/bwd_scores.cuh"
#include "cuda/bwd/bwd_common.cuh"
#include "cuda/bwd/bwd_dbias_zero.cuh"
#include "cuda/ptx/ptx_cp_async.cuh"
#include "cuda/ptx/ptx_ldmatrix.cuh"

static_assert(BCH == BN / 8 && BCH8 == (BCH & ~7), "bias rows: BN / 8 chunks");

/* The bias tile of one step (queries m0 .. m0 + BM - 1, keys n0 .. n0 + BN -
 * 1 of head hh) into shared memory at sb: [BM][BN] 16-bit, chunks swizzled
 * by bswz, zero past sq / sk. By cp.async when every bias row is 16-byte
 * aligned (aligned), else by plain loads and shared stores; either is seen
 * by the block after the next wait + __syncthreads. */
__device__ __forceinline__ void bwd_bias_tile(uint32_t sb, const sdpa_problem *p, int b, int hh,
                                              int m0, int n0, int sq, int sk, int aligned, int tid) {
  const uint16_t *g = (const uint16_t *)p->bias + b * p->bias_sb + hh * p->bias_sh + n0;
#pragma unroll 1
  for (int k = tid; k < BM * BCH; k += NTHREADS) {
    const int r = k / BCH, c = k % BCH;
    const int left = sk - n0 - c * 8;
    const int n = m0 + r < sq && left > 0 ? (left < 8 ? left : 8) : 0; /* valid elements */
    const uint16_t *src = g + (int64_t)(m0 + r) * p->bias_sq + c * 8;
    const uint32_t dst = sb + (uint32_t)((r * BCH + bswz(r, c, BCH, BCH8)) * 16);
    if (aligned) {
      cp_async_16(dst, n ? (const void *)src : p->bias, 2 * n);
    } else {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int e = 0; e < 8; ++e) /* unrolled: w stays in registers */
        if (e < n) w[e >> 1] |= (uint32_t)src[e] << (16 * (e & 1));
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]),
                   "r"(w[2]), "r"(w[3]));
    }
  }
}

/* This warp's bias values of nqn (a literal, even) n8 query tiles from row
 * r0 of the tile at sb, in the S^T accumulator layout: bv[nq][hf] holds (key
 * kw 16 + g + 8 hf; queries r0 + 8 nq + 2 t, + 1) in its low / high 16 bits.
 * ldmatrix.trans of an 8 x 8 block (rows = queries, columns = keys) hands
 * lane (g, t) exactly rows 2 t, 2 t + 1 of column g: one x4 load per two
 * query tiles. */
__device__ __forceinline__ void bwd_bias_frag(uint32_t (*bv)[2], uint32_t sb, int r0, const int nqn,
                                              int kw, int lane, int x7, int x3) {
  const int m = lane >> 3;
#pragma unroll
  for (int a = 0; a < nqn; a += 2) {
    const int r = r0 + 8 * (a + (m >> 1)) + (lane & 7);
    uint32_t x[4];
    ldmatrix_x4_trans(x, sb + (uint32_t)((r * BCH + bswz_lane(kw * 2 + (m & 1), BCH, BCH8, x7, x3)) * 16));
    bv[a][0] = x[0], bv[a][1] = x[1], bv[a + 1][0] = x[2], bv[a + 1][1] = x[3];
  }
}

/* The step's dbias tile (shared, [BM][BN] as the bias tile; rows m0 ..,
 * keys n0 .. of head hh) out to global memory: 16-byte stores when dbias's
 * rows are 16-byte aligned (dbias_aligned), else 16-bit ones; only i < sq,
 * j < sk. A warp covers whole rows, so its stores are coalesced (16-bit
 * stores straight from the score registers would not be). */
__device__ __forceinline__ void bwd_dbias_out(uint32_t sdb, const sdpa_problem *p, int b, int hh,
                                              int m0, int n0, int sq, int sk, int dbias_aligned,
                                              int tid) {
  uint16_t *g = (uint16_t *)p->dbias + b * p->dbias_sb + hh * p->dbias_sh + n0;
#pragma unroll 1
  for (int k = tid; k < BM * BCH; k += NTHREADS) {
    const int r = k / BCH, c = k % BCH, left = sk - n0 - c * 8;
    if (m0 + r >= sq || left <= 0) continue;
    uint32_t w[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(sdb + (uint32_t)((r * BCH + bswz(r, c, BCH, BCH8)) * 16)));
    uint16_t *dst = g + (int64_t)(m0 + r) * p->dbias_sq + c * 8;
    if (dbias_aligned && left >= 8) {
      *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (e < left) dst[e] = (uint16_t)(w[e >> 1] >> (16 * (e & 1)));
    }
  }
}

/* The dbias destination of this lane for the queries from tile row r0 (a
 * multiple of 8) of the dbias tile at sdb, keys 16 kw ..: row r0 + 8 nq + 2 t
 * + (e & 1), chunk 2 kw + (e >> 1) (bwd_p_ds's bwd_dbias_dst); lane 0 (no
 * dbias) unless on. */
__device__ __forceinline__ void bwd_dbias_dst_at(bwd_dbias_dst *db, uint32_t sdb, int r0, int kw,
                                                 int g, int t, int on) {
  db->lane = on ? sdb + (uint32_t)((r0 + 2 * t) * BCH * 16 + g * 2) : 0u;
  db->row = BCH * 16;
#pragma unroll
  for (int lo = 0; lo < 2; ++lo)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      db->col[lo][hf] = (uint32_t)(bswz(2 * t + lo, kw * 2 + hf, BCH, BCH8) * 16);
}

#endif /* SDPA_BWD_BIAS_CUH */
