/*
 * bwd_cases.c - the backward's case table and its runner (bwd_cases.h).
 *
 * The table: the three dtypes (f32 on the CPU backend only: the CUDA fp32
 * rows have their own suite, tests/gpu/test_gpu_bwd_tf32.c), every CUDA
 * head-dim bucket (d = 1 and 3 through rows padded to 16 bytes, d 320 and
 * d != d_v on the CPU), GQA 1 / 2 / 8, lengths off the tile grid (1,
 * s_q > s_k, s_q != s_k), causal in both alignments, windows, alibi [h] and
 * [b, h], softcap, scale, additive biases with dbias reduced over broadcast
 * dims and -inf entries, dropout 0.17, lse's gradient (dlse), varlen with
 * empty sequences and seqused_k (fixed lengths and drawn ones), padded
 * strides, empty problems; determinism: CPU reruns over thread counts, CUDA
 * reruns bit for bit; CUDA only: the Hopper rows' buckets and walks (explain
 * must select bwd_sm90 on sm_90), a CUDA-graph capture with a caller
 * workspace, what the rows refuse, and the --small set (one small problem
 * per head-dim bucket and dtype, for compute-sanitizer).
 */
#include "common/bwd_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/dtype.h"
#include "ref/ref.h"

#define F32 SDPA_DTYPE_F32
#define F16 SDPA_DTYPE_F16
#define BF16 SDPA_DTYPE_BF16
#define BC_B BWD_BC_B
#define BC_H BWD_BC_H
#define BC_Q BWD_BC_Q

/* ---- the table ------------------------------------------------------------------------ */

CASE_TABLE(bwd_tcase, 200, "bwd_cases")
#define ADD(...) add((bwd_tcase){__VA_ARGS__})

/* the CPU cases' fixed varlen lengths (b entries each) and thread counts */
static const int32_t lq1[4] = {5, 0, 70, 1}, lk1[4] = {7, 0, 90, 3}, us1[4] = {7, 0, 61, 2};
static const int32_t lq2[3] = {66, 1, 20}, lk2[3] = {40, 9, 0}, us2[3] = {33, 4, 0};
static const int32_t lq3[2] = {0, 30}, lk3[2] = {12, 75};
/* the rotated deterministic walks (CUDA): sequences 0 and 2 rotate, sequence 1
 * has more key blocks than steps and keeps the descending order */
static const int32_t lq4[3] = {250, 20, 130}, lk4[3] = {300, 520, 140};
static const int thr_a[] = {1, 2, 3, 7, 2, 0};
static const int thr_b[] = {4, 1, 2, 5, 0};

static void build_table(void) {
  ntab = 0;

  /* ---- the --small set (CUDA): one problem per head-dim bucket and dtype;
   * deterministic at d 64, 192 and 256 (tile counters), and on the older
   * d 256 row forced (the dQ kernels); empty problems */
  {
    const int64_t dims[7] = {32, 64, 96, 128, 192, 256, 160};
    for (int di = 0; di < 7; ++di)
      for (int t = 0; t < 2; ++t)
        ADD(.name = "small", .on = ON_CUDA, .small = 1, .dt = t ? BF16 : F16, .b = 2, .h = 4,
            .hk = 2, .sq = 70, .sk = 45, .d = dims[di], .rows16 = 1, .causal = di & 1,
            .dropout = di == 2 ? 0.17f : 0.f, .softcap = di == 3 ? 4.f : 0.f,
            .det = di == 1 || di == 4 || di == 5 ? 1 : 0);
    ADD(.name = "small_empty_queries", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 2, .h = 4,
        .hk = 2, .sq = 0, .sk = 70, .d = 64, .rows16 = 1);
    ADD(.name = "small_empty_keys", .on = ON_CUDA, .small = 1, .dt = F16, .b = 2, .h = 4, .hk = 2,
        .sq = 50, .sk = 0, .d = 128, .rows16 = 1);
    ADD(.name = "small_mla", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 4, .hk = 1,
        .sq = 70, .sk = 90, .d = 192, .dv = 128, .rows16 = 1, .causal = 1);
    ADD(.name = "small_mla_det", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 4, .hk = 2,
        .sq = 90, .sk = 70, .d = 192, .dv = 128, .rows16 = 1, .det = 1);
    /* bwd_sm90_*_hd192 and _hd192_dv128 forced (bwd_sm90_ws_* take d 129-192 first) */
    ADD(.name = "small_sm90_d192_older", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 4,
        .hk = 2, .sq = 90, .sk = 70, .d = 192, .rows16 = 1, .det = 1,
        .kernel = "bwd_sm90_bf16_hd192");
    ADD(.name = "small_sm90_d256_older", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 4,
        .hk = 2, .sq = 90, .sk = 70, .d = 256, .rows16 = 1, .causal = 1, .det = 1,
        .kernel = "bwd_sm90_f16_hd256");
    ADD(.name = "small_sm90ws_d256_dropout", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1,
        .h = 4, .hk = 2, .sq = 150, .sk = 140, .d = 256, .rows16 = 1, .dropout = 0.17f);
    ADD(.name = "small_mla_older", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 4, .hk = 1,
        .sq = 70, .sk = 90, .d = 192, .dv = 128, .rows16 = 1, .causal = 1,
        .kernel = "bwd_sm90_f16_hd192_dv128");
    ADD(.name = "small_mla_sm80", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 4, .hk = 1,
        .sq = 70, .sk = 90, .d = 192, .dv = 128, .rows16 = 1, .causal = 1,
        .kernel = "bwd_sm80_f16_hd192");
    ADD(.name = "small_sm80_d96", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 2, .h = 4, .hk = 2,
        .sq = 70, .sk = 45, .d = 96, .rows16 = 1, .dropout = 0.17f,
        .kernel = "bwd_sm80_bf16_hd96");
    /* the rows above d = 256 (dK / dV split four ways) and d 128's 64-query steps */
    static const char *wide[6] = {"bwd_sm80_f16_hd384", "bwd_sm80_bf16_hd384",
                                  "bwd_sm80_f16_hd512", "bwd_sm80_bf16_hd512",
                                  "bwd_sm80_f16_hd128_bm64", "bwd_sm80_bf16_hd128_bm64"};
    static const int64_t wd[6] = {320, 384, 448, 512, 128, 112};
    for (int k = 0; k < 6; ++k)
      ADD(.name = "small_wide", .on = ON_CUDA, .small = 1, .dt = k & 1 ? BF16 : F16, .b = 1,
          .h = 4, .hk = 2, .sq = 70, .sk = 90, .d = wd[k], .rows16 = 1, .causal = k % 3 != 2,
          .dropout = k % 3 == 1 ? 0.17f : 0.f, .det = k >= 4, .kernel = wide[k]);
  }

  /* ---- the CPU backend's matrix: contiguous or padded strides, every dtype,
   * d != d_v, biases with dbias, dlse, fixed varlen lengths, thread counts.
   * (Every bias here broadcasts over b: the table these came from spelled
   * "on" with the bit of b's broadcast; "bias_full_b_dbias_f32" adds the
   * full one.) */
  ADD(.name = "basic_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70,
      .d = 64);
  ADD(.name = "basic_f16", .on = ON_CPU, .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70,
      .d = 64);
  ADD(.name = "basic_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70,
      .d = 64);
  ADD(.name = "gqa2_d3_dv5_f16", .on = ON_CPU, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 33,
      .sk = 100, .d = 3, .dv = 5);
  ADD(.name = "gqa8_causal_br_bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 8, .hk = 1, .sq = 17,
      .sk = 130, .d = 128, .dv = 64, .causal = 1);
  ADD(.name = "gqa8_causal_tl_f32", .on = ON_CPU, .dt = F32, .b = 1, .h = 8, .hk = 1, .sq = 130,
      .sk = 17, .d = 64, .dv = 32, .causal = 1, .top_left = 1);
  ADD(.name = "len1_f32", .on = ON_CPU, .dt = F32, .b = 1, .h = 1, .hk = 1, .sq = 1, .sk = 1,
      .d = 1);
  ADD(.name = "sq1_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 1, .sq = 1, .sk = 77,
      .d = 16, .dv = 8, .causal = 1);
  ADD(.name = "sk1_causal_br_f32", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 77,
      .sk = 1, .d = 8, .dv = 16, .causal = 1);
  ADD(.name = "sq_gt_sk_causal_br_f16", .on = ON_CPU, .dt = F16, .b = 2, .h = 2, .hk = 1,
      .sq = 100, .sk = 37, .d = 32, .causal = 1);
  ADD(.name = "sq_gt_sk_causal_tl_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 2, .hk = 1,
      .sq = 100, .sk = 37, .d = 32, .causal = 1, .top_left = 1);
  ADD(.name = "d256_window_br_bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 70,
      .sk = 90, .d = 256, .window = 1, .wl = 8, .wr = 3);
  ADD(.name = "d320_causal_tl_f16", .on = ON_CPU, .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 70,
      .sk = 50, .d = 320, .dv = 128, .causal = 1, .top_left = 1);
  ADD(.name = "d128_window_tl_f32", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 80,
      .sk = 80, .d = 128, .top_left = 1, .window = 1, .wl = 20, .wr = 0);
  ADD(.name = "window_left_only_f32", .on = ON_CPU, .dt = F32, .b = 1, .h = 1, .hk = 1, .sq = 70,
      .sk = 70, .d = 16, .window = 1, .wl = 5, .wr = -1);
  ADD(.name = "alibi_h_causal_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 50,
      .sk = 60, .d = 32, .causal = 1, .alibi = 1);
  ADD(.name = "alibi_bh_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 40,
      .sk = 30, .d = 32, .dv = 48, .alibi = 2);
  ADD(.name = "softcap_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 1, .sq = 45, .sk = 66,
      .d = 32, .softcap = 5.0f, .scale = 0.3f);
  ADD(.name = "softcap_causal_bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 66,
      .sk = 66, .d = 64, .causal = 1, .softcap = 2.0f);
  ADD(.name = "bias_full_dbias_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 33,
      .sk = 70, .d = 16, .bias = 1 | BC_B, .dbias = 1);
  ADD(.name = "bias_full_b_dbias_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 33,
      .sk = 70, .d = 16, .bias = 1, .dbias = 1);
  ADD(.name = "bias_bcast_h_q_ninf_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2,
      .sq = 70, .sk = 40, .d = 16, .bias = 1 | BC_B | BC_H | BC_Q, .bias_ninf = 1, .dbias = 1);
  ADD(.name = "bias_bcast_b_h_f16", .on = ON_CPU, .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 30,
      .sk = 75, .d = 32, .causal = 1, .bias = 1 | BC_B | BC_H, .bias_ninf = 1, .dbias = 1);
  ADD(.name = "bias_bcast_b_q_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 2, .hk = 1, .sq = 70,
      .sk = 70, .d = 32, .bias = 1 | BC_B | BC_Q, .dbias = 1);
  ADD(.name = "bias_bcast_all_softcap_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 2,
      .sq = 65, .sk = 65, .d = 8, .softcap = 4.0f, .bias = 1 | BC_B | BC_H | BC_Q,
      .bias_ninf = 1, .dbias = 1);
  ADD(.name = "bias_no_dbias_bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 20,
      .sk = 20, .d = 16, .bias = 1 | BC_B, .bias_ninf = 1);
  ADD(.name = "dropout_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 75,
      .d = 32, .dropout = 0.17f);
  ADD(.name = "dropout_causal_bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 66,
      .sk = 80, .d = 64, .dv = 32, .causal = 1, .dropout = 0.17f);
  ADD(.name = "varlen_seqused_causal_f16", .on = ON_CPU, .dt = F16, .b = 4, .h = 4, .hk = 2,
      .d = 32, .causal = 1, .lq = lq1, .lk = lk1, .used = us1);
  ADD(.name = "varlen_seqused_tl_f32", .on = ON_CPU, .dt = F32, .b = 3, .h = 2, .hk = 1, .d = 16,
      .dv = 24, .causal = 1, .top_left = 1, .lq = lq2, .lk = lk2, .used = us2);
  ADD(.name = "varlen_all_mods_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 4, .hk = 1, .d = 64,
      .window = 1, .wl = 7, .wr = 9, .alibi = 1, .softcap = 3.0f, .dropout = 0.17f, .lq = lq3,
      .lk = lk3);
  ADD(.name = "padded_gqa2_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 40,
      .sk = 50, .d = 32, .dv = 16, .causal = 1, .bias = 1 | BC_B, .dbias = 1, .pad = 3);
  ADD(.name = "padded_varlen_bf16", .on = ON_CPU, .dt = BF16, .b = 4, .h = 2, .hk = 2, .d = 24,
      .alibi = 1, .dropout = 0.17f, .pad = 5, .lq = lq1, .lk = lk1, .used = us1);
  ADD(.name = "everything_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 70,
      .sk = 80, .d = 48, .dv = 40, .window = 1, .wl = 30, .wr = 5, .alibi = 1, .softcap = 6.0f,
      .bias = 1 | BC_B | BC_H, .bias_ninf = 1, .dbias = 1, .dropout = 0.17f, .pad = 2);
  ADD(.name = "multi_block_f16", .on = ON_CPU, .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 260,
      .sk = 300, .d = 64, .causal = 1, .alibi = 1, .bias = 1 | BC_B | BC_Q, .dbias = 1,
      .dropout = 0.17f);
  /* lse feeds the loss (dlse): dense with a window and dbias, varlen with dropout */
  ADD(.name = "dlse_window_dbias_f32", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 40,
      .sk = 70, .d = 32, .dv = 16, .window = 1, .wl = 9, .wr = 4, .bias = 1 | BC_B | BC_H,
      .dbias = 1, .dlse = 1);
  ADD(.name = "dlse_varlen_dropout_bf16", .on = ON_CPU, .dt = BF16, .b = 4, .h = 2, .hk = 1,
      .d = 32, .causal = 1, .dropout = 0.17f, .lq = lq1, .lk = lk1, .used = us1, .dlse = 1);
  /* empty problems: the gradients of the non-empty side are zeros (poisoned first) */
  ADD(.name = "empty_queries_dbias_f16", .on = ON_CPU, .dt = F16, .b = 2, .h = 2, .hk = 1,
      .sq = 0, .sk = 70, .d = 32, .bias = 1 | BC_B | BC_Q, .dbias = 1);
  ADD(.name = "empty_keys_causal_bf16", .on = ON_CPU, .dt = BF16, .b = 2, .h = 2, .hk = 2,
      .sq = 50, .sk = 0, .d = 64, .causal = 1);
  ADD(.name = "empty_batch_f32", .on = ON_CPU, .dt = F32, .b = 0, .h = 2, .hk = 2, .sq = 9,
      .sk = 9, .d = 16);
  ADD(.name = "determinism_dense", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 130,
      .sk = 140, .d = 64, .causal = 1, .alibi = 1, .softcap = 3.0f, .bias = 1 | BC_B | BC_H,
      .bias_ninf = 1, .dbias = 1, .dropout = 0.17f, .threads = thr_a);
  ADD(.name = "determinism_varlen", .on = ON_CPU, .dt = BF16, .b = 4, .h = 4, .hk = 1, .d = 32,
      .causal = 1, .dropout = 0.17f, .lq = lq1, .lk = lk1, .used = us1, .threads = thr_b);

  /* ---- the CUDA rows' matrix (16-byte rows; the CPU backend on the same
   * inputs): f16 / bf16, every bucket, drawn varlen lengths */
#define G(...) ADD(.on = ON_BOTH, .rows16 = 1, __VA_ARGS__)
  G(.name = "basic", .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70, .d = 64);
  G(.name = "basic", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70, .d = 64);
  G(.name = "gqa2_causal_br", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 130, .sk = 100, .d = 128,
    .causal = 1);
  G(.name = "gqa8_sq_ne_sk_causal_br", .dt = F16, .b = 1, .h = 8, .hk = 1, .sq = 17, .sk = 130,
    .d = 64, .causal = 1);
  G(.name = "gqa8_sq_gt_sk_causal_tl", .dt = BF16, .b = 1, .h = 8, .hk = 1, .sq = 150, .sk = 37,
    .d = 128, .causal = 1, .top_left = 1);
  G(.name = "sq_gt_sk_causal_br", .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 100, .sk = 37, .d = 32,
    .causal = 1);
  G(.name = "len1", .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 1, .sk = 1, .d = 64);
  G(.name = "sq1_causal", .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 1, .sk = 77, .d = 96,
    .causal = 1);
  G(.name = "sk1_causal_br", .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 77, .sk = 1, .d = 64,
    .causal = 1);
  G(.name = "d1_rows16", .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 40, .sk = 50, .d = 1);
  G(.name = "d3_rows16_causal", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 33, .sk = 70, .d = 3,
    .causal = 1);
  G(.name = "d160_window_br", .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 70, .sk = 90, .d = 160,
    .window = 1, .wl = 8, .wr = 3);
  G(.name = "d256_window_br", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 70, .sk = 90, .d = 256,
    .window = 1, .wl = 8, .wr = 3);
  G(.name = "d256_causal_tl", .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 70, .sk = 50, .d = 256,
    .causal = 1, .top_left = 1);
  G(.name = "d128_window_tl_left", .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 80, .sk = 80,
    .d = 128, .top_left = 1, .window = 1, .wl = 20, .wr = -1);
  G(.name = "alibi_h_causal", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 50, .sk = 60, .d = 32,
    .causal = 1, .alibi = 1);
  G(.name = "alibi_bh", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 40, .sk = 30, .d = 64,
    .alibi = 2);
  G(.name = "softcap", .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 45, .sk = 66, .d = 64,
    .softcap = 5.f, .scale = 0.3f);
  G(.name = "softcap_causal", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 66, .sk = 66, .d = 128,
    .causal = 1, .softcap = 2.f);
  G(.name = "dropout", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 75, .d = 64,
    .dropout = 0.17f);
  G(.name = "dropout_causal", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 66, .sk = 80, .d = 128,
    .causal = 1, .dropout = 0.17f);
  G(.name = "dropout_d256", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 40, .sk = 50, .d = 256,
    .dropout = 0.17f);
  G(.name = "varlen_causal_seqused", .dt = BF16, .b = 4, .h = 4, .hk = 2, .sq = 90, .sk = 100,
    .d = 64, .varlen = 1, .causal = 1);
  G(.name = "varlen_all_mods", .dt = F16, .b = 3, .h = 4, .hk = 1, .sq = 70, .sk = 75, .d = 128,
    .varlen = 1, .window = 1, .wl = 7, .wr = 9, .alibi = 1, .softcap = 3.f, .dropout = 0.17f);
  G(.name = "padded_gqa2", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 40, .sk = 50, .d = 64,
    .pad = 8, .causal = 1);
  G(.name = "multi_block", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 260, .sk = 300, .d = 128,
    .causal = 1, .alibi = 1, .dropout = 0.17f);
  /* deterministic: first run checked, 5 more compared bit for bit */
  G(.name = "determinism_dense", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300, .sk = 260,
    .d = 64, .causal = 1, .det = 5);
  G(.name = "determinism_varlen_window", .dt = F16, .b = 4, .h = 8, .hk = 2, .sq = 200, .sk = 180,
    .d = 128, .varlen = 1, .window = 1, .wl = 40, .wr = 10, .dropout = 0.17f, .det = 5);
  /* the Hopper rows' buckets with d below the bucket, several key blocks and
   * query steps, each feature kernel and the deterministic walk */
#define H(...) G(.cuda_shape = 1, .sm90 = 1, __VA_ARGS__)
  H(.name = "sm90_d40_gqa8_causal", .dt = F16, .b = 2, .h = 8, .hk = 1, .sq = 200, .sk = 333,
    .d = 40, .causal = 1);
  H(.name = "sm90_d64_window_tl", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 300, .sk = 290,
    .d = 64, .top_left = 1, .window = 1, .wl = 70, .wr = 20);
  H(.name = "sm90_d100_window", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 300, .sk = 260,
    .d = 100, .window = 1, .wl = 50, .wr = 20);
  H(.name = "sm90_d128_softcap_alibi", .dt = F16, .b = 2, .h = 4, .hk = 1, .sq = 260, .sk = 200,
    .d = 128, .causal = 1, .softcap = 3.f, .alibi = 2);
  H(.name = "sm90_d128_dropout_det", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 190, .sk = 300,
    .d = 128, .dropout = 0.17f, .det = 5);
  H(.name = "sm90_d200_softcap_alibi", .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 150, .sk = 170,
    .d = 200, .causal = 1, .softcap = 3.f, .alibi = 2, .kernel = "bwd_sm90_f16_hd256");
  H(.name = "sm90_d256_dropout_det", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 190, .sk = 200,
    .d = 256, .dropout = 0.17f, .det = 5);
  H(.name = "sm90_d64_varlen_seqused_gqa4", .dt = F16, .b = 4, .h = 8, .hk = 2, .sq = 150,
    .sk = 170, .d = 64, .varlen = 1, .causal = 1);
  H(.name = "sm90_d256_varlen_det", .dt = BF16, .b = 3, .h = 2, .hk = 1, .sq = 130, .sk = 140,
    .d = 256, .varlen = 1, .window = 1, .wl = 60, .wr = 5, .det = 5);
  /* the warp-specialized rows: varlen with GQA packing and a partial last query
   * step, dropout under a window, more query steps than stages; at d 64
   * (128 queries a step) softcap with varlen, a top-left window */
  H(.name = "sm90ws_d128_varlen_gqa4_causal", .dt = BF16, .b = 3, .h = 8, .hk = 2, .sq = 230,
    .sk = 260, .d = 128, .varlen = 1, .causal = 1, .row = "bwd_sm90_ws_bf16_hd128");
  H(.name = "sm90ws_d112_dropout_window", .dt = F16, .b = 2, .h = 4, .hk = 4, .sq = 333,
    .sk = 290, .d = 112, .window = 1, .wl = 90, .wr = 30, .dropout = 0.17f,
    .row = "bwd_sm90_ws_f16_hd128");
  H(.name = "sm90ws_d48_varlen_gqa2_softcap", .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 300,
    .sk = 270, .d = 48, .varlen = 1, .causal = 1, .softcap = 3.f, .row = "bwd_sm90_ws_f16_hd64");
  H(.name = "sm90ws_d64_window_tl", .dt = BF16, .b = 2, .h = 2, .hk = 1, .sq = 400, .sk = 333,
    .d = 64, .top_left = 1, .window = 1, .wl = 100, .wr = 0, .row = "bwd_sm90_ws_bf16_hd64");
  /* the Hopper rows' deterministic mode: GQA, causal top-left with s_q > s_k,
   * a left window; and more than 16 key blocks, so that each block walks
   * several key blocks into its dQ slice (bwd_det_splits: at most 16 slices;
   * at d = 256 the dQ kernel instead, over 18 key tiles a query block) */
  H(.name = "sm90_d128_det_causal_tl_gqa4", .dt = F16, .b = 1, .h = 8, .hk = 2, .sq = 520,
    .sk = 300, .d = 128, .causal = 1, .top_left = 1, .det = 5, .row = "bwd_sm90_ws_f16_hd128");
  H(.name = "sm90_d64_det_window_gqa2", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 600, .sk = 700,
    .d = 64, .window = 1, .wl = 150, .wr = 30, .det = 5);
  H(.name = "sm90_d256_det_dqkernel_dropout", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 130,
    .sk = 1100, .d = 256, .dropout = 0.17f, .det = 5, .kernel = "bwd_sm90_bf16_hd256");
  H(.name = "sm90_d128_det_walk_causal", .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 100, .sk = 2200,
    .d = 128, .causal = 1, .det = 5);
  /* the same on the older row, forced (the warp-specialized rows take the
   * deterministic mode at d <= 128): its key-block walk into dQ slices */
  H(.name = "sm90_d128_det_walk_causal_slices", .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 100,
    .sk = 2200, .d = 128, .causal = 1, .det = 5, .kernel = "bwd_sm90_f16_hd128");
  /* the warp-specialized rows' counters: varlen with GQA (tiles of sequences
   * that do not start on a 64-row boundary), a window whose first visiting
   * key block is past 0, and dropout (the feature kernel) */
  H(.name = "sm90ws_d96_det_varlen_window_dropout", .dt = BF16, .b = 3, .h = 4, .hk = 2,
    .sq = 350, .sk = 420, .d = 96, .varlen = 1, .window = 1, .wl = 150, .wr = 40,
    .dropout = 0.17f, .det = 5, .row = "bwd_sm90_ws_bf16_hd128");
  /* unmasked: rotated walks (bwd_rot_place), going round the GQA group's heads */
  H(.name = "sm90ws_d128_det_rotated_gqa2", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300,
    .sk = 450, .d = 128, .det = 5, .row = "bwd_sm90_ws_bf16_hd128");
  H(.name = "sm90ws_d64_det_rotated_varlen", .dt = F16, .b = 3, .h = 2, .hk = 1, .d = 64,
    .lq = lq4, .lk = lk4, .det = 5, .row = "bwd_sm90_ws_f16_hd64");
  H(.name = "sm90ws_d64_det_causal_br", .dt = F16, .b = 2, .h = 4, .hk = 4, .sq = 300, .sk = 700,
    .d = 64, .causal = 1, .det = 5, .row = "bwd_sm90_ws_f16_hd64");
  /* head dims padded up to the Hopper buckets (d 80 / 96 in hd128, 136 / 160
   * / 176 in hd192) and d_qk != d_v (MLA's 192 / 128 in hd192_dv128, d_v
   * above 128 in hd192): V, dO and dV masked to d_v. hd192's column split
   * (128 + 64 a warpgroup, dQ the other way round; dV 64 + 64 in _dv128):
   * each kernel (plain, score features, the deterministic ones and its dQ
   * kernels), GQA, several key blocks and query steps */
  H(.name = "sm90_d80_gqa4_causal", .dt = BF16, .b = 2, .h = 8, .hk = 2, .sq = 200, .sk = 260,
    .d = 80, .causal = 1);
  H(.name = "sm90_d96_dropout_det", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 190, .sk = 300,
    .d = 96, .dropout = 0.17f, .det = 5);
  H(.name = "sm90_d160_window", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 200, .sk = 230,
    .d = 160, .window = 1, .wl = 60, .wr = 10, .kernel = "bwd_sm90_f16_hd192");
  H(.name = "sm90_mla_d192_dv128_causal_gqa", .dt = BF16, .b = 2, .h = 8, .hk = 1, .sq = 260,
    .sk = 300, .d = 192, .dv = 128, .causal = 1, .kernel = "bwd_sm90_bf16_hd192_dv128");
  H(.name = "sm90_mla_d192_dv128_det_varlen", .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 130,
    .sk = 150, .d = 192, .dv = 128, .varlen = 1, .causal = 1, .det = 5,
    .kernel = "bwd_sm90_f16_hd192_dv128");
  H(.name = "sm90_d192_softcap_alibi_dropout", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300,
    .sk = 270, .d = 192, .causal = 1, .softcap = 3.f, .alibi = 2, .dropout = 0.17f,
    .kernel = "bwd_sm90_bf16_hd192");
  H(.name = "sm90_d176_det_dqkernel_window", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 200,
    .sk = 700, .d = 176, .window = 1, .wl = 300, .wr = 40, .det = 5,
    .kernel = "bwd_sm90_f16_hd192");
  H(.name = "sm90_d192_det_dropout_tl", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 330, .sk = 200,
    .d = 192, .causal = 1, .top_left = 1, .dropout = 0.17f, .det = 5,
    .kernel = "bwd_sm90_bf16_hd192");
  H(.name = "sm90_d136_varlen_gqa4", .dt = BF16, .b = 3, .h = 8, .hk = 2, .sq = 150, .sk = 200,
    .d = 136, .varlen = 1, .kernel = "bwd_sm90_bf16_hd192");
  H(.name = "sm90_mla_d192_dv128_plain", .dt = F16, .b = 1, .h = 4, .hk = 4, .sq = 400, .sk = 330,
    .d = 192, .dv = 128, .kernel = "bwd_sm90_f16_hd192_dv128");
  H(.name = "sm90_d160_dv96_softcap_dropout", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 260,
    .sk = 300, .d = 160, .dv = 96, .softcap = 3.f, .dropout = 0.17f,
    .kernel = "bwd_sm90_bf16_hd192_dv128");
  H(.name = "sm90_d192_dv160_causal_gqa", .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 200, .sk = 260,
    .d = 192, .dv = 160, .causal = 1, .kernel = "bwd_sm90_f16_hd192");
  /* _dv128's deterministic kernels with score features (feat_det, dq_feat);
   * d_v above d in hd192; d and d_v that end inside a 16-byte chunk (in
   * rows padded to 16 bytes) in hd192 and _dv128 */
  H(.name = "sm90_mla_dv128_det_softcap_alibi", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 200,
    .sk = 330, .d = 192, .dv = 128, .causal = 1, .softcap = 3.f, .alibi = 1, .det = 5,
    .kernel = "bwd_sm90_bf16_hd192_dv128");
  H(.name = "sm90_d128_dv192", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 190, .sk = 250, .d = 128,
    .dv = 192, .kernel = "bwd_sm90_f16_hd192");
  H(.name = "sm90_d150_causal", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 170, .sk = 210,
    .d = 150, .causal = 1, .kernel = "bwd_sm90_bf16_hd192");
  H(.name = "sm90_mla_d192_dv100", .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 220, .sk = 190,
    .d = 192, .dv = 100, .kernel = "bwd_sm90_f16_hd192_dv128");
  /* the warp-specialized d split (d 129-192; _dv128 for d_v <= 128): GQA with
   * several key blocks and query steps, varlen under a window, the score
   * features with dropout, d_v != d both ways, and the deterministic mode's
   * counters on three dQ tiles a query block (two of them one writer's) */
  H(.name = "sm90ws_d192_causal_gqa4", .dt = BF16, .b = 2, .h = 8, .hk = 2, .sq = 260, .sk = 300,
    .d = 192, .causal = 1, .row = "bwd_sm90_ws_bf16_hd192");
  H(.name = "sm90ws_d160_varlen_window", .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 200, .sk = 230,
    .d = 160, .varlen = 1, .window = 1, .wl = 60, .wr = 10, .row = "bwd_sm90_ws_f16_hd192");
  H(.name = "sm90ws_d192_softcap_alibi_dropout", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300,
    .sk = 270, .d = 192, .causal = 1, .softcap = 3.f, .alibi = 2, .dropout = 0.17f,
    .row = "bwd_sm90_ws_bf16_hd192");
  H(.name = "sm90ws_d176_det_window", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 200, .sk = 700,
    .d = 176, .window = 1, .wl = 300, .wr = 40, .det = 5, .row = "bwd_sm90_ws_f16_hd192");
  H(.name = "sm90ws_d192_det_dropout_tl", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 330,
    .sk = 200, .d = 192, .causal = 1, .top_left = 1, .dropout = 0.17f, .det = 5,
    .row = "bwd_sm90_ws_bf16_hd192");
  H(.name = "sm90ws_d192_dv160_causal_gqa", .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 200,
    .sk = 260, .d = 192, .dv = 160, .causal = 1, .row = "bwd_sm90_ws_f16_hd192");
  H(.name = "sm90ws_d128_dv192", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 190, .sk = 250,
    .d = 128, .dv = 192, .row = "bwd_sm90_ws_f16_hd192");
  H(.name = "sm90ws_mla_causal_gqa8", .dt = BF16, .b = 2, .h = 8, .hk = 1, .sq = 260, .sk = 300,
    .d = 192, .dv = 128, .causal = 1, .row = "bwd_sm90_ws_bf16_hd192_dv128");
  H(.name = "sm90ws_mla_det_varlen", .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 130, .sk = 150,
    .d = 192, .dv = 128, .varlen = 1, .causal = 1, .det = 5, .row = "bwd_sm90_ws_f16_hd192_dv128");
  /* the d split's rotated walks (unmasked deterministic): 5 and 6 key blocks
   * on 8 and 16 steps, the writer with two tiles a step */
  H(.name = "sm90ws_d192_det_rotated_gqa2", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 230,
    .sk = 290, .d = 192, .det = 5, .row = "bwd_sm90_ws_bf16_hd192");
  H(.name = "sm90ws_mla_det_rotated_softcap_gqa4", .dt = F16, .b = 1, .h = 4, .hk = 1,
    .sq = 200, .sk = 330, .d = 192, .dv = 128, .softcap = 3.f, .det = 5,
    .row = "bwd_sm90_ws_f16_hd192_dv128");
  H(.name = "sm90ws_d160_dv100_softcap_dropout", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 260,
    .sk = 300, .d = 160, .dv = 100, .softcap = 3.f, .dropout = 0.17f,
    .row = "bwd_sm90_ws_bf16_hd192_dv128");
  /* the d split at d 256 (one Q / dO stage): GQA with several key blocks and
   * query steps, varlen under a window, the score features with dropout, d_v
   * below d, and the deterministic mode's counters (two dQ tiles a writer) */
  H(.name = "sm90ws_d256_gqa2", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 390, .sk = 333,
    .d = 256, .row = "bwd_sm90_ws_bf16_hd256");
  H(.name = "sm90ws_d256_causal_gqa4", .dt = F16, .b = 2, .h = 8, .hk = 2, .sq = 260, .sk = 300,
    .d = 256, .causal = 1, .row = "bwd_sm90_ws_f16_hd256");
  H(.name = "sm90ws_d224_varlen_window", .dt = BF16, .b = 3, .h = 4, .hk = 2, .sq = 200,
    .sk = 230, .d = 224, .varlen = 1, .window = 1, .wl = 60, .wr = 10,
    .row = "bwd_sm90_ws_bf16_hd256");
  H(.name = "sm90ws_d256_softcap_alibi_dropout", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 300,
    .sk = 270, .d = 256, .causal = 1, .softcap = 3.f, .alibi = 2, .dropout = 0.17f,
    .row = "bwd_sm90_ws_f16_hd256");
  H(.name = "sm90ws_d240_det_window", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 200, .sk = 700,
    .d = 240, .window = 1, .wl = 300, .wr = 40, .det = 5, .row = "bwd_sm90_ws_bf16_hd256");
  H(.name = "sm90ws_d256_det_dropout_tl", .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 330,
    .sk = 200, .d = 256, .causal = 1, .top_left = 1, .dropout = 0.17f, .det = 5,
    .row = "bwd_sm90_ws_f16_hd256");
  H(.name = "sm90ws_d256_dv200_varlen_causal", .dt = BF16, .b = 3, .h = 4, .hk = 1, .sq = 150,
    .sk = 170, .d = 256, .dv = 200, .varlen = 1, .causal = 1, .row = "bwd_sm90_ws_bf16_hd256");
  /* dO's second column block wholly past d_v (the copy engine's boxes read zeros) */
  H(.name = "sm90ws_d192_dv64_gqa", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 150, .sk = 200,
    .d = 192, .dv = 64, .causal = 1, .row = "bwd_sm90_ws_f16_hd192_dv128");
  H(.name = "sm90ws_mla_det_softcap_alibi", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 200,
    .sk = 330, .d = 192, .dv = 128, .causal = 1, .softcap = 3.f, .alibi = 1, .det = 5,
    .row = "bwd_sm90_ws_bf16_hd192_dv128");
  H(.name = "sm90_d128_dv64_softcap_alibi", .dt = F16, .b = 2, .h = 4, .hk = 1, .sq = 200,
    .sk = 170, .d = 128, .dv = 64, .causal = 1, .softcap = 3.f, .alibi = 2);
  H(.name = "sm90_d96_dv64_dropout", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 150, .sk = 190,
    .d = 96, .dv = 64, .dropout = 0.17f);
  H(.name = "sm90_d64_dv128_det", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 300, .sk = 260,
    .d = 64, .dv = 128, .causal = 1, .top_left = 1, .det = 5);
#undef H
  /* empty problems: the side with rows gets zero gradients over poison */
  G(.name = "empty_queries", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 0, .sk = 70, .d = 64);
  G(.name = "empty_keys_causal", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 50, .sk = 0, .d = 128,
    .causal = 1);
  G(.name = "empty_batch", .dt = BF16, .b = 0, .h = 2, .hk = 2, .sq = 9, .sk = 9, .d = 64);
  /* d_qk != d_v on the sm80 rows, forced (on sm_90 the Hopper rows take these) */
  G(.name = "sm80_mla_d192_dv128_causal", .dt = BF16, .b = 1, .h = 4, .hk = 1, .sq = 150,
    .sk = 170, .d = 192, .dv = 128, .causal = 1, .kernel = "bwd_sm80_bf16_hd192");
  G(.name = "sm80_d128_dv64_det", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 200, .sk = 260,
    .d = 128, .dv = 64, .dropout = 0.17f, .det = 5, .kernel = "bwd_sm80_f16_hd128");
  G(.name = "sm80_d96_dv64", .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 90, .sk = 100, .d = 96,
    .dv = 64, .window = 1, .wl = 30, .wr = 8, .kernel = "bwd_sm80_f16_hd96");
  /* above d = 256: dK / dV split four ways (each split recomputes S^T and
   * dP^T); d 128's 64-query steps (the A100's row), forced */
  G(.name = "wide_d288_gqa_causal", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 130, .sk = 200,
    .d = 288, .causal = 1);
  G(.name = "wide_d384_causal_tl_det", .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 200, .sk = 90,
    .d = 384, .causal = 1, .top_left = 1, .det = 5, .kernel = "bwd_sm80_f16_hd384");
  G(.name = "wide_d400_window_mods", .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 150, .sk = 300,
    .d = 400, .window = 1, .wl = 40, .wr = 7, .softcap = 4.f, .alibi = 2);
  G(.name = "wide_d512_varlen_dropout", .dt = F16, .b = 4, .h = 2, .hk = 1, .sq = 120, .sk = 140,
    .d = 512, .varlen = 1, .causal = 1, .dropout = 0.17f, .kernel = "bwd_sm80_f16_hd512");
  G(.name = "wide_d448_dv320_det_walk", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 60, .sk = 1200,
    .d = 448, .dv = 320, .det = 5, .kernel = "bwd_sm80_bf16_hd512");
  G(.name = "sm80_d128_bm64_det", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300, .sk = 260,
    .d = 128, .causal = 1, .det = 5, .kernel = "bwd_sm80_bf16_hd128_bm64");
  G(.name = "sm80_d112_bm64_softcap", .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 200, .sk = 170,
    .d = 112, .softcap = 3.f, .alibi = 1, .dropout = 0.17f, .kernel = "bwd_sm80_f16_hd128_bm64");
#undef G
  /* ---- rows not 16-byte aligned on the staged row (the tensor-core row of
   * the problem on aligned copies): d 100 (rows of 200 bytes) causal with
   * GQA, deterministic; varlen d 36 with dropout; odd padding with a bias
   * and its dbias summed over heads; d != d_v with a window (varlen padding
   * rows: test_gpu_bwd.c) */
  ADD(.name = "staged d100 gqa det", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2,
      .sq = 150, .sk = 170, .d = 100, .causal = 1, .det = 3, .sm90 = 1, .row = "bwd_staged");
  ADD(.name = "staged varlen d36 dropout", .on = ON_BOTH, .dt = F16, .b = 3, .h = 2, .hk = 1,
      .sq = 90, .sk = 120, .d = 36, .varlen = 1, .dropout = 0.17f, .sm90 = 1, .row = "bwd_staged");
  ADD(.name = "staged pad odd bias dbias", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 2,
      .sq = 70, .sk = 90, .d = 64, .pad = 3, .bias = 1 | BWD_BC_H, .dbias = 1, .sm90 = 1,
      .row = "bwd_staged");
  ADD(.name = "staged d != d_v", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 4, .sq = 64,
      .sk = 80, .d = 52, .dv = 44, .window = 1, .wl = 30, .wr = 3, .sm90 = 1, .row = "bwd_staged");
  /* ---- CUDA only: a graph capture, what the rows refuse */
  ADD(.name = "graph", .on = ON_CUDA, .kind = BWD_GRAPH, .rows16 = 1, .dt = BF16, .b = 2, .h = 4,
      .hk = 2, .sq = 200, .sk = 333, .d = 128, .causal = 1);
  /* contiguous d = 3: rows of 6 bytes, which no tensor-core row takes as
   * they are (the staged row copies them; the cases above check it) */
  ADD(.name = "unaligned_d3_contiguous", .on = ON_CUDA, .kind = BWD_REFUSE, .dt = BF16, .b = 1,
      .h = 2, .hk = 2, .sq = 20, .sk = 20, .d = 3);
  ADD(.name = "bias_row_without_bias", .on = ON_CUDA, .kind = BWD_BIAS_ROW, .rows16 = 1,
      .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 40, .sk = 40, .d = 64);
}

/* ---- one case's problem on the host ------------------------------------------------------ */

typedef struct bwd_prob {
  case_bufs bufs;
  sdpa_bwd_desc desc; /* host pointers, SDPA_DEVICE_CPU */
  int64_t sq, sk;     /* dense lengths, or the varlen maxima */
  int64_t bshape[4];  /* the bias's */
} bwd_prob;

static sdpa_tensor alloc_data(const bwd_tcase *c, bwd_prob *f, sdpa_dtype dt, int rank,
                              const int64_t *shape, int is_out) {
  return case_alloc(&f->bufs, dt, rank, shape, c->rows16, c->pad, is_out);
}

/* Fresh random inputs for case c, out / lse from the CPU forward; 0 on a
 * failure (counted). */
static int build(const case_env *env, const bwd_tcase *c, bwd_prob *f) {
  test_rng *rng = env->rng;
  memset(f, 0, sizeof *f);
  sdpa_bwd_init(&f->desc);
  sdpa_bwd_desc *bd = &f->desc;
  sdpa_attn *a = &bd->attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = env->primary == ON_CUDA ? 4 : 2;
  const int varlen = c->varlen || c->lq;
  int64_t nq = c->b, nk = c->b;
  f->sq = c->sq, f->sk = c->sk;
  if (varlen) {
    const int64_t n1[1] = {c->b + 1}, nb[1] = {c->b};
    a->cu_seqlens_q = case_alloc(&f->bufs, SDPA_DTYPE_I32, 1, n1, 0, 0, 0);
    a->cu_seqlens_k = case_alloc(&f->bufs, SDPA_DTYPE_I32, 1, n1, 0, 0, 0);
    int32_t *cq = (int32_t *)a->cu_seqlens_q.data, *ck = (int32_t *)a->cu_seqlens_k.data;
    int32_t *us = NULL;
    if (c->varlen || c->used) {
      a->seqused_k = case_alloc(&f->bufs, SDPA_DTYPE_I32, 1, nb, 0, 0, 0);
      us = (int32_t *)a->seqused_k.data;
    }
    cq[0] = ck[0] = 0;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      int64_t lq, lk;
      if (c->lq) {
        lq = c->lq[b], lk = c->lk[b];
        if (us) us[b] = c->used[b];
      } else {
        lq = b == 1 ? 0 : test_rng_int(rng, 1, c->sq);
        lk = b == 1 ? 0 : test_rng_int(rng, 1, c->sk);
        us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      }
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      if (lq > mq) mq = lq;
      if (lk > mk) mk = lk;
    }
    a->max_seqlen_q = f->sq = mq;
    a->max_seqlen_k = f->sk = mk;
    nq = cq[c->b], nk = ck[c->b];
  }
  /* dense [b, s, h, d]; varlen [total, h, d] */
  const int r = varlen ? 3 : 4, o = varlen ? 0 : 1;
  int64_t sq[4] = {nq, f->sq, c->h, c->d}, sk[4] = {nk, f->sk, c->hk, c->d};
  int64_t sv[4] = {nk, f->sk, c->hk, c->dv}, so[4] = {nq, f->sq, c->h, c->dv};
  if (!o) { /* drop the s dim */
    int64_t *all[4] = {sq, sk, sv, so};
    for (int k = 0; k < 4; ++k) all[k][1] = all[k][2], all[k][2] = all[k][3];
  }
  a->q = alloc_data(c, f, c->dt, r, sq, 0);
  a->k = alloc_data(c, f, c->dt, r, sk, 0);
  a->v = alloc_data(c, f, c->dt, r, sv, 0);
  bd->out = alloc_data(c, f, c->dt, r, so, 0);
  bd->dout = alloc_data(c, f, c->dt, r, so, 0);
  bd->dq = alloc_data(c, f, c->dt, r, sq, 1);
  bd->dk = alloc_data(c, f, c->dt, r, sk, 1);
  bd->dv = alloc_data(c, f, c->dt, r, sv, 1);
  const int64_t sl3[3] = {c->b, c->h, f->sq}, sl2[2] = {c->h, nq};
  /* lse: padded like the data without 16-byte rows, contiguous with them */
  bd->lse = case_alloc(&f->bufs, F32, varlen ? 2 : 3, varlen ? sl2 : sl3, 0,
                       c->rows16 ? 0 : c->pad, 0);
  test_fill_normal(&a->q, rng, 1.0);
  test_fill_normal(&a->k, rng, 1.0);
  test_fill_normal(&a->v, rng, 1.0);
  test_fill_normal(&bd->dout, rng, 1.0);
  if (c->dlse) {
    bd->dlse = case_alloc(&f->bufs, F32, bd->lse.rank, bd->lse.shape, 0, 0, 0);
    test_fill_normal(&bd->dlse, rng, 1.0);
  }
  if (c->alibi) {
    const int64_t as[2] = {c->b, c->h};
    a->alibi_slopes = c->alibi == 1 ? case_alloc(&f->bufs, F32, 1, &as[1], 0, 0, 0)
                                    : case_alloc(&f->bufs, F32, 2, as, 0, 0, 0);
    test_fill_uniform(&a->alibi_slopes, rng, 0.05, 0.6);
  }
  f->bshape[0] = c->bias & BC_B ? 1 : c->b;
  f->bshape[1] = c->bias & BC_H ? 1 : c->h;
  f->bshape[2] = c->bias & BC_Q ? 1 : f->sq;
  f->bshape[3] = f->sk;
  if (c->bias) {
    a->bias = alloc_data(c, f, c->dt, 4, f->bshape, 0);
    test_fill_normal(&a->bias, rng, 1.0);
    if (c->bias_ninf)
      for (int64_t e = 0; e < test_numel(&a->bias); ++e)
        if (test_rng_uniform(rng) < 0.1) test_set(&a->bias, e, -INFINITY);
    if (c->dbias) bd->dbias = alloc_data(c, f, c->dt, 4, f->bshape, 1);
  }
  a->scale = c->scale;
  a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (c->window && !c->causal) a->window_left = c->wl, a->window_right = c->wr;
  a->dropout_p = c->dropout;
  a->dropout_seed = 0x1234abcd5678ull ^ test_rng_u64(rng);
  a->dropout_offset = (uint64_t)(test_rng_u64(rng) & 0xffffu);

  /* out and lse: the CPU backend's forward */
  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  fd.attn = *a;
  fd.out = bd->out;
  fd.lse = bd->lse;
  const sdpa_status st = env->cpu_fwd(&fd);
  return TEST_EXPECT(st == SDPA_OK, "%s: CPU sdpa_fwd: %s: %s", c->name, sdpa_status_string(st),
                     sdpa_last_error());
}

/* ---- the runner ---------------------------------------------------------------------------- */

static void lens_str(char *buf, size_t n, const bwd_tcase *c) {
  size_t at = 0;
  buf[0] = 0;
  if (!c->lq) return;
  const int32_t *arr[3] = {c->lq, c->lk, c->used};
  for (int x = 0; x < 3 && arr[x]; ++x)
    for (int64_t b = 0; b < c->b; ++b)
      at += (size_t)snprintf(buf + at, n - at, "%s%d", b ? "," : x ? "/" : " ", arr[x][b]);
}

static void threads_str(char *buf, size_t n, const int *t) {
  size_t at = 0;
  buf[0] = 0;
  for (; t && *t; ++t) at += (size_t)snprintf(buf + at, n - at, "%d,", *t);
}

/* One line per case: what it is (--list; the before/after case counts). */
static void list_case(const bwd_tcase *c) {
  static const char *const kinds[4] = {"check", "graph", "refuse", "bias-row"};
  char lens[128], thr[64];
  lens_str(lens, sizeof lens, c);
  threads_str(thr, sizeof thr, c->threads);
  const int win = c->window && !c->causal;
  printf("%sCASE %s|%s|b%lld h%lld/%lld s%lld/%lld d%lld/%lld|c%d tl%d w%lld,%lld|cap%g sc%g "
         "al%d|bias%d bc%d%d%d ninf%d dbias%d dlse%d|drop%g|varlen%d%s|r16 %d p%lld|det%d thr%s|"
         "%s|sm90 %d\n",
         c->small ? "small " : "", c->name, sdpa_dtype_string(c->dt), (long long)c->b,
         (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->sk, (long long)c->d,
         (long long)c->dv, c->causal, c->top_left, (long long)(win ? c->wl : -1),
         (long long)(win ? c->wr : -1), (double)c->softcap, (double)c->scale, c->alibi,
         c->bias != 0, (c->bias & BC_B) != 0, (c->bias & BC_H) != 0, (c->bias & BC_Q) != 0,
         c->bias_ninf, c->dbias, c->dlse, (double)c->dropout, c->varlen ? 1 : c->lq ? 2 : 0, lens,
         c->rows16, (long long)c->pad, c->det, thr, kinds[c->kind], c->sm90);
}

/* dq, dk, dv, dbias of d (dbias: NULL tensor when none). */
static void grads(sdpa_bwd_desc *d, sdpa_tensor *g[4]) {
  g[0] = &d->dq, g[1] = &d->dk, g[2] = &d->dv, g[3] = &d->dbias;
}

/* CPU: reruns over c->threads, bit for bit equal to the first run. */
static void cpu_reruns(const case_env *env, const bwd_tcase *c, bwd_prob *f) {
  static const char *const names[4] = {"dq", "dk", "dv", "dbias"};
  sdpa_bwd_desc bd = f->desc;
  sdpa_tensor *g[4];
  grads(&f->desc, g);
  sdpa_tensor g0[4];
  memset(g0, 0, sizeof g0);
  for (int e = 0; e < 4; ++e)
    if (g[e]->data) g0[e] = case_copy(g[e]);
  for (const int *t = c->threads; *t; ++t) {
    bd.attn.num_threads = *t;
    case_poison_outputs(&f->bufs);
    const sdpa_status st = env->cpu_bwd(&bd);
    TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd (threads %d): %s", c->name, *t, sdpa_last_error());
    for (int e = 0; e < 4; ++e) {
      if (!g[e]->data) continue;
      char label[160];
      snprintf(label, sizeof label, "%s threads=%d %s", c->name, *t, names[e]);
      test_check_equal(label, g[e], &g0[e]);
    }
  }
  for (int e = 0; e < 4; ++e) test_free(&g0[e]);
}

/* BWD_CHECK and BWD_GRAPH: the oracle once, each backend of the case this
 * binary has, CUDA's gradients against the CPU backend's. */
static void run_check(const case_env *env, bwd_cuda_fn cuda, const bwd_tcase *c, bwd_prob *f) {
  static const char *const names[4] = {"dq", "dk", "dv", "dbias"};
  sdpa_bwd_desc *bd = &f->desc;
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_bwd(bd, &p) == SDPA_OK, "%s: sdpa_validate_bwd: %s", c->name,
                   sdpa_last_error()))
    return;
  sdpa_tensor *g[4];
  grads(bd, g);
  int64_t n[4];
  for (int e = 0; e < 3; ++e) n[e] = test_numel(g[e]);
  const int64_t nfull = c->b * c->h * f->sq * f->sk;
  double *r[2][4];
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 3; ++e) r[l][e] = malloc(sizeof(double) * (size_t)(n[e] ? n[e] : 1));
    r[l][3] = c->dbias ? malloc(sizeof(double) * (size_t)(nfull ? nfull : 1)) : NULL;
    if (ref_bwd(&p, l, NULL, r[l][0], r[l][1], r[l][2], r[l][3])) {
      printf("FATAL ref_bwd: out of memory\n");
      exit(1);
    }
  }
  /* reduce the oracle's full dbias over the broadcast dims */
  n[3] = 0;
  if (c->dbias) {
    const int64_t *bs = f->bshape;
    n[3] = bs[0] * bs[1] * bs[2] * bs[3];
    for (int l = 0; l < 2; ++l) {
      double *red = case_reduce_dbias(r[l][3], c->b, c->h, f->sq, f->sk, bs);
      free(r[l][3]);
      r[l][3] = red;
    }
  }
  const unsigned run = c->on & env->backends & (cuda ? ON_BOTH : ON_CPU);
  const int both = run == ON_BOTH;
  double *cpu_g[4] = {NULL, NULL, NULL, NULL};
  for (int backend = ON_CPU; backend <= ON_CUDA; backend <<= 1) {
    if (!(run & (unsigned)backend)) continue;
    case_poison_outputs(&f->bufs);
    char cname[160];
    if (both)
      snprintf(cname, sizeof cname, "%s [%s]", c->name, backend == ON_CUDA ? "cuda" : "cpu");
    else
      snprintf(cname, sizeof cname, "%s", c->name);
    int ok;
    if (backend == ON_CPU) {
      bd->deterministic = 1;
      const sdpa_status st = env->cpu_bwd(bd);
      ok = TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd: %s: %s", cname, sdpa_status_string(st),
                       sdpa_last_error());
    } else {
      bd->deterministic = c->det > 0;
      ok = cuda(c, bd, &f->bufs);
    }
    if (!ok) continue;
    for (int e = 0; e < 4; ++e) {
      if (!g[e]->data || (e == 3 && !c->dbias)) continue;
      char what[64];
      snprintf(what, sizeof what, "%s%s", c->kind == BWD_GRAPH ? "graph " : "", names[e]);
      test_check_grad(cname, what, g[e], r[0][e], r[1][e]);
    }
    if (backend == ON_CPU && c->threads) cpu_reruns(env, c, f);
    if (backend == ON_CPU && both) {
      for (int e = 0; e < 4; ++e)
        if (g[e]->data && (e < 3 || c->dbias)) cpu_g[e] = case_doubles(g[e]);
    } else if (backend == ON_CUDA && cpu_g[0]) {
      /* both within their bound of the oracle (test_check_grad's), so within
       * twice it of each other */
      for (int e = 0; e < 4; ++e) {
        if (!cpu_g[e]) continue;
        const double scale = fmax(1.0, test_max_abs(r[0][e], n[e]));
        const double bound =
            2.0 * case_max_diff(r[1][e], r[0][e], n[e]) + test_atol(c->dt) * scale;
        char what[200];
        snprintf(what, sizeof what, "%s %s vs CPU backend", c->name, names[e]);
        test_check(what, g[e], cpu_g[e], NULL, 2.0 * bound);
      }
    }
  }
  for (int e = 0; e < 4; ++e) free(cpu_g[e]);
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 4; ++e) free(r[l][e]);
}

void bwd_cases_run(const case_env *env, bwd_cuda_fn cuda) {
  build_table();
  for (int n = 0; n < ntab; ++n) {
    const bwd_tcase *c = &tab[n];
    if (!case_selected(env, c->name, c->on, c->small) || (c->cuda_shape && env->primary == ON_CPU))
      continue;
    if (env->list) {
      list_case(c);
      continue;
    }
    printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld/%lld%s%s%s\n", c->name,
           sdpa_dtype_string(c->dt), (long long)c->b, (long long)c->h, (long long)c->hk,
           (long long)c->sq, (long long)c->sk, (long long)c->d, (long long)c->dv,
           c->varlen || c->lq ? " varlen" : "", c->pad ? " padded" : "",
           c->kind == BWD_GRAPH ? " (CUDA graph, caller workspace)" :
           c->kind == BWD_REFUSE ? " (sm80 rows decline)" :
           c->kind == BWD_BIAS_ROW ? " (bias row without a bias)" : "");
    bwd_prob f;
    if (build(env, c, &f)) {
      if (c->kind == BWD_REFUSE || c->kind == BWD_BIAS_ROW) {
        if (cuda) (void)cuda(c, &f.desc, &f.bufs);
      } else {
        run_check(env, cuda, c, &f);
      }
    }
    case_bufs_free(&f.bufs);
  }
}
