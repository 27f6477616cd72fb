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
