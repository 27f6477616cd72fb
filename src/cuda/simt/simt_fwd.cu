/*
 * simt_fwd.cu - fwd_simt, the forward that never refuses a valid problem on
 * CUDA (geometry and score pipeline: simt_common.cuh). f32 / f16 / bf16
 * storage with fp32 math (expf, not __expf: fp32-class accuracy for f32), any
 * d and d_v, any strides and alignment, dense, varlen (+ seqused_k) and KV
 * cache (contiguous with cache_batch_idx or leftpad, or paged; the append and
 * q's rotary run first, kv_append.cu), paged varlen, every score modifier,
 * dropout, probs, lse, GQA; not forced split-KV.
 *
 * One block per (batch, head, 16 query rows, 128 output columns), walked with
 * a block-stride loop over a 1-D grid (no grid-dimension limits): the block
 * streams the visible keys 32 at a time, S = q.k through simt_dot_tile, an
 * online softmax per row in registers (running max and sum; warp shuffles),
 * then O += P V with the 32 x 128 V tile staged in shared memory and P
 * broadcast from the lane that owns its key. Column block 0 also writes lse
 * and, when asked, the probabilities in a second pass once lse is known.
 * No workspace, no host synchronization.
 */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/decode/kv_append.h"
#include "cuda/simt/simt_common.cuh"

/* ---- probs (testing aid, dense only) -------------------------------------------- */

/* probs rows of the tile over all s_k keys: exp(s - lse), masked 0, dropped
 * negated, empty rows 0. offa holds the tile's q rows; lse[r] the thread's rows. */
__device__ void simt_fwd_probs(const sdpa_problem *p, int64_t b, int64_t hh, int64_t hk,
                               int64_t sq, int64_t sk, int64_t i0, float slope,
                               const float lse[SIMT_RPW], const int64_t *offa, int64_t *offb,
                               simt_stage *st) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int64_t j0 = 0; j0 < p->s_k; j0 += SIMT_BN) {
    __syncthreads();
    if (tid < SIMT_BN)
      offb[tid] = j0 + tid < sk ? sdpa_kv_offset(p, p->k_st, b, j0 + tid, hk) : -1;
    float s[SIMT_RPW] = {0.0f, 0.0f, 0.0f, 0.0f};
    simt_dot_tile(p->q, p->k, p->dtype, p->d, offa, offb, st, s);
    const int64_t j = j0 + lane;
    for (int r = 0; r < SIMT_RPW; ++r) {
      const int64_t i = i0 + warp * SIMT_RPW + r;
      if (i >= sq || j >= p->s_k) continue;
      float t;
      const float sc = simt_score(p, b, hh, sq, sk, i, j, s[r], slope, &t);
      float pr = lse[r] == INFINITY ? 0.0f : expf(sc - lse[r]);
      if (simt_keep(p, b, hh, i, j) == 0.0f) pr = -pr;
      simt_st(p->probs, p->probs_dtype, b * p->probs_sb + hh * p->probs_sh + i * p->probs_sq + j,
              pr);
    }
  }
}

/* ---- the kernel ------------------------------------------------------------------ */

__global__ void __launch_bounds__(SIMT_THREADS)
    sdpa_simt_fwd_kernel(const __grid_constant__ sdpa_problem prm, int64_t nqb, int64_t ncb,
                         int64_t items) {
  __shared__ simt_stage st;
  __shared__ float vs[SIMT_BN][SIMT_CW];
  __shared__ int64_t offa[SIMT_BM], offb[SIMT_BN];
  const sdpa_problem *p = &prm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t group = p->h / p->h_k;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const simt_item it = simt_item_split(item, ncb, nqb, p->h);
    const int64_t cb = it.inner, qb = it.tile, hh = it.head, b = it.b;
    const int64_t sq = sdpa_seq_len_q(p, b);
    const int64_t i0 = qb * SIMT_BM;
    if (i0 >= sq) continue;
    const int64_t sk = sdpa_seq_len_k(p, b);
    const int64_t hk = hh / group;
    const int64_t c0 = cb * SIMT_CW;
    const int64_t i1 = sq - i0 < SIMT_BM ? sq : i0 + SIMT_BM;
    const float slope = simt_slope(p, b, hh);
    int64_t lo, hi;
    sdpa_key_span(p, i0, i1, sq, sk, &lo, &hi, NULL);

    __syncthreads(); /* the previous item is done with offa */
    if (tid < SIMT_BM) offa[tid] = i0 + tid < i1 ? sdpa_q_offset(p, p->q_st, b, i0 + tid, hh) : -1;

    float m[SIMT_RPW], l[SIMT_RPW], o[SIMT_RPW][SIMT_NC];
    for (int r = 0; r < SIMT_RPW; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
      for (int c = 0; c < SIMT_NC; ++c) o[r][c] = 0.0f;
    }

    for (int64_t j0 = lo; j0 < hi; j0 += SIMT_BN) {
      const int64_t nj = hi - j0 < SIMT_BN ? hi - j0 : SIMT_BN;
      __syncthreads(); /* offb's last readers (the V load) are done */
      if (tid < SIMT_BN) offb[tid] = tid < nj ? sdpa_kv_offset(p, p->k_st, b, j0 + tid, hk) : -1;
      float s[SIMT_RPW] = {0.0f, 0.0f, 0.0f, 0.0f};
      simt_dot_tile(p->q, p->k, p->dtype, p->d, offa, offb, &st, s);

      /* online softmax: row r of this warp, key j of this lane */
      const int64_t j = j0 + lane;
      float pr[SIMT_RPW];
      for (int r = 0; r < SIMT_RPW; ++r) {
        const int64_t i = i0 + warp * SIMT_RPW + r;
        float t;
        const float sc = simt_score(p, b, hh, sq, sk, i, j, s[r], slope, &t);
        const float m_new = fmaxf(m[r], simt_warp_max(sc));
        if (m_new == -INFINITY) { /* nothing visible yet */
          pr[r] = 0.0f;
          continue;
        }
        const float alpha = expf(m[r] - m_new); /* 0 when m was -inf */
        pr[r] = expf(sc - m_new);
        l[r] = l[r] * alpha + simt_warp_sum(pr[r]);
        m[r] = m_new;
        for (int c = 0; c < SIMT_NC; ++c) o[r][c] *= alpha;
        if (simt_keep(p, b, hh, i, j) == 0.0f) pr[r] = 0.0f;
      }

      /* V tile: keys j0.., columns c0.. */
      __syncthreads();
      if (tid < SIMT_BN) offb[tid] = tid < nj ? sdpa_kv_offset(p, p->v_st, b, j0 + tid, hk) : -1;
      __syncthreads();
      simt_tile_product(p->v, p->dtype, p->d_v, c0, offb, vs, pr, o);
    }

    /* normalize: out = O * keep_scale / l, lse = m + log l (0 and +inf if empty) */
    const float keep_scale = p->dropout_p > 0.0f ? p->drop_scale : 1.0f;
    float lse[SIMT_RPW];
    for (int r = 0; r < SIMT_RPW; ++r) {
      const int64_t i = i0 + warp * SIMT_RPW + r;
      const int empty = !(l[r] > 0.0f && m[r] > -INFINITY);
      const float inv = empty ? 0.0f : keep_scale / l[r];
      lse[r] = empty ? INFINITY : m[r] + logf(l[r]);
      if (i >= sq) continue;
      const int64_t oo = sdpa_q_offset(p, p->o_st, b, i, hh);
      for (int c = 0; c < SIMT_NC; ++c) {
        const int64_t col = c0 + lane + 32 * c;
        if (col < p->d_v) simt_st(p->out, p->dtype, oo + col, empty ? 0.0f : o[r][c] * inv);
      }
      if (cb == 0 && lane == 0 && p->lse) p->lse[sdpa_lse_offset(p, b, i, hh)] = lse[r];
    }
    if (cb == 0 && p->probs)
      simt_fwd_probs(p, b, hh, hk, sq, sk, i0, slope, lse, offa, offb, &st);
  }
}

/* ---- host side -------------------------------------------------------------------- */

/* rotary: q rotated into the workspace (the kernel reads q as stored) */
extern "C" size_t fwd_simt_workspace(const sdpa_problem *p, const sdpa_kernel_row *row) {
  (void)row;
  return sdpa_cuda_rotated_q_bytes(p);
}

static sdpa_status simt_fwd_launch(const sdpa_problem *p) {
  if (p->b == 0 || p->h == 0 || p->s_q == 0) return SDPA_OK;
  const int64_t nqb = (p->s_q + SIMT_BM - 1) / SIMT_BM;
  const int64_t ncb = (p->d_v + SIMT_CW - 1) / SIMT_CW;
  const int64_t items = p->b * p->h * nqb * (ncb > 0 ? ncb : 1);
  sdpa_simt_fwd_kernel<<<simt_grid(items), SIMT_THREADS, 0, (cudaStream_t)p->stream>>>(
      *p, nqb, ncb > 0 ? ncb : 1, items);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "fwd_simt: kernel launch failed: %s", cudaGetErrorString(e));
  return SDPA_OK;
}

/* A cache problem's append first; with rotary, the kernel reads q rotated
 * into the workspace ([b, s_q, h, d]). */
extern "C" sdpa_status fwd_simt_run(const sdpa_problem *p, const sdpa_kernel_row *row) {
  sdpa_trace_run("fwd_simt");
  (void)row;
  if (p->num_splits > 1)
    return sdpa_fail(SDPA_ERR_INTERNAL, "fwd_simt: dispatched a problem with forced split-KV, "
                     "which its registry row does not list");
  const size_t qbytes = sdpa_cuda_rotated_q_bytes(p);
  if (qbytes == 0) {
    SDPA_TRY(sdpa_cuda_kv_append(p));
    return simt_fwd_launch(p);
  }
  /* the workspace first: a refused call leaves the cache as it was */
  void *ws = NULL;
  int owned = 0;
  SDPA_TRY(sdpa_cuda_ws_acquire(p, qbytes, 16, "fwd_simt", "sdpa_fwd_workspace_size", &ws,
                                &owned));
  sdpa_status st = sdpa_cuda_kv_append(p);
  if (st == SDPA_OK) st = sdpa_cuda_rotate_q(p, ws);
  if (st == SDPA_OK) {
    sdpa_problem r = *p;
    r.q = ws;
    r.q_st.sh = p->d;
    r.q_st.ss = p->h * p->d;
    r.q_st.sb = p->s_q * r.q_st.ss;
    st = simt_fwd_launch(&r);
  }
  return sdpa_cuda_ws_release(p, ws, owned, st, "fwd_simt");
}
