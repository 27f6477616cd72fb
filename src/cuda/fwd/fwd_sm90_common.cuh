/*
 * fwd_sm90_common.cuh - what the Hopper forward's instances
 * (fwd_sm90_body.cuh) share with its host half (fwd_sm90_launch.cu): the
 * kernel parameters, which are the mma.sync forwards' (the validated problem
 * and the constants folded for it: fwd_common.cuh) plus the tensor
 * maps of q, k and v that the copy engine reads.
 */
#ifndef SDPA_FWD_SM90_COMMON_CUH
#define SDPA_FWD_SM90_COMMON_CUH

#include <cuda.h>

#include "cuda/fwd/fwd_common.cuh"

/* Passed by value (__grid_constant__: the copy engine reads the maps in place). */
typedef struct sdpa_fwd_sm90_params {
  CUtensorMap tq, tk, tv; /* 64-byte aligned: first */
  sdpa_fwd_params base;
  /* work items: query block (counted from the last), head, batch, in that
   * order (item w is query block m_blocks - 1 - w % m_blocks); a block
   * takes items blockIdx.x, + gridDim.x, ..., or in pairs (a heavy query
   * block and its light mirror, whose causal costs add up to the same) pairs
   * blockIdx.x, + gridDim.x, ...: fwd_sm90_items.h. */
  int m_blocks, items, pairs;
} sdpa_fwd_sm90_params;

/* Host side (fwd_sm90_launch.cu). The tensor maps of q, k, v (dims {d, s,
 * h, b}; varlen {d, total, h, 1}; 128-byte swizzled boxes of 64 columns: q
 * 64 rows, k and v bn rows) into prm; NULL, or the name of the first tensor
 * the copy engine cannot describe (a stride or base the driver refuses; all
 * three without the driver's entry point). The rows' refuse function makes
 * the same maps, so a problem that reaches the run function maps. */
extern "C" const char *sdpa_fwd_sm90_maps(const sdpa_problem *p, int bn, sdpa_fwd_sm90_params *prm);
/* The launch of a Hopper forward instance: its work items (blocks: the
 * query blocks, heads and batch sdpa_fwd_params_init gives) into prm, and a
 * one-dimensional grid: where every item costs the same (dense, unmasked,
 * no seqused_k, no dropout) and there are more items than SMs, a block an
 * SM, each taking items in turn (persistent: an item's first copies run
 * under the previous one's epilogue); dense causal (no left window, no
 * seqused_k, no dropout, two query blocks or more), pairs of query blocks
 * (a heavy one, then its light mirror): a block an SM at most, each taking
 * pairs in turn, where the pairs cost the same (an even count, s_q <= s_k),
 * else a block a pair;
 * else a block an item. SDPA_ERR_INTERNAL naming `name` past 2^31-1 items
 * (the rows' refuse function turns those problems away). */
extern "C" sdpa_status sdpa_fwd_sm90_grid(const sdpa_problem *p, dim3 blocks, const char *name,
                                          sdpa_fwd_sm90_params *prm, dim3 *grid);
/* The shortest s_q at which the 192-row d 64 rows take a causal problem:
 * below it the 128-row rows run it faster (the wide block's diagonal tiles
 * waste more than its shared K / V tiles save). */
#define SDPA_FWD_WIDE_CAUSAL_SQ 2048

/* The Hopper forward rows' own rule: q, k and v map (row->block_n keys a box),
 * at most 2^31 - 1 work items. */
extern "C" const char *sdpa_fwd_sm90_refuse(const sdpa_problem *p, const sdpa_kernel_row *row,
                                            char *why, size_t n);

#endif /* SDPA_FWD_SM90_COMMON_CUH */
