/*
 * simt_bwd.cu - bwd_simt, the backward that never refuses a valid problem on
 * CUDA (geometry and score pipeline: simt_common.cuh): f32 / f16 / bf16
 * storage with fp32 math, any d and d_v, any strides and alignment, dense and
 * varlen (+ seqused_k), every score modifier with dbias (summed over the
 * broadcast dims), the softcap derivative, dropout, GQA.
 *
 * Math as src/cpu/bwd.c: P = exp(S - lse), dP = dO V^T, keep = 0 or 1/(1-p),
 * dS = P (dP keep - D), D_i = rowsum(dO_i O_i); dV = (P keep)^T dO,
 * dK = scale dS_raw^T Q, dQ = scale dS_raw K, dS_raw = dS (1 - t^2) under
 * softcap; dbias = dS summed over its broadcast dims.
 *
 * Deterministic by construction: every output element is written by exactly
 * one block, which sums its terms in an order fixed by the problem (no
 * atomics), recomputing P and dS where it needs them. Four launches on the
 * caller's stream, each walking a 1-D grid with a block-stride loop:
 *   pre    one warp per (query row, head): D into the workspace (fp32
 *          [total_q][h], the only workspace);
 *   dkdv   one block per (batch, kv head, 32 keys, 128 columns of dK / dV):
 *          the lanes own keys and the warps columns; loops over the heads of
 *          the GQA group and the 16-row query tiles that see its keys, P keep
 *          and dS of a tile going through shared memory;
 *   dq     one block per (batch, head, 16 query rows, 128 columns of dQ):
 *          the forward's structure, dS broadcast by shuffles, K staged;
 *   dbias  (when asked) one block per (dbias batch, head, 16 query rows or the
 *          summed row, 32 keys): dS summed over the broadcast batch / head /
 *          query rows in a fixed order.
 */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"
#include "cuda/simt/simt_common.cuh"

/* Row offsets of one query tile (q, dO) and one key tile (k, v) in shared
 * memory, -1 for rows outside the sequence (zero rows in simt_dot_tile). */
typedef struct simt_offs {
  int64_t q[SIMT_BM], dout[SIMT_BM];
  int64_t k[SIMT_BN], v[SIMT_BN];
} simt_offs;

/* Which (sequence, query head, rows, keys) a gradient tile is about. */
typedef struct simt_tile {
  int64_t b, hh, sq, sk, i0;
  float slope;
} simt_tile;

/* Element offset of global query row g (varlen: the packed row; dense:
 * b * s_q + i) of head hh in a [b, s_q, h, x] / [total_q, h, x] tensor. */
__device__ __forceinline__ int64_t simt_grow_offset(const sdpa_problem *p, sdpa_bshd st, int64_t g,
                                                    int64_t hh) {
  if (p->layout == SDPA_LAYOUT_VARLEN) return g * st.ss + hh * st.sh;
  return (g / p->s_q) * st.sb + (g % p->s_q) * st.ss + hh * st.sh;
}

/* Query side of a tile: row offsets of q and dO (threads 0..31), and the
 * calling thread's rows' lse and D (lse +inf, D 0 outside the sequence). */
__device__ void simt_load_rows(const sdpa_problem *p, const simt_tile *tl, const float *dsum,
                               simt_offs *off, float lse[SIMT_RPW], float dd[SIMT_RPW]) {
  const int tid = threadIdx.x, warp = tid >> 5;
  if (tid < SIMT_BM) {
    const int64_t i = tl->i0 + tid;
    off->q[tid] = i < tl->sq ? sdpa_q_offset(p, p->q_st, tl->b, i, tl->hh) : -1;
  } else if (tid < 2 * SIMT_BM) {
    const int64_t i = tl->i0 + tid - SIMT_BM;
    off->dout[tid - SIMT_BM] = i < tl->sq ? sdpa_q_offset(p, p->do_st, tl->b, i, tl->hh) : -1;
  }
  for (int r = 0; r < SIMT_RPW; ++r) {
    const int64_t i = tl->i0 + warp * SIMT_RPW + r;
    lse[r] = INFINITY;
    dd[r] = 0.0f;
    if (i < tl->sq) {
      lse[r] = p->lse[sdpa_lse_offset(p, tl->b, i, tl->hh)];
      dd[r] = dsum[(sdpa_seq_q_start(p, tl->b) + i) * p->h + tl->hh];
    }
  }
}

/* Key side: row offsets of k and v for keys [j0, j0 + n) of kv head hk. */
__device__ __forceinline__ void simt_load_keys(const sdpa_problem *p, int64_t b, int64_t hk,
                                               int64_t j0, int64_t n, simt_offs *off) {
  const int tid = threadIdx.x;
  if (tid < SIMT_BN)
    off->k[tid] = tid < n ? sdpa_kv_offset_seq(p, p->k_st, b, j0 + tid, hk) : -1;
  else if (tid < 2 * SIMT_BN)
    off->v[tid - SIMT_BN] =
        tid - SIMT_BN < n ? sdpa_kv_offset_seq(p, p->v_st, b, j0 + tid - SIMT_BN, hk) : -1;
}

/*
 * One gradient tile for the calling thread's rows (warp) and key (lane j0 +
 * lane): pk[r] = P keep, ds[r] = dS (times 1 - t^2 when want_raw and
 * softcap). The offsets in off must be written (a barrier in simt_dot_tile
 * publishes them). Whole block.
 */
__device__ void simt_grad_tile(const sdpa_problem *p, const simt_tile *tl, int64_t j0,
                               const float lse[SIMT_RPW], const float dd[SIMT_RPW],
                               const simt_offs *off, simt_stage *st, int want_raw,
                               float pk[SIMT_RPW], float ds[SIMT_RPW]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float s[SIMT_RPW] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[SIMT_RPW] = {0.0f, 0.0f, 0.0f, 0.0f};
  simt_dot_tile(p->q, p->k, p->dtype, p->d, off->q, off->k, st, s);
  simt_dot_tile(p->dout, p->v, p->dtype, p->d_v, off->dout, off->v, st, dp);
  const int64_t j = j0 + lane;
  for (int r = 0; r < SIMT_RPW; ++r) {
    const int64_t i = tl->i0 + warp * SIMT_RPW + r;
    float t;
    const float sc = simt_score(p, tl->b, tl->hh, tl->sq, tl->sk, i, j, s[r], tl->slope, &t);
    const float pv = lse[r] == INFINITY ? 0.0f : expf(sc - lse[r]);
    const float kp = pv != 0.0f ? simt_keep(p, tl->b, tl->hh, i, j) : 1.0f;
    float g = pv * (dp[r] * kp - dd[r]);
    if (want_raw && p->softcap > 0.0f) g *= 1.0f - t * t;
    pk[r] = pv * kp;
    ds[r] = g;
  }
}

/* 1 if query rows [i0, i1) of the sequence see a key in [j0, j1). */
__device__ __forceinline__ int simt_rows_see(const sdpa_problem *p, int64_t i0, int64_t i1,
                                             int64_t sq, int64_t sk, int64_t j0, int64_t j1) {
  int64_t lo, hi;
  sdpa_key_span(p, i0, i1, sq, sk, &lo, &hi, NULL);
  return lo < hi && lo < j1 && hi > j0;
}

/* ---- pre: D = rowsum(dO * O) ------------------------------------------------------- */

__global__ void __launch_bounds__(SIMT_THREADS)
    sdpa_simt_bwd_pre(const __grid_constant__ sdpa_problem prm, float *dsum) {
  const sdpa_problem *p = &prm;
  const int lane = threadIdx.x & 31;
  const int64_t rows = p->total_q * p->h;
  for (int64_t w = (int64_t)blockIdx.x * SIMT_WARPS + (threadIdx.x >> 5); w < rows;
       w += (int64_t)gridDim.x * SIMT_WARPS) {
    const int64_t g = w / p->h, hh = w % p->h;
    const int64_t od = simt_grow_offset(p, p->do_st, g, hh);
    const int64_t oo = simt_grow_offset(p, p->o_st, g, hh);
    float acc = 0.0f;
    for (int64_t e = lane; e < p->d_v; e += 32)
      acc = fmaf(simt_ld(p->dout, p->dtype, od + e), simt_ld(p->out, p->dtype, oo + e), acc);
    acc = simt_warp_sum(acc);
    if (lane == 0) dsum[w] = acc - sdpa_dlse_row(p, g, hh);
  }
}

/* ---- dK, dV --------------------------------------------------------------------------- */

__global__ void __launch_bounds__(SIMT_THREADS)
    sdpa_simt_bwd_dkdv(const __grid_constant__ sdpa_problem prm, const float *dsum, int64_t nkb,
                       int64_t ncb, int64_t items) {
  __shared__ simt_stage st;
  __shared__ simt_offs off;
  __shared__ float pks[SIMT_BM][SIMT_BN], dss[SIMT_BM][SIMT_BN];
  __shared__ float qc[SIMT_BM][SIMT_CW], doc[SIMT_BM][SIMT_CW];
  const sdpa_problem *p = &prm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t group = p->h / p->h_k;
  enum { NCOL = SIMT_CW / SIMT_WARPS }; /* columns per thread: warp + 4 c */

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const simt_item it = simt_item_split(item, ncb, nkb, p->h_k);
    const int64_t cb = it.inner, hk = it.head, b = it.b;
    const int64_t j0 = it.tile * SIMT_BN;
    const int64_t jn = sdpa_bwd_tile_rows(p, b, j0, SIMT_BN);
    if (jn <= 0) continue;
    const int64_t sk = sdpa_seq_len_k(p, b), sq = sdpa_seq_len_q(p, b);
    int64_t n = sk - j0;
    n = n < 0 ? 0 : (n > jn ? jn : n);
    const int64_t c0 = cb * SIMT_CW;

    float adk[NCOL], adv[NCOL];
    for (int c = 0; c < NCOL; ++c) adk[c] = adv[c] = 0.0f;
    __syncthreads(); /* the previous item is done with off */
    simt_load_keys(p, b, hk, j0, n, &off);
    for (int64_t g = 0; n > 0 && g < group; ++g) {
      simt_tile tl;
      tl.b = b, tl.hh = hk * group + g, tl.sq = sq, tl.sk = sk;
      tl.slope = simt_slope(p, b, tl.hh);
      for (int64_t i0 = 0; i0 < sq; i0 += SIMT_BM) {
        const int64_t i1 = sq - i0 < SIMT_BM ? sq : i0 + SIMT_BM;
        if (!simt_rows_see(p, i0, i1, sq, sk, j0, j0 + n)) continue;
        tl.i0 = i0;
        float lse[SIMT_RPW], dd[SIMT_RPW], pk[SIMT_RPW], ds[SIMT_RPW];
        __syncthreads(); /* the last tile is done with off.q, pks, qc */
        simt_load_rows(p, &tl, dsum, &off, lse, dd);
        simt_grad_tile(p, &tl, j0, lse, dd, &off, &st, 1, pk, ds);
        for (int r = 0; r < SIMT_RPW; ++r) {
          pks[warp * SIMT_RPW + r][lane] = pk[r];
          dss[warp * SIMT_RPW + r][lane] = ds[r];
        }
        for (int e = tid; e < SIMT_BM * SIMT_CW; e += SIMT_THREADS) {
          const int r = e / SIMT_CW, col = e % SIMT_CW;
          const int64_t oq = off.q[r], od = off.dout[r];
          qc[r][col] = oq >= 0 && c0 + col < p->d ? simt_ld(p->q, p->dtype, oq + c0 + col) : 0.0f;
          doc[r][col] =
              od >= 0 && c0 + col < p->d_v ? simt_ld(p->dout, p->dtype, od + c0 + col) : 0.0f;
        }
        __syncthreads();
        for (int r = 0; r < SIMT_BM; ++r) {
          const float a = pks[r][lane], z = dss[r][lane];
#pragma unroll
          for (int c = 0; c < NCOL; ++c) {
            adv[c] = fmaf(a, doc[r][warp + SIMT_WARPS * c], adv[c]);
            adk[c] = fmaf(z, qc[r][warp + SIMT_WARPS * c], adk[c]);
          }
        }
      }
    }
    /* every key row of the block, zeros past seqused_k */
    if (lane < jn) {
      const int64_t j = j0 + lane;
      const int64_t ok = sdpa_kv_offset_seq(p, p->dk_st, b, j, hk);
      const int64_t ov = sdpa_kv_offset_seq(p, p->dv_st, b, j, hk);
      for (int c = 0; c < NCOL; ++c) {
        const int64_t col = c0 + warp + SIMT_WARPS * c;
        if (col < p->d) simt_st(p->dk, p->dtype, ok + col, p->scale * adk[c]);
        if (col < p->d_v) simt_st(p->dv, p->dtype, ov + col, adv[c]);
      }
    }
  }
}

/* ---- dQ ---------------------------------------------------------------------------------- */

__global__ void __launch_bounds__(SIMT_THREADS)
    sdpa_simt_bwd_dq(const __grid_constant__ sdpa_problem prm, const float *dsum, int64_t nqb,
                     int64_t ncb, int64_t items) {
  __shared__ simt_stage st;
  __shared__ simt_offs off;
  __shared__ float ks[SIMT_BN][SIMT_CW];
  const sdpa_problem *p = &prm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t group = p->h / p->h_k;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const simt_item it = simt_item_split(item, ncb, nqb, p->h);
    const int64_t cb = it.inner, qb = it.tile, hh = it.head, b = it.b;
    simt_tile tl;
    tl.b = b, tl.hh = hh, tl.sq = sdpa_seq_len_q(p, b), tl.sk = sdpa_seq_len_k(p, b);
    tl.i0 = qb * SIMT_BM;
    if (tl.i0 >= tl.sq) continue;
    tl.slope = simt_slope(p, b, hh);
    const int64_t hk = hh / group, c0 = cb * SIMT_CW;
    const int64_t i1 = tl.sq - tl.i0 < SIMT_BM ? tl.sq : tl.i0 + SIMT_BM;
    int64_t lo, hi;
    sdpa_key_span(p, tl.i0, i1, tl.sq, tl.sk, &lo, &hi, NULL);
    float lse[SIMT_RPW], dd[SIMT_RPW], acc[SIMT_RPW][SIMT_NC];
    for (int r = 0; r < SIMT_RPW; ++r)
      for (int c = 0; c < SIMT_NC; ++c) acc[r][c] = 0.0f;
    __syncthreads(); /* the previous item is done with off */
    simt_load_rows(p, &tl, dsum, &off, lse, dd);

    for (int64_t j0 = lo; j0 < hi; j0 += SIMT_BN) {
      const int64_t nj = hi - j0 < SIMT_BN ? hi - j0 : SIMT_BN;
      float pk[SIMT_RPW], ds[SIMT_RPW];
      __syncthreads(); /* the K load of the last tile is done with off.k */
      simt_load_keys(p, b, hk, j0, nj, &off);
      simt_grad_tile(p, &tl, j0, lse, dd, &off, &st, 1, pk, ds);
      __syncthreads(); /* the last tile's readers of ks are done */
      simt_tile_product(p->k, p->dtype, p->d, c0, off.k, ks, ds, acc);
    }
    for (int r = 0; r < SIMT_RPW; ++r) {
      const int64_t i = tl.i0 + warp * SIMT_RPW + r;
      if (i >= tl.sq) continue;
      const int64_t oq = sdpa_q_offset(p, p->dq_st, b, i, hh);
      for (int c = 0; c < SIMT_NC; ++c) {
        const int64_t col = c0 + lane + 32 * c;
        if (col < p->d) simt_st(p->dq, p->dtype, oq + col, p->scale * acc[r][c]);
      }
    }
  }
}

/* ---- dbias (dense layout) ------------------------------------------------------------------ */

__global__ void __launch_bounds__(SIMT_THREADS)
    sdpa_simt_bwd_dbias(const __grid_constant__ sdpa_problem prm, const float *dsum, int64_t nkb,
                        int64_t nqi, int sum_q, int64_t items) {
  __shared__ simt_stage st;
  __shared__ simt_offs off;
  __shared__ float red[SIMT_BM][SIMT_BN];
  const sdpa_problem *p = &prm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t group = p->h / p->h_k;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const simt_item it = simt_item_split(item, nkb, nqi, p->dbias_nh);
    const int64_t kb = it.inner, qi = it.tile, hb = it.head, bb = it.b;
    const int64_t j0 = kb * SIMT_BN;
    /* source query rows [qa, qz): all (summed into row 0) or this tile */
    const int64_t qa = sum_q ? 0 : qi * SIMT_BM;
    const int64_t qz = sum_q || p->s_q - qa < SIMT_BM ? p->s_q : qa + SIMT_BM;
    const int64_t b_lo = p->dbias_nb == 1 ? 0 : bb, b_hi = p->dbias_nb == 1 ? p->b : bb + 1;
    const int64_t h_lo = p->dbias_nh == 1 ? 0 : hb, h_hi = p->dbias_nh == 1 ? p->h : hb + 1;
    float acc[SIMT_RPW] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b = b_lo; b < b_hi; ++b) {
      const int64_t sq = sdpa_seq_len_q(p, b), sk = sdpa_seq_len_k(p, b);
      int64_t n = sk - j0;
      n = n < 0 ? 0 : (n > SIMT_BN ? SIMT_BN : n);
      if (n == 0) continue;
      for (int64_t hh = h_lo; hh < h_hi; ++hh) {
        simt_tile tl;
        tl.b = b, tl.hh = hh, tl.sq = sq, tl.sk = sk;
        tl.slope = simt_slope(p, b, hh);
        for (int64_t i0 = qa; i0 < qz; i0 += SIMT_BM) {
          const int64_t i1 = qz - i0 < SIMT_BM ? qz : i0 + SIMT_BM;
          if (!simt_rows_see(p, i0, i1, sq, sk, j0, j0 + n)) continue;
          tl.i0 = i0;
          float lse[SIMT_RPW], dd[SIMT_RPW], pk[SIMT_RPW], ds[SIMT_RPW];
          __syncthreads(); /* the last tile's dot products are done with off */
          simt_load_keys(p, b, hh / group, j0, n, &off);
          simt_load_rows(p, &tl, dsum, &off, lse, dd);
          simt_grad_tile(p, &tl, j0, lse, dd, &off, &st, 0, pk, ds);
          for (int r = 0; r < SIMT_RPW; ++r) acc[r] += ds[r];
        }
      }
    }
    const int64_t j = j0 + lane;
    if (!sum_q) {
      for (int r = 0; r < SIMT_RPW; ++r) {
        const int64_t i = qa + warp * SIMT_RPW + r;
        if (i < qz && j < p->s_k)
          simt_st(p->dbias, p->dtype,
                  bb * p->dbias_sb + hb * p->dbias_sh + i * p->dbias_sq + j * p->dbias_sk, acc[r]);
      }
      continue;
    }
    /* summed over query rows: the 16 row slots added in a fixed order */
    __syncthreads();
    for (int r = 0; r < SIMT_RPW; ++r) red[warp * SIMT_RPW + r][lane] = acc[r];
    __syncthreads();
    if (warp == 0 && j < p->s_k) {
      float sum = 0.0f;
      for (int r = 0; r < SIMT_BM; ++r) sum += red[r][lane];
      simt_st(p->dbias, p->dtype, bb * p->dbias_sb + hb * p->dbias_sh + j * p->dbias_sk, sum);
    }
  }
}

/* ---- host side ------------------------------------------------------------------------------ */

/* The workspace: D as fp32 [total_q][h], 256-byte granules. */
static size_t simt_bwd_ws_bytes(const sdpa_problem *p) {
  const size_t n = (size_t)(p->total_q * p->h) * sizeof(float);
  return n > 0 ? (n + 255) / 256 * 256 : 256;
}

extern "C" size_t bwd_simt_workspace(const sdpa_problem *p, const sdpa_kernel_row *row) {
  (void)row;
  return simt_bwd_ws_bytes(p);
}

static sdpa_status simt_launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "bwd_simt: %s kernel launch failed: %s", what,
                     cudaGetErrorString(e));
  return SDPA_OK;
}

static sdpa_status simt_bwd_launch(const sdpa_problem *p, float *dsum) {
  cudaStream_t stream = (cudaStream_t)p->stream;
  const int64_t max_k = p->s_k; /* dense s_k, varlen max_seqlen_k */
  const int64_t nkb = (max_k + SIMT_BN - 1) / SIMT_BN;
  const int64_t nqb = (p->s_q + SIMT_BM - 1) / SIMT_BM;
  const int64_t dmax = p->d > p->d_v ? p->d : p->d_v;
  const int64_t ncb_kv = (dmax + SIMT_CW - 1) / SIMT_CW, ncb_q = (p->d + SIMT_CW - 1) / SIMT_CW;
  const int64_t rows = p->total_q * p->h;
  if (rows > 0) {
    sdpa_simt_bwd_pre<<<simt_grid((rows + SIMT_WARPS - 1) / SIMT_WARPS), SIMT_THREADS, 0, stream>>>(
        *p, dsum);
    SDPA_TRY(simt_launched("pre"));
  }
  const int64_t n1 = p->b * p->h_k * nkb * ncb_kv;
  if (n1 > 0) {
    sdpa_simt_bwd_dkdv<<<simt_grid(n1), SIMT_THREADS, 0, stream>>>(*p, dsum, nkb, ncb_kv, n1);
    SDPA_TRY(simt_launched("dK/dV"));
  }
  const int64_t n2 = p->b * p->h * nqb * ncb_q;
  if (n2 > 0) {
    sdpa_simt_bwd_dq<<<simt_grid(n2), SIMT_THREADS, 0, stream>>>(*p, dsum, nqb, ncb_q, n2);
    SDPA_TRY(simt_launched("dQ"));
  }
  if (p->dbias) {
    const int sum_q = p->dbias_nq == 1 && p->s_q != 1;
    const int64_t nqi = sum_q ? 1 : nqb;
    const int64_t n3 = p->dbias_nb * p->dbias_nh * nqi * nkb;
    if (n3 > 0) {
      sdpa_simt_bwd_dbias<<<simt_grid(n3), SIMT_THREADS, 0, stream>>>(*p, dsum, nkb, nqi, sum_q,
                                                                     n3);
      SDPA_TRY(simt_launched("dbias"));
    }
  }
  return SDPA_OK;
}

extern "C" sdpa_status bwd_simt_run(const sdpa_problem *p, const sdpa_kernel_row *row) {
  sdpa_trace_run("bwd_simt");
  (void)row;
  if (p->layout == SDPA_LAYOUT_CACHE)
    return sdpa_fail(SDPA_ERR_INTERNAL, "bwd_simt: dispatched a KV-cache problem, which its "
                                        "registry row does not list");
  if (p->b == 0 || p->h == 0) return SDPA_OK;
  void *ws = NULL;
  int owned = 0;
  SDPA_TRY(sdpa_cuda_ws_acquire(p, simt_bwd_ws_bytes(p), 4, "bwd_simt", "sdpa_bwd_workspace_size",
                                &ws, &owned));
  return sdpa_cuda_ws_release(p, ws, owned, simt_bwd_launch(p, (float *)ws), "bwd_simt");
}
