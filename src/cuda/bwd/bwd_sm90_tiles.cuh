/*
 * bwd_sm90_tiles.cuh - what the Hopper backward bodies (bwd_sm90_body.cuh,
 * bwd_sm90_ws_body.cuh) share around their tiles: the 128-byte swizzle of a
 * [rows, d] tile (d / 64 blocks of [rows][64], chunk c of row r at chunk
 * c ^ (r % 8)) and its cp.async load, the wgmma descriptors, the products
 * S^T = K Q^T / dP^T = V dO^T and dV += P^T dO / dK += dS^T Q, the dS^T
 * store, and the issue of dQ = dS K. A body
 * includes it after its geometry: HD, BM (query rows a step), BN (keys a
 * block), ROWB, CPR and tile_load.cuh's other fields, and SDPA_HDW; and after
 * bwd_elem16.cuh (SDPA_TY) and bwd_scores.cuh (wg_scores makes the dropout
 * bits). SDPA_WG(kind, n) names the dtype's m64n<n> wgmma of that kind; the
 * body #undef's it.
 */
#ifndef SDPA_BWD_SM90_TILES_CUH
#define SDPA_BWD_SM90_TILES_CUH

#define SDPA_WG(kind, n) SDPA_PASTE(SDPA_PASTE(wgmma_##kind##_m64n, n), SDPA_PASTE(_, SDPA_TY))

typedef uint16_t tile_elem;
/* tile_load.cuh's chunk index in a tile of `rows` rows: its address (r CPR +
 * swz) 16 is the 128-byte swizzle's (c / 8) rows 128 + r 128 + ((c % 8) ^
 * (r % 8)) 16. */
__device__ __forceinline__ int swz(int r, int c, int rows) {
  return (c >> 3) * rows * 8 + r * (8 - CPR) + ((c & 7) ^ (r & 7));
}
#define TILE_SWZ(r, c, rows) swz(r, c, rows)
#include "cuda/ptx/tile_load.cuh"

/* x, which the compiler cannot see through: values derived from it (the
 * k-step descriptors) are computed where used, not hoisted out of the loops
 * and held in registers the accumulators need. */
__device__ __forceinline__ uint32_t opaque_u32(uint32_t x) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
  return x;
}

/* The descriptors: K-major (rows along M / N) and MN-major (rows along K,
 * 64-column blocks lbo bytes apart). */
__device__ __forceinline__ uint64_t desc_k(uint32_t a) { return wg_desc(a, 16, 1024); }
__device__ __forceinline__ uint64_t desc_mn(uint32_t a, uint32_t lbo) { return wg_desc(a, lbo, 1024); }

/* acc = X Y^T over the first 16 nks columns (a literal: KS, or KSV for V)
 * for this warpgroup's 64 rows of the [BN, HD] tile at xa (K or V) and qs (a
 * literal, 32, 64 or 128) rows of the [BM, HD] tile at ya (Q or dO). */
__device__ __forceinline__ void wg_rows_by_queries(float (*acc)[4], uint32_t xa, uint32_t ya,
                                                   const int qs, const int nks) {
  const uint64_t da0 = desc_k(xa), db0 = desc_k(ya);
#pragma unroll
  for (int ks = 0; ks < nks; ++ks) {
    const uint32_t koff = (ks & 3) * 32; /* k16 step inside a 128-byte row */
    /* qs 32 (the d split): built a step, since held descriptors leave ptxas too
       few registers to pipeline these under the next step's copies (C7511) */
    const uint64_t da = qs == 32 ? desc_k(xa + (ks >> 2) * BN * ROWB + koff)
                                 : wg_desc_at(da0, (ks >> 2) * BN * ROWB + koff);
    const uint64_t db = qs == 32 ? desc_k(ya + (ks >> 2) * BM * ROWB + koff)
                                 : wg_desc_at(db0, (ks >> 2) * BM * ROWB + koff);
    if (qs == 128)
      SDPA_WG(ss, 128)(acc, da, db, ks > 0);
    else if (qs == 64)
      SDPA_WG(ss, 64)(acc, da, db, ks > 0);
    else
      SDPA_WG(ss, 32)(acc, da, db, ks > 0);
  }
}

/* acc += X^T T: X^T (this warpgroup's [64 keys, qs queries], packed A
 * fragments xa[qs / 16][4]) times the qs rows of the [BM, HD] tile at ta
 * (N-major, ta at the warpgroup's first column block). */
__device__ __forceinline__ void wg_keys_by_cols(float (*acc)[4], const uint32_t (*xa)[4],
                                                uint32_t ta, const int qs) {
  const uint64_t db0 = desc_mn(ta, BM * ROWB);
#pragma unroll
  for (int ms = 0; ms < qs / 16; ++ms)
    SDPA_WG(rs, SDPA_HDW)(acc, xa[ms], wg_desc_at(db0, ms * 16 * ROWB), 1);
}

/* acc += X^T T for a d split: X^T the [64 keys, BM queries] tile at xs
 * (P^T or dS^T, shared, K-major) times n (a literal, 64 or 128) columns of
 * the [BM, HD] tile at ta (dO or Q, N-major, ta at the first column block). */
__device__ __forceinline__ void wg_keys_by_cols_ss(float (*acc)[4], uint32_t xs, uint32_t ta,
                                                   const int n) {
  const uint64_t da0 = desc_k(xs), db0 = desc_mn(ta, BM * ROWB);
#pragma unroll
  for (int ks = 0; ks < BM / 16; ++ks) {
    const uint64_t da = wg_desc_at(da0, (ks >> 2) * BN * ROWB + (ks & 3) * 32);
    const uint64_t db = wg_desc_at(db0, ks * 16 * ROWB);
    if (n == 128)
      SDPA_WG(sst, 128)(acc, da, db, 1);
    else
      SDPA_WG(sst, 64)(acc, da, db, 1);
  }
}

/* dP^T = V dO^T and S^T = K Q^T for the warpgroup's 64 keys (rows of the V /
 * K tiles from v_wg / k_wg) and qs queries (rows of the dO / Q tiles from
 * s_do / s_q), over nksv / KS k16 steps (literals); while they run, the
 * dropout keep bits of the queries from q0 (one word each 32, feat a literal:
 * 1 with dropout); complete on return. */
__device__ __forceinline__ void wg_scores(float (*sp)[4], float (*ss)[4], uint32_t *keep,
                                          const sdpa_bwd_params *prm, uint32_t v_wg,
                                          uint32_t k_wg, uint32_t s_do, uint32_t s_q, const int qs,
                                          const int nksv, const int feat, uint32_t bh, int q0,
                                          int j_lo, int lane) {
  wg_fence();
  wg_rows_by_queries(sp, opaque_u32(v_wg), s_do, qs, nksv);
  wg_rows_by_queries(ss, opaque_u32(k_wg), s_q, qs, KS);
  wg_commit();
#pragma unroll
  for (int h2 = 0; h2 < qs / 32; ++h2)
    keep[h2] = feat && prm->has_dropout ? bwd_keep_bits(&prm->p, bh, q0 + 32 * h2, j_lo, lane) : 0u;
  wg_wait0();
  wg_fence_acc(sp, qs / 8);
  wg_fence_acc(ss, qs / 8);
}

/* The scores of queries 16 * ms .. 16 * ms + 15 as A fragments a[ms], for
 * each ms < qs / 16. */
__device__ __forceinline__ void pack_frags(uint32_t (*a)[4], float (*x)[4], const int qs) {
#pragma unroll
  for (int ms = 0; ms < qs / 16; ++ms) pack_a_frag(a[ms], x + 2 * ms, SDPA_BWD_IS_BF16);
}

/* The warp's packed P^T or dS^T fragments (keys 16 kw + g, + 8; queries
 * qc .. qc + qs - 1) into a [BM / 64][BN][64] swizzled tile at ss. */
__device__ __forceinline__ void store_ds(uint32_t ss, const uint32_t (*da)[4], int kw, int qc,
                                         int g, int t, const int qs) {
#pragma unroll
  for (int ms = 0; ms < qs / 16; ++ms)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = kw * 16 + g + 8 * (e & 1), c = qc / 8 + 2 * ms + (e >> 1);
      const uint32_t a = ss + (uint32_t)((c >> 3) * BN * ROWB + r * ROWB + (((c & 7) ^ (r & 7)) << 4) + 4 * t);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(da[ms][e]) : "memory");
    }
}

/* acc = dS K (acc += dS K with add) for dQ[64 rows of block rb, n columns
 * from column 64 cb] (n a literal, 64 or 128): the wgmma issue only (no
 * fence, commit or wait). */
__device__ __forceinline__ void dq_issue(float (*acc)[4], uint32_t s_s, uint32_t s_k, int rb,
                                         int cb, int add, const int n) {
  const uint64_t da0 = desc_mn(s_s + rb * BN * ROWB, BN * ROWB);
  const uint64_t db0 = desc_mn(s_k + cb * BN * ROWB, BN * ROWB);
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) {
    const uint64_t da = wg_desc_at(da0, ks * 16 * ROWB);
    const uint64_t db = wg_desc_at(db0, ks * 16 * ROWB);
    if (n == 128)
      SDPA_WG(sstt, 128)(acc, da, db, add || ks > 0);
    else
      SDPA_WG(sstt, 64)(acc, da, db, add || ks > 0);
  }
}

#endif /* SDPA_BWD_SM90_TILES_CUH */
