/*
 * test_bwd_tiles.c - the backward's tile arithmetic that the GPU kernels
 * trust without checking (src/cuda/bwd/bwd_common.cuh), on the host:
 *   - bwd_key_block_hi: the key blocks that visit a query block
 *     (bwd_query_blocks) are exactly a run ending there, so the
 *     deterministic tiled dQ can count a block's turn from it;
 *   - bwd_rot_place: in rotated walks every key block's place at a step is
 *     its rank in the order the key blocks reach that step's position;
 *   - bwd_dq_tile_row0 / bwd_dq_tiled_rows: in the tiled dQ accumulator
 *     every sequence's tiles lie past the previous sequence's and inside
 *     the accumulator.
 * Exhaustive over small sequences, both causal alignments, windows and the
 * bucket geometries of the warp-specialized rows.
 */
#include <stdint.h>
#include <stdio.h>

#include "cuda/bwd/bwd_common.cuh"

static int failures;

static void check(int ok, const char *what, long long a, long long b, long long c,
                  long long d) {
  if (!ok && failures++ < 20) printf("FAIL %s (%lld %lld %lld %lld)\n", what, a, b, c, d);
}

/* every query block of one problem: its visitors, by bwd_query_blocks, form
 * the run [first visitor, bwd_key_block_hi] */
static void visitors(int64_t sq, int64_t sk, int64_t off, int64_t wl, int64_t wr, int bm,
                     int bn) {
  const int64_t nkb = (sk + bn - 1) / bn, nmb = (sq + bm - 1) / bm;
  for (int64_t mb = 0; mb < nmb; ++mb) {
    int64_t first = -1, last = -1, count = 0;
    for (int64_t n = 0; n < nkb; ++n) {
      int lo, hi;
      if (bwd_query_blocks(sq, sk, off, wl, wr, n * bn, bn, bm, &lo, &hi) && lo <= mb &&
          mb <= hi) {
        if (first < 0) first = n;
        last = n;
        ++count;
      }
    }
    if (count == 0) continue; /* nobody adds to the tile, nobody waits on it */
    check(count == last - first + 1, "visitors not contiguous", sq, sk, mb, count);
    check(last == bwd_key_block_hi(sq, sk, off, wr, mb, bm, bn), "bwd_key_block_hi", sq, sk, mb,
          last);
  }
}

/* nkb key blocks on walks of n steps, key block j starting at position j:
 * its place at each position is the number of key blocks that reach the
 * position in fewer steps (brute force) */
static void rotated(int64_t nkb, int64_t n) {
  for (int64_t pos = 0; pos < n; ++pos)
    for (int64_t j = 0; j < nkb; ++j) {
      const int64_t t = ((pos - j) % n + n) % n; /* j's step at pos */
      int64_t before = 0;
      for (int64_t k = 0; k < nkb; ++k) before += ((pos - k) % n + n) % n < t;
      check(bwd_rot_place(t, j, nkb, n) == before, "bwd_rot_place", nkb, n, pos, j);
    }
}

int main(void) {
  for (int64_t n = 1; n <= 40; ++n)
    for (int64_t nkb = 1; nkb <= n; ++nkb) rotated(nkb, n);
  /* (bm, bn): the d 128, d 64 and d 192 (the d split) rows */
  const int geo[][2] = {{64, 128}, {128, 128}, {64, 64}};
  const int64_t unb = (int64_t)1 << 30;         /* sdpa_window_clamp's unbounded */
  const int64_t wins[][2] = {{unb, unb}, {unb, 0}, {90, 30}, {100, 0}, {0, 0}, {5, 300}};
  for (int g = 0; g < 3; ++g)
    for (int64_t sq = 1; sq <= 420; sq += 37)
      for (int64_t sk = 1; sk <= 700; sk += 53)
        for (int w = 0; w < 6; ++w)
          for (int br = 0; br < 2; ++br)
            visitors(sq, sk, br ? sk - sq : 0, wins[w][0], wins[w][1], geo[g][0], geo[g][1]);

  /* varlen: sequences of lengths len[0 .. n) one after another */
  const int lens[] = {1, 63, 64, 65, 127, 128, 129, 300, 0, 7, 64, 200};
  const int nl = (int)(sizeof lens / sizeof lens[0]);
  for (int start = 0; start < nl; ++start) {
    int64_t q_start = 0, prev_end = 0;
    int b = 0;
    for (int k = start; k < nl; ++k, ++b) {
      const int64_t r0 = bwd_dq_tile_row0(q_start, b);
      check(r0 % 64 == 0, "row0 not a tile boundary", start, b, r0, 0);
      check(r0 >= prev_end, "sequence overlaps the previous one's tiles", start, b, r0, prev_end);
      prev_end = r0 + (lens[k] + 63) / 64 * 64;
      q_start += lens[k];
    }
    sdpa_problem p = {0};
    p.layout = SDPA_LAYOUT_VARLEN;
    p.total_q = q_start;
    p.b = b;
    check(bwd_dq_tiled_rows(&p) >= prev_end, "accumulator too short", start, b,
          bwd_dq_tiled_rows(&p), prev_end);
  }
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok   bwd tiles: visitors of every query block, rotated places, tiled dQ rows\n");
  return 0;
}
