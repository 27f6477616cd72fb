/*
 * fwd_sm90_launch.cu - the host half of the Hopper forward
 * (fwd_sm90_body.cuh): the tensor maps of q, k and v for the copy
 * engine (tma_map.h), the rows' refusal of what they cannot map, and the grid.
 */
#include <stdint.h>
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/fwd/fwd_sm90_common.cuh"
#include "cuda/tma_map.h"

extern "C" const char *sdpa_fwd_sm90_maps(const sdpa_problem *p, int bn, sdpa_fwd_sm90_params *prm) {
  /* dense or varlen: the rows refuse KV caches (SDPA_FWD_SM90_FEATURES) */
  sdpa_bshd q = p->q_st, k = p->k_st, v = p->v_st;
  int64_t sq = p->s_q, sk = p->s_k, b = p->b;
  if (p->layout == SDPA_LAYOUT_VARLEN) { /* rows are global: one batch of total rows */
    q.sb = q.ss * p->total_q; /* any valid stride: the batch extent is 1 */
    k.sb = k.ss * p->total_k;
    v.sb = v.ss * p->total_k;
    sq = p->total_q, sk = p->total_k, b = 1;
  }
  if (!sdpa_tma_map_bshd(&prm->tq, p->q, p->dtype, p->d, sq, p->h, b, q, 64)) return "q";
  if (!sdpa_tma_map_bshd(&prm->tk, p->k, p->dtype, p->d, sk, p->h_k, b, k, bn)) return "k";
  if (!sdpa_tma_map_bshd(&prm->tv, p->v, p->dtype, p->d_v, sk, p->h_k, b, v, bn)) return "v";
  return NULL;
}

extern "C" const char *sdpa_fwd_sm90_refuse(const sdpa_problem *p, const sdpa_kernel_row *row,
                                            char *why, size_t n) {
  /* sdpa_fwd_sm90_grid's items (query blocks x heads x batch) fit an int */
  const int64_t items = (p->s_q + row->block_m - 1) / row->block_m * p->h * p->b;
  if (items > 0x7fffffff) {
    snprintf(why, n, "%lld work items (query blocks x heads x batch; at most 2^31-1 expected)",
             (long long)items);
    return why;
  }
  sdpa_fwd_sm90_params prm;
  const char *unmapped = sdpa_fwd_sm90_maps(p, row->block_n, &prm);
  if (!unmapped) return NULL;
  snprintf(why, n,
           "the copy engine cannot map %s (a CUDA 12 driver, strides and base 16-byte aligned, "
           "strides below 2^40 bytes, expected)", unmapped);
  return why;
}

extern "C" sdpa_status sdpa_fwd_sm90_grid(const sdpa_problem *p, dim3 blocks, const char *name,
                                          sdpa_fwd_sm90_params *prm, dim3 *grid) {
  const int64_t items = (int64_t)blocks.x * blocks.y * blocks.z;
  if (items > 0x7fffffff) /* sdpa_fwd_sm90_refuse turned these away */
    return sdpa_fail(SDPA_ERR_INTERNAL,
                     "%s: %lld work items (query blocks x heads x batch) exceed 2^31-1", name,
                     (long long)items);
  prm->m_blocks = (int)blocks.x;
  prm->items = (int)items;
  const int dense = p->layout == SDPA_LAYOUT_DENSE && p->seqused_k == NULL &&
                    !prm->base.has_dropout;
  const int64_t sms = sdpa_cuda_sm_count();
  prm->pairs = dense && p->window_left < 0 && p->window_right >= 0 && blocks.x > 1;
  /* persistent pairs (a block an SM walking pairs in a fixed stride) only where every pair
     costs about the same: an even count of query blocks (no middle block alone) and s_q <=
     s_k (no query block past the keys); else a block a pair, which the hardware balances */
  const int64_t npairs = (blocks.x + 1) / 2 * (int64_t)blocks.y * blocks.z;
  const int even = blocks.x % 2 == 0 && p->s_q <= p->s_k;
  if (prm->pairs)
    *grid = dim3((unsigned)(even && sms > 0 && sms < npairs ? sms : npairs));
  else if (dense && p->window_left < 0 && p->window_right < 0 && sms > 0 && sms < items)
    *grid = dim3((unsigned)sms);
  else
    *grid = dim3((unsigned)items);
  return SDPA_OK;
}
