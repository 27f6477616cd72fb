/*
 * kv_append.cu - the KV-cache forward's work before attention on the GPU:
 * the in-call append (k_new / v_new [b, s_new, h_k, d] written into the
 * cache, contiguous, with cache_batch_idx, or paged through block_table, at
 * positions cache_seqlens[b] .. cache_seqlens[b] + s_new - 1, k rotated at
 * its position) and, for kernels that read q as stored, q's rotary into a
 * copy. One block per (row, kv head) or (row, head), launched on the
 * caller's stream ahead of the attention kernel. Any storage dtype; the
 * rounding matches the CPU backend's bit for bit (sdpa_rotary_elem_any).
 */
#include <cuda_runtime.h>

#include "error.h"
#include "cuda/decode/decode_common.cuh"
#include "cuda/decode/kv_append.h"

enum { APPEND_THREADS = 128 };

extern "C" __global__ void __launch_bounds__(APPEND_THREADS)
    sdpa_kv_append_kernel(const __grid_constant__ sdpa_problem p) {
  const int64_t item = blockIdx.x, hk = blockIdx.y;
  const int64_t b = item / p.s_new, i = item % p.s_new;
  const int64_t j = (int64_t)p.cache_seqlens[b] + i;
  const size_t es = p.dtype == SDPA_DTYPE_F32 ? 4 : 2;
  const char *kn = (const char *)p.k_new + (b * p.kn_st.sb + i * p.kn_st.ss + hk * p.kn_st.sh) * es;
  const char *vn = (const char *)p.v_new + (b * p.vn_st.sb + i * p.vn_st.ss + hk * p.vn_st.sh) * es;
  const sdpa_kv_pos pos = sdpa_kv_locate(&p, b, j); /* one block_table read for k and v */
  char *kc = (char *)p.k + sdpa_kv_at(p.k_st, pos, hk) * es;
  char *vc = (char *)p.v + sdpa_kv_at(p.v_st, pos, hk) * es;
  for (int e = threadIdx.x; e < (int)p.d; e += APPEND_THREADS)
    sdpa_store_f(kc, p.dtype, e, sdpa_rotary_elem_any(&p, kn, e, j));
  for (int e = threadIdx.x; e < (int)p.d_v; e += APPEND_THREADS)
    sdpa_store_f(vc, p.dtype, e, sdpa_load_f(vn, p.dtype, e));
}

/* q row i of (b, hh) rotated at sdpa_rotary_q_pos into dst [b, s_q, h, d]. */
extern "C" __global__ void __launch_bounds__(APPEND_THREADS)
    sdpa_rotate_q_kernel(const __grid_constant__ sdpa_problem p, void *dst) {
  const int64_t item = blockIdx.x, hh = blockIdx.y;
  const int64_t b = item / p.s_q, i = item % p.s_q;
  const size_t es = p.dtype == SDPA_DTYPE_F32 ? 4 : 2;
  const char *q = (const char *)p.q + sdpa_q_offset(&p, p.q_st, b, i, hh) * es;
  char *out = (char *)dst + ((item * p.h + hh) * p.d) * es;
  const int64_t pos = sdpa_rotary_q_pos(&p, b, i);
  for (int e = threadIdx.x; e < (int)p.d; e += APPEND_THREADS)
    sdpa_store_f(out, p.dtype, e, sdpa_rotary_elem_any(&p, q, e, pos));
}

static sdpa_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: kernel launch failed: %s", what, cudaGetErrorString(e));
  return SDPA_OK;
}

/* rows x heads blocks, within the grid's limits */
static sdpa_status row_grid(int64_t rows, int64_t heads, const char *what, dim3 *grid) {
  if (rows > 0x7fffffff || heads > 65535)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "%s: %lld rows, %lld heads: expected < 2^31 and"
                     " <= 65535", what, (long long)rows, (long long)heads);
  *grid = dim3((unsigned)rows, (unsigned)heads);
  return SDPA_OK;
}

sdpa_status sdpa_cuda_kv_append(const sdpa_problem *p) {
  if (p->s_new <= 0 || p->b <= 0 || p->h_k <= 0) return SDPA_OK;
  dim3 grid;
  SDPA_TRY(row_grid(p->b * p->s_new, p->h_k, "kv append", &grid));
  sdpa_kv_append_kernel<<<grid, APPEND_THREADS, 0, (cudaStream_t)p->stream>>>(*p);
  return launched("kv append");
}

size_t sdpa_cuda_rotated_q_bytes(const sdpa_problem *p) {
  if (p->rotary_dim <= 0) return 0;
  return (size_t)(p->b * p->s_q * p->h * p->d) * (p->dtype == SDPA_DTYPE_F32 ? 4 : 2);
}

sdpa_status sdpa_cuda_rotate_q(const sdpa_problem *p, void *dst) {
  if (p->rotary_dim <= 0 || p->b * p->s_q <= 0) return SDPA_OK;
  dim3 grid;
  SDPA_TRY(row_grid(p->b * p->s_q, p->h, "q rotary", &grid));
  sdpa_rotate_q_kernel<<<grid, APPEND_THREADS, 0, (cudaStream_t)p->stream>>>(*p, dst);
  return launched("q rotary");
}
