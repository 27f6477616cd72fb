/*
 * bwd_sm90_split.cuh - the d split's column table, for the Hopper backward
 * bodies whose two warpgroups share 64 keys (block_n 64: bwd_sm90_body.cuh
 * at d 192 / 256, bwd_sm90_ws_body.cuh at d 192). A body includes it after
 * HD and HDV (d_v's columns multiplied: 128 in a _dv128 row), and #undef's
 * the SPLIT_* macros at its end.
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

#endif /* SDPA_BWD_SM90_SPLIT_CUH */
