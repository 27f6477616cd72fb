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
  /* One IMAD.WIDE.U32. Written as C, the compiler carried the rounds in
   * 64-bit values (the key from the 64-bit seed) and spent a zero add and a
   * uniform move on every product's high word: ~115 instructions a call
   * where ~70 do (SASS of the d = 128 forward, 2026-11-21). The asm is not
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

#define SDPA_PHILOX_M0 0xD2511F53u
#define SDPA_PHILOX_M1 0xCD9E8D57u
#define SDPA_PHILOX_W0 0x9E3779B9u
#define SDPA_PHILOX_W1 0xBB67AE85u

/* One round with this round's key (k0, k1). */
SDPA_HD sdpa_u32x4 sdpa_philox_round(sdpa_u32x4 ctr, uint32_t k0, uint32_t k1) {
  uint32_t hi0, hi1;
  const uint32_t lo0 = sdpa_mulhilo32(SDPA_PHILOX_M0, ctr.x[0], &hi0);
  const uint32_t lo1 = sdpa_mulhilo32(SDPA_PHILOX_M1, ctr.x[2], &hi1);
  sdpa_u32x4 next;
  next.x[0] = hi1 ^ ctr.x[1] ^ k0;
  next.x[1] = lo1;
  next.x[2] = hi0 ^ ctr.x[3] ^ k1;
  next.x[3] = lo0;
  return next;
}

SDPA_HD sdpa_u32x4 sdpa_philox4x32_10(sdpa_u32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    ctr = sdpa_philox_round(ctr, k0, k1);
    k0 += SDPA_PHILOX_W0;
    k1 += SDPA_PHILOX_W1;
  }
  return ctr;
}

/* The eight 16-bit uniforms for keys j0 = 8*(j/8) .. j0+7 of row i. */
SDPA_HD sdpa_u32x4 sdpa_dropout_bits(uint64_t seed, uint32_t offset, uint32_t bh, uint32_t i,
                                     uint32_t j_over_8) {
  sdpa_u32x4 c;
  c.x[0] = j_over_8;
  c.x[1] = i;
  c.x[2] = bh;
  c.x[3] = offset;
  return sdpa_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/*
 * The same bits in three parts, for kernels that make many calls of one row
 * and many rows of one key block. With counter (j8, i, bh, offset) the
 * first rounds multiply words that depend on the key block alone or on the
 * row alone: round 1's two products (j8; bh), round 2's (the row's word;
 * the key block's) and round 3's first (the key block's). So a kernel makes
 * sdpa_dropout_key_part once per key block (3 products), sdpa_dropout_row_part
 * once per row (1), and sdpa_dropout_bits_parts per call: 15 products where
 * sdpa_dropout_bits makes 20. Bit for bit the same (tests/test_ref.c).
 */
/* Round 2's first product (of the row's word): {hi, lo}. */
SDPA_HD void sdpa_dropout_row_part(uint64_t seed, uint32_t bh, uint32_t i, uint32_t *hi,
                                   uint32_t *lo) {
  uint32_t h1;
  (void)sdpa_mulhilo32(SDPA_PHILOX_M1, bh, &h1);
  *lo = sdpa_mulhilo32(SDPA_PHILOX_M0, h1 ^ i ^ (uint32_t)seed, hi);
}

/* The key block's words after round 3's first product: x[0] round 2's x3
 * with its key, x[1] round 2's y1, x[2] / x[3] round 3's hi / lo of M0. */
SDPA_HD sdpa_u32x4 sdpa_dropout_key_part(uint64_t seed, uint32_t offset, uint32_t bh,
                                         uint32_t j_over_8) {
  const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t h0, h1, g1, y0h;
  const uint32_t l0 = sdpa_mulhilo32(SDPA_PHILOX_M0, j_over_8, &h0);
  const uint32_t l1 = sdpa_mulhilo32(SDPA_PHILOX_M1, bh, &h1);
  /* round 1 -> (x0 row, x1 = l1, x2 = h0 ^ offset ^ k1, x3 = l0); round 2's key block product */
  const uint32_t m1 = sdpa_mulhilo32(SDPA_PHILOX_M1, h0 ^ offset ^ k1, &g1);
  const uint32_t y0 = g1 ^ l1 ^ (k0 + SDPA_PHILOX_W0);
  sdpa_u32x4 r;
  r.x[0] = l0 ^ (k1 + SDPA_PHILOX_W1);
  r.x[1] = m1;
  r.x[3] = sdpa_mulhilo32(SDPA_PHILOX_M0, y0, &y0h);
  r.x[2] = y0h;
  return r;
}

/* sdpa_dropout_bits from the parts (row: sdpa_dropout_row_part's hi / lo;
 * key: sdpa_dropout_key_part's). */
SDPA_HD sdpa_u32x4 sdpa_dropout_bits_parts(uint64_t seed, uint32_t row_hi, uint32_t row_lo,
                                           sdpa_u32x4 key) {
  uint32_t k0 = (uint32_t)seed + 2u * SDPA_PHILOX_W0, k1 = (uint32_t)(seed >> 32) + 2u * SDPA_PHILOX_W1;
  /* round 2's words: y0 (used by key.x[2..3]), y1 = key.x[1], y2, y3 = row_lo */
  const uint32_t y2 = row_hi ^ key.x[0];
  uint32_t h1;
  const uint32_t l1 = sdpa_mulhilo32(SDPA_PHILOX_M1, y2, &h1);
  sdpa_u32x4 ctr; /* after round 3 */
  ctr.x[0] = h1 ^ key.x[1] ^ k0;
  ctr.x[1] = l1;
  ctr.x[2] = key.x[2] ^ row_lo ^ k1;
  ctr.x[3] = key.x[3];
  for (int round = 3; round < 10; ++round) {
    k0 += SDPA_PHILOX_W0;
    k1 += SDPA_PHILOX_W1;
    ctr = sdpa_philox_round(ctr, k0, k1);
  }
  return ctr;
}

/* Field j % 8 of the block returned by sdpa_dropout_bits. */
SDPA_HD uint32_t sdpa_dropout_field(sdpa_u32x4 r, uint32_t j) {
  uint32_t f = j & 7u;
  return (r.x[f >> 1] >> (16u * (f & 1u))) & 0xffffu;
}

/* 1 if element (bh = batch*h + head, i, j) is dropped. */
SDPA_HD int sdpa_dropped(uint64_t seed, uint32_t offset, uint32_t threshold, uint32_t bh,
                         uint32_t i, uint32_t j) {
  return sdpa_dropout_field(sdpa_dropout_bits(seed, offset, bh, i, j >> 3), j) < threshold;
}

#endif /* SDPA_PHILOX_H */
