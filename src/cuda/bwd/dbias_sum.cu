/*
 * dbias_sum.cu - dbias over broadcast dims (dbias_sum.h). Each element of
 * the caller's dbias is one thread's sum over the broadcast dims in a fixed
 * order, in fp32, so the result does not depend on the run (deterministic
 * mode needs nothing more). The full gradient costs a write and a read of
 * b h s_q s_k 16-bit values, next to the backward's own traffic.
 */
#include <cuda_runtime.h>

#include "error.h"
#include "cuda/bwd/dbias_sum.h"
#include "cuda/simt/simt_common.cuh" /* simt_ld, simt_st */

extern "C" size_t sdpa_dbias_full_bytes(const sdpa_problem *p) {
  if (!sdpa_dbias_sums(p)) return 0;
  return (size_t)(p->b * p->h * p->s_q * p->s_k) * (p->dtype == SDPA_DTYPE_F32 ? 4u : 2u);
}

extern "C" void sdpa_dbias_full_view(const sdpa_problem *p, void *full, sdpa_problem *q) {
  *q = *p;
  q->dbias = full;
  q->dbias_sk = 1;
  q->dbias_sq = p->s_k;
  q->dbias_sh = p->s_q * p->s_k;
  q->dbias_sb = p->h * p->s_q * p->s_k;
  q->dbias_nb = p->b, q->dbias_nh = p->h, q->dbias_nq = p->s_q;
}

/* One 16-byte chunk of a row of the full gradient: n < its width only at
 * the end of a row whose length is not a multiple of it, where the rows are
 * not 16-byte aligned either and go element by element (zeros past n). */
__device__ __forceinline__ uint4 dbias_load_chunk(const char *at, int es, int n, int vec) {
  if (vec) return *(const uint4 *)at;
  uint32_t u[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) /* unrolled: u stays in registers */
    if (es == 4 && i < 4 && i < n) u[i] = ((const uint32_t *)at)[i];
    else if (es == 2 && i < n) u[i >> 1] |= (uint32_t)((const unsigned short *)at)[i] << (16 * (i & 1));
  return make_uint4(u[0], u[1], u[2], u[3]);
}

__device__ __forceinline__ void dbias_add_chunk(uint4 w, sdpa_dtype t, float *acc) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  if (t == SDPA_DTYPE_F32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += __uint_as_float(u[i]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] += simt_ld(u, t, i);
}

enum { DBIAS_BATCH = 4 }; /* chunks a thread has in flight */

/* Elements of dtype t in a 16-byte chunk, and the chunks of an output row of
 * s_k elements: a thread sums one chunk, the launch covers every chunk of
 * every output row. */
__host__ __device__ __forceinline__ int dbias_chunk_elems(sdpa_dtype t) {
  return t == SDPA_DTYPE_F32 ? 4 : 8;
}
__host__ __device__ __forceinline__ int64_t dbias_row_chunks(int64_t s_k, int64_t per) {
  return (s_k + per - 1) / per;
}

/* A thread sums one 16-byte chunk of an output row over the rows of the
 * full gradient that broadcast into it: its row's indices are worked out
 * once, and it loads DBIAS_BATCH chunks before adding them, so that many
 * loads are in flight. The order over (b, h, q) is fixed, so the result
 * does not depend on the run. */
__global__ void __launch_bounds__(256) dbias_sum_kernel(const __grid_constant__ sdpa_problem p,
                                                        const void *full) {
  const int per = dbias_chunk_elems(p.dtype), es = 16 / per;
  const int vec = p.s_k % per == 0;
  const int64_t chunks = dbias_row_chunks(p.s_k, per);
  const int64_t n = p.dbias_nb * p.dbias_nh * p.dbias_nq * chunks;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = o % chunks, r = o / chunks;
    const int64_t q = r % p.dbias_nq, bh = r / p.dbias_nq;
    const int64_t hh = bh % p.dbias_nh, b = bh / p.dbias_nh;
    const int64_t k0 = c * per;
    const int cnt = (int)(p.s_k - k0 < per ? p.s_k - k0 : per);
    /* a broadcast dim (extent 1) sums every index of the problem's */
    const int64_t b0 = p.dbias_nb == 1 ? 0 : b, b1 = p.dbias_nb == 1 ? p.b : b + 1;
    const int64_t h0 = p.dbias_nh == 1 ? 0 : hh, h1 = p.dbias_nh == 1 ? p.h : hh + 1;
    const int64_t q0 = p.dbias_nq == 1 ? 0 : q, q1 = p.dbias_nq == 1 ? p.s_q : q + 1;
    const int64_t steps = (b1 - b0) * (h1 - h0) * (q1 - q0);
    const char *base = (const char *)full + k0 * es;
    const size_t row = (size_t)p.s_k * es;
    int64_t bi = b0, hi = h0, qi = q0; /* the next row to load, in (b, h, q) order */
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t s0 = 0; s0 < steps; s0 += DBIAS_BATCH) {
      uint4 w[DBIAS_BATCH];
#pragma unroll
      for (int u = 0; u < DBIAS_BATCH; ++u) {
        w[u] = make_uint4(0u, 0u, 0u, 0u);
        if (s0 + u >= steps) continue;
        w[u] = dbias_load_chunk(base + ((bi * p.h + hi) * p.s_q + qi) * row, es, cnt, vec);
        if (++qi == q1) {
          qi = q0;
          if (++hi == h1) hi = h0, ++bi;
        }
      }
#pragma unroll
      for (int u = 0; u < DBIAS_BATCH; ++u)
        if (s0 + u < steps) dbias_add_chunk(w[u], p.dtype, acc);
    }
    const int64_t out = b * p.dbias_sb + hh * p.dbias_sh + q * p.dbias_sq + k0 * p.dbias_sk;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < cnt) simt_st(p.dbias, p.dtype, out + i * p.dbias_sk, acc[i]);
  }
}

extern "C" sdpa_status sdpa_dbias_sum(const sdpa_problem *p, const void *full, const char *who) {
  const int64_t n = p->dbias_nb * p->dbias_nh * p->dbias_nq *
                    dbias_row_chunks(p->s_k, dbias_chunk_elems(p->dtype));
  if (n == 0) return SDPA_OK;
  const int64_t blocks = (n + 255) / 256;
  dbias_sum_kernel<<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0,
                     (cudaStream_t)p->stream>>>(*p, full);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: dbias sum kernel launch failed: %s", who,
                     cudaGetErrorString(e));
  return SDPA_OK;
}
