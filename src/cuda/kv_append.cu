/*
 * kv_append.cu - the in-call append of the KV-cache forward on the GPU:
 * k_new / v_new [b, s_new, h_k, d] written into the cache (contiguous, with
 * cache_batch_idx, or paged through block_table) at positions
 * cache_seqlens[b] .. cache_seqlens[b] + s_new - 1, k rotated (rotary,
 * interleaved or half-split, first rotary_dim elements) at its position.
 * One block per (new token, kv head), launched on the caller's stream ahead
 * of the attention kernel, which then reads the cache it wrote. 16-bit
 * dtypes (the decode rows' f16 / bf16); the rounding matches the CPU
 * backend's bit for bit (sdpa_rotary_elem).
 */
#include <cuda_runtime.h>

#include "../error.h"
#include "decode_common.cuh"

enum { APPEND_THREADS = 128 };

extern "C" __global__ void __launch_bounds__(APPEND_THREADS)
    sdpa_kv_append_kernel(const __grid_constant__ sdpa_problem p) {
  const int64_t item = blockIdx.x, hk = blockIdx.y;
  const int64_t b = item / p.s_new, i = item % p.s_new;
  const int64_t j = (int64_t)p.cache_seqlens[b] + i;
  const int is_bf16 = p.dtype == SDPA_DTYPE_BF16;
  const uint16_t *kn = (const uint16_t *)p.k_new + b * p.kn_st.sb + i * p.kn_st.ss + hk * p.kn_st.sh;
  const uint16_t *vn = (const uint16_t *)p.v_new + b * p.vn_st.sb + i * p.vn_st.ss + hk * p.vn_st.sh;
  const sdpa_kv_pos pos = sdpa_kv_locate(&p, b, j); /* one block_table read for k and v */
  uint16_t *kc = (uint16_t *)p.k + sdpa_kv_at(p.k_st, pos, hk);
  uint16_t *vc = (uint16_t *)p.v + sdpa_kv_at(p.v_st, pos, hk);
  for (int e = threadIdx.x; e < (int)p.d; e += APPEND_THREADS) {
    const float x = sdpa_rotary_elem(&p, kn, e, j, is_bf16);
    kc[e] = e < p.rotary_dim ? (is_bf16 ? cvt_bf16(x) : cvt_f16(x)) : kn[e];
  }
  for (int e = threadIdx.x; e < (int)p.d_v; e += APPEND_THREADS) vc[e] = vn[e];
}

sdpa_status sdpa_cuda_kv_append(const sdpa_problem *p) {
  if (p->s_new <= 0 || p->b <= 0 || p->h_k <= 0) return SDPA_OK;
  if (p->dtype != SDPA_DTYPE_F16 && p->dtype != SDPA_DTYPE_BF16)
    return sdpa_fail(SDPA_ERR_INTERNAL, "kv append: dtype %s: expected f16 or bf16",
                     sdpa_dtype_string(p->dtype));
  const int64_t items = p->b * p->s_new;
  if (items > 0x7fffffff || p->h_k > 65535)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "kv append: b * s_new = %lld, h_k = %lld: expected < 2^31 and <= 65535",
                     (long long)items, (long long)p->h_k);
  dim3 grid((unsigned)items, (unsigned)p->h_k);
  sdpa_kv_append_kernel<<<grid, APPEND_THREADS, 0, (cudaStream_t)p->stream>>>(*p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "kv append: kernel launch failed: %s", cudaGetErrorString(e));
  return SDPA_OK;
}
