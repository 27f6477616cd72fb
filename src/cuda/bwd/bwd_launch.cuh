/*
 * bwd_launch.cuh - what the backward instances share around their main
 * kernel (bwd_sm80_body.cuh and bwd_sm90_body.cuh for fp16 / bf16,
 * bwd_tf32_body.cuh for fp32):
 *   pre   D_i = rowsum(dO_i * O_i), lse2 = lse * log2(e), dQ accumulator = 0
 *   main  the four compilations of the body's bwd_body(prm, feat, det)
 *         (score features or not, deterministic or not); in a 16-bit row's
 *         _bias instance or a Hopper bias row (SDPA_BWD_BIAS 1) the two of
 *         the bias form (feat 2)
 *   post  dQ = scale * accumulator (the slices added in order when
 *         deterministic), in the input dtype
 * and the host side: workspace size, parameter setup, the three launches on
 * the caller's stream. Included at the bottom of a body, which defines first
 *   HD, BN, NTHREADS, SMEM_BYTES   (enum) bucket, keys per block, threads,
 *                                  dynamic shared memory of the main kernel
 *   bwd_body(prm, feat, det)       the main kernel's body
 *   SDPA_BELEM                     the element type of q / k / v / out / dq ...
 *   bwd_ld8(x, f)                  f[0..8) = x[0..8) in fp32 (16-byte aligned x)
 *   bwd_ld1(x, k)                  x[k] in fp32
 *   bwd_st8(x, f, n)               x[0..n) = f[0..n) in the element type, n <= 8
 *                                  (one 16-byte aligned store when n >= 8)
 * and the names of bwd_names.cuh. This file #undef's the names and the row's fields at the end. A body with dQ
 * kernels (SDPA_BWD_DQ_KERNEL 1: the Hopper body's d split, bwd_dq_body,
 * DQ_SMEM_BYTES, BM: its grid's query blocks) makes the deterministic mode's
 * dQ with them instead of with dQ slices and the post kernel. A body with a
 * tiled accumulator (SDPA_BWD_DQ_TILED) has one slice and is deterministic
 * by a counter a tile (its main kernel adds each tile in key-block order,
 * bwd_dq_sem; pre zeroes the counters).
 */
#include <stdio.h>
#include <string.h>

#include "cuda/bwd/dbias_sum.h"

#ifndef SDPA_BWD_DQ_KERNEL
#define SDPA_BWD_DQ_KERNEL 0
#endif
#ifndef SDPA_BWD_QDO_TMA /* 1 (set before bwd_common.cuh): Q and dO by the copy engine where
                             they map (prm.qdo_tma, prm.tq, prm.tdo) */
#define SDPA_BWD_QDO_TMA 0
#endif
#ifndef SDPA_BWD_DQ_TILED /* 1: the dQ accumulator is tiled (bwd_dq_tiled_at; one slice),
                              deterministic by a counter a tile (bwd_dq_sem) */
#define SDPA_BWD_DQ_TILED 0
#endif
/* the largest d_v: the bucket, or a Hopper row's SDPA_DV (below HD in a _dv row) */
#ifdef SDPA_DV
#define SDPA_BWD_DV_MAX SDPA_DV
#else
#define SDPA_BWD_DV_MAX HD
#endif

/* Where accumulator slice sl holds columns c .. c + 7 (c a multiple of 8) of
 * query row i of sequence b (row: i counted over all sequences), head hh. */
static __device__ __forceinline__ float *bwd_dq_at(const sdpa_bwd_params *prm, int sl, int b,
                                                   int64_t i, int64_t row, int hh, int c) {
#if SDPA_BWD_DQ_TILED
  (void)sl;
  return bwd_dq_tiled_at(prm, row - i, b, i, hh, c, HD);
#else
  (void)b;
  (void)i;
  return bwd_dq_acc_row(prm, sl, row, hh, HD) + c;
#endif
}

/* ---- pre: D, lse2, zeroed dQ accumulator ------------------------------------------ */
/* 256 threads = 32 (row, head) items of 8 lanes; grid (rows / 32, h, b). */
extern "C" __global__ void __launch_bounds__(256) SDPA_KPRE(const __grid_constant__ sdpa_bwd_params prm) {
  const sdpa_problem *p = &prm.p;
  const int l8 = threadIdx.x & 7, b = blockIdx.z, hh = blockIdx.y;
  const int64_t i = (int64_t)blockIdx.x * 32 + (threadIdx.x >> 3);
  if (i >= sdpa_seq_len_q(p, b)) return; /* whole 8-lane teams leave together */
  const unsigned team = 0xffu << (threadIdx.x & 24);
  const int64_t row = sdpa_seq_q_start(p, b) + i;
  const int d = (int)p->d_v;
  const SDPA_BELEM *o = (const SDPA_BELEM *)p->out + sdpa_q_offset(p, p->o_st, b, i, hh);
  const SDPA_BELEM *dout = (const SDPA_BELEM *)p->dout + sdpa_q_offset(p, p->do_st, b, i, hh);
  float acc = 0.f;
  for (int c = l8 * 8; c < d; c += 64) {
    if (c + 8 <= d) {
      float ov[8], dv[8];
      bwd_ld8(o + c, ov);
      bwd_ld8(dout + c, dv);
#pragma unroll
      for (int k = 0; k < 4; ++k) acc += ov[2 * k] * dv[2 * k] + ov[2 * k + 1] * dv[2 * k + 1];
    } else {
      for (int k = c; k < d; ++k) acc += bwd_ld1(o, k) * bwd_ld1(dout, k);
    }
  }
  acc += __shfl_xor_sync(team, acc, 4);
  acc += __shfl_xor_sync(team, acc, 2);
  acc += __shfl_xor_sync(team, acc, 1);
  if (l8 == 0) {
    prm.dsum[hh * prm.total_q + row] = acc;
    prm.lse2[hh * prm.total_q + row] = p->lse[sdpa_lse_offset(p, b, i, hh)] * SDPA_LOG2E;
  }
#if SDPA_BWD_DQ_TILED
  if (prm.dq_sem && (i & 63) == 0 && l8 == 0) /* a tile's first row: its counters */
    for (int cb = 0; cb < HD / 64; ++cb)
      *bwd_dq_sem(&prm, bwd_dq_tile_index(&prm, row - i, b, i, hh, cb, HD)) = 0;
#endif
  for (int sl = 0; sl < prm.nsplit; ++sl)
    for (int c = l8 * 8; c < HD; c += 64) {
      float4 *a = (float4 *)bwd_dq_at(&prm, sl, b, i, row, hh, c);
      a[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      a[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/* ---- post: dQ = scale * accumulator, in the input dtype ------------------------------ */
extern "C" __global__ void __launch_bounds__(256) SDPA_KPOST(const __grid_constant__ sdpa_bwd_params prm) {
  const sdpa_problem *p = &prm.p;
  const int l8 = threadIdx.x & 7, b = blockIdx.z, hh = blockIdx.y;
  const int64_t i = (int64_t)blockIdx.x * 32 + (threadIdx.x >> 3);
  if (i >= sdpa_seq_len_q(p, b)) return;
  const int64_t row = sdpa_seq_q_start(p, b) + i;
  const int d = (int)p->d;
  SDPA_BELEM *dq = (SDPA_BELEM *)p->dq + sdpa_q_offset(p, p->dq_st, b, i, hh);
  const float s = p->scale;
  for (int c = l8 * 8; c < d; c += 64) {
    const float *a = bwd_dq_at(&prm, 0, b, i, row, hh, c);
    float4 x = *(const float4 *)a, y = *(const float4 *)(a + 4);
    for (int sl = 1; sl < prm.nsplit; ++sl) { /* deterministic: the slices in a fixed order */
      const float4 x2 = *(const float4 *)(a + sl * prm.slice), y2 = *(const float4 *)(a + sl * prm.slice + 4);
      x.x += x2.x, x.y += x2.y, x.z += x2.z, x.w += x2.w;
      y.x += y2.x, y.y += y2.y, y.z += y2.z, y.w += y2.w;
    }
    const float r[8] = {x.x * s, x.y * s, x.z * s, x.w * s, y.x * s, y.y * s, y.z * s, y.w * s};
    bwd_st8(dq + c, r, d - c);
  }
}

/* The compilations of the body (feat and det literals): four, two in a bias
 * row (feat 2); the macro names the signature only. */
#define SDPA_BWD_MAIN(kname)                                                                      \
  extern "C" __global__ void __launch_bounds__(NTHREADS, 1)                                       \
      kname(const __grid_constant__ sdpa_bwd_params prm)
#if SDPA_BWD_BIAS
SDPA_BWD_MAIN(SDPA_KMAIN) { bwd_body(&prm, 2, 0); }
SDPA_BWD_MAIN(SDPA_KMAIN_DET) { bwd_body(&prm, 2, 1); }
#else
SDPA_BWD_MAIN(SDPA_KMAIN) { bwd_body(&prm, 0, 0); }
SDPA_BWD_MAIN(SDPA_KFEAT) { bwd_body(&prm, 1, 0); }
SDPA_BWD_MAIN(SDPA_KMAIN_DET) { bwd_body(&prm, 0, 1); }
SDPA_BWD_MAIN(SDPA_KFEAT_DET) { bwd_body(&prm, 1, 1); }
#endif
#if SDPA_BWD_DQ_KERNEL /* the deterministic mode's dQ kernels (the Hopper body's d split) */
SDPA_BWD_MAIN(SDPA_PASTE(SDPA_KERNEL_NAME, _dq_kernel)) { bwd_dq_body(&prm, 0); }
SDPA_BWD_MAIN(SDPA_PASTE(SDPA_KERNEL_NAME, _dq_feat_kernel)) { bwd_dq_body(&prm, 1); }
static void (*const SDPA_PASTE(SDPA_KERNEL_NAME, _dq_kernels)[2])(const sdpa_bwd_params) = {
    SDPA_PASTE(SDPA_KERNEL_NAME, _dq_kernel), SDPA_PASTE(SDPA_KERNEL_NAME, _dq_feat_kernel)};
#endif
#undef SDPA_BWD_MAIN

/* ---- host --------------------------------------------------------------------------- */

/* Indexed by 2 deterministic + features (the bias instance: by deterministic). */
#if SDPA_BWD_BIAS
enum { NKERNELS = 2 };
static void (*const SDPA_BWD_KERNELS[NKERNELS])(const sdpa_bwd_params) = {SDPA_KMAIN,
                                                                              SDPA_KMAIN_DET};
#else
enum { NKERNELS = 4 };
static void (*const SDPA_BWD_KERNELS[NKERNELS])(const sdpa_bwd_params) = {
    SDPA_KMAIN, SDPA_KFEAT, SDPA_KMAIN_DET, SDPA_KFEAT_DET};
#endif

/* dQ slices: bwd_det_splits in the deterministic mode, except where a dQ
 * kernel makes dQ (SDPA_BWD_DQ_KERNEL: none then, no accumulator to zero
 * or to hold) or counters order the additions (SDPA_BWD_DQ_TILED: one) */
static int SDPA_PASTE(SDPA_KERNEL_NAME, _nsplit)(const sdpa_problem *p) {
  if (SDPA_BWD_DQ_KERNEL) return p->deterministic ? 0 : 1;
  if (SDPA_BWD_DQ_TILED) return 1;
  return bwd_det_splits(p, HD, BN, sdpa_cuda_sm_count());
}

/* The tile counters: a tiled accumulator's, in deterministic mode. */
static int SDPA_PASTE(SDPA_KERNEL_NAME, _counters)(const sdpa_problem *p) {
  return SDPA_BWD_DQ_TILED && p->deterministic;
}

/* This row's bwd_workspace_layout: its slices and its counters. */
static bwd_ws_layout SDPA_PASTE(SDPA_KERNEL_NAME, _layout)(const sdpa_problem *p) {
  return bwd_workspace_layout(p, HD, SDPA_PASTE(SDPA_KERNEL_NAME, _nsplit)(p), SDPA_BWD_DQ_TILED,
                              SDPA_PASTE(SDPA_KERNEL_NAME, _counters)(p));
}

/* The workspace: the layout's, then (a bias row whose dbias is summed over
 * broadcast dims) the full gradient the kernels write, which sdpa_dbias_sum
 * adds up into the caller's dbias. */
static size_t SDPA_PASTE(SDPA_KERNEL_NAME, _ws_bytes)(const sdpa_problem *p, size_t *full_at) {
  *full_at = SDPA_PASTE(SDPA_KERNEL_NAME, _layout)(p).bytes;
  return *full_at + (SDPA_BWD_BIAS ? bwd_align256(sdpa_dbias_full_bytes(p)) : 0);
}

extern "C" size_t SDPA_WS(const sdpa_problem *p, const sdpa_kernel_row *row) {
  (void)row;
  size_t full_at;
  return SDPA_PASTE(SDPA_KERNEL_NAME, _ws_bytes)(p, &full_at);
}

/* A device whose blocks cannot have the shared memory the kernels take (an
 * A100's 163 KB against a 226 KB block) is refused, so the registry moves
 * on to a row that fits instead of failing at the opt-in. A bias row's dbias
 * summed over broadcast dims goes through the full gradient, which the
 * kernels write for every (i < s_q, j < s_k) of a dense problem but not
 * past a varlen or seqused_k sequence's end. */
extern "C" const char *SDPA_PASTE(SDPA_KERNEL_NAME, _refuse)(const sdpa_problem *p,
                                                            const sdpa_kernel_row *row, char *why,
                                                            size_t n) {
  (void)row;
#if SDPA_BWD_DQ_KERNEL
  const int smem = (int)SMEM_BYTES > (int)DQ_SMEM_BYTES ? (int)SMEM_BYTES : (int)DQ_SMEM_BYTES;
#else
  const int smem = (int)SMEM_BYTES;
#endif
  if (sdpa_cuda_smem_refusal(smem, why, n)) return why;
  if (p->d_v > SDPA_BWD_DV_MAX) {
    snprintf(why, n, "d_v = %lld above this row's %d", (long long)p->d_v, (int)SDPA_BWD_DV_MAX);
    return why;
  }
  if (SDPA_BWD_BIAS && sdpa_dbias_sums(p) && (p->layout == SDPA_LAYOUT_VARLEN || p->seqused_k)) {
    snprintf(why, n, "dbias summed over a broadcast dim with varlen or seqused_k keys");
    return why;
  }
  return NULL;
}

static sdpa_status SDPA_PASTE(SDPA_KERNEL_NAME, _launch)(const sdpa_bwd_params *prm) {
  const sdpa_problem *p = &prm->p;
  cudaStream_t stream = (cudaStream_t)p->stream;
  const dim3 rows_grid((unsigned)((p->s_q + 31) / 32), (unsigned)p->h, (unsigned)p->b);
  const int feat = prm->has_softcap || prm->has_alibi || prm->has_dropout; /* the score features */
  if (p->s_q > 0) SDPA_KPRE<<<rows_grid, 256, 0, stream>>>(*prm);
  const int64_t nkb = (p->s_k + BN - 1) / BN;
  if (nkb > 0) {
    const dim3 grid((unsigned)(p->deterministic && !SDPA_BWD_DQ_KERNEL && !SDPA_BWD_DQ_TILED
                                   ? prm->nsplit
                                   : nkb),
                    (unsigned)p->h_k, (unsigned)p->b);
    const int det = p->deterministic != 0;
    const int k = SDPA_BWD_BIAS ? det : 2 * det + feat;
    SDPA_BWD_KERNELS[k]<<<grid, NTHREADS, SMEM_BYTES, stream>>>(*prm);
  }
#if SDPA_BWD_DQ_KERNEL
  if (p->deterministic) { /* dQ by its own kernel, in the input dtype: no post */
    if (p->s_q > 0) {
      const dim3 qgrid((unsigned)((p->s_q + BM - 1) / BM), (unsigned)p->h, (unsigned)p->b);
      SDPA_PASTE(SDPA_KERNEL_NAME, _dq_kernels)[feat]<<<qgrid, NTHREADS, DQ_SMEM_BYTES, stream>>>(*prm);
    }
  } else
#endif
  if (p->s_q > 0) SDPA_KPOST<<<rows_grid, 256, 0, stream>>>(*prm);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: kernel launch failed: %s", SDPA_STR(SDPA_KERNEL_NAME),
                     cudaGetErrorString(e));
  return SDPA_OK;
}

extern "C" sdpa_status SDPA_RUN(const sdpa_problem *p, const sdpa_kernel_row *row) {
  static unsigned char smem_set[NKERNELS][SDPA_MAX_DEVICES]; /* per kernel and device: smem limit raised */
  (void)row; /* the registry matched dtype, features and bucket (sdpa_row_refusal) */
  sdpa_trace_run(SDPA_STR(SDPA_KERNEL_NAME));
  if (SDPA_BWD_BIAS ? !p->bias : p->bias != NULL) /* the rows' required and features bits */
    return sdpa_fail(SDPA_ERR_INTERNAL, "%s: a problem %s a bias reached it",
                     SDPA_STR(SDPA_KERNEL_NAME), SDPA_BWD_BIAS ? "without" : "with");
  if (p->d > HD || p->d_v > SDPA_BWD_DV_MAX)
    return sdpa_fail(SDPA_ERR_INTERNAL,
                     "%s: d = %lld, d_v = %lld outside this kernel's bucket %d (d_v up to %d)",
                     SDPA_STR(SDPA_KERNEL_NAME), (long long)p->d, (long long)p->d_v, (int)HD,
                     (int)SDPA_BWD_DV_MAX);
  if (p->b == 0 || p->h == 0) return SDPA_OK;
  const int64_t nkb = (p->s_k + BN - 1) / BN, nrb = (p->s_q + 31) / 32;
  if (nkb > 0x7fffffff || nrb > 0x7fffffff || p->h > 65535 || p->b > 65535)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "%s: grid (%lld key blocks, h = %lld, b = %lld) exceeds CUDA's limits "
                     "(2^31-1, 65535, 65535)",
                     SDPA_STR(SDPA_KERNEL_NAME), (long long)nkb, (long long)p->h, (long long)p->b);

  const int nsplit = SDPA_PASTE(SDPA_KERNEL_NAME, _nsplit)(p);
  const bwd_ws_layout lay = SDPA_PASTE(SDPA_KERNEL_NAME, _layout)(p);

  sdpa_bwd_params prm;
  prm.p = *p;
  const int softcap = p->softcap > 0.f;
  sdpa_score_consts(p, &prm.score_mul, &prm.softcap_post);
  prm.dk_scale = p->scale;
  prm.drop_scale = p->dropout_p > 0.f ? p->drop_scale : 1.f;
  prm.h_per_hk = (int)(p->h / p->h_k);
  prm.nsplit = nsplit;
  prm.total_q = bwd_total_q(p);
  prm.wl = sdpa_window_clamp(p->window_left);
  prm.wr = sdpa_window_clamp(p->window_right);
  /* every key block visits every query block, and a sequence's key blocks can all be
     resident at once (the rotated walks wait on each other both ways) */
  prm.det_rot = SDPA_PASTE(SDPA_KERNEL_NAME, _counters)(p) && prm.wl == SDPA_WINDOW_UNBOUNDED &&
                prm.wr == SDPA_WINDOW_UNBOUNDED && nkb <= sdpa_cuda_sm_count();
  prm.has_softcap = softcap;
  prm.has_alibi = p->alibi != NULL;
  prm.has_dropout = p->dropout_p > 0.f;
  prm.has_dbias = p->dbias != NULL;
  prm.bias_aligned = p->bias && ((uintptr_t)p->bias & 15u) == 0 &&
                     (p->bias_sb | p->bias_sh | p->bias_sq) % 8 == 0;
  prm.dbias_aligned = p->dbias && ((uintptr_t)p->dbias & 15u) == 0 &&
                      (p->dbias_sb | p->dbias_sh | p->dbias_sq) % 8 == 0;
#if SDPA_BWD_QDO_TMA /* dense only: a varlen tile's rows past its sequence must read as 0 */
  memset(&prm.tq, 0, sizeof prm.tq); /* (unread where they do not map; no stale bytes launched) */
  memset(&prm.tdo, 0, sizeof prm.tdo);
  prm.qdo_tma = p->layout != SDPA_LAYOUT_VARLEN &&
                sdpa_tma_map_bshd(&prm.tq, p->q, p->dtype, p->d, p->s_q, p->h, p->b, p->q_st, BM) &&
                sdpa_tma_map_bshd(&prm.tdo, p->dout, p->dtype, p->d_v, p->s_q, p->h, p->b,
                                  p->do_st, BM);
#endif

  for (int k = 0; k < NKERNELS; ++k)
    SDPA_TRY(sdpa_cuda_opt_in_smem((const void *)SDPA_BWD_KERNELS[k], (int)SMEM_BYTES, smem_set[k],
                                    SDPA_STR(SDPA_KERNEL_NAME)));
#if SDPA_BWD_DQ_KERNEL
  static unsigned char dq_smem_set[2][SDPA_MAX_DEVICES];
  for (int k = 0; k < 2; ++k)
    SDPA_TRY(sdpa_cuda_opt_in_smem((const void *)SDPA_PASTE(SDPA_KERNEL_NAME, _dq_kernels)[k],
                                    (int)DQ_SMEM_BYTES, dq_smem_set[k], SDPA_STR(SDPA_KERNEL_NAME)));
#endif

  void *wsv = NULL;
  int owned = 0;
  size_t full_at;
  const size_t need = SDPA_PASTE(SDPA_KERNEL_NAME, _ws_bytes)(p, &full_at);
  SDPA_TRY(sdpa_cuda_ws_acquire(p, need, 16, SDPA_STR(SDPA_KERNEL_NAME),
                                "sdpa_bwd_workspace_size", &wsv, &owned));
  unsigned char *ws = (unsigned char *)wsv;
  prm.dq_acc = (float *)(ws + lay.dq_acc);
  prm.dsum = (float *)(ws + lay.dsum);
  prm.lse2 = (float *)(ws + lay.lse2);
  prm.dq_sem = SDPA_PASTE(SDPA_KERNEL_NAME, _counters)(p) ? (int *)(ws + lay.sem) : NULL;
  prm.slice = p->deterministic && !SDPA_BWD_DQ_KERNEL ? prm.total_q * p->h * HD : 0;
  const int sums = SDPA_BWD_BIAS && sdpa_dbias_sums(p);
  if (sums) { /* the kernels write the full gradient (16-byte aligned rows when s_k % 8 == 0) */
    sdpa_dbias_full_view(p, ws + full_at, &prm.p);
    prm.dbias_aligned = p->s_k % 8 == 0;
  }
  sdpa_status st = SDPA_PASTE(SDPA_KERNEL_NAME, _launch)(&prm);
  if (sums && st == SDPA_OK) st = sdpa_dbias_sum(p, ws + full_at, SDPA_STR(SDPA_KERNEL_NAME));
  return sdpa_cuda_ws_release(p, wsv, owned, st, SDPA_STR(SDPA_KERNEL_NAME));
}

#undef SDPA_KPRE
#undef SDPA_KMAIN
#undef SDPA_KFEAT
#undef SDPA_KMAIN_DET
#undef SDPA_KFEAT_DET
#undef SDPA_KPOST
#undef SDPA_RUN
#undef SDPA_BWD_KERNELS
#undef SDPA_WS
#undef SDPA_BWD_BIAS
#undef SDPA_BWD_DQ_KERNEL
#undef SDPA_BWD_DV_MAX
#undef SDPA_BWD_DQ_TILED
#undef SDPA_BWD_QDO_TMA
#include "cuda/row_undef.cuh"
