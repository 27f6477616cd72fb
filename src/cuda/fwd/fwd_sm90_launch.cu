/*
 * fwd_sm90_launch.cu - the host half of the Hopper forward
 * (fwd_sm90_body.cuh): the tensor maps of q, k and v for the copy
 * engine, made by the driver's cuTensorMapEncodeTiled (looked up once
 * through the runtime, so the library links no libcuda).
 */
#include <stdint.h>
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/fwd/fwd_sm90_common.cuh"

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's encoder, or NULL (a driver older than CUDA 12). Looked up on
 * the first call; a racing second lookup stores the same pointer. */
static encode_tiled_fn encoder(void) {
  static encode_tiled_fn fn;
  static int looked;
  if (!looked) {
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = (encode_tiled_fn)f;
    looked = 1;
  }
  return fn;
}

/* Map of a [b, s, h, d] tensor (strides st in elements) as dims {d, s, h, b},
 * boxes of 64 columns x `rows` rows, 128-byte swizzle, zeros outside. */
static int make_map(encode_tiled_fn enc, CUtensorMap *m, const void *base, sdpa_dtype dt,
                    int64_t d, int64_t s, int64_t h, int64_t b, sdpa_bshd st, int rows) {
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)s, (cuuint64_t)h, (cuuint64_t)b};
  const cuuint64_t strides[3] = {(cuuint64_t)st.ss * 2, (cuuint64_t)st.sh * 2,
                                 (cuuint64_t)st.sb * 2};
  const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  if (st.ss <= 0 || st.sh < 0 || st.sb < 0) return 0;
  const CUtensorMapDataType t = dt == SDPA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return enc(m, t, 4, (void *)base, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

extern "C" const char *sdpa_fwd_sm90_maps(const sdpa_problem *p, int bn, sdpa_fwd_sm90_params *prm) {
  encode_tiled_fn enc = encoder();
  if (!enc) return "q, k or v (the driver has no cuTensorMapEncodeTiled: CUDA 12 or later expected)";
  /* dense or varlen: the rows refuse KV caches (SDPA_FWD_SM90_FEATURES) */
  sdpa_bshd q = p->q_st, k = p->k_st, v = p->v_st;
  int64_t sq = p->s_q, sk = p->s_k, b = p->b;
  if (p->layout == SDPA_LAYOUT_VARLEN) { /* rows are global: one batch of total rows */
    q.sb = q.ss * p->total_q; /* any valid stride: the batch extent is 1 */
    k.sb = k.ss * p->total_k;
    v.sb = v.ss * p->total_k;
    sq = p->total_q, sk = p->total_k, b = 1;
  }
  if (!make_map(enc, &prm->tq, p->q, p->dtype, p->d, sq, p->h, b, q, 64)) return "q";
  if (!make_map(enc, &prm->tk, p->k, p->dtype, p->d, sk, p->h_k, b, k, bn)) return "k";
  if (!make_map(enc, &prm->tv, p->v, p->dtype, p->d_v, sk, p->h_k, b, v, bn)) return "v";
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
           "the copy engine cannot map %s (strides and base 16-byte aligned, strides below 2^40 "
           "bytes, expected)", unmapped);
  return why;
}

extern "C" sdpa_status sdpa_fwd_sm90_grid(const sdpa_problem *p, dim3 blocks, int pairs_ok,
                                          const char *name, sdpa_fwd_sm90_params *prm,
                                          dim3 *grid) {
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
  prm->pairs = pairs_ok && dense && p->window_left < 0 && p->window_right >= 0 && blocks.x > 1;
  if (prm->pairs)
    *grid = dim3((unsigned)((blocks.x + 1) / 2 * (int64_t)blocks.y * blocks.z));
  else if (dense && p->window_left < 0 && p->window_right < 0 && sms > 0 && sms < items)
    *grid = dim3((unsigned)sms);
  else
    *grid = dim3((unsigned)items);
  return SDPA_OK;
}
