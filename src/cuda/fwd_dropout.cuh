/*
 * fwd_dropout.cuh - dropout in the forwards whose score tiles are in the
 * m16n8 accumulator layout (fwd_sm80_body.cuh: mma.sync; fwd_sm90_body.cuh:
 * wgmma, the same layout per warp): each tile's keep bits from Philox
 * (philox.h, the contract's mask), and their application to P. A body
 * includes it after fwd_softmax.cuh; it reads MT (m16 tiles per warp) and
 * PS (k16 steps of P V: key pairs of n8 tiles).
 */
#ifndef SDPA_FWD_DROPOUT_CUH
#define SDPA_FWD_DROPOUT_CUH

#include <stdint.h>

#include "../common/philox.h"
#include "fwd_sm80_common.cuh"

/* Dropout bits of the tile at key n0. In the m16n8 layout the four lanes of
 * a quad share a row and an 8-key block: for n8 tiles (2 ps, 2 ps + 1) of
 * m16 tile mt the quad needs four Philox calls, rows (r, r + 8) x the two
 * blocks, and lane t needs fields 2t, 2t + 1 of each. So lane t evaluates
 * call c = t only (hf = c >> 1, n8 tile 2 ps + (c & 1)) as eight drop bits,
 * the quad gathers the four bytes by two shuffles, and lane t keeps bits
 * 2t, 2t + 1 of each: one call a lane instead of four (2026-11-21: the
 * four-fold redundant form ran at 0.22x-0.39x of the p = 0 speed). Bit
 * 8c + 2 (ps & 3) + e of dm[mt][ps / 4] drops key 2t + e of call c. The
 * calls depend on no score, so the main loop makes a tile's before its
 * Q K^T, where the integer work can issue beside the tensor cores (the
 * probs pass after it: registers). */
enum { DW = (PS + 3) / 4 }; /* drop-bit words per m16 tile */

__device__ __forceinline__ void drop_mask(uint32_t (*dm)[DW], const sdpa_problem *p,
                                          const fwd_rows *rw, uint32_t bh, int n0, int t) {
  const uint32_t thr = p->drop_threshold;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int ps = 0; ps < PS; ++ps) {
      const sdpa_u32x4 r =
          sdpa_dropout_bits(p->seed, p->offset, bh, (uint32_t)row_i(rw, mt, t >> 1),
                            (uint32_t)((n0 >> 3) + 2 * ps + (t & 1)));
      uint32_t own = 0; /* bit f: key f of the block dropped */
#pragma unroll
      for (int f = 0; f < 8; ++f)
        own |= (uint32_t)(sdpa_dropout_field(r, (uint32_t)f) < thr) << f;
      uint32_t all = own << (8 * t); /* byte c: call c */
      all |= __shfl_xor_sync(0xffffffffu, all, 1);
      all |= __shfl_xor_sync(0xffffffffu, all, 2);
      const uint32_t mine = ((all >> (2 * t)) & 0x03030303u) << (2 * (ps & 3));
      dm[mt][ps >> 2] = (ps & 3) ? dm[mt][ps >> 2] | mine : mine;
    }
}

/* Zeroes (negate: flips the sign of, the probs pass's marking) the dropped
 * elements of n8 tiles (2 ps, 2 ps + 1) of m16 tile mt: a select on P. */
__device__ __forceinline__ void drop_apply(float (*s)[NT][4], const uint32_t (*dm)[DW], int mt,
                                           int ps, int negate) {
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float *x = &s[mt][2 * ps + (c & 1)][2 * (c >> 1) + e];
      const int dropped = (dm[mt][ps >> 2] >> (8 * c + 2 * (ps & 3) + e)) & 1u;
      *x = dropped ? (negate ? -*x : 0.f) : *x;
    }
}

#endif /* SDPA_FWD_DROPOUT_CUH */
