/*
 * fwd_launch.cu - the host half of the mma.sync forwards' launch, one copy
 * for every instance of fwd_sm80_body.cuh and fwd_tf32_body.cuh: the grid of
 * a problem (query blocks x heads x batch, checked against CUDA's limits),
 * the kernel parameters the host folds from it (sdpa_fwd_params:
 * exp2-domain multipliers, softcap, dropout scale, feature flags), and the
 * launch (shared-memory opt-in, cudaLaunchKernel, its error; also the Hopper
 * forward's, whose parameters add tensor maps).
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/fwd/fwd_common.cuh"

extern "C" sdpa_status sdpa_fwd_params_init(const sdpa_problem *p, int bm, const char *name,
                                            sdpa_fwd_params *prm, dim3 *grid) {
  const int64_t m_blocks = (p->s_q + bm - 1) / bm;
  if (m_blocks > 0x7fffffff || p->h > 65535 || p->b > 65535)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "%s: grid (%lld query blocks, h = %lld, b = %lld) exceeds CUDA's limits "
                     "(2^31-1, 65535, 65535)",
                     name, (long long)m_blocks, (long long)p->h, (long long)p->b);
  *grid = dim3((unsigned)m_blocks, (unsigned)p->h, (unsigned)p->b);

  memset(prm, 0, sizeof *prm);
  prm->p = *p;
  const int softcap = p->softcap > 0.f;
  sdpa_score_consts(p, &prm->score_mul, &prm->softcap_post);
  /* without softcap, bias and alibi, a positive multiplier commutes with the
   * row max: scores stay raw and the softmax applies it in its FFMA */
  prm->fold = !softcap && p->bias == NULL && p->alibi == NULL && prm->score_mul > 0.f;
  prm->exp_mul = prm->fold ? prm->score_mul : 1.f;
  prm->out_scale = p->dropout_p > 0.f ? p->drop_scale : 1.f;
  prm->h_per_hk = (int)(p->h / p->h_k);
  prm->has_softcap = softcap;
  prm->has_alibi = p->alibi != NULL;
  prm->has_dropout = p->dropout_p > 0.f;
  prm->has_bias = p->bias != NULL;
  return SDPA_OK;
}

extern "C" const char *sdpa_fwd_sm80_refuse(const sdpa_problem *p, const sdpa_kernel_row *row,
                                            char *why, size_t n) {
  (void)row;
  if (!p->bias) return NULL;
  if (p->dropout_p > 0.f) {
    snprintf(why, n, "a bias with dropout (the bucket's _full row runs it)");
    return why;
  }
  /* the bias tile is copied by cp.async in whole 16-byte chunks */
  if (((uintptr_t)p->bias & 15u) != 0 || (p->bias_sb | p->bias_sh | p->bias_sq | p->s_k) % 8 != 0) {
    snprintf(why, n,
             "bias rows not in whole 16-byte chunks (base %p, strides b %lld, h %lld, q %lld, "
             "s_k %lld: a 16-byte aligned base and multiples of 8 expected; the bucket's _full "
             "row runs it)",
             p->bias, (long long)p->bias_sb, (long long)p->bias_sh, (long long)p->bias_sq,
             (long long)p->s_k);
    return why;
  }
  return NULL;
}

extern "C" sdpa_status sdpa_kernel_launch1(const void *kernel, const void *params, void *stream,
                                           dim3 grid, int threads, int smem,
                                           unsigned char *smem_set, const char *name) {
  SDPA_TRY(sdpa_cuda_opt_in_smem(kernel, smem, smem_set, name));
  void *args[1] = {(void *)params};
  cudaError_t e = cudaLaunchKernel(kernel, grid, dim3((unsigned)threads), args, (size_t)smem,
                                   (cudaStream_t)stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: kernel launch failed: %s", name, cudaGetErrorString(e));
  return SDPA_OK;
}
