/*
 * bwd_dbias_zero.cuh - the dbias a backward's bias kernels never compute:
 * the tiles of a key block that its masks keep it from visiting, whose
 * gradient is 0 but whose memory is the caller's. Shared by the 16-bit bias
 * kernels (bwd_bias.cuh) and the fp32 ones (bwd_tf32_body.cuh); a body
 * includes it after its geometry (BM, BN, NTHREADS) and SDPA_BELEM, the
 * dbias element type.
 */
#ifndef SDPA_BWD_DBIAS_ZERO_CUH
#define SDPA_BWD_DBIAS_ZERO_CUH

#include "problem.h"
#include "cuda/bwd/bwd_common.cuh"

static_assert(NTHREADS % BN == 0, "dbias zeroing: whole rows of a key block per pass");

/* Zero dbias rows [i0, i1) x keys [j0, j1) (j1 - j0 <= BN) of head hh: the
 * tiles of a key block that the masks keep it from visiting (dbias is the
 * caller's buffer, and a masked element's gradient is 0). */
__device__ __forceinline__ void bwd_dbias_zero(const sdpa_problem *p, int b, int hh, int i0, int i1,
                                               int j0, int j1, int tid) {
  SDPA_BELEM *base = (SDPA_BELEM *)p->dbias + b * p->dbias_sb + hh * p->dbias_sh;
  const int j = j0 + tid % BN;
  if (j >= j1) return;
#pragma unroll 1
  for (int i = i0 + tid / BN; i < i1; i += NTHREADS / BN) base[(int64_t)i * p->dbias_sq + j] = 0;
}

/* dbias is zero outside the query blocks [m_lo, m_hi] that the key block
 * at n0 visits (bwd_query_blocks; none: m_lo = 0, m_hi = -1, so the second
 * range is every row), for every query head of kv head hk's group. */
__device__ __forceinline__ void bwd_dbias_zero_skipped(const sdpa_bwd_params *prm, int n0, int sq,
                                                       int sk, int m_lo, int m_hi, int b, int hk,
                                                       int tid) {
  if (!prm->has_dbias || n0 >= sk) return;
  const int j1 = n0 + BN < sk ? n0 + BN : sk, group = prm->h_per_hk;
  const sdpa_problem *p = &prm->p;
#pragma unroll 1
  for (int hh = hk * group; hh < (hk + 1) * group; ++hh) {
    bwd_dbias_zero(p, b, hh, 0, m_lo * BM, n0, j1, tid);
    bwd_dbias_zero(p, b, hh, (m_hi + 1) * BM, sq, n0, j1, tid);
  }
}

#endif /* SDPA_BWD_DBIAS_ZERO_CUH */
