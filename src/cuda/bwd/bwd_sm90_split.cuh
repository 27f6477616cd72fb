/*
 * bwd_sm90_split.cuh - the d split's column table, the middle of a step
 * (P^T and dS^T into shared tiles) and the issue of its products, for the
 * Hopper backward bodies whose two warpgroups share 64 keys (block_n 64:
 * bwd_sm90_body.cuh and bwd_sm90_ws_body.cuh at d 192 / 256). A body
 * includes it after bwd_sm90_tiles.cuh (dq_issue, wg_keys_by_cols_ss,
 * store_ds, opaque_u32), bwd_scores.cuh, BM, ROWB, HD and HDV (d_v's
 * columns multiplied: 128 in a _dv128 row), and #undef's the SPLIT_*
 * macros at its end.
 *
 * Warpgroup wg's dK, dV and dQ widths (64 or 128) and first columns. The
 * widths are macros so that a literal wg gives the products literal widths
 * (ptxas allocates the d = 192 kernels differently when they come through
 * inline functions). d = 256: 128 of each a warpgroup. d = 192 (the
 * 64-column swizzle blocks allow no 96-column halves): dK / dV 128 + 64, dQ
 * the other way round (warpgroup 0 the last 64 columns, 1 the first 128), so
 * each multiplies five or four 64-column blocks a step; with d_v 128 (a
 * _dv128 row), dV 64 + 64: four each.
 */
#ifndef SDPA_BWD_SM90_SPLIT_CUH
#define SDPA_BWD_SM90_SPLIT_CUH

#define SPLIT_DK_N(wg) (HD == 256 || (wg) == 0 ? 128 : 64)
#define SPLIT_DV_N(wg) (HDV == 128 ? 64 : SPLIT_DK_N(wg))
#define SPLIT_DQ_N(wg) (HD == 256 || (wg) == 1 ? 128 : 64)
#define SPLIT_DK_COL(wg) (128 * (wg))
__device__ __forceinline__ int split_dv_col(int wg) { return HDV == 128 ? 64 * wg : 128 * wg; }
__device__ __forceinline__ int split_dq_col(int wg) {
  return HD == 256 ? 128 * wg : 128 - 128 * wg;
}

/* Where split_issue puts the dQ product among the step's groups. */
enum { SPLIT_DQ_NONE, SPLIT_DQ_FIRST, SPLIT_DQ_LAST };

/* Warpgroup wg's dQ columns, dQ = dS K, into dqa as a group of their own. */
__device__ __forceinline__ void split_dq(float (*dqa)[4], uint32_t s_s, uint32_t s_k, int wg,
                                         const int dqn) {
  dq_issue(dqa, opaque_u32(s_s), opaque_u32(s_k), 0, split_dq_col(wg) / 64, 0, dqn);
  wg_commit();
}

/* Issues warpgroup wg's products of a step, after the P^T / dS^T exchange:
 * dV and dK as one group (dv_apart, a literal: a group each), with its dQ
 * columns into dqa as a group before them or after them or not at all
 * (dq_at, a literal), so each group can be waited on in turn. dkn, dvn,
 * dqn: the table's widths of wg, as literals. The caller waits and fences. */
__device__ __forceinline__ void split_issue(float (*dqa)[4], float (*dk)[4], float (*dv)[4],
                                            uint32_t s_s, uint32_t s_p, uint32_t s_k,
                                            uint32_t s_q, uint32_t s_do, const int dq_at,
                                            const int dv_apart, int wg, const int dkn,
                                            const int dvn, const int dqn) {
  const uint32_t kcol = (uint32_t)(SPLIT_DK_COL(wg) / 64 * BM * ROWB);
  const uint32_t vcol = (uint32_t)(split_dv_col(wg) / 64 * BM * ROWB);
  wg_fence_acc(dv, dvn / 8);
  wg_fence_acc(dk, dkn / 8);
  wg_fence();
  if (dq_at == SPLIT_DQ_FIRST) split_dq(dqa, s_s, s_k, wg, dqn);
  wg_keys_by_cols_ss(dv, s_p, s_do + vcol, dvn);
  if (dv_apart) wg_commit();
  wg_keys_by_cols_ss(dk, s_s, s_q + kcol, dkn);
  wg_commit();
  if (dq_at == SPLIT_DQ_LAST) split_dq(dqa, s_s, s_k, wg, dqn);
}

/* A step's middle for warpgroup wg's 32 queries (from q0, column qc of the
 * step's tiles; lse_t / dd_t their lse2 / D rows; keep their dropout bits,
 * made while the products ran) once its S^T / dP^T (ss, sp) are issued: P
 * and dS (bwd_scores.cuh; feat a literal), and P^T / dS^T into the shared
 * tiles at s_p / s_s, fenced for the products' reads. The caller then meets
 * the other warpgroup. */
__device__ __forceinline__ void split_exchange(float (*ss)[4], float (*sp)[4],
                                               const sdpa_bwd_params *prm, const float *lse_t,
                                               const float *dd_t, int b, int hh, int j_lo, int q0,
                                               int qc, int kw, int lane, int g, int t, int sq,
                                               int sk, int off, uint32_t keep, const int feat,
                                               int full, uint32_t s_p, uint32_t s_s) {
  wg_wait0();
  wg_fence_acc(sp, 4);
  wg_fence_acc(ss, 4);
  bwd_p_ds_forms(ss, sp, 4, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, keep, feat,
                 full, 1);
  uint32_t pa[2][4], da[2][4];
  pack_frags(pa, ss, 32);
  pack_frags(da, sp, 32);
  store_ds(s_p, pa, kw, qc, g, t, 32);
  store_ds(s_s, da, kw, qc, g, t, 32);
  fence_proxy_async();
}

#endif /* SDPA_BWD_SM90_SPLIT_CUH */
