/*
 * fwd_dropout.cuh - dropout in the forwards whose score tiles are in the
 * m16n8 accumulator layout (fwd_sm80_body.cuh: mma.sync; fwd_sm90_body.cuh:
 * wgmma, the same layout per warp, with key tiles of 64; with tiles of 128
 * its producer makes the bits, fwd_sm90_dropout.cuh): each tile's keep bits
 * from Philox (philox.h, the contract's mask), and their application to P. A
 * body includes it after fwd_softmax.cuh; it reads MT (m16 tiles per warp)
 * and PS (k16 steps of P V: key pairs of n8 tiles).
 */
#ifndef SDPA_FWD_DROPOUT_CUH
#define SDPA_FWD_DROPOUT_CUH

#include <stdint.h>

#include "common/philox.h"
#include "cuda/fwd/fwd_common.cuh"

/* Keep bits of the tile at key n0. In the m16n8 layout the four lanes of a
 * quad share a row and an 8-key block: for the k16 steps (2 pp, 2 pp + 1) of
 * m16 tile mt the quad needs four Philox calls (16 keys a call), rows (r,
 * r + 8) x the two steps. So lane t makes call (row half t & 1, step 2 pp +
 * (t >> 1)) as sixteen keep bits (sdpa_dropout_keep16: key 4k + m of the
 * step at bit 8m + k), the quad gathers them by two shuffles (row half hf
 * into nibble hf of each byte), and lane t keeps the 16 bits of its
 * elements: one call a lane for 16 of its elements (not four lanes making
 * the same call). Element (n8 tile 2 ps + n8, row half hf, column 2t + e) is
 * kept iff bit keep_bit(ps, n8, hf, e) of dm[mt][ps / 4] is set
 * (drop_packed applies them to P V's operand, drop_negate marks probs).
 * The calls depend on no score, so the main loop makes a tile's before its
 * Q K^T, where the integer work can issue beside the tensor cores (the probs
 * pass after it: registers). */
enum { DW = (PS + 3) / 4 }; /* keep-bit words per m16 tile */
#ifndef SDPA_FWD_NO_DROPOUT /* (key tiles of 80 have an odd step count, and no dropout) */
static_assert(PS % 2 == 0, "the lanes of a quad split k16 steps in pairs");
#endif

/* The keep bit of element (n8, hf, e) of step ps in word dm[mt][ps / 4]: the
 * one statement of the layout drop_mask writes and drop_negate / drop_packed
 * read (e = 1 is e = 0's bit + 8). */
__device__ __forceinline__ int keep_bit(int ps, int n8, int hf, int e) {
  return 16 * ((ps >> 1) & 1) + 8 * e + 4 * hf + 2 * n8 + (ps & 1);
}

__device__ __forceinline__ void drop_mask(uint32_t (*dm)[DW], const sdpa_problem *p,
                                          const fwd_rows *rw, uint32_t bh, int n0, int t) {
  const uint32_t thr = p->drop_threshold;
  /* lane t's element (hf, n8, e) of a step is key 8 n8 + 2t + e = 4k + m of
   * it (k = 2 n8 + (t >> 1), m = 2 (t & 1) + e): bit 8m + 4hf + k of the
   * gathered word, i.e. bit 8e + 4hf + 2 n8 of the word shifted by sh. */
  const int sh = 16 * (t & 1) + (t >> 1);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int pp = 0; pp < PS / 2; ++pp) {
      const sdpa_u32x4 r =
          sdpa_dropout_bits(p->seed, p->offset, bh, (uint32_t)row_i(rw, mt, t & 1),
                            (uint32_t)((n0 >> 4) + 2 * pp + (t >> 1)));
      uint32_t x = sdpa_dropout_keep16(r, thr) << (4 * (t & 1));
      x |= __shfl_xor_sync(0xffffffffu, x, 1);                 /* both halves of my step */
      const uint32_t y = __shfl_xor_sync(0xffffffffu, x, 2);   /* the other step */
      const uint32_t w0 = (t >> 1) ? y : x, w1 = (t >> 1) ? x : y; /* steps 2 pp, 2 pp + 1 */
      /* keep_bit's layout: bit 8e + 4hf + 2 n8 + (ps & 1), a half word per pp */
      const uint32_t mine = ((w0 >> sh) & 0x5555u) | (((w1 >> sh) & 0x5555u) << 1);
      dm[mt][pp >> 1] = (pp & 1) ? dm[mt][pp >> 1] | (mine << 16) : mine;
    }
}

/* Flips the sign of the dropped elements of n8 tiles (2 ps, 2 ps + 1) of m16
 * tile mt (the probs pass's marking; the P V operand takes drop_packed). */
__device__ __forceinline__ void drop_negate(float (*s)[NT][4], const uint32_t (*dm)[DW], int mt,
                                            int ps) {
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float *x = &s[mt][2 * ps + n8][2 * hf + e];
        *x = (dm[mt][ps >> 2] >> keep_bit(ps, n8, hf, e)) & 1u ? *x : -*x;
      }
}

/* Zeroes the dropped ones of the two elements in the packed word *a (low
 * half e = 0, high half e = 1) whose keep bits are bits b0 and b0 + 8 of w,
 * both in the same half word: w shifted so that they land on bits 7 and 15
 * (or 23 and 31), one byte permute with sign replication turns them into
 * 0x0000 / 0xffff halves, an AND applies them: fewer instructions than a
 * bit test and a select an element. */
__device__ __forceinline__ void drop_pair(uint32_t *a, uint32_t w, int b0) {
  const uint32_t x = w << (7 - (b0 & 7));
  const uint32_t sel = (b0 >> 4) ? 0xbbaau : 0x9988u; /* bytes 2, 3 or 0, 1, sign */
  uint32_t m;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(m) : "r"(x), "r"(sel));
  *a &= m;
}

/* Zeroes the dropped elements of P V's A fragment a of step ps (pack_a_frag's
 * order: a[2 n8 + hf] holds elements e = 0, 1 of (n8, hf) in its low, high
 * half), keep bits in drop_mask's words. */
__device__ __forceinline__ void drop_packed(uint32_t *a, const uint32_t *dmw, int ps) {
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      drop_pair(&a[2 * n8 + hf], dmw[ps >> 2], keep_bit(ps, n8, hf, 0));
}

#endif /* SDPA_FWD_DROPOUT_CUH */
