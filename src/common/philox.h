/*
 * philox.h - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11) and the dropout decision of the contract in sdpa.h.
 * One definition for the CPU backend and every CUDA kernel, so all of them
 * drop the same elements bit for bit. (The test oracle has its own, written
 * separately, and the two are checked against each other and against the
 * published known-answer vectors.)
 */
#ifndef SDPA_PHILOX_H
#define SDPA_PHILOX_H

#include <stdint.h>

#include "../problem.h" /* SDPA_HD */

typedef struct sdpa_u32x4 {
  uint32_t x[4];
} sdpa_u32x4;

SDPA_HD uint32_t sdpa_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
#if defined(__CUDA_ARCH__)
  /* One IMAD.WIDE.U32: written as C, the compiler carries the rounds in
   * 64-bit values and adds instructions on every product's high word. Not
   * volatile, so calls with equal inputs still merge. */
  uint32_t lo;
  asm("{\n\t.reg .u64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%0, %1}, t;\n\t}"
      : "=r"(lo), "=r"(*hi)
      : "r"(a), "r"(b));
  return lo;
#else
  uint64_t prod = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(prod >> 32);
  return (uint32_t)prod;
#endif
}

SDPA_HD sdpa_u32x4 sdpa_philox4x32_10(sdpa_u32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = sdpa_mulhilo32(0xD2511F53u, ctr.x[0], &hi0);
    uint32_t lo1 = sdpa_mulhilo32(0xCD9E8D57u, ctr.x[2], &hi1);
    sdpa_u32x4 next;
    next.x[0] = hi1 ^ ctr.x[1] ^ k0;
    next.x[1] = lo1;
    next.x[2] = hi0 ^ ctr.x[3] ^ k1;
    next.x[3] = lo0;
    ctr = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/* The sixteen 8-bit uniforms for keys j0 = 16*(j/16) .. j0+15 of row i:
 * FlashAttention-2's fields, half the Philox calls of 16-bit ones, at the
 * price of p rounded to a multiple of 1/256. */
SDPA_HD sdpa_u32x4 sdpa_dropout_bits(uint64_t seed, uint32_t offset, uint32_t bh, uint32_t i,
                                     uint32_t j_over_16) {
  sdpa_u32x4 c;
  c.x[0] = j_over_16;
  c.x[1] = i;
  c.x[2] = bh;
  c.x[3] = offset;
  return sdpa_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Field j % 16 of the block returned by sdpa_dropout_bits: byte j % 4 of word
 * (j % 16) / 4 (the block's bytes in little-endian order). */
SDPA_HD uint32_t sdpa_dropout_field(sdpa_u32x4 r, uint32_t j) {
  uint32_t f = j & 15u;
  return (r.x[f >> 2] >> (8u * (f & 3u))) & 0xffu;
}

/* The keep verdicts of a block, byte for byte (the Hopper forward's producer
 * merges their bit 7s into its consumers' words, fwd_sm90_dropout.cuh): bit 7
 * of byte m of word k is 1 iff field 4k + m >= threshold, for any threshold
 * in [0, 256]; the other bits are not specified. Per byte b of a word and t =
 * threshold: bit 7 of (b | 0x80) - (t & 0x7f) says low7(b) >= low7(t) with
 * no borrow across bytes, and one three-input logic op with t's high bit
 * makes it b >= t; t = 256 takes low7 0x80, which clears every byte's bit 7
 * (nothing kept). Three integer ops a word. */
SDPA_HD sdpa_u32x4 sdpa_dropout_keep_bytes(sdpa_u32x4 r, uint32_t threshold) {
  const uint32_t hi = 0x80808080u;
  const uint32_t lo7 = (threshold >= 256u ? 0x80u : (threshold & 0x7fu)) * 0x01010101u;
  const uint32_t t7 = threshold >= 128u ? hi : 0u;
  sdpa_u32x4 keep;
  for (int k = 0; k < 4; ++k) {
    const uint32_t w = r.x[k];
    const uint32_t lo_ge = (w | hi) - lo7;
    keep.x[k] = (w & ~t7) | (~(w ^ t7) & lo_ge);
  }
  return keep;
}

/* The keep bits of a whole block in one word (the mma.sync forwards' and the
 * backwards' form; the CPU and the oracle test field by field): bit
 * sdpa_keep16_pos(j) of the result is 1 iff field j % 16 >= threshold. Word
 * k's verdict on its byte m lands on bit 8m + k. */
SDPA_HD uint32_t sdpa_dropout_keep16(sdpa_u32x4 r, uint32_t threshold) {
  const sdpa_u32x4 kb = sdpa_dropout_keep_bytes(r, threshold);
  uint32_t keep = 0;
  for (int k = 0; k < 4; ++k) /* disjoint bits: + lets the shift and the sum be one LEA.HI */
    keep += (kb.x[k] & 0x80808080u) >> (7 - k);
  return keep;
}

/* Where sdpa_dropout_keep16 puts key j of the block (j in [0, 16)). */
SDPA_HD uint32_t sdpa_keep16_pos(uint32_t j) { return 8u * (j & 3u) + ((j >> 2) & 3u); }

/* 1 if element (bh = batch*h + head, i, j) is dropped. */
SDPA_HD int sdpa_dropped(uint64_t seed, uint32_t offset, uint32_t threshold, uint32_t bh,
                         uint32_t i, uint32_t j) {
  return sdpa_dropout_field(sdpa_dropout_bits(seed, offset, bh, i, j >> 4), j) < threshold;
}

#endif /* SDPA_PHILOX_H */
