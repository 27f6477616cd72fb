/*
 * fwd_sm90_dropout.cuh - the Hopper forward's dropout mask made by the
 * producer warpgroup (key tiles of 128: SDPA_MASK_BY_PRODUCER; with tiles of
 * 64 the consumers make it, fwd_dropout.cuh's drop_mask, as the mma.sync
 * forwards do). Each producer thread makes one query row's keep bits of a
 * tile (philox.h, the contract's mask) into a two-stage ring in shared
 * memory, in the words its four consumer lanes apply; each consumer thread
 * loads its two words (rows hf = 0, 1) with one load.
 *
 * Why: the consumers' issue is latency-bound, so Philox chains in them
 * lengthen every tile's critical path, while the producer warpgroup idles
 * but for one thread's copies; with tiles of 64 (d 256) the consumers' tile
 * is long enough to hide their calls.
 *
 * Layout (keep_bit_row, the one statement): consumer thread ctid (warp w =
 * ctid / 32 owns rows 16 w + g and 16 w + g + 8, g = lane / 4, t = lane % 4)
 * loads uint2 ring[stage][ctid]; word hf is row 16 w + g + 8 hf; its element
 * (step ps, n8 tile 2 ps + n8, column 2t + e) is bit keep_bit_row(ps, n8, e).
 * The body includes this after fwd_dropout.cuh; it reads BM, PS (and
 * places the ring: MASK_STAGE bytes a stage, a uint2 a consumer thread).
 */
#ifndef SDPA_FWD_SM90_DROPOUT_CUH
#define SDPA_FWD_SM90_DROPOUT_CUH

#include <stdint.h>

#include "common/philox.h"
#include "cuda/fwd/fwd_dropout.cuh" /* drop_pair */
#include "cuda/ptx/ptx_tma.cuh"     /* mbar_* */

static_assert(!SDPA_MASK_BY_PRODUCER || PS <= 8, "a row's keep bits of a tile in one word a lane");
static_assert(!SDPA_MASK_BY_PRODUCER || BM <= 128, "a producer thread a query row");

/* Keep bit of element (step ps, n8 tile 2 ps + n8, column 2t + e) in its row's
 * word: steps 0-3 in the low half word, 4-7 in the high one, two bits a step
 * (n8 = 1 below n8 = 0) from bit 7 down, e = 1 at e = 0's + 8 (as drop_pair
 * reads them). */
__device__ __forceinline__ int keep_bit_row(int ps, int n8, int e) {
  return 16 * (ps >> 2) + 8 * e + 7 - 2 * (ps & 3) - n8;
}

/* Producer thread R: the keep bits of query row i (the block's row R)
 * against the key tile at n0 into stage st (its consumers' words), once the
 * stage is free (empty's phase ph ^ 1 done), then one arrival on full.
 * Lane t's elements of a step are keys 8 n8 + 2t + e: bit 7 of byte 2 (t &
 * 1) + e of keep-byte word 2 n8 + (t >> 1). So per step the words 0 / 2 (t =
 * 0, 1) and 1 / 3 (t = 2, 3) are merged, shifted to the step's two bits of
 * every byte, into x (t = 0, 1) and y (t = 2, 3) for steps 0-3 and 4-7; one
 * byte permute a lane at the end picks its bytes. */
__device__ __forceinline__ void mask_row(const sdpa_problem *p, uint32_t bh, int i, int n0, int R,
                                         uint32_t st, uint32_t full, uint32_t empty,
                                         uint32_t ph) {
  uint32_t x[2] = {0u, 0u}, y[2] = {0u, 0u};
#pragma unroll
  for (int ps = 0; ps < PS; ++ps) {
    const sdpa_u32x4 kb = sdpa_dropout_keep_bytes(
        sdpa_dropout_bits(p->seed, p->offset, bh, (uint32_t)i, (uint32_t)((n0 >> 4) + ps)),
        p->drop_threshold);
    const int sh = 2 * (ps & 3); /* n8 = 0 to bit 7 - sh of each byte, n8 = 1 to 6 - sh */
    const uint32_t m0 = 0x80808080u >> sh, m1 = 0x40404040u >> sh;
    x[ps >> 2] |= ((kb.x[0] >> sh) & m0) | ((kb.x[2] >> (sh + 1)) & m1);
    y[ps >> 2] |= ((kb.x[1] >> sh) & m0) | ((kb.x[3] >> (sh + 1)) & m1);
  }
  /* lane t: bytes 2 (t & 1), + 1 of steps 0-3 (low half) and of steps 4-7 */
  const uint32_t w[4] = {__byte_perm(x[0], x[1], 0x5410), __byte_perm(x[0], x[1], 0x7632),
                         __byte_perm(y[0], y[1], 0x5410), __byte_perm(y[0], y[1], 0x7632)};
  mbar_wait(empty, ph ^ 1u);
  /* consumer ctid = 32 (R / 16) + 4 (R % 8) + t, word (R / 8) & 1 */
  const uint32_t a = st + ((32 * (R >> 4) + 4 * (R & 7)) * 2 + ((R >> 3) & 1)) * 4;
#pragma unroll
  for (int t = 0; t < 4; ++t)
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a + 8 * t), "r"(w[t]) : "memory");
  mbar_arrive(full); /* release: this thread's stores before it */
}

/* Consumer thread ctid: its two words of the tile in stage st, then the
 * stage freed (lane 0 of each warp, after the warp's loads). */
__device__ __forceinline__ uint2 mask_load(uint32_t st, uint32_t full, uint32_t empty,
                                           uint32_t ph, int ctid) {
  mbar_wait(full, ph);
  uint2 m;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(m.x), "=r"(m.y) : "r"(st + ctid * 8));
  __syncwarp();
  if ((ctid & 31) == 0) mbar_arrive(empty);
  return m;
}

/* Zeroes the dropped elements of P V's A fragment a of step ps (a[2 n8 + hf]
 * holds elements e = 0, 1 of (n8, hf)), keep bits in the ring's words m. */
__device__ __forceinline__ void drop_packed_rows(uint32_t *a, uint2 m, int ps) {
#pragma unroll
  for (int n8 = 0; n8 < 2; ++n8)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      drop_pair(&a[2 * n8 + hf], hf ? m.y : m.x, keep_bit_row(ps, n8, 0));
}

#endif /* SDPA_FWD_SM90_DROPOUT_CUH */
