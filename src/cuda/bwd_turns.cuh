/*
 * bwd_turns.cuh - the deterministic mode of the Hopper backward: every key
 * block adds its dQ of a query block in key-block order, through one turn
 * counter per (batch, query head, query block) (FlashAttention-3's
 * semaphores), into the single fp32 dQ accumulator.
 *
 * Why not the mma.sync backward's dQ slices (bwd_sm80_common.cuh): a slice
 * per block keeps every block's dQ rows private, so the blocks of all heads
 * sweep nsplit copies of dQ at once (512 MB at d = 256, s 4096, b 4, h 8):
 * the reductions miss L2 and the d = 256 kernel lost a third of its speed.
 * With turns, all key blocks of a head add into the same rows at about the
 * same time (they walk the query blocks in one order: here from the last to
 * the first, so that under causal masks, where key block n starts at query
 * block n, the blocks of a head still meet each query block in lock step),
 * as the atomic mode does, and the only cost is the order: block n adds
 * after block n - 1, a skew of one reduction a block, not a stall a step.
 * Each warp takes its turn on its own (its dQ elements are its own): it
 * waits until the counter says that every warp of the blocks before it has
 * added (turn x warps), adds, and counts itself in; no block barrier.
 *
 * A block waits only for blocks of its own (kv head, batch) with a smaller
 * key-block index, which the grid (key blocks fastest) starts first: no
 * deadlock. The key blocks that visit a query block are contiguous (band
 * masks; bwd_query_blocks), so a block's turn is its distance to the first.
 */
#ifndef SDPA_BWD_TURNS_CUH
#define SDPA_BWD_TURNS_CUH

#include "bwd_sm80_common.cuh"

/* The turn of key block n (bn keys) at query block m (bm rows) of a sequence:
 * n minus the first key block that visits m (binary search: the visitors of
 * m are the contiguous run of key blocks that ends at or after n). */
__device__ __forceinline__ int bwd_turn_rank(const sdpa_bwd_sm80_params *prm, int sq, int sk,
                                             int off, int n, int m, int bn, int bm) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    int a = 0, z = -1;
    const int visits = bwd_query_blocks(sq, sk, off, prm->wl, prm->wr, (int64_t)mid * bn, bn, bm,
                                        &a, &z) &&
                       a <= m && m <= z;
    if (visits)
      hi = mid;
    else
      lo = mid + 1;
  }
  return n - lo;
}

/* The counter of query block m of head hh, sequence b. */
__device__ __forceinline__ int *bwd_turn_at(const sdpa_bwd_sm80_params *prm, int b, int hh, int m) {
  return prm->turns + ((int64_t)b * prm->p.h + hh) * prm->turn_mq + m;
}

/* The warp waits for its turn: lane 0 spins until the counter reaches
 * rank x nwarps (acquire: the earlier blocks' reductions are visible after),
 * and __syncwarp hands that on to the other lanes. */
__device__ __forceinline__ void bwd_turn_wait(const int *turn, int rank, int nwarps, int lane) {
  if (lane == 0) {
    const int want = rank * nwarps;
    int v;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(turn) : "memory");
    } while (v < want);
  }
  __syncwarp();
}

/* After the warp's reductions: __syncwarp orders its lanes' writes before
 * lane 0's fence and release add, which counts the warp in. */
__device__ __forceinline__ void bwd_turn_pass(int *turn, int lane) {
  __syncwarp();
  if (lane == 0) {
    __threadfence();
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn) : "memory");
  }
}

#endif /* SDPA_BWD_TURNS_CUH */
