/*
 * bwd_sm90_body.cuh - the Hopper backward (sm_90a: wgmma), fp16 / bf16,
 * written once and specialized by the preprocessor. An instance (generated
 * by CMake from a SDPA_BWD_SM90_KERNEL row of kernels.def) defines
 *   SDPA_KERNEL_NAME  token, e.g. bwd_sm90_bf16_hd128
 *   SDPA_DTYPE        BF16 or F16
 *   SDPA_HDIM         head-dim bucket: 64, 128, 192 or 256
 *   SDPA_BLOCK_M      query rows per step (= SDPA_BLOCK_N, or half of it in
 *                     a bias row where the bias tiles would not fit)
 *   SDPA_BLOCK_N      keys per block: 128 (two warpgroups of 64 keys) or 64
 *                     (both warpgroups on the same 64 keys, each with part
 *                     of the dK / dV columns: the d split, d = 192 / 256)
 *   SDPA_WARPS        8 (two warpgroups)
 *   SDPA_DV           (a _dv128 row, optional) the columns of V, dO and dV
 *                     worth multiplying when d_v is below the bucket (MLA's
 *                     192 / 128): the tiles keep HD columns (zero past d_v),
 *                     the products stop at SDPA_DV
 *   SDPA_BWD_BIAS     0: a SDPA_BWD_SM90_KERNEL row (the plain and score-
 *                     feature kernels), 1: a SDPA_BWD_SM90_BIAS_KERNEL row
 *                     (the bias kernels, feat 2: every feature plus an
 *                     additive bias and its dbias; bwd_bias.cuh)
 * and includes this file, which defines the kernels and
 *   extern "C" SDPA_KERNEL_NAME##_run / _workspace
 * through bwd_launch.cuh (the pre / post kernels and the host side, shared
 * with the mma.sync backwards).
 *
 * The mma.sync backward's algorithm (bwd_sm80_body.cuh: one block per key
 * block, K and V resident, the block walks the query blocks of every head
 * of its GQA group; dK, dV in registers; dQ added to an fp32 accumulator)
 * with the five products on the warpgroup tensor-core instructions:
 *   dP^T = V dO^T, S^T = K Q^T   wgmma m64n<QS>, both operands from shared
 *                                memory (K-major), 64 keys a warpgroup
 *   dV += P^T dO, dK += dS^T Q   wgmma m64n<HDW>, A = P^T / dS^T from the
 *                                registers the scores came out in (each
 *                                warp's 16 keys: the m16n8 layout is the A
 *                                fragment), B = dO / Q read N-major (the
 *                                d split: A from the shared P^T / dS^T
 *                                tiles, n64 or n128 a warpgroup,
 *                                split_products)
 *   dQ = dS K                    wgmma m64n<DQN> (the d split: n64 or n128
 *                                a warpgroup), A = dS^T and B = K both
 *                                read MN-major from shared memory; added to
 *                                the fp32 accumulator by red.global (d split:
 *                                issued first, reduced while dV / dK run;
 *                                deterministic: a dQ kernel, bwd_dq_body)
 * Each warp owns 16 keys exactly as in the mma.sync kernel, so the
 * elementwise middle is bwd_scores.cuh's code unchanged (masks, softcap,
 * alibi, dropout recomputed from Philox).
 * Tiles are copied by cp.async (every thread; Q / dO double-buffered, the
 * next step's under this one) into the 128-byte swizzle the wgmma
 * descriptors read: a [rows, d] tile is d / 64 blocks of [rows][64], chunk c
 * of row r at chunk c ^ (r % 8), bases 1024-byte aligned. Generic-proxy
 * writes (cp.async, the dS^T stores) are fenced to the async proxy before
 * the barrier that precedes the wgmma reading them.
 * Supported (SDPA_BWD_SM90_FEATURES): dense and varlen, seqused_k, causal /
 * window in both alignments, alibi, softcap, dropout, GQA / MQA,
 * deterministic mode (bwd_common.cuh's dQ slices; with the d split, d
 * = 192 / 256, no dQ here and a dQ kernel, bwd_dq_body); in the bias rows
 * an additive bias with dbias too: the step's [BM, BN] bias tile comes by
 * cp.async with Q / dO (double-buffered) and is read by ldmatrix.trans in
 * the S^T layout, dbias gathers in a shared tile written out by whole rows
 * after the step (bwd_bias.cuh, shared with the mma.sync kernel).
 */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "error.h"
#include "problem.h"
#include "registry.h"
#include "cuda/bwd/bwd_scores.cuh"
#include "cuda/bwd/bwd_common.cuh"
#include "cuda/ptx/ptx_atomic.cuh"
#include "cuda/ptx/ptx_cp_async.cuh"
#include "cuda/ptx/ptx_ldmatrix.cuh" /* smem_u32 */
#include "cuda/ptx/ptx_mma.cuh"      /* pack_*x2 */
#include "cuda/ptx/ptx_tma.cuh"      /* fence_proxy_async */
#include "cuda/ptx/ptx_wgmma.cuh"

#include "cuda/bwd/bwd_names.cuh"
#include "cuda/bwd/bwd_elem16.cuh"

/* Per bucket: dK / dV columns per warpgroup (the m64n<HDW> of dV, dK);
 * queries per sub-step (S^T / dP^T are m64n<qs>) of the plain kernels (the
 * atomic and the deterministic one) and of the feature ones, whose extra
 * live values would spill at the plain kernels' size; dQ columns per
 * product (m64n<DQN>). */
#if SDPA_HDIM <= 64
#define SDPA_HDW 64
enum { QS = 64, QS_F = 64, DQN = 64 };
#elif SDPA_HDIM <= 128
#define SDPA_HDW 128
enum { QS = 64, QS_F = 32, DQN = 64 };
#else /* the d split: the wider warpgroup's dK / dV and dQ widths (SPLIT_*_N) */
#define SDPA_HDW 128
enum { QS = 32, QS_F = 32, DQN = 128 };
#endif
#ifndef SDPA_DV
#define SDPA_DV SDPA_HDIM
#endif

enum {
  HD = SDPA_HDIM,
  BM = SDPA_BLOCK_M,
  BN = SDPA_BLOCK_N,
  NTHREADS = SDPA_WARPS * 32,
  KWG = BN / 64,    /* warpgroups along the keys */
  DSG = 2 / KWG,    /* warpgroups along the dK / dV columns */
  HDW = SDPA_HDW,
  NQ = QS / 8,      /* n8 tiles of S^T / dP^T (at most) */
  KS = HD / 16,     /* k16 steps over the head dim */
  HDV = SDPA_DV,    /* V's, dO's and dV's columns multiplied */
  KSV = HDV / 16,   /* k16 steps of dP^T = V dO^T */
  MS = QS / 16,     /* k16 steps over a sub-step's queries (at most) */
  DTW = HDW / 8,    /* n8 tiles of dK / dV */
  DQT = DQN / 8,    /* n8 tiles of a dQ product */
  ROWB = 128,       /* bytes of a swizzled row */
  TILE = BM * HD * 2,    /* a Q or dO tile */
  TILE_KV = BN * HD * 2, /* a K or V tile */
  SM_S = BN * BM * 2,
  OFF_Q = 0,        /* Q [2][tile], dO [2][tile], K, V, dS^T, (d split) P^T, lse2 / D [4][BM], */
  OFF_DO = 2 * TILE, /* (bias rows) bias [2][BM][BN], dbias [BM][BN] */
  OFF_K = 4 * TILE,
  OFF_V = OFF_K + TILE_KV,
  OFF_S = OFF_V + TILE_KV,
  OFF_P = OFF_S + SM_S,
  OFF_L = OFF_P + (DSG == 2 ? SM_S : 0),
  OFF_B = OFF_L + 16 * BM,
  BCH = BN / 8,     /* bwd_bias.cuh's tiles: 16-byte chunks a row */
  BCH8 = BCH & ~7,
  SM_B = BM * BN * 2,
  OFF_DB = OFF_B + 2 * SM_B,
  SMEM_BYTES = OFF_B + (SDPA_BWD_BIAS ? 3 * SM_B : 0) + 1024, /* + slack to align the base to 1024 */
  /* tile_load.cuh's geometry */
  CPR = HD / 8,
  EPC = 8,
  CPRP = CPR <= 16 ? CPR : 32, /* d = 192: 24 chunks a row in a warp's lanes */
  LOAD_RPP = NTHREADS / CPRP,
  LOAD_PLAIN = 0
};
#define LOAD_ZFILL 1 /* head dims inside the bucket (d 160, MLA's d_v 128): no split warps */
static_assert(NTHREADS == 256 && KWG * DSG == 2, "two warpgroups: keys x column splits");
static_assert(BM == BN || (SDPA_BWD_BIAS && 2 * BM == BN && DSG == 1),
              "query steps of BN rows (half of it in a bias row)");
static_assert(BM % QS == 0 && BM % 64 == 0, "whole sub-steps and 64-row dQ products a step");
static_assert(HD % 64 == 0 && (DSG == 1 ? HDW == HD && HD % DQN == 0 : HDW == 128),
              "64-column swizzle blocks");
static_assert(QS >= QS_F && BM % QS == 0 && QS_F % 32 == 0, "sub-steps of 32-query halves");
static_assert(DSG == 1 || (BM == 64 && (HD == 192 || HD == 256) && DQN == 128),
              "d split: one 64-query step, 32 a warpgroup, one dQ product a warpgroup");
static_assert(DSG == 2 || (BM / 64) * (HD / DQN) % 2 == 0,
              "dQ products: an even number, alternating warpgroups");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one block");
static_assert(HDV == HD || (HD == 192 && HDV == 128), "a _dv128 row: d = 192's split only");
/* bwd_launch.cuh: the d split's deterministic mode makes dQ with its own
   kernels (bwd_dq_body; the preprocessor needs the condition in row fields) */
#define SDPA_BWD_DQ_KERNEL (SDPA_BLOCK_N == 64)
static_assert(SDPA_BWD_DQ_KERNEL == (DSG == 2), "the dQ kernels are the d split's");

#include "cuda/bwd/bwd_sm90_tiles.cuh"

/* acc (dq_issue's, complete: n columns from column c0) added to the fp32
 * accumulator (rows past sq skipped). */
__device__ __forceinline__ void dq_reduce(const sdpa_bwd_params *prm, float (*acc)[4], int rb,
                                          int c0, const int n, int m0, int sq, int64_t q_start,
                                          int hh, int wq, int g, int t) {
  /* two 8-byte reductions a tile: a lane-pair exchange for one 16-byte
   * red.global.add.v4 costs more than it saves */
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = m0 + rb * 64 + wq * 16 + g + 8 * hf;
    if (i >= sq) continue;
    /* bwd_dq_acc_row's address written out: through the call ptxas schedules
       the d = 192 kernels differently */
    float *dst = prm->dq_acc + (int64_t)blockIdx.x * prm->slice +
                 ((q_start + i) * prm->p.h + hh) * HD + c0 + 2 * t;
#pragma unroll
    for (int j = 0; j < n / 8; ++j) red_add_f32x2(dst + 8 * j, acc[j][2 * hf], acc[j][2 * hf + 1]);
  }
}
#include "cuda/bwd/bwd_bias.cuh" /* after the geometry: BM, BN, NTHREADS, BCH, BCH8 */

/* dQ[64 rows of block rb, DQN columns of chunk cc] += dS K, on its own. */
__device__ __forceinline__ void dq_product(const sdpa_bwd_params *prm, uint32_t s_s,
                                           uint32_t s_k, int rb, int cc, int m0, int sq,
                                           int64_t q_start, int hh, int wq, int g, int t) {
  float acc[DQT][4];
  wg_fence();
  dq_issue(acc, s_s, s_k, rb, cc * (DQN / 64), 0, DQN);
  wg_commit();
  wg_wait0();
  wg_fence_acc(acc, DQT);
  dq_reduce(prm, acc, rb, cc * DQN, DQN, m0, sq, q_start, hh, wq, g, t);
}

#include "cuda/bwd/bwd_sm90_split.cuh" /* the d split's column table */

/* One warpgroup's products of a d split's step, after the P^T / dS^T
 * exchange: its dQ columns (none when deterministic: bwd_dq_body makes dQ)
 * first, then dV, dK; the dQ reductions run while dV / dK are on the tensor
 * cores. dkn, dvn, dqn: the split table's widths of wg, as literals. */
__device__ __forceinline__ void split_products(const sdpa_bwd_params *prm, float (*dk)[4],
                                               float (*dv)[4], uint32_t s_s, uint32_t s_p,
                                               uint32_t s_k, uint32_t s_q, uint32_t s_do, int det,
                                               int wg, int m0, int sq, int64_t q_start, int hh,
                                               int wq, int g, int t, const int dkn,
                                               const int dvn, const int dqn) {
  float dqa[DQT][4];
  const int dqc = split_dq_col(wg);
  split_issue(dqa, dk, dv, s_s, s_p, s_k, s_q, s_do, det ? SPLIT_DQ_NONE : SPLIT_DQ_FIRST, 0, wg,
              dkn, dvn, dqn);
  if (det) {
    wg_wait0();
  } else {
    wg_wait1(); /* the dQ group only */
    wg_fence_acc(dqa, dqn / 8);
    dq_reduce(prm, dqa, 0, dqc, dqn, m0, sq, q_start, hh, wq, g, t);
    wg_wait0();
  }
  wg_fence_acc(dv, dvn / 8);
  wg_fence_acc(dk, dkn / 8);
}

/* ---- main: dK, dV, dQ accumulation ---------------------------------------------------- */
/* feat (0 plain, 1 softcap / alibi / dropout, 2 the bias rows' forms: those
 * and the bias with dbias) and det (deterministic: walk this block's key
 * blocks, dQ into its slice; with the d split one key block a block and no
 * dQ, which bwd_dq_body makes) are literals at each kernel (bwd_launch.cuh). */
__device__ __forceinline__ void bwd_body(const sdpa_bwd_params *prm, const int feat,
                                         const int det) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  float *s_lse = (float *)(smem + (base - smem_u32(smem)) + OFF_L); /* [2][BM] */
  float *s_dd = s_lse + 2 * BM;                                     /* [2][BM] */
  const sdpa_problem *p = &prm->p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), wq = warp & 3; /* (uniform: descriptors) */
  const int kwg = wg % KWG, dsg = wg / KWG; /* key block, column split of the warpgroup */
  const int kw = kwg * 4 + wq;              /* this warp's 16 keys: n0 + 16 kw .. */
  const int qs = feat ? QS_F : QS; /* a literal */
  const int hk = blockIdx.y, b = blockIdx.z;
  const int fk = (int)sdpa_seq_full_len_k(p, b);
  const uint32_t s_k = base + OFF_K, s_v = base + OFF_V, s_s = base + OFF_S, s_p = base + OFF_P;
#pragma unroll 1
  /* (the d split's deterministic kernel leaves dQ to bwd_dq_body: one key block a block) */
  for (int nblk = blockIdx.x, more = 1; more && nblk * BN < fk;
       nblk += gridDim.x, more = det && DSG == 1) {
  if (nblk != (int)blockIdx.x) __syncthreads(); /* the last key block's smem readers are done */
  const bwd_kframe kf = bwd_kframe_make(prm, b, nblk, BN, BM);
  const int n0 = kf.n0, sq = kf.sq, sk = kf.sk, off = kf.off, m_lo = kf.m_lo, m_hi = kf.m_hi;
  const int n_it = kf.n_it, group = prm->h_per_hk, d = (int)p->d;
  const int64_t q_start = kf.q_start;

  /* dbias of the query blocks the masks keep these keys from is 0 (first:
     at the end, with dK / dV live, the d = 128 deterministic kernel spilled) */
  if (feat == 2) bwd_dbias_zero_skipped(prm, kf.n0, kf.sq, kf.sk, kf.m_lo, kf.m_hi, b, hk, tid);

  float dk[DTW][4], dv[DTW][4];
  bwd_zero_acc(dk, DTW);
  bwd_zero_acc(dv, DTW);

  if (n_it > 0) {
    load_tile(s_k, (const uint16_t *)p->k + sdpa_kv_offset_seq(p, p->k_st, b, n0, hk), p->k_st.ss,
              BN, sk - n0, d, tid, p->k);
    load_tile(s_v, (const uint16_t *)p->v + sdpa_kv_offset_seq(p, p->v_st, b, n0, hk), p->v_st.ss,
              BN, sk - n0, (int)p->d_v, tid, p->v);
    const uint16_t *q_b = (const uint16_t *)p->q + sdpa_q_offset(p, p->q_st, b, 0, 0);
    const uint16_t *do_b = (const uint16_t *)p->dout + sdpa_q_offset(p, p->do_st, b, 0, 0);
    const int64_t qss = p->q_st.ss, qsh = p->q_st.sh, dss = p->do_st.ss, dsh = p->do_st.sh;
    {
      const int hh = hk * group, m0 = m_lo * BM;
      load_tile(base + OFF_Q, q_b + m0 * qss + hh * qsh, qss, BM, sq - m0, d, tid, p->q);
      load_tile(base + OFF_DO, do_b + m0 * dss + hh * dsh, dss, BM, sq - m0, (int)p->d_v, tid,
                p->dout);
      if (feat == 2) bwd_bias_tile(base + OFF_B, p, b, hh, m0, n0, sq, sk, prm->bias_aligned, tid);
      if (tid < BM) bwd_row_stats(prm, q_start, hh, m0 + tid, sq, &s_lse[tid], &s_dd[tid]);
    }
    cp_async_commit();

    const int64_t wlo = (int64_t)off - prm->wl, whi = (int64_t)off + prm->wr;
    const int j_lo = n0 + kw * 16;
    const uint32_t k_wg = s_k + kwg * 64 * ROWB, v_wg = s_v + kwg * 64 * ROWB; /* A rows */
    const uint32_t col0 = (uint32_t)(dsg * (HDW / 64) * BM * ROWB); /* dK / dV column block */

    int hh = hk * group, mb = m_lo; /* this step's query head and block: (head, block) order */
#pragma unroll 1
    for (int it = 0; it < n_it; ++it) {
      const int cur = it & 1, m0 = mb * BM;
      const int wrap = mb == m_hi, hh2 = hh + wrap, mb2 = wrap ? m_lo : mb + 1; /* next step */
      const uint32_t s_q = base + OFF_Q + cur * TILE, s_do = base + OFF_DO + cur * TILE;
      cp_async_wait_all(); /* Q / dO of this step landed (and K / V on the first) */
      fence_proxy_async(); /* ... visible to wgmma once the barrier passes */
      __syncthreads();     /* ... for every thread; everyone is done with the other buffers */

      /* d split: S^T / dP^T for the warpgroup's 32 queries go to the tensor
         cores before the prefetch's address work (+0.5..1.3%) */
      float spd[4][4], ssd[4][4];
      if (DSG == 2) {
        wg_fence();
        wg_rows_by_queries(spd, opaque_u32(v_wg), s_do + wg * 32 * ROWB, 32, KSV);
        wg_rows_by_queries(ssd, opaque_u32(k_wg), s_q + wg * 32 * ROWB, 32, KS);
        wg_commit();
      }
      /* prefetch the next step's Q / dO (cp.async) and lse2 / D (registers; by
         cp.async instead, the plain d = 128 kernel spilled) */
      float nl = INFINITY, nd = 0.f;
      if (it + 1 < n_it) {
        const int m02 = mb2 * BM;
        load_tile(base + OFF_Q + (cur ^ 1) * TILE, q_b + m02 * qss + hh2 * qsh, qss, BM, sq - m02,
                  d, tid, p->q);
        load_tile(base + OFF_DO + (cur ^ 1) * TILE, do_b + m02 * dss + hh2 * dsh, dss, BM,
                  sq - m02, (int)p->d_v, tid, p->dout);
        if (feat == 2)
          bwd_bias_tile(base + OFF_B + (cur ^ 1) * SM_B, p, b, hh2, m02, n0, sq, sk,
                        prm->bias_aligned, tid);
        cp_async_commit();
        if (tid < BM) bwd_row_stats(prm, q_start, hh2, m02 + tid, sq, &nl, &nd);
      }
      const int full = m0 + BM <= sq && n0 + BN <= sk && (int64_t)n0 - (m0 + BM - 1) >= wlo &&
                       (int64_t)n0 + BN - 1 - m0 <= whi;

      if (DSG == 2) {
        /* d split (d = 192 / 256): the warpgroups share the 64 keys and
           split the step's 64 queries for S^T / dP^T (no product twice),
           exchange P^T and dS^T through shared memory, then each does dV / dK
           and dQ for its columns (the split table) from the shared
           tiles */
        const int q0 = m0 + wg * 32, qc = wg * 32;
        float(*sp)[4] = spd, (*ss)[4] = ssd; /* issued above */
        const uint32_t keep = feat && prm->has_dropout
                                  ? bwd_keep_bits(p, (uint32_t)(b * p->h + hh), q0, j_lo, lane)
                                  : 0u;
        split_exchange(ss, sp, prm, s_lse + cur * BM + qc, s_dd + cur * BM + qc, b, hh, j_lo, q0,
                       qc, kw, lane, g, t, sq, sk, off, keep, feat, full, s_p, s_s);
        __syncthreads();
        /* d = 192: each warpgroup's path with its widths as literals;
           the branch order is ptxas's: the other one serialized the wgmma
           of the plain kernel for want of registers */
        enum { W1 = HDV == 192 }; /* warpgroup 1's path first */
        if (HD == 256)
          split_products(prm, dk, dv, s_s, s_p, s_k, s_q, s_do, det, wg, m0, sq, q_start, hh, wq,
                         g, t, 128, 128, 128);
        else if (wg == W1)
          split_products(prm, dk, dv, s_s, s_p, s_k, s_q, s_do, det, wg, m0, sq, q_start, hh, wq,
                         g, t, SPLIT_DK_N(W1), SPLIT_DV_N(W1), SPLIT_DQ_N(W1));
        else
          split_products(prm, dk, dv, s_s, s_p, s_k, s_q, s_do, det, wg, m0, sq, q_start, hh, wq,
                         g, t, SPLIT_DK_N(1 - W1), SPLIT_DV_N(1 - W1), SPLIT_DQ_N(1 - W1));
      } else {
#pragma unroll 1
        for (int qh = 0; qh < BM / qs; ++qh) {
          const int q0 = m0 + qh * qs; /* first query of the sub-step */
          const uint32_t qrow = (uint32_t)(qh * qs * ROWB);
          /* dP^T = V dO^T and S^T = K Q^T for the warpgroup's 64 keys x qs queries */
          float sp[NQ][4], ss[NQ][4];
          uint32_t keep[QS / 32]; /* dropout's Philox bits while the products run */
          wg_scores(sp, ss, keep, prm, v_wg, k_wg, s_do + qrow, s_q + qrow, qs, KSV, feat,
                    (uint32_t)(b * p->h + hh), q0, j_lo, lane);

          /* P (times keep / (1 - p)) in ss, dS in sp: bwd_scores.cuh, 32 queries at a time */
          {
            const float *lse_t = s_lse + cur * BM + qh * qs, *dd_t = s_dd + cur * BM + qh * qs;
#pragma unroll
            for (int h2 = 0; h2 < qs / 32; ++h2) {
              if (feat == 2) { /* the bias; dbias into the shared dbias tile (bwd_dbias_out
                                  writes it). (The bias loaded while the products ran, the
                                  d = 128 kernel spilled.) */
                uint32_t bv[4][2];
                bwd_bias_frag(bv, base + OFF_B + cur * SM_B, qh * qs + 32 * h2, 4, kw, lane,
                              lane & 7, (lane >> 1) & 3);
                bwd_dbias_dst db; /* (opaque: made here, not hoisted for the loop) */
                bwd_dbias_dst_at(&db, opaque_u32(base + OFF_DB), qh * qs + 32 * h2,
                                 (int)opaque_u32(kw), g, t, prm->has_dbias);
                bwd_p_ds_bias_forms(ss + 4 * h2, sp + 4 * h2, 4, prm, lse_t + 32 * h2,
                                    dd_t + 32 * h2, b, hh, j_lo, q0 + 32 * h2, lane, sq, sk, off,
                                    keep[h2], bv, &db, full, SDPA_BIAS_KIND, 1);
              } else {
                bwd_p_ds_forms(ss + 4 * h2, sp + 4 * h2, 4, prm, lse_t + 32 * h2, dd_t + 32 * h2,
                               b, hh, j_lo, q0 + 32 * h2, lane, sq, sk, off, keep[h2], feat, full,
                               1);
              }
            }
          }
          uint32_t pa[MS][4], da[MS][4];
          pack_frags(pa, ss, qs);
          pack_frags(da, sp, qs);
          if (dsg == 0) store_ds(s_s, da, kw, qh * qs, g, t, qs); /* for dQ = dS K */

          /* dV += Pdrop^T dO, dK += dS^T Q (this warpgroup's columns) */
          wg_fence_acc(dv, DTW);
          wg_fence_acc(dk, DTW);
          wg_fence();
          wg_keys_by_cols(dv, pa, s_do + col0 + qrow, qs);
          wg_keys_by_cols(dk, da, s_q + col0 + qrow, qs);
          wg_commit();
          wg_wait0();
          wg_fence_acc(dv, DTW);
          wg_fence_acc(dk, DTW);
        }
        fence_proxy_async(); /* the dS^T stores, for the dQ products' reads */
        __syncthreads();
        if (feat == 2 && prm->has_dbias) /* the step's dbias tile, complete after the barrier */
          bwd_dbias_out(base + OFF_DB, p, b, hh, m0, n0, sq, sk, prm->dbias_aligned, tid);

        /* dQ[BM, HD] += dS K: products of 64 rows x DQN columns, alternating warpgroups */
#pragma unroll 1
        for (int k = 0; k < (BM / 64) * (HD / DQN) / 2; ++k) {
          const int u = 2 * k + wg; /* (a trip count the same for both warpgroups) */
          dq_product(prm, opaque_u32(s_s), opaque_u32(s_k), u % (BM / 64), u / (BM / 64), m0, sq,
                     q_start, hh, wq, g, t);
        }
      }

      if (it + 1 < n_it && tid < BM) {
        s_lse[(cur ^ 1) * BM + tid] = nl;
        s_dd[(cur ^ 1) * BM + tid] = nd;
      }
      hh = hh2;
      mb = mb2;
    }
  }

  /* dK (times scale) and dV of this block's keys; rows past seqused_k are 0
     (d = 192: the split table's columns, warpgroup 1's apart for its widths) */
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int j = n0 + kw * 16 + g + hf * 8;
    if (HD == 192 && dsg == 1)
      bwd_store_kv_row(prm, b, hk, j, fk, dk, dv, SPLIT_DK_N(1) / 8, SPLIT_DK_COL(1),
                       SPLIT_DV_N(1) / 8, split_dv_col(1), hf, t);
    else if (HD == 192 && HDV == 128)
      bwd_store_kv_row(prm, b, hk, j, fk, dk, dv, DTW, 0, SPLIT_DV_N(0) / 8, 0, hf, t);
    else
      bwd_store_kv_row(prm, b, hk, j, fk, dk, dv, DTW, dsg * HDW, DTW, dsg * HDW, hf, t);
  }
  } /* key blocks */
#else
  (void)prm; /* the sm_80 pass of a multi-arch build: never launched (min_arch 90) */
  (void)feat;
  (void)det;
#endif
}

/* ---- the d split's deterministic dQ: one block a query block -------------------------- */
/* dQ of the BM queries of block blockIdx.x, query head blockIdx.y, batch
 * blockIdx.z, with Q and dO resident and the key tiles streaming (K and V
 * double-buffered by cp.async): per tile the same S^T / dP^T products and
 * elementwise middle as bwd_body (the warpgroups split the queries; each warp
 * owns 16 keys), dS^T through shared memory, and dQ += dS K accumulated in
 * registers (each warpgroup its split_dq_col columns), written once, scaled, in
 * the input dtype: no reductions, deterministic by construction. With
 * bwd_body's deterministic kernel (dK, dV without the dQ product) this is
 * the d split's deterministic mode, which avoids dQ slices (their
 * reductions miss L2 at d = 256). feat: 0 plain, 1 score features. */
enum {
  DQO_Q = 0, /* Q, dO, K [2], V [2] tiles (BM = BN rows), dS^T, lse2 / D */
  DQO_DO = TILE,
  DQO_K = 2 * TILE,
  DQO_V = 4 * TILE,
  DQO_S = 6 * TILE,
  DQO_L = DQO_S + SM_S,
  DQ_SMEM_BYTES = DQO_L + 8 * BM + 1024
};
/* (int): the constants come from different enums (-Wenum-compare) */
static_assert(!SDPA_BWD_DQ_KERNEL || ((int)BM == (int)BN && (int)TILE == (int)TILE_KV &&
                                      (int)DQ_SMEM_BYTES <= (int)SMEM_BYTES),
              "the dQ kernel's tiles fit the main kernel's shared memory");

/* dqa += dS K over n (a literal) columns from column c0, complete on return */
__device__ __forceinline__ void dq_accumulate(float (*dqa)[4], uint32_t s_s, uint32_t s_k, int c0,
                                              const int n) {
  wg_fence_acc(dqa, n / 8);
  wg_fence();
  dq_issue(dqa, opaque_u32(s_s), opaque_u32(s_k), 0, c0 / 64, 1, n);
  wg_commit();
  wg_wait0();
  wg_fence_acc(dqa, n / 8);
}

__device__ __forceinline__ void bwd_dq_body(const sdpa_bwd_params *prm, const int feat) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  float *s_lse = (float *)(smem + (base - smem_u32(smem)) + DQO_L); /* [BM] */
  float *s_dd = s_lse + BM;                                          /* [BM] */
  const sdpa_problem *p = &prm->p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3, wg = warp >> 2, wq = warp & 3;
  const int hh = blockIdx.y, b = blockIdx.z, hk = hh / prm->h_per_hk, d = (int)p->d;
  const int sq = (int)sdpa_seq_len_q(p, b), sk = (int)sdpa_seq_len_k(p, b);
  const int m0 = blockIdx.x * BM;
  if (m0 >= sq) return;
  const int off = p->bottom_right ? sk - sq : 0;
  const int64_t q_start = sdpa_seq_q_start(p, b);
  int n_begin, n_end; /* the key tiles some query of the block sees */
  sdpa_key_tiles(p, m0, BM, BN, sq, sk, &n_begin, &n_end);
  const int64_t wlo = (int64_t)off - prm->wl, whi = (int64_t)off + prm->wr;
  const uint32_t s_q = base + DQO_Q, s_do = base + DQO_DO, s_s = base + DQO_S;
  /* key row 0 of this sequence and kv head: tile n is n BN rows on */
  const uint16_t *k_b = (const uint16_t *)p->k + sdpa_kv_offset_seq(p, p->k_st, b, 0, hk);
  const uint16_t *v_b = (const uint16_t *)p->v + sdpa_kv_offset_seq(p, p->v_st, b, 0, hk);
  const int64_t kss = p->k_st.ss, vss = p->v_st.ss;
  const int qc = wg * 32, q0 = m0 + qc; /* this warpgroup's 32 queries */
  const int dqc = split_dq_col(wg);      /* and its dQ columns */

  float dqa[DQT][4];
  bwd_zero_acc(dqa, DQT);
  if (n_begin < n_end) {
    load_tile(s_q, (const uint16_t *)p->q + sdpa_q_offset(p, p->q_st, b, m0, hh), p->q_st.ss, BM,
              sq - m0, d, tid, p->q);
    load_tile(s_do, (const uint16_t *)p->dout + sdpa_q_offset(p, p->do_st, b, m0, hh),
              p->do_st.ss, BM, sq - m0, (int)p->d_v, tid, p->dout);
    if (tid < BM) bwd_row_stats(prm, q_start, hh, m0 + tid, sq, &s_lse[tid], &s_dd[tid]);
    {
      const int n0 = n_begin * BN;
      load_tile(base + DQO_K, k_b + n0 * kss, kss, BN, sk - n0, d, tid, p->k);
      load_tile(base + DQO_V, v_b + n0 * vss, vss, BN, sk - n0, (int)p->d_v, tid, p->v);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int n = n_begin, it = 0; n < n_end; ++n, ++it) {
    const int cur = it & 1, n0 = n * BN, j_lo = n0 + wq * 16;
    const uint32_t s_k = base + DQO_K + cur * TILE, s_v = base + DQO_V + cur * TILE;
    cp_async_wait_all(); /* this tile's K / V landed (and Q / dO on the first) */
    fence_proxy_async();
    __syncthreads(); /* ... for everyone; the other buffers' and dS^T's readers are done */
    float sp[4][4], ss[4][4];
    wg_fence();
    wg_rows_by_queries(sp, opaque_u32(s_v), s_do + qc * ROWB, 32, KSV);
    wg_rows_by_queries(ss, opaque_u32(s_k), s_q + qc * ROWB, 32, KS);
    wg_commit();
    if (n + 1 < n_end) { /* the next tile's K / V under this one */
      const int n02 = n0 + BN;
      load_tile(base + DQO_K + (cur ^ 1) * TILE, k_b + n02 * kss, kss, BN, sk - n02, d, tid, p->k);
      load_tile(base + DQO_V + (cur ^ 1) * TILE, v_b + n02 * vss, vss, BN, sk - n02, (int)p->d_v,
                tid, p->v);
      cp_async_commit();
    }
    const uint32_t keep = feat && prm->has_dropout
                              ? bwd_keep_bits(p, (uint32_t)(b * p->h + hh), q0, j_lo, lane)
                              : 0u;
    /* every pair visible: bwd_tf32_body.cuh's tile_vis == 2 written out, as in
       bwd_body (through a shared call ptxas spills in bwd_body) */
    const int full = m0 + BM <= sq && n0 + BN <= sk && (int64_t)n0 - (m0 + BM - 1) >= wlo &&
                     (int64_t)n0 + BN - 1 - m0 <= whi;
    wg_wait0();
    wg_fence_acc(sp, 4);
    wg_fence_acc(ss, 4);
    bwd_p_ds_forms(ss, sp, 4, prm, s_lse + qc, s_dd + qc, b, hh, j_lo, q0, lane, sq, sk, off, keep,
                   feat, full, 1);
    uint32_t da[2][4];
    pack_frags(da, sp, 32);
    store_ds(s_s, da, wq, qc, g, t, 32);
    fence_proxy_async(); /* the dS^T stores, for the product's reads */
    __syncthreads();
    if (SPLIT_DQ_N(wg) == 128)
      dq_accumulate(dqa, s_s, s_k, dqc, 128);
    else
      dq_accumulate(dqa, s_s, s_k, dqc, 64);
  }

  /* dQ = scale x accumulator, this warpgroup's columns, rows inside the sequence */
  SDPA_BELEM *dq = (SDPA_BELEM *)p->dq;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = m0 + wq * 16 + g + 8 * hf;
    if (i >= sq) continue;
    SDPA_BELEM *row = dq + sdpa_q_offset(p, p->dq_st, b, i, hh);
#pragma unroll
    for (int j = 0; j < DQT; ++j)
      if (j < SPLIT_DQ_N(wg) / 8)
        bwd_st_pair(row, dqc + 8 * j + 2 * t, d,
                    SDPA_PACK(dqa[j][2 * hf] * p->scale, dqa[j][2 * hf + 1] * p->scale));
  }
#else
  (void)prm;
  (void)feat;
#endif
}

#include "cuda/bwd/bwd_launch.cuh"

#undef SDPA_WG
#undef SPLIT_DK_N
#undef SPLIT_DV_N
#undef SPLIT_DQ_N
#undef SPLIT_DK_COL
#undef SDPA_HDW
#undef SDPA_DV
#undef TILE_SWZ
#undef LOAD_ZFILL
#include "cuda/bwd/bwd_elem16_undef.cuh"
