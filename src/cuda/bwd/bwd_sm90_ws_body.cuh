/*
 * bwd_sm90_ws_body.cuh - the warp-specialized Hopper backward (sm_90a:
 * wgmma), fp16 / bf16, written once and specialized by the preprocessor. An
 * instance (a SDPA_BWD_SM90_WS row of kernels.def) defines
 *   SDPA_KERNEL_NAME  token, e.g. bwd_sm90_ws_bf16_hd128
 *   SDPA_DTYPE        BF16 or F16
 *   SDPA_HDIM         head-dim bucket: 64, 128, 192 or 256
 *   SDPA_BLOCK_M      query rows a step: 128 at d 64, else 64
 *   SDPA_BLOCK_N      keys a block: 128 (64 a consumer warpgroup), or 64
 *                     at d 192 / 256 (the d split: both consumers on the
 *                     same keys, each with part of the dK / dV / dQ columns)
 *   SDPA_WARPS        12 (a producer warpgroup and two consumers)
 *   SDPA_DV           (a _dv128 row, optional) d_v's columns multiplied
 *                     when below the bucket (MLA's 192 / 128)
 * and includes this file; bwd_launch.cuh (included at the bottom) adds the
 * pre / post kernels and the host side, as for the other backwards.
 *
 * The algorithm is bwd_sm90_body.cuh's (a block owns a key block, K and V
 * resident, and walks the query blocks of every head of its GQA group; dK,
 * dV in registers; dQ added into an fp32 accumulator), with the work split
 * by role (docs/design.md §6, "Warp-specialized backward"):
 *   loaders    producer warps 0, 1 copy K and V once, then each step's Q
 *              and dO tiles and its lse2 / D rows into a ring of STAGES
 *              stages: the tiles by the copy engine where they map
 *              (prm->qdo_tma: a dense problem, whose rows past s_q read as
 *              zeros), else by cp.async (completed and fenced for the
 *              tensor cores); the rows by loads; then the stage's full
 *              barrier is arrived on.
 *   consumers  warpgroups 1 and 2, 64 keys each: per step S^T = K Q^T and
 *              dP^T = V dO^T (both operands shared), P and dS in registers
 *              (bwd_scores.cuh), dV += P^T dO and dK += dS^T Q with P^T
 *              and dS^T from registers; while those run, dS^T goes to a
 *              shared tile (two, alternating by step) and the consumers
 *              meet on a named barrier; then dQ = dS K for the warpgroup's
 *              block of dQ over all 128 keys, so each dQ element is
 *              reduced once a block. The stage is released as soon as dV /
 *              dK are done; dQ goes to the warpgroup's fp32 dQ tile.
 *   writers    producer warps 2, 3, one a consumer: its dQ tiles are added
 *              to the accumulator by bulk reductions of the copy engine
 *              (cp.reduce.async.bulk), the accumulator being tiled to match
 *              (bwd_dq_tile), so the consumers issue no atomics and wait
 *              for none.
 * The d split (d 192 / 256, ws_consume_split): both consumers own the
 * block's 64 keys; each makes S^T / dP^T for 32 of the step's 64 queries,
 * P^T and dS^T meet in shared tiles, and each multiplies dV, dK and dQ for
 * its columns of bwd_sm90_split.cuh's table (d 192: dK / dV 128 + 64, dQ
 * 64 + 128; d 256: 128 of each) with the operands from shared memory. At
 * d 256 one Q / dO stage fits beside K, V and the four dQ tiles: dV and dK
 * go first, so the stage is copied into while dQ runs.
 * No block-wide barrier after the start: the roles meet on mbarriers, the
 * consumers on one named barrier a step. The producer warpgroup keeps 56
 * registers a thread (setmaxnreg), the consumers 224.
 * Supported: bwd_sm90_body.cuh's plain and score-feature kernels (dense and
 * varlen, seqused_k, causal / window, alibi, softcap, dropout, GQA, d_v up
 * to the bucket), and the deterministic mode: each dQ tile's additions in
 * a fixed key-block order behind a counter (ws_write_dq, ws_dq_turn); without
 * a mask or window each key block starts its walk at its own index and goes
 * round (ws_rotation), so at each step the blocks add into different tiles.
 */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

/* Q and dO by the copy engine where they map: before bwd_common.cuh, whose
 * params then hold the maps (bwd_launch.cuh makes them). */
#define SDPA_BWD_QDO_TMA 1

#include "error.h"
#include "problem.h"
#include "registry.h"
#include "cuda/bwd/bwd_scores.cuh"
#include "cuda/bwd/bwd_common.cuh"
#include "cuda/ptx/ptx_bar.cuh"
#include "cuda/ptx/ptx_cp_async.cuh"
#include "cuda/ptx/ptx_ldmatrix.cuh" /* smem_u32 */
#include "cuda/ptx/ptx_mma.cuh"      /* pack_*x2 */
#include "cuda/ptx/ptx_sem.cuh"
#include "cuda/ptx/ptx_tma.cuh"      /* mbarriers, fence_proxy_async, setmaxnreg */
#include "cuda/ptx/ptx_wgmma.cuh"
#include "cuda/tma_map.h"

#include "cuda/bwd/bwd_names.cuh"
#include "cuda/bwd/bwd_elem16.cuh"

#ifndef SDPA_DV
#define SDPA_DV SDPA_HDIM
#endif
/* dK / dV columns a warpgroup: all of them, or the d split's wider share */
#if SDPA_BLOCK_N == 64
#define SDPA_HDW 128
#else
#define SDPA_HDW SDPA_HDIM
#endif
/* setmaxnreg's split of the block's 384 x 168 registers: the producer keeps
 * what its copies' addresses need, the consumers take the rest */
#define SDPA_REG_P 56
#define SDPA_REG_C 224
/* bwd_launch.cuh: dQ accumulated in 64 x 64 tiles, one bulk add each, deterministic by a
   counter a tile (ws_write_dq) */
#define SDPA_BWD_DQ_TILED 1

enum {
  HD = SDPA_HDIM,
  HDV = SDPA_DV, /* V's, dO's and dV's columns multiplied (the d split) */
  BM = SDPA_BLOCK_M,
  BN = SDPA_BLOCK_N,
  SPLIT = BN == 64, /* the d split: both consumers on the block's 64 keys */
  NTHREADS = SDPA_WARPS * 32,
  STAGES = HD == 256 ? 1 : 2, /* Q / dO / lse2 / D stages: one fits at d 256 */
  NQ = BM / 8,      /* n8 tiles of S^T / dP^T */
  MS = BM / 16,     /* k16 steps over a step's queries */
  KS = HD / 16,     /* k16 steps over the head dim */
  KSV = HDV / 16,   /* k16 steps of dP^T = V dO^T (the d split) */
  DTW = SDPA_HDW / 8, /* n8 tiles of dK / dV */
  /* a consumer's block of the step's dQ, 64 x 64 tiles: at d 128 all 64 rows
     and half of the columns, at d 64 (128 queries a step) half of the rows;
     the d split's 64 or 128 columns (one or two tiles) */
  DQN = 64,
  DQT = (SPLIT ? 128 : DQN) / 8,
  DQ_BY_ROWS = BM == 128,
  NDQ = SPLIT ? HD / 64 : 2, /* staged dQ tiles */
  NCB_DO = (HDV + 63) / 64,  /* dO's column blocks the products read */
  ROWB = 128,
  TILE = BM * HD * 2,    /* a Q or dO tile */
  TILE_KV = BN * HD * 2, /* a K or V tile */
  SM_S = BN * BM * 2,    /* a dS^T tile */
  SM_DQ = 64 * DQN * 4, /* a staged dQ tile: a tile of the accumulator, its layout (bwd_dq_tile) */
  /* K, V, Q [STAGES], dO [STAGES], dS^T [2], (the d split) P^T [2], dQ [NDQ],
     lse2 / D [STAGES][BM], barriers */
  OFF_K = 0,
  OFF_V = TILE_KV,
  OFF_Q = 2 * TILE_KV,
  OFF_DO = OFF_Q + STAGES * TILE,
  OFF_S = OFF_DO + STAGES * TILE,
  OFF_P = OFF_S + 2 * SM_S,
  OFF_DQ = OFF_P + (SPLIT ? 2 * SM_S : 0),
  OFF_L = OFF_DQ + NDQ * SM_DQ,
  OFF_D = OFF_L + STAGES * BM * 4,
  OFF_BAR = OFF_D + STAGES * BM * 4,
  BAR_FULL = 0, /* + stage */
  BAR_EMPTY = STAGES,
  BAR_KV_FULL = 2 * STAGES,
  BAR_DQ_FULL = 2 * STAGES + 1, /* + consumer */
  BAR_DQ_EMPTY = 2 * STAGES + 3,
  /* one stage (d 256): dO on barriers of its own (FULL / EMPTY then hold Q
     and the lse2 / D rows) and dQ issued after dV / dK, so each tile is
     copied again as soon as the product reading it is done */
  DO_APART = STAGES == 1,
  BAR_FULL_DO = 2 * STAGES + 5,
  BAR_EMPTY_DO = 2 * STAGES + 6,
  NBARS = 2 * STAGES + 5 + 2 * DO_APART,
  SMEM_BYTES = OFF_BAR + 8 * NBARS + 1024, /* + slack to align the base to 1024 */
  PRODUCERS = 128,
  LOADERS = 64, /* the producer's warps 0, 1; warps 2, 3 add the consumers' dQ tiles */
  CONSUMERS = 256,
  BAR_DS = 1, /* the consumers' named barrier: both dS^T halves stored */
  /* tile_load.cuh's geometry, for the 64 loader threads */
  CPR = HD / 8,
  EPC = 8,
  CPRP = CPR <= 16 ? CPR : 32, /* d 192 / 256: a row's 24 / 32 chunks in a warp's lanes */
  LOAD_RPP = LOADERS / CPRP,
  LOAD_PLAIN = 0
};
#define LOAD_THREADS LOADERS
#define LOAD_UNROLL 2 /* the producer keeps few registers */
#define LOAD_ZFILL 1 /* head dims inside the bucket: no split warps */
static_assert(NTHREADS == PRODUCERS + CONSUMERS, "a producer and two consumer warpgroups");
static_assert((BN == 128 && ((HD == 128 && BM == 64) || (HD == 64 && BM == 128))) ||
                  (SPLIT && (HD == 192 || HD == 256) && BM == 64),
              "64 keys a consumer; d 128: 64 queries a step, d 64: 128; d 192, 256: the d split");
static_assert(HDV == HD || (SPLIT && HDV == 128), "a _dv128 row: the d split's");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one block");
static_assert(STAGES == 2 || SPLIT, "one stage: the d split's products only (ws_split_products)");
static_assert(OFF_DQ % 256 == 0 && SM_DQ % 256 == 0, "dQ tiles: the staging stores' xor needs bits 5-7 clear");
/* setmaxnreg.inc waits until the registers are free: a split above what the
 * block holds at launch (NTHREADS x 168 under __launch_bounds__(NTHREADS, 1))
 * would hang */
static_assert(PRODUCERS * SDPA_REG_P + CONSUMERS * SDPA_REG_C <= NTHREADS * ((65536 / NTHREADS) & ~7),
              "setmaxnreg: the split must fit the registers the block holds");

#include "cuda/bwd/bwd_sm90_tiles.cuh"
#include "cuda/bwd/bwd_sm90_split.cuh"

__device__ __forceinline__ uint32_t ws_bar(uint32_t base, int i) { return base + OFF_BAR + 8 * i; }

/* The walk: blocks m_lo .. m_hi of each head of the group in turn. A
 * deterministic walk may start at step rot > 0 (ws_rotation) and go round;
 * det is a literal. */
__device__ __forceinline__ void ws_first_step(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                              int rot, int *hh, int *mb, const int det) {
  const int r = det && rot > 0 ? rot : 0;
  *hh = (int)blockIdx.y * prm->h_per_hk + r / kf->nm;
  *mb = kf->m_lo + r % kf->nm;
}

/* The (query head, query block) after this step's: past the group's last
 * head (a multiple of the group's size) a deterministic walk goes round to
 * its first. The size comes from the frame's live fields: prm->h_per_hk held
 * through the consumers' loop cost them registers. */
__device__ __forceinline__ void ws_next_step(const bwd_kframe *kf, int *hh, int *mb,
                                             const int det) {
  const int wrap = *mb == kf->m_hi;
  *hh += wrap;
  if (det && wrap) {
    const int group = kf->n_it / (kf->m_hi - kf->m_lo + 1);
    if (*hh % group == 0) *hh -= group;
  }
  *mb = wrap ? kf->m_lo : *mb + 1;
}

/* The step a deterministic walk starts at: its key block's index where
 * every key block of the sequence visits every step (prm->det_rot) and
 * there are no more key blocks than steps, so that at each step the blocks
 * add into different tiles (bwd_rot_place orders them); else -1, the walk
 * from step 0 (bwd_key_block_hi orders them). */
__device__ __forceinline__ int ws_rotation(const sdpa_bwd_params *prm, const bwd_kframe *kf) {
  return prm->det_rot && kf->n_it > 0 && (kf->sk + BN - 1) / BN <= kf->n_it ? kf->n0 / BN : -1;
}

/* ---- producer warps 0, 1: K / V once, Q / dO / lse2 / D a step ------------------------- */
/* K and V by cp.async (their group committed, not waited on). */
__device__ __forceinline__ void ws_load_kv(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                           uint32_t base, int tid) {
  const sdpa_problem *p = &prm->p;
  const int hk = blockIdx.y, b = blockIdx.z;
  load_tile(base + OFF_K, (const uint16_t *)p->k + sdpa_kv_offset_seq(p, p->k_st, b, kf->n0, hk),
            p->k_st.ss, BN, kf->sk - kf->n0, (int)p->d, tid, p->k);
  load_tile(base + OFF_V, (const uint16_t *)p->v + sdpa_kv_offset_seq(p, p->v_st, b, kf->n0, hk),
            p->v_st.ss, BN, kf->sk - kf->n0, (int)p->d_v, tid, p->v);
  cp_async_commit();
}

/* A step's lse2 / D rows into stage s, a loader a row. */
__device__ __forceinline__ void ws_load_rows(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                             int hh, int m0, int s, float *s_lse, float *s_dd,
                                             int tid) {
#pragma unroll
  for (int i = tid; i < BM; i += LOADERS)
    bwd_row_stats(prm, kf->q_start, hh, m0 + i, kf->sq, &s_lse[s * BM + i], &s_dd[s * BM + i]);
}

/* K and V landed (one_later, a literal: step 0's cp.async group is still
 * out after theirs), fenced for the tensor cores once the barrier passes. */
__device__ __forceinline__ void ws_release_kv(uint32_t base, const int one_later) {
  if (one_later)
    cp_async_wait_1();
  else
    cp_async_wait_all();
  fence_proxy_async();
  mbar_arrive(ws_bar(base, BAR_KV_FULL));
}

/* Q and dO by cp.async. */
__device__ __forceinline__ void ws_produce(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                           uint32_t base, float *s_lse, float *s_dd, int tid,
                                           int rot, const int det) {
  const sdpa_problem *p = &prm->p;
  const int b = blockIdx.z, d = (int)p->d, dv = (int)p->d_v;
  const uint16_t *q_b = (const uint16_t *)p->q + sdpa_q_offset(p, p->q_st, b, 0, 0);
  const uint16_t *do_b = (const uint16_t *)p->dout + sdpa_q_offset(p, p->do_st, b, 0, 0);
  const int64_t qss = p->q_st.ss, qsh = p->q_st.sh, dss = p->do_st.ss, dsh = p->do_st.sh;
  ws_load_kv(prm, kf, base, tid); /* released below, once step 0's copies are out too */
  int hh, mb;
  ws_first_step(prm, kf, rot, &hh, &mb, det);
#pragma unroll 1
  for (int it = 0; it < kf->n_it; ++it) {
    const int s = it % STAGES, m0 = mb * BM;
    if (DO_APART) mbar_wait(ws_bar(base, BAR_EMPTY_DO), (it & 1) ^ 1);
    mbar_wait(ws_bar(base, BAR_EMPTY + s), ((it / STAGES) & 1) ^ 1);
    load_tile(base + OFF_Q + s * TILE, q_b + m0 * qss + hh * qsh, qss, BM, kf->sq - m0, d, tid,
              p->q);
    load_tile(base + OFF_DO + s * TILE, do_b + m0 * dss + hh * dsh, dss, BM, kf->sq - m0, dv, tid,
              p->dout);
    cp_async_commit();
    ws_load_rows(prm, kf, hh, m0, s, s_lse, s_dd, tid);
    if (it == 0) ws_release_kv(base, 1);
    cp_async_wait_all();
    fence_proxy_async();
    mbar_arrive(ws_bar(base, BAR_FULL + s));
    if (DO_APART) mbar_arrive(ws_bar(base, BAR_FULL_DO));
    ws_next_step(kf, &hh, &mb, det);
  }
}

#if SDPA_BWD_QDO_TMA
/* dO's column blocks of a step by the copy engine, completing on bar. */
__device__ __forceinline__ void ws_tma_do(const sdpa_bwd_params *prm, uint32_t dst, int m0, int hh,
                                          uint32_t bar) {
#pragma unroll
  for (int cb = 0; cb < NCB_DO; ++cb)
    tma_load_4d(dst + cb * BM * ROWB, &prm->tdo, cb * 64, m0, hh, blockIdx.z, bar);
}

/* Q and dO by the copy engine (prm->qdo_tma: a dense problem; the tiles' rows
 * and columns past s_q, d, d_v read as zeros), thread 0 issuing; each loader
 * arrives once its lse2 / D rows are stored. With DO_APART dO first, on its
 * own barriers. */
__device__ __forceinline__ void ws_produce_tma(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                               uint32_t base, float *s_lse, float *s_dd,
                                               int tid, int rot, const int det) {
  const int b = blockIdx.z;
  ws_load_kv(prm, kf, base, tid);
  int hh, mb;
  ws_first_step(prm, kf, rot, &hh, &mb, det);
#pragma unroll 1
  for (int it = 0; it < kf->n_it; ++it) {
    const int s = it % STAGES, m0 = mb * BM;
    const uint32_t full = ws_bar(base, BAR_FULL + s);
    if (DO_APART) {
      const uint32_t full_do = ws_bar(base, BAR_FULL_DO);
      mbar_wait(ws_bar(base, BAR_EMPTY_DO), (it & 1) ^ 1);
      if (tid == 0) {
        mbar_expect_tx_only(full_do, NCB_DO * BM * ROWB);
        ws_tma_do(prm, base + OFF_DO, m0, hh, full_do);
      }
      mbar_arrive(full_do);
    }
    mbar_wait(ws_bar(base, BAR_EMPTY + s), ((it / STAGES) & 1) ^ 1);
    if (tid == 0) {
      mbar_expect_tx_only(full, (HD / 64 + (DO_APART ? 0 : NCB_DO)) * BM * ROWB);
#pragma unroll
      for (int cb = 0; cb < HD / 64; ++cb)
        tma_load_4d(base + OFF_Q + s * TILE + cb * BM * ROWB, &prm->tq, cb * 64, m0, hh, b, full);
      if (!DO_APART) ws_tma_do(prm, base + OFF_DO + s * TILE, m0, hh, full);
    }
    ws_load_rows(prm, kf, hh, m0, s, s_lse, s_dd, tid);
    if (it == 0) ws_release_kv(base, 0); /* (their group the only one) */
    mbar_arrive(full);
    ws_next_step(kf, &hh, &mb, det);
  }
}
#endif

/* ---- producer warps 2, 3: consumer w's dQ tiles into the accumulator ------------------ */
/* Consumer w's staged tiles a step: how many, and the first (its index
 * among the staged tiles and, but for d 64's row halves, its column block). */
__device__ __forceinline__ int ws_dq_ntiles(int w) { return SPLIT ? SPLIT_DQ_N(w) / 64 : 1; }
__device__ __forceinline__ int ws_dq_first(int w) { return SPLIT ? split_dq_col(w) / 64 : w; }

/* This key block's turn at step it's dQ tiles (det): in a rotated walk
 * (rot >= 0, the block's index) its place among the blocks that reach the
 * step's query block (bwd_rot_place); else its place in descending order,
 * counted from the last key block that visits query block mb
 * (bwd_key_block_hi): under a causal mask or a window a key block meets a
 * query block one step after the next key block did. */
__device__ __forceinline__ int ws_dq_turn(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                          int it, int mb, int rot) {
  if (rot >= 0) return (int)bwd_rot_place(it, rot, (kf->sk + BN - 1) / BN, kf->n_it);
  return (int)(bwd_key_block_hi(kf->sq, kf->sk, kf->off, prm->wr, mb, BM, BN) - kf->n0 / BN);
}

/* One bulk reduction a tile (skipped when all its rows are past the
 * sequence), the tiles free again once the copy engine has read them. det (a
 * literal): a tile's additions in the order of ws_dq_turn, behind its
 * counter. The step's tiles share the turn: all are waited for, added and
 * their writes waited on at once (the completions overlap), then every
 * counter is released; the staged tiles are freed before that, so the
 * consumer does not wait for the writes. */
__device__ __forceinline__ void ws_write_dq(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                            uint32_t base, int w, int lane, int rot,
                                            const int det) {
  const int first = ws_dq_first(w), ntiles = ws_dq_ntiles(w);
  int hh, mb;
  ws_first_step(prm, kf, rot, &hh, &mb, det);
#pragma unroll 1
  for (int it = 0; it < kf->n_it; ++it) {
    const int m0 = mb * BM + (DQ_BY_ROWS ? 64 * w : 0); /* the tiles' first row */
    mbar_wait(ws_bar(base, BAR_DQ_FULL + w), it & 1);
    if (lane == 0) {
      const int live = m0 < kf->sq;
      /* the step's tiles: consecutive column blocks of one row tile */
      const int64_t dt0 =
          bwd_dq_tile_index(prm, kf->q_start, blockIdx.z, m0, hh, DQ_BY_ROWS ? 0 : first, HD);
      if (det && live) {
        const int turn = ws_dq_turn(prm, kf, it, mb, rot);
#pragma unroll 1
        for (int k = 0; k < ntiles; ++k) sem_wait_eq(bwd_dq_sem(prm, dt0 + k), turn);
      }
#pragma unroll 1
      for (int k = 0; k < ntiles; ++k)
        if (live)
          bulk_reduce_add_f32(bwd_dq_tile(prm, dt0 + k), base + OFF_DQ + (first + k) * SM_DQ,
                              SM_DQ);
      bulk_commit();
      bulk_wait_read0();
      mbar_arrive(ws_bar(base, BAR_DQ_EMPTY + w)); /* the consumer stages again meanwhile */
      if (det) {
        bulk_wait0(); /* the writes done: the next key block may add */
        if (live) {
#pragma unroll 1
          for (int k = 0; k < ntiles; ++k) sem_release_inc(bwd_dq_sem(prm, dt0 + k));
        }
      }
    }
    __syncwarp();
    ws_next_step(kf, &hh, &mb, det);
  }
  if (lane == 0) bulk_wait0();
}

/* ---- consumers ------------------------------------------------------------------------ */
/* The warpgroup's dQ block (n columns, a literal, in 64-column tiles from the
 * staged tile at tile0) to shared memory, which a producer warp adds to the
 * accumulator: row r's 8-column group j of a tile at j ^ (r % 8) = j ^ g
 * (the group's byte offset j 32 sits in bits 5-7, which the tile's base and
 * row leave 0: j ^ g is an xor of the address). */
__device__ __forceinline__ void ws_stage_dq(uint32_t tile0, float (*dqa)[4], int wq, int g, int t,
                                            const int n) {
  const uint32_t st = (tile0 + ((wq * 16 + g) * DQN + 2 * t) * 4) ^ (g << 5);
#pragma unroll
  for (int j = 0; j < n / 8; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(((st + (j >> 3) * SM_DQ) ^
                                                                 ((j & 7) << 5)) +
                                                                hf * 8 * DQN * 4),
                   "f"(dqa[j][2 * hf]), "f"(dqa[j][2 * hf + 1])
                   : "memory");
}

/* Warpgroup wg's finished dQ columns (n, a literal) into its staged tiles
 * once its writer has freed them, then handed to the writer. */
__device__ __forceinline__ void ws_hand_dq(float (*dqa)[4], uint32_t base, int wg, int wq, int g,
                                           int t, int it, const int n) {
  wg_fence_acc(dqa, n / 8);
  mbar_wait(ws_bar(base, BAR_DQ_EMPTY + wg), (it & 1) ^ 1);
  ws_stage_dq(base + OFF_DQ + ws_dq_first(wg) * SM_DQ, dqa, wq, g, t, n);
  fence_proxy_async(); /* for the copy engine's reads */
  mbar_arrive(ws_bar(base, BAR_DQ_FULL + wg));
}

/* The five products of a step, two consumers of 64 keys each. */
/* wg: 0 or 1 (the consumer), ctid: 0 .. 255; feat (0 plain, 1 softcap / alibi
 * / dropout) a literal. dK, dV accumulate into dk, dv. */
__device__ __forceinline__ void ws_consume(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                           uint32_t base, const float *s_lse, const float *s_dd,
                                           int wg, int ctid, float (*dk)[4], float (*dv)[4],
                                           int rot, const int feat, const int det) {
  const sdpa_problem *p = &prm->p;
  const int lane = ctid & 31, wq = (ctid >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int kw = wg * 4 + wq; /* this warp's 16 keys: n0 + 16 kw .. */
  const int b = blockIdx.z, n0 = kf->n0, sq = kf->sq, sk = kf->sk, off = kf->off;
  const uint32_t k_wg = base + OFF_K + wg * 64 * ROWB, v_wg = base + OFF_V + wg * 64 * ROWB;
  const int64_t wlo = (int64_t)off - prm->wl, whi = (int64_t)off + prm->wr;
  const int j_lo = n0 + kw * 16;
  mbar_wait(ws_bar(base, BAR_KV_FULL), 0);
  int hh, mb;
  ws_first_step(prm, kf, rot, &hh, &mb, det);
#pragma unroll 1
  for (int it = 0; it < kf->n_it; ++it) {
    const int s = it % STAGES, m0 = mb * BM;
    const uint32_t s_q = base + OFF_Q + s * TILE, s_do = base + OFF_DO + s * TILE;
    const uint32_t s_s = base + OFF_S + (it & 1) * SM_S;
    const int full = m0 + BM <= sq && n0 + BN <= sk && (int64_t)n0 - (m0 + BM - 1) >= wlo &&
                     (int64_t)n0 + BN - 1 - m0 <= whi;
    mbar_wait(ws_bar(base, BAR_FULL + s), (it / STAGES) & 1);

    /* dP^T = V dO^T and S^T = K Q^T: 64 keys x 64 queries */
    float sp[NQ][4], ss[NQ][4];
    uint32_t keep[BM / 32]; /* dropout's Philox bits while the products run */
    wg_scores(sp, ss, keep, prm, v_wg, k_wg, s_do, s_q, BM, KS, feat, (uint32_t)(b * p->h + hh), m0,
              j_lo, lane);
#pragma unroll
    for (int h2 = 0; h2 < BM / 32; ++h2)
      bwd_p_ds_forms(ss + 4 * h2, sp + 4 * h2, 4, prm, s_lse + s * BM + 32 * h2,
                     s_dd + s * BM + 32 * h2, b, hh, j_lo, m0 + 32 * h2, lane, sq, sk, off,
                     keep[h2], feat, full, 1);
    /* dV += P^T dO and dK += dS^T Q, both with their A operand from registers,
       while dS^T goes to shared memory for dQ and the consumers meet */
    uint32_t pa[MS][4], da[MS][4];
    pack_frags(pa, ss, BM);
    pack_frags(da, sp, BM);
    wg_fence_acc(dv, DTW);
    wg_fence_acc(dk, DTW);
    wg_fence();
    wg_keys_by_cols(dv, pa, s_do, BM);
    wg_keys_by_cols(dk, da, s_q, BM);
    wg_commit();
    store_ds(s_s, da, kw, 0, g, t, BM);
    fence_proxy_async(); /* the dS^T stores, for the products' reads */
    bar_sync_named(BAR_DS, CONSUMERS);
    wg_wait0(); /* dV / dK: pa, da free, the stage's Q and dO read */
    wg_fence_acc(dv, DTW);
    wg_fence_acc(dk, DTW);
    mbar_arrive(ws_bar(base, BAR_EMPTY + s));

    /* the warpgroup's 64 x 64 block of dQ = dS K over the 128 keys */
    float dqa[DQT][4];
    wg_fence();
    dq_issue(dqa, opaque_u32(s_s), opaque_u32(base + OFF_K), DQ_BY_ROWS ? wg : 0,
             DQ_BY_ROWS ? 0 : wg, 0, DQN);
    wg_commit();
    wg_wait0();
    ws_hand_dq(dqa, base, wg, wq, g, t, it, DQN);
    ws_next_step(kf, &hh, &mb, det);
  }
}

/* dV / dK done: the stage's Q and dO read, the stage free (with DO_APART
 * dV's group was waited on, and dO released, before). */
__device__ __forceinline__ void ws_split_release(float (*dk)[4], float (*dv)[4], uint32_t base,
                                                 int s, const int dkn, const int dvn) {
  if (!DO_APART) wg_fence_acc(dv, dvn / 8);
  wg_fence_acc(dk, dkn / 8);
  mbar_arrive(ws_bar(base, BAR_EMPTY + s));
}

/* The d split: one warpgroup's products of a step, after the P^T / dS^T
 * exchange. With two stages dQ goes first, staged for its writer once done
 * while dV and dK run (two groups); with one (DO_APART) dV, dK and dQ a
 * group each, dO released once dV is done and Q once dK is, so each is
 * copied again while the rest runs. dkn, dvn, dqn: the split table's widths
 * of wg, as literals. */
__device__ __forceinline__ void ws_split_products(float (*dk)[4], float (*dv)[4], uint32_t base,
                                                  uint32_t s_s, uint32_t s_p, uint32_t s_q,
                                                  uint32_t s_do, int wg, int wq, int g, int t,
                                                  int it, int s, const int dkn, const int dvn,
                                                  const int dqn) {
  float dqa[DQT][4];
  split_issue(dqa, dk, dv, s_s, s_p, base + OFF_K, s_q, s_do,
              DO_APART ? SPLIT_DQ_LAST : SPLIT_DQ_FIRST, DO_APART, wg, dkn, dvn, dqn);
  if (DO_APART) {
    wg_wait2(); /* dV */
    wg_fence_acc(dv, dvn / 8);
    mbar_arrive(ws_bar(base, BAR_EMPTY_DO));
  }
  wg_wait1(); /* the first group (with DO_APART: dK) */
  if (DO_APART)
    ws_split_release(dk, dv, base, s, dkn, dvn);
  else
    ws_hand_dq(dqa, base, wg, wq, g, t, it, dqn);
  wg_wait0();
  if (DO_APART)
    ws_hand_dq(dqa, base, wg, wq, g, t, it, dqn);
  else
    ws_split_release(dk, dv, base, s, dkn, dvn);
}

/* The d split's steps and dK / dV: both warpgroups on the block's 64 keys,
 * 32 of the step's queries each for S^T / dP^T (no product twice); P^T and
 * dS^T meet in shared tiles (two of each, alternating by step, so a step's
 * stores never meet the other warpgroup's reads of the last). dkn, dvn,
 * dqn: the split table's widths of wg, literals, so that the accumulators
 * past them are never live. */
__device__ __forceinline__ void ws_consume_split(const sdpa_bwd_params *prm, const bwd_kframe *kf,
                                                 uint32_t base, const float *s_lse,
                                                 const float *s_dd, int wg, int ctid, int rot,
                                                 const int feat, const int det, const int dkn,
                                                 const int dvn, const int dqn) {
  const sdpa_problem *p = &prm->p;
  const int lane = ctid & 31, wq = (ctid >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.z, n0 = kf->n0, sq = kf->sq, sk = kf->sk, off = kf->off;
  const int64_t wlo = (int64_t)off - prm->wl, whi = (int64_t)off + prm->wr;
  const int j_lo = n0 + wq * 16, qc = wg * 32; /* this warp's 16 keys, the warpgroup's queries */
  float dk[DTW][4], dv[DTW][4];
  bwd_zero_acc(dk, DTW);
  bwd_zero_acc(dv, DTW);
  if (kf->n_it > 0) mbar_wait(ws_bar(base, BAR_KV_FULL), 0);
  int hh, mb;
  ws_first_step(prm, kf, rot, &hh, &mb, det);
#pragma unroll 1
  for (int it = 0; it < kf->n_it; ++it) {
    const int s = it % STAGES, m0 = mb * BM, q0 = m0 + qc;
    const uint32_t s_q = base + OFF_Q + s * TILE, s_do = base + OFF_DO + s * TILE;
    const uint32_t s_s = base + OFF_S + (it & 1) * SM_S, s_p = base + OFF_P + (it & 1) * SM_S;
    const int full = m0 + BM <= sq && n0 + BN <= sk && (int64_t)n0 - (m0 + BM - 1) >= wlo &&
                     (int64_t)n0 + BN - 1 - m0 <= whi;
    /* dP^T first: with DO_APART dO is copied before Q */
    mbar_wait(ws_bar(base, DO_APART ? BAR_FULL_DO : BAR_FULL + s), (it / STAGES) & 1);
    float sp[4][4], ss[4][4];
    wg_fence();
    wg_rows_by_queries(sp, opaque_u32(base + OFF_V), s_do + qc * ROWB, 32, KSV);
    if (DO_APART) { /* Q's wait loop between the products: fence again for the next */
      mbar_wait(ws_bar(base, BAR_FULL + s), it & 1);
      wg_fence();
    }
    wg_rows_by_queries(ss, opaque_u32(base + OFF_K), s_q + qc * ROWB, 32, KS);
    wg_commit();
    const uint32_t keep =
        feat && prm->has_dropout ? bwd_keep_bits(p, (uint32_t)(b * p->h + hh), q0, j_lo, lane) : 0u;
    split_exchange(ss, sp, prm, s_lse + s * BM + qc, s_dd + s * BM + qc, b, hh, j_lo, q0, qc, wq,
                   lane, g, t, sq, sk, off, keep, feat, full, s_p, s_s);
    bar_sync_named(BAR_DS, CONSUMERS);
    ws_split_products(dk, dv, base, s_s, s_p, s_q, s_do, wg, wq, g, t, it, s, dkn, dvn, dqn);
    ws_next_step(kf, &hh, &mb, det);
  }
  /* dK (times scale) and dV of this warp's keys, the warpgroup's columns; rows
     past seqused_k are 0 */
  const int fk = (int)sdpa_seq_full_len_k(p, b);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
    bwd_store_kv_row(prm, b, blockIdx.y, n0 + wq * 16 + g + hf * 8, fk, dk, dv, dkn / 8,
                     SPLIT_DK_COL(wg), dvn / 8, split_dv_col(wg), hf, t);
}

/* ---- main ------------------------------------------------------------------------- */
/* feat (0 plain, 1 softcap / alibi / dropout) and det (the deterministic
 * mode: the writers' counters, and the walks' start) literals at each kernel
 * (bwd_launch.cuh); one key block a block. */
__device__ __forceinline__ void bwd_body(const sdpa_bwd_params *prm, const int feat,
                                         const int det) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  float *s_lse = (float *)(smem + (base - smem_u32(smem)) + OFF_L); /* [STAGES][BM] */
  float *s_dd = (float *)(smem + (base - smem_u32(smem)) + OFF_D);
  const int tid = threadIdx.x, b = blockIdx.z;
  /* deterministic: the highest key block first, so a block's counter waits point at
     lower-numbered blocks, which the hardware starts first */
  const int nblk = det ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const bwd_kframe kf = bwd_kframe_make(prm, b, nblk, BN, BM);
  const int rot = det ? ws_rotation(prm, &kf) : -1;
  if (kf.n_it > 0) { /* (the same at every thread: the barriers are used or not at all) */
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        mbar_init(ws_bar(base, BAR_FULL + s), LOADERS);
        mbar_init(ws_bar(base, BAR_EMPTY + s), CONSUMERS);
      }
      mbar_init(ws_bar(base, BAR_KV_FULL), LOADERS);
      if (DO_APART) {
        mbar_init(ws_bar(base, BAR_FULL_DO), LOADERS);
        mbar_init(ws_bar(base, BAR_EMPTY_DO), CONSUMERS);
      }
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        mbar_init(ws_bar(base, BAR_DQ_FULL + w), CONSUMERS / 2);
        mbar_init(ws_bar(base, BAR_DQ_EMPTY + w), 1);
      }
      mbar_init_fence();
    }
    __syncthreads();
  }
  if (tid < PRODUCERS) {
    SDPA_SETMAXNREG_DEC(SDPA_REG_P);
    if (kf.n_it == 0) return;
#if SDPA_BWD_QDO_TMA
    if (tid < LOADERS && prm->qdo_tma)
      ws_produce_tma(prm, &kf, base, s_lse, s_dd, tid, rot, det);
    else
#endif
    if (tid < LOADERS)
      ws_produce(prm, &kf, base, s_lse, s_dd, tid, rot, det);
    else
      ws_write_dq(prm, &kf, base, (tid - LOADERS) >> 5, tid & 31, rot, det);
  } else {
    SDPA_SETMAXNREG_INC(SDPA_REG_C);
    /* the warpgroup as a warp-uniform value: the descriptors derived from it stay
       in uniform registers */
    const int ctid = tid - PRODUCERS, wg = __shfl_sync(0xffffffffu, ctid >> 7, 0);
    if (SPLIT) {
      /* each warpgroup's path with its widths as literals, in the branch
         order bwd_sm90_body.cuh found ptxas allocates best (W1's first) */
      enum { W1 = HDV == 192 };
      if (wg == W1)
        ws_consume_split(prm, &kf, base, s_lse, s_dd, wg, ctid, rot, feat, det, SPLIT_DK_N(W1),
                         SPLIT_DV_N(W1), SPLIT_DQ_N(W1));
      else
        ws_consume_split(prm, &kf, base, s_lse, s_dd, wg, ctid, rot, feat, det,
                         SPLIT_DK_N(1 - W1), SPLIT_DV_N(1 - W1), SPLIT_DQ_N(1 - W1));
      return;
    }
    const int g = (ctid & 31) >> 2, t = ctid & 3;
    const int kw = wg * 4 + ((ctid >> 5) & 3);
    float dk[DTW][4], dv[DTW][4];
    bwd_zero_acc(dk, DTW);
    bwd_zero_acc(dv, DTW);
    if (kf.n_it > 0) ws_consume(prm, &kf, base, s_lse, s_dd, wg, ctid, dk, dv, rot, feat, det);
    /* dK (times scale) and dV of this warp's keys; rows past seqused_k are 0 */
    const int fk = (int)sdpa_seq_full_len_k(&prm->p, b);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      bwd_store_kv_row(prm, b, blockIdx.y, kf.n0 + kw * 16 + g + hf * 8, fk, dk, dv, DTW, 0, DTW,
                       0, hf, t);
  }
#else
  (void)prm; /* the sm_80 pass of a multi-arch build: never launched (min_arch 90) */
  (void)feat;
  (void)det;
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
#undef SDPA_REG_P
#undef SDPA_REG_C
#undef TILE_SWZ
#undef LOAD_ZFILL
#undef LOAD_THREADS
#undef LOAD_UNROLL
#include "cuda/bwd/bwd_elem16_undef.cuh"
