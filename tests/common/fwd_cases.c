/*
 * fwd_cases.c - the forward's case table and its runner (fwd_cases.h).
 *
 * The table: head dims 1 .. 320 (every CUDA bucket, padded inside it) and
 * d != d_v, the three dtypes (f32 on the CPU backend only), GQA 1 / 2 / 8,
 * lengths off the tile grid (s = 1, s_q > s_k, long rows), empty problems,
 * causal in both alignments, windows, alibi [h] / [b, h], softcap, additive
 * biases (full, broadcast by shape or by stride 0, -inf entries and rows,
 * rows not 16-byte aligned, with every other modifier), fully masked rows,
 * dropout (probs' sign pattern = the oracle's dropout bits), varlen with
 * empty sequences and seqused_k, padded strides, split-KV; CPU only: reruns
 * bitwise over thread counts and every split count vs unsplit; CUDA only:
 * the Hopper rows' selection, what the sm80 rows decline, a CUDA-graph
 * capture, and the --small set (one small problem per kernel instance, for
 * compute-sanitizer).
 */
#include "common/fwd_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ref/ref.h"

#define F32 SDPA_DTYPE_F32
#define F16 SDPA_DTYPE_F16
#define BF16 SDPA_DTYPE_BF16

/* ---- the table ------------------------------------------------------------------------ */

CASE_TABLE(fwd_case, 400, "fwd_cases")
#define ADD(...) add((fwd_case){__VA_ARGS__})

/* f32 runs on the CPU backend only (the CUDA fp32 rows have their own suite,
 * tests/gpu/test_gpu_tf32.c, and measure) */
static unsigned on_dt(sdpa_dtype dt) { return dt == F32 ? ON_CPU : ON_BOTH; }

static void build_table(void) {
  const sdpa_dtype dts[3] = {F32, F16, BF16}, dts2[2] = {F16, BF16};
  const int64_t buckets[8] = {32, 64, 96, 128, 160, 192, 224, 256};
  ntab = 0;

  /* ---- the --small set (CUDA): every kernel instance once: each bucket and
   * dtype, fast (causal, off the tile grid), fast with dropout, and full
   * (dropout + probs) variants */
  for (int k = 0; k < 16; ++k) {
    fwd_case c = {.name = "small", .on = ON_CUDA, .small = 1, .dt = dts2[k / 8], .b = 1, .h = 2,
                  .hk = 1, .sq = 70, .sk = 150, .d = buckets[k % 8], .causal = 1, .rows16 = 1,
                  .varlen = 0};
    add(c);
    c.dropout = 0.17f;
    add(c);
    c.probs = 1, c.causal = 0, c.window = 1, c.wl = 20, c.wr = 3;
    add(c);
  }
  /* the Hopper rows (one instance per bucket and dtype): causal, GQA, off the
   * tile grid, d below the bucket */
  for (int k = 0; k < 8; ++k) {
    const int64_t d9[4] = {40, 128, 160, 232};
    ADD(.name = "small sm90", .on = ON_CUDA, .small = 1, .dt = dts2[k / 4], .b = 1, .h = 4,
        .hk = 2, .sq = 130, .sk = 200, .d = d9[k % 4], .causal = 1, .rows16 = 1, .sm90 = 1);
  }
  /* unmasked: more work items than an H100 / H200 has SMs, so the blocks are
   * persistent (and d 40 takes the 192-row d 64 row) */
  for (int k = 0; k < 2; ++k)
    ADD(.name = "small sm90 persistent", .on = ON_CUDA, .small = 1, .dt = dts2[k], .b = 1,
        .h = 80, .hk = 8, .sq = 200, .sk = 70, .d = k ? 232 : 40, .rows16 = 1, .sm90 = 1);
  /* unmasked d 256: key tiles of 80, several tiles (the pipelined steps), both dtypes */
  for (int k = 0; k < 2; ++k)
    ADD(.name = "small sm90 key tiles of 80", .on = ON_CUDA, .small = 1, .dt = dts2[k], .b = 1,
        .h = 4, .hk = 2, .sq = 130, .sk = 200, .d = 256, .rows16 = 1,
        .row = k ? "fwd_sm90_bf16_hd256_bn80" : "fwd_sm90_f16_hd256_bn80");
  /* causal on the 192-row d 64 row: pairs with the middle block alone */
  ADD(.name = "small sm90 wide causal", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 2,
      .hk = 1, .sq = 2048, .sk = 2048, .d = 64, .causal = 1, .rows16 = 1,
      .row = "fwd_sm90_bf16_hd64_bm192");
  /* d_qk != d_v (MLA's 192 / 128) on the Hopper row and forced onto the sm80 one */
  ADD(.name = "small mla sm90", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 4, .hk = 1,
      .sq = 130, .sk = 200, .d = 192, .dv = 128, .causal = 1, .rows16 = 1, .sm90 = 1);
  ADD(.name = "small mla sm80", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 4, .hk = 1,
      .sq = 130, .sk = 200, .d = 192, .dv = 128, .causal = 1, .rows16 = 1,
      .kernel = "fwd_sm80_f16_hd192");
  /* the sm80 rows whose buckets the Hopper rows now take on sm_90, forced */
  ADD(.name = "small sm80 forced", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 2,
      .hk = 1, .sq = 70, .sk = 150, .d = 96, .causal = 1, .rows16 = 1,
      .kernel = "fwd_sm80_bf16_hd96");
  ADD(.name = "small sm80 forced", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 2,
      .hk = 1, .sq = 70, .sk = 150, .d = 160, .rows16 = 1, .dropout = 0.17f,
      .kernel = "fwd_sm80_bf16_hd160");
  /* above d = 256: the warp-pair rows (each warp S whole and half of O),
   * forced: plain, dropout and bias kernels of each */
  {
    static const char *wide[6] = {"fwd_sm80_f16_hd320", "fwd_sm80_bf16_hd320",
                                  "fwd_sm80_f16_hd384", "fwd_sm80_bf16_hd384",
                                  "fwd_sm80_f16_hd512", "fwd_sm80_bf16_hd512"};
    static const int64_t wd[6] = {272, 320, 352, 384, 448, 512};
    for (int k = 0; k < 6; ++k) {
      fwd_case c = {.name = "small wide", .on = ON_CUDA, .small = 1, .dt = dts2[k & 1], .b = 1,
                    .h = 2, .hk = 1, .sq = 70, .sk = 150, .d = wd[k], .causal = 1,
                    .rows16 = 1, .kernel = wide[k]};
      add(c);
      c.dropout = 0.17f, c.causal = 0, c.window = 1, c.wl = 20, c.wr = 3;
      add(c);
      c.dropout = 0.f, c.window = 0, c.bias = BIAS_SHAPE, c.bias_inf = 1, c.sk = 152;
      add(c);
    }
  }
  /* the Hopper split-O rows: K's and V's copies, blocks past d / d_v never copied */
  ADD(.name = "small wide sm90", .on = ON_CUDA, .small = 1, .dt = BF16, .b = 1, .h = 4, .hk = 2,
      .sq = 70, .sk = 150, .d = 448, .dv = 384, .causal = 1, .rows16 = 1,
      .row = "fwd_sm90_bf16_hd512");
  ADD(.name = "small wide sm90", .on = ON_CUDA, .small = 1, .dt = F16, .b = 1, .h = 2, .hk = 1,
      .sq = 70, .sk = 150, .d = 300, .window = 1, .wl = 30, .wr = 5, .rows16 = 1,
      .row = "fwd_sm90_f16_hd384");
  /* empty problems: no keys (out 0, lse +inf over poison), no queries */
  ADD(.name = "small no keys", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 2, .h = 4, .hk = 2,
      .sq = 37, .sk = 0, .d = 128, .rows16 = 1);
  ADD(.name = "small no queries", .on = ON_BOTH, .small = 1, .dt = F16, .b = 2, .h = 4, .hk = 2,
      .sq = 0, .sk = 37, .d = 64, .rows16 = 1);
  /* bias: the fast kernels' shared tile and the full kernels' global loads
   * (rows not 16-byte aligned, s_k % 8 != 0), -inf entries and rows */
  for (int k = 0; k < 2; ++k) {
    fwd_case c = {.name = "small bias", .on = ON_CUDA, .small = 1, .dt = dts2[k], .b = 1, .h = 2,
                  .hk = 1, .sq = 70, .sk = 152, .d = k ? 128 : 64, .causal = 1, .rows16 = 1,
                  .bias = BIAS_SHAPE, .bias_inf = 1};
    add(c);
    c.sk = 147, c.bias_packed = 1;
    add(c);
  }

  /* ---- head dims (d != d_v included), every dtype, GQA 1 / 2 / 8 */
  {
    const int64_t ds[8] = {1, 3, 8, 64, 80, 128, 256, 320};
    for (int k = 0; k < 8; ++k)
      ADD(.name = "head dim", .on = on_dt(dts[k % 3]), .dt = dts[k % 3],
          .b = 2, .h = 4, .hk = k % 2 ? 2 : 4, .sq = 37, .sk = 301, .d = ds[k]);
  }
  /* every bucket (padded inside it), f16 and bf16, GQA 1 / 2 / 8, 16-byte rows */
  {
    const int64_t ds[10] = {1, 3, 32, 64, 80, 96, 128, 160, 192, 256};
    const int64_t gq[3] = {1, 2, 8};
    for (int k = 0; k < 20; ++k)
      ADD(.name = "head dim", .on = ON_BOTH, .dt = dts2[k / 10], .b = 2, .h = 8,
          .hk = 8 / gq[k % 3], .sq = 37 + k, .sk = 301, .d = ds[k % 10], .rows16 = 1);
  }
  ADD(.name = "d != d_v", .on = ON_BOTH, .dt = F16, .b = 2, .h = 8, .hk = 1, .sq = 70, .sk = 129,
      .d = 40, .dv = 72);
  ADD(.name = "d != d_v small", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 5, .sk = 9,
      .d = 96, .dv = 3);
  for (int k = 0; k < 3; ++k)
    ADD(.name = "gqa 8", .on = on_dt(dts[k]), .dt = dts[k], .b = 1, .h = 8, .hk = 1, .sq = 65,
        .sk = 257, .d = 64);

  /* ---- lengths: s = 1, s_q > s_k, off the tile grid, several tiles */
  ADD(.name = "s=1", .on = ON_BOTH, .dt = BF16, .b = 3, .h = 2, .hk = 1, .sq = 1, .sk = 1, .d = 32,
      .rows16 = 1);
  ADD(.name = "s_q=1 long keys", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 1,
      .sk = 777, .d = 64);
  ADD(.name = "s_q=1 long keys", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 1,
      .sk = 777, .d = 64, .rows16 = 1);
  ADD(.name = "s_q > s_k", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 200, .sk = 33,
      .d = 64, .rows16 = 1);
  ADD(.name = "long causal", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 1000,
      .sk = 1030, .d = 128, .causal = 1, .rows16 = 1);
  ADD(.name = "long", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 515, .sk = 1100,
      .d = 256, .rows16 = 1);

  /* ---- empty problems: no keys (out 0, lse +inf over poisoned outputs), no
   * queries, no batch */
  ADD(.name = "no keys", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 37, .sk = 0,
      .d = 64);
  ADD(.name = "no keys causal", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 5, .sk = 0,
      .d = 8, .causal = 1);
  ADD(.name = "no queries", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 0, .sk = 30,
      .d = 32);
  ADD(.name = "no batch", .on = ON_CPU, .dt = F32, .b = 0, .h = 2, .hk = 1, .sq = 7, .sk = 9,
      .d = 16);
  for (int k = 0; k < 2; ++k) {
    ADD(.name = "no keys", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 4, .hk = 2, .sq = 37,
        .sk = 0, .d = k ? 64 : 128, .causal = k, .rows16 = 1);
    ADD(.name = "no queries", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 4, .hk = 2, .sq = 0,
        .sk = 37, .d = 64, .rows16 = 1);
    ADD(.name = "no batch", .on = ON_BOTH, .dt = dts2[k], .b = 0, .h = 4, .hk = 2, .sq = 5,
        .sk = 7, .d = 128, .rows16 = 1);
  }

  /* ---- masks: causal both alignments (s_q > s_k bottom-right: empty rows), windows */
  for (int k = 0; k < 3; ++k) {
    ADD(.name = "causal bottom-right", .on = on_dt(dts[k]), .dt = dts[k], .b = 2, .h = 2, .hk = 1,
        .sq = 131, .sk = 300, .d = 64, .causal = 1, .rows16 = 1);
    ADD(.name = "causal top-left", .on = on_dt(dts[k]), .dt = dts[k], .b = 2, .h = 2, .hk = 1,
        .sq = 131, .sk = 300, .d = 64, .causal = 1, .top_left = 1);
  }
  for (int k = 0; k < 2; ++k) {
    ADD(.name = "causal top-left", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 2, .hk = 1,
        .sq = 131, .sk = 300, .d = 128, .causal = 1, .top_left = 1, .rows16 = 1);
    ADD(.name = "causal s_q > s_k (empty rows)", .on = ON_BOTH, .dt = dts2[k], .b = 1, .h = 2,
        .hk = 2, .sq = 150, .sk = 70, .d = 96, .causal = 1, .rows16 = 1);
  }
  ADD(.name = "causal s_q > s_k (empty rows)", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2,
      .sq = 150, .sk = 70, .d = 32, .causal = 1);
  ADD(.name = "window (40, 7)", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 300,
      .sk = 300, .d = 64, .window = 1, .wl = 40, .wr = 7, .rows16 = 1);
  ADD(.name = "window (3, -1) top-left", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2,
      .sq = 90, .sk = 300, .d = 16, .window = 1, .wl = 3, .wr = -1, .top_left = 1);
  ADD(.name = "window (3, -1) top-left", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 2,
      .sq = 90, .sk = 300, .d = 32, .window = 1, .wl = 3, .wr = -1, .top_left = 1, .rows16 = 1);
  ADD(.name = "window (0, 0)", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 70,
      .sk = 70, .d = 24, .window = 1, .wl = 0, .wr = 0, .rows16 = 1);
  ADD(.name = "window (-1, 30) top-left d192", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 1,
      .sq = 200, .sk = 150, .d = 192, .window = 1, .wl = -1, .wr = 30, .top_left = 1,
      .rows16 = 1);

  /* ---- score modifiers */
  ADD(.name = "softcap", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 200,
      .d = 64, .softcap = 5.0f, .scale = 0.5f);
  for (int k = 0; k < 2; ++k)
    ADD(.name = "softcap", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 2, .hk = 2, .sq = 65,
        .sk = 200, .d = 128, .softcap = 5.0f, .scale = 0.5f, .rows16 = 1);
  ADD(.name = "alibi [h] causal", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 100,
      .sk = 150, .d = 32, .alibi = 1, .causal = 1);
  ADD(.name = "alibi [h] causal", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 100,
      .sk = 150, .d = 32, .alibi = 1, .causal = 1, .rows16 = 1);
  ADD(.name = "alibi [b,h]", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 4, .sq = 100,
      .sk = 64, .d = 32, .alibi = 2);
  ADD(.name = "alibi [b,h]", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 4, .sq = 100,
      .sk = 64, .d = 160, .alibi = 2, .rows16 = 1);
  ADD(.name = "softcap + alibi + window", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 1,
      .sq = 129, .sk = 257, .d = 64, .softcap = 3.0f, .alibi = 1, .window = 1, .wl = 50, .wr = 0,
      .rows16 = 1);

  /* ---- additive bias: CPU-style layouts (contiguous, stride-0 broadcasts) */
  for (int k = 0; k < 3; ++k)
    ADD(.name = "bias full with -inf", .on = on_dt(dts[k]), .dt = dts[k], .b = 2, .h = 2, .hk = 1,
        .sq = 40, .sk = 300, .d = 32, .bias = BIAS_FULL_SPARSE);
  ADD(.name = "bias broadcast [1,h,1,s_k]", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 3, .hk = 1,
      .sq = 50, .sk = 270, .d = 32, .bias = BIAS_STRIDE0_H_SK, .probs = 1);
  ADD(.name = "bias [b,1,s_q,s_k], -inf row + softcap + alibi + causal", .on = ON_CPU, .dt = F32,
      .b = 2, .h = 2, .hk = 2, .sq = 70, .sk = 90, .d = 16, .bias = BIAS_STRIDE0_H,
      .softcap = 3.0f, .alibi = 1, .causal = 1, .probs = 1);
  /* every bucket the benchmark uses in both dtypes, off the tile grid (causal
   * on a third), then broadcasts, -inf, and every modifier. s_k % 8 == 0 with
   * 16-byte rows runs the CUDA fast kernels (shared bias tile); the rest the
   * full kernels (global loads): both are covered. */
  {
    const int64_t bd[3] = {64, 128, 256};
    for (int k = 0; k < 6; ++k)
      ADD(.name = "bias", .on = ON_BOTH, .dt = dts2[k % 2], .b = 2, .h = 4, .hk = 2,
          .sq = 77 + 13 * k, .sk = 200 + 8 * k, .d = bd[k / 2], .bias = BIAS_SHAPE,
          .causal = k % 3 == 1, .rows16 = 1);
    const int bcs[4] = {BC_B, BC_H, BC_Q, BC_B | BC_H | BC_Q};
    for (int k = 0; k < 4; ++k)
      ADD(.name = "bias broadcast", .on = ON_BOTH, .dt = dts2[k % 2], .b = 2, .h = 3, .hk = 3,
          .sq = 100, .sk = 152, .d = k % 2 ? 128 : 64, .bias = BIAS_SHAPE, .bias_bc = bcs[k],
          .causal = k == 2, .rows16 = 1);
  }
  for (int k = 0; k < 2; ++k)
    ADD(.name = "bias -inf entries and row", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 2,
        .hk = 1, .sq = 90, .sk = 264, .d = k ? 128 : 64, .bias = BIAS_SHAPE, .bias_inf = 1,
        .causal = 1, .top_left = k, .rows16 = 1);
  ADD(.name = "bias -inf, broadcast over s_q (rows all -inf)", .on = ON_BOTH, .dt = BF16, .b = 2,
      .h = 2, .hk = 2, .sq = 70, .sk = 136, .d = 128, .bias = BIAS_SHAPE, .bias_bc = BC_Q,
      .bias_inf = 1, .rows16 = 1);
  ADD(.name = "bias + softcap", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 65,
      .sk = 200, .d = 128, .bias = BIAS_SHAPE, .softcap = 5.0f, .scale = 0.5f, .rows16 = 1);
  ADD(.name = "bias + alibi + window", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 1,
      .sq = 129, .sk = 264, .d = 64, .bias = BIAS_SHAPE, .alibi = 2, .window = 1, .wl = 50,
      .wr = 10, .rows16 = 1);
  ADD(.name = "bias + dropout", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 77,
      .sk = 208, .d = 128, .bias = BIAS_SHAPE, .dropout = 0.17f, .causal = 1, .rows16 = 1);
  ADD(.name = "bias + dropout + probs", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 1,
      .sq = 67, .sk = 270, .d = 64, .bias = BIAS_SHAPE, .dropout = 0.17f, .probs = 1,
      .rows16 = 1);
  ADD(.name = "bias padded", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 70,
      .sk = 184, .d = 256, .bias = BIAS_SHAPE, .pad = 8, .causal = 1, .rows16 = 1);
  for (int k = 0; k < 2; ++k)
    ADD(.name = "bias rows not 16-byte aligned", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 2,
        .hk = 1, .sq = 99, .sk = 203, .d = k ? 128 : 256, .bias = BIAS_SHAPE, .bias_packed = 1,
        .bias_inf = k, .causal = 1, .rows16 = 1);
  ADD(.name = "bias s_k % 8 != 0", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 100,
      .sk = 203, .d = 64, .bias = BIAS_SHAPE, .causal = 1, .rows16 = 1);
  ADD(.name = "bias s=1", .on = ON_BOTH, .dt = BF16, .b = 3, .h = 2, .hk = 1, .sq = 1, .sk = 1,
      .d = 32, .bias = BIAS_SHAPE, .rows16 = 1);
  ADD(.name = "bias s_q > s_k", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 200,
      .sk = 72, .d = 128, .bias = BIAS_SHAPE, .causal = 1, .rows16 = 1);
  ADD(.name = "bias long", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 600,
      .sk = 1096, .d = 128, .bias = BIAS_SHAPE, .rows16 = 1);

  /* ---- dropout: the exact mask through probs' sign pattern */
  for (int k = 0; k < 3; ++k)
    ADD(.name = "dropout 0.17 + probs", .on = on_dt(dts[k]), .dt = dts[k], .b = 2, .h = 2,
        .hk = 1, .sq = 67, .sk = 270, .d = 32, .dropout = 0.17f, .probs = 1, .causal = k == 1);
  for (int k = 0; k < 2; ++k)
    ADD(.name = "dropout 0.17 + probs", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 2, .hk = 1,
        .sq = 67, .sk = 270, .d = 64, .dropout = 0.17f, .probs = 1, .causal = k == 1,
        .rows16 = 1);
  ADD(.name = "dropout 0.17 + probs d256", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 2,
      .sq = 70, .sk = 133, .d = 256, .dropout = 0.17f, .probs = 1, .rows16 = 1);
  ADD(.name = "dropout only", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 200,
      .sk = 300, .d = 128, .dropout = 0.17f, .rows16 = 1);
  /* dropout without probs runs CUDA's fast instances' drop kernels: out
   * against the oracle (which applies the exact mask) in every bucket and dtype */
  for (int k = 0; k < 16; ++k)
    ADD(.name = "dropout only, every bucket", .on = ON_BOTH, .dt = dts2[k / 8], .b = 1, .h = 2,
        .hk = 1, .sq = 77, .sk = 201, .d = buckets[k % 8], .dropout = 0.17f, .causal = k % 2,
        .rows16 = 1);
  ADD(.name = "probs f32 no dropout, window", .on = ON_CPU, .dt = F32, .b = 1, .h = 2, .hk = 2,
      .sq = 130, .sk = 300, .d = 64, .probs = 1, .window = 1, .wl = 50, .wr = 20);
  ADD(.name = "probs no dropout, window", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 2,
      .sq = 130, .sk = 300, .d = 64, .probs = 1, .window = 1, .wl = 50, .wr = 20, .rows16 = 1);

  /* ---- varlen (empty sequences, seqused_k) */
  for (int k = 0; k < 3; ++k)
    ADD(.name = "varlen", .on = on_dt(dts[k]), .dt = dts[k], .b = 4, .h = 4, .hk = 2, .sq = 150,
        .sk = 280, .d = 64, .varlen = 1, .causal = k == 2);
  for (int k = 0; k < 2; ++k)
    ADD(.name = "varlen", .on = ON_BOTH, .dt = dts2[k], .b = 5, .h = 4, .hk = 2, .sq = 150,
        .sk = 280, .d = 64, .varlen = 2, .causal = k == 1, .rows16 = 1);
  ADD(.name = "varlen window + alibi + dropout", .on = ON_BOTH, .dt = F16, .b = 3, .h = 2,
      .hk = 1, .sq = 90, .sk = 90, .d = 40, .varlen = 1, .window = 1, .wl = 10, .wr = 5,
      .alibi = 2, .dropout = 0.17f);
  ADD(.name = "varlen window + alibi + dropout", .on = ON_BOTH, .dt = F16, .b = 4, .h = 2,
      .hk = 1, .sq = 90, .sk = 90, .d = 40, .varlen = 2, .window = 1, .wl = 10, .wr = 5,
      .alibi = 2, .dropout = 0.17f, .rows16 = 1);

  /* ---- padded strides */
  ADD(.name = "padded", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 190,
      .d = 48, .pad = 3, .causal = 1);
  ADD(.name = "padded varlen", .on = ON_BOTH, .dt = BF16, .b = 3, .h = 4, .hk = 4, .sq = 50,
      .sk = 60, .d = 20, .pad = 3, .varlen = 1);
  ADD(.name = "padded", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 190,
      .d = 48, .pad = 8, .causal = 1, .rows16 = 1);
  ADD(.name = "padded varlen", .on = ON_BOTH, .dt = F16, .b = 4, .h = 4, .hk = 4, .sq = 50,
      .sk = 60, .d = 20, .pad = 16, .varlen = 2, .rows16 = 1);

  /* ---- split-KV forced (the CPU backend; CUDA forces splits on its decode
   * rows only: tests/gpu/test_gpu_decode.c), then every split count vs
   * unsplit and bitwise reruns over thread counts */
  ADD(.name = "split 5 decode", .on = ON_CPU, .dt = F32, .b = 1, .h = 4, .hk = 1, .sq = 1,
      .sk = 1500, .d = 128, .splits = 5);
  ADD(.name = "split 3 causal + dropout + probs", .on = ON_CPU, .dt = F16, .b = 1, .h = 2,
      .hk = 2, .sq = 70, .sk = 600, .d = 32, .splits = 3, .causal = 1, .dropout = 0.17f,
      .probs = 1);
  ADD(.name = "split auto varlen", .on = ON_BOTH, .dt = BF16, .b = 3, .h = 2, .hk = 1, .sq = 2,
      .sk = 900, .d = 64, .varlen = 1);
  ADD(.name = "repeat decode", .on = ON_CPU, .kind = FWD_REPEAT, .dt = F32, .b = 2, .h = 4,
      .hk = 2, .sq = 1, .sk = 3000, .d = 64);
  ADD(.name = "repeat window dropout", .on = ON_CPU, .kind = FWD_REPEAT, .dt = BF16, .b = 1,
      .h = 2, .hk = 1, .sq = 100, .sk = 1100, .d = 32, .window = 1, .wl = 300, .wr = 10,
      .dropout = 0.17f);
  ADD(.name = "repeat varlen causal", .on = ON_CPU, .kind = FWD_REPEAT, .dt = F16, .b = 3, .h = 2,
      .hk = 2, .sq = 40, .sk = 700, .d = 16, .varlen = 1, .causal = 1);

  /* ---- CUDA: the Hopper rows (wgmma + tensor copies): every bucket and
   * dtype with d at and below the bucket, lengths off the 64 / 128-row
   * tiles, GQA 8:1 and MQA, both causal alignments, windows, alibi, softcap,
   * empty rows, varlen with seqused_k, dropout (explain must select them on
   * sm_90; the CPU backend runs them too) */
  {
    const int64_t d9[9] = {64, 40, 128, 100, 256, 232, 80, 160, 192};
    for (int k = 0; k < 18; ++k)
      ADD(.name = "sm90", .on = ON_BOTH, .dt = dts2[k / 9], .b = 2, .h = 8,
          .hk = k % 3 == 0 ? 1 : 8 >> (k % 3), .sq = 65 + 37 * k, .sk = 129 + 61 * k,
          .d = d9[k % 6], .causal = k % 4 == 1, .top_left = k % 8 == 5, .sm90 = 1, .rows16 = 1);
  }
  /* unmasked, more work items than SMs: persistent blocks, every bucket */
  {
    const int64_t dp[5] = {64, 40, 96, 160, 256};
    for (int k = 0; k < 10; ++k)
      ADD(.name = "sm90 persistent", .on = ON_BOTH, .dt = dts2[k & 1], .b = 3, .h = 16,
          .hk = 4, .sq = 700 + 11 * k, .sk = 450 + 7 * k, .d = dp[k % 5], .alibi = k == 3,
          .softcap = k == 4 ? 5.0f : 0.f, .sm90 = 1, .rows16 = 1);
  }
  ADD(.name = "sm90 long causal", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 1100,
      .sk = 1300, .d = 128, .causal = 1, .sm90 = 1, .rows16 = 1);
  /* causal at d <= 64: the 192-row rows from s_q 2048 (in pairs; bottom-right
   * and top-left, s_q above and below s_k), the 128-row ones below it and
   * with a left window */
  {
    static const char *const wide[2] = {"fwd_sm90_f16_hd64_bm192", "fwd_sm90_bf16_hd64_bm192"};
    for (int k = 0; k < 4; ++k)
      ADD(.name = "sm90 wide causal", .on = ON_BOTH, .dt = dts2[k & 1], .b = 1 + (k == 2),
          .h = 2, .hk = 1, .sq = 2048 + 160 * k, .sk = k == 3 ? 1500 : 2100 + 64 * k,
          .d = k == 1 ? 40 : 64, .causal = 1, .top_left = k == 2, .rows16 = 1, .row = wide[k & 1]);
  }
  ADD(.name = "sm90 causal below the wide rows' s_q", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2,
      .hk = 2, .sq = 2000, .sk = 2000, .d = 64, .causal = 1, .rows16 = 1,
      .row = "fwd_sm90_bf16_hd64");
  ADD(.name = "sm90 window at d 64 (300, 0), s_q 2100", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2,
      .hk = 1, .sq = 2100, .sk = 2100, .d = 64, .window = 1, .wl = 300, .wr = 0, .rows16 = 1,
      .row = "fwd_sm90_f16_hd64");
  /* causal pairs (d > 64) where a block's mirror sees no key (s_q > s_k,
   * bottom-right) and with an odd count of query blocks (the middle alone) */
  for (int k = 0; k < 2; ++k)
    ADD(.name = "sm90 causal pairs s_q > s_k", .on = ON_BOTH, .dt = dts2[k], .b = 2, .h = 4,
        .hk = 2, .sq = k ? 600 : 700, .sk = k ? 260 : 200, .d = k ? 192 : 128, .causal = 1,
        .sm90 = 1, .rows16 = 1);
  /* causal pairs, more of them than SMs: persistent blocks walking pairs
   * (fwd_sm90_items.h), square and with mirrors that see no key */
  {
    const int64_t dq[3] = {64, 128, 256};
    for (int k = 0; k < 3; ++k)
      ADD(.name = "sm90 causal pairs persistent", .on = ON_CUDA, .dt = dts2[k & 1], .b = 2,
          .h = 40, .hk = 8, .sq = 650, .sk = k == 1 ? 500 : 650, .d = dq[k], .causal = 1,
          .top_left = k == 2, .sm90 = 1, .rows16 = 1);
  }
  /* d 256 unmasked: key tiles of 80 (a partial last tile; GQA; varlen, whose
   * copies read the next sequence's rows; d 232 padded) */
  ADD(.name = "sm90 d 256 key tiles of 80", .on = ON_CUDA, .dt = BF16, .b = 2, .h = 4, .hk = 2,
      .sq = 333, .sk = 250, .d = 256, .rows16 = 1, .row = "fwd_sm90_bf16_hd256_bn80");
  ADD(.name = "sm90 d 232 key tiles of 80, varlen", .on = ON_CUDA, .dt = F16, .b = 3, .h = 2,
      .hk = 1, .sq = 300, .sk = 260, .d = 232, .varlen = 1, .rows16 = 1,
      .row = "fwd_sm90_f16_hd256_bn80");
  ADD(.name = "sm90 d 256 causal on the 64-key row", .on = ON_CUDA, .dt = BF16, .b = 1, .h = 2,
      .hk = 2, .sq = 270, .sk = 300, .d = 256, .causal = 1, .rows16 = 1,
      .row = "fwd_sm90_bf16_hd256");
  ADD(.name = "sm90 s_q > s_k causal (empty rows)", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2,
      .hk = 1, .sq = 300, .sk = 100, .d = 64, .causal = 1, .sm90 = 1, .rows16 = 1);
  ADD(.name = "sm90 window (100, 20)", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 4, .hk = 4,
      .sq = 400, .sk = 500, .d = 256, .window = 1, .wl = 100, .wr = 20, .sm90 = 1, .rows16 = 1);
  ADD(.name = "sm90 softcap + alibi [b,h]", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2,
      .sq = 200, .sk = 333, .d = 128, .softcap = 4.0f, .alibi = 2, .causal = 1, .sm90 = 1,
      .rows16 = 1);
  ADD(.name = "sm90 padded", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 150,
      .sk = 270, .d = 64, .pad = 24, .sm90 = 1, .rows16 = 1);
  for (int k = 0; k < 2; ++k) /* empty sequence, seqused_k on the last: zero_v_tail */
    ADD(.name = "sm90 varlen", .on = ON_BOTH, .dt = dts2[k], .b = 5, .h = 4, .hk = 2, .sq = 200,
        .sk = 300, .d = k ? 128 : 256, .varlen = 2, .causal = k, .dropout = k ? 0.17f : 0.f,
        .sm90 = 1, .rows16 = 1);
  ADD(.name = "sm90 dropout", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 150,
      .sk = 270, .d = 64, .dropout = 0.17f, .causal = 1, .sm90 = 1, .rows16 = 1);

  /* ---- above d = 256 (the warp-pair rows of buckets 320, 384 and 512): off the
   * grid, GQA, both causal alignments, windows, varlen, score features,
   * dropout, a bias, d != d_v, several key tiles */
  ADD(.name = "wide", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 130, .sk = 200,
      .d = 288, .causal = 1, .rows16 = 1, .row = "fwd_sm90_bf16_hd384");
  ADD(.name = "wide", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 200, .sk = 90,
      .d = 384, .causal = 1, .top_left = 1, .rows16 = 1, .row = "fwd_sm90_f16_hd384");
  ADD(.name = "wide", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 150, .sk = 300,
      .d = 400, .window = 1, .wl = 40, .wr = 7, .softcap = 4.f, .alibi = 2, .rows16 = 1);
  ADD(.name = "wide", .on = ON_BOTH, .dt = F16, .b = 4, .h = 2, .hk = 1, .sq = 120, .sk = 140,
      .d = 512, .varlen = 2, .causal = 1, .dropout = 0.17f, .rows16 = 1);
  ADD(.name = "wide", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 100, .sk = 136,
      .d = 512, .bias = BIAS_SHAPE, .bias_inf = 1, .rows16 = 1, .kernel = "fwd_sm80_bf16_hd512");
  ADD(.name = "wide", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 90, .sk = 333,
      .d = 448, .dv = 320, .causal = 1, .rows16 = 1, .kernel = "fwd_sm80_bf16_hd512");
  ADD(.name = "wide", .on = ON_BOTH, .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 300, .sk = 500,
      .d = 320, .dv = 256, .scale = 0.05f, .rows16 = 1, .kernel = "fwd_sm80_f16_hd320");
  ADD(.name = "wide", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 1, .sq = 150, .sk = 170,
      .d = 336, .dv = 384, .causal = 1, .dropout = 0.17f, .rows16 = 1,
      .kernel = "fwd_sm80_bf16_hd384");
  /* the Hopper split-O rows (each consumer warpgroup S whole and half of O;
   * GQA rows packed): several query blocks, d != d_v both ways, a window, a
   * negative scale, padded strides, forced splits, GQA 8 at a short s_q,
   * 576 / 512 with a separate v */
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8, .hk = 2, .sq = 300,
      .sk = 500, .d = 512, .causal = 1, .rows16 = 1, .row = "fwd_sm90_bf16_hd512");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 90, .sk = 333,
      .d = 448, .dv = 320, .window = 1, .wl = 100, .wr = 20, .rows16 = 1,
      .row = "fwd_sm90_f16_hd512");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 300,
      .sk = 500, .d = 320, .dv = 256, .scale = -0.07f, .rows16 = 1, .row = "fwd_sm90_bf16_hd384");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 150, .sk = 170,
      .d = 336, .dv = 384, .causal = 1, .pad = 24, .rows16 = 1, .row = "fwd_sm90_f16_hd384");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 4, .sq = 40, .sk = 400,
      .d = 512, .splits = 3, .rows16 = 1, .row = "fwd_sm90_bf16_hd512");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = F16, .b = 2, .h = 16, .hk = 2, .sq = 5, .sk = 300,
      .d = 384, .causal = 1, .rows16 = 1, .row = "fwd_sm90_f16_hd384");
  ADD(.name = "wide sm90", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 4, .hk = 1, .sq = 100,
      .sk = 150, .d = 576, .dv = 512, .causal = 1, .rows16 = 1,
      .row = "fwd_sm90_bf16_hd576_dv512");

  /* ---- d_qk != d_v on the tensor-core rows: the Hopper rows (the bucket of
   * max(d, d_v), V and O masked to d_v), the sm80 rows forced, with a bias
   * (the sm80 bias kernel) and with probs (the _full row) */
  {
    const int64_t dq[5] = {192, 128, 96, 64, 160}, dv[5] = {128, 64, 64, 128, 176};
    for (int k = 0; k < 10; ++k)
      ADD(.name = "d != d_v sm90", .on = ON_BOTH, .dt = dts2[k & 1], .b = 2, .h = 8,
          .hk = k % 3 == 0 ? 1 : 2, .sq = 70 + 19 * k, .sk = 90 + 23 * k, .d = dq[k % 5],
          .dv = dv[k % 5], .causal = k % 4 != 3, .top_left = k == 5, .dropout = k == 4 ? 0.17f : 0.f,
          .varlen = k == 4 || k == 6 ? 2 : 0, .sm90 = 1, .rows16 = 1);
  }
  ADD(.name = "d != d_v sm80", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8, .hk = 1, .sq = 300,
      .sk = 333, .d = 192, .dv = 128, .causal = 1, .rows16 = 1, .kernel = "fwd_sm80_bf16_hd192");
  ADD(.name = "d != d_v sm80", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 200,
      .sk = 190, .d = 128, .dv = 64, .dropout = 0.17f, .rows16 = 1, .kernel = "fwd_sm80_f16_hd128");
  ADD(.name = "d != d_v bias", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 150,
      .sk = 170, .d = 96, .dv = 64, .causal = 1, .rows16 = 1, .bias = BIAS_SHAPE, .bias_inf = 1);
  ADD(.name = "d != d_v probs", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 90,
      .sk = 130, .d = 64, .dv = 128, .probs = 1, .dropout = 0.17f, .rows16 = 1);

  /* ---- CUDA: what the sm80 rows decline (rows not 16-byte aligned): their
   * row of the bucket declines with the reason, and what runs instead (the
   * staged row) is checked */
  ADD(.name = "rows not 16-byte aligned", .on = ON_BOTH, .kind = FWD_REFUSE, .dt = BF16, .b = 1,
      .h = 2, .hk = 2, .sq = 10, .sk = 10, .d = 3, .rows16 = 1, .q_contig = 1,
      .refuse_row = "fwd_sm80_bf16_hd32 ", .refuse_why = "unaligned");

  /* ---- rows not 16-byte aligned on the staged row (the tensor-core row of
   * the problem on aligned copies): d 100 (rows of 200 bytes) causal with
   * GQA, in a graph too (the copies' stream-ordered workspace captured);
   * varlen d 36; odd padding with dropout; a bias; probs; forced splits;
   * d != d_v */
  ADD(.name = "staged d100 gqa", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 150,
      .sk = 170, .d = 100, .causal = 1, .row = "fwd_staged");
  ADD(.name = "staged d100 graph", .on = ON_BOTH, .kind = FWD_GRAPH, .dt = F16, .b = 2, .h = 4,
      .hk = 4, .sq = 150, .sk = 170, .d = 100, .row = "fwd_staged");
  ADD(.name = "staged varlen d36", .on = ON_BOTH, .dt = F16, .b = 3, .h = 2, .hk = 1, .sq = 90,
      .sk = 120, .d = 36, .varlen = 1, .causal = 1, .row = "fwd_staged");
  ADD(.name = "staged pad odd dropout", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 2, .hk = 2,
      .sq = 70, .sk = 90, .d = 64, .pad = 3, .dropout = 0.17f, .row = "fwd_staged");
  ADD(.name = "staged bias", .on = ON_BOTH, .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 70,
      .sk = 88, .d = 60, .bias = BIAS_SHAPE, .bias_inf = 1, .row = "fwd_staged");
  ADD(.name = "staged probs", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 40,
      .sk = 50, .d = 20, .probs = 1, .row = "fwd_staged");
  ADD(.name = "staged splits", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 1, .sq = 3,
      .sk = 300, .d = 100, .splits = 3, .row = "fwd_staged");
  ADD(.name = "staged d != d_v", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 4, .sq = 64,
      .sk = 80, .d = 52, .dv = 44, .window = 1, .wl = 30, .wr = 3, .row = "fwd_staged");

  /* ---- CUDA graph capture (on sm_90 of the Hopper row explain selects) */
  ADD(.name = "graph", .on = ON_BOTH, .kind = FWD_GRAPH, .dt = BF16, .b = 2, .h = 4, .hk = 2,
      .sq = 200, .sk = 333, .d = 128, .causal = 1, .sm90 = 1, .rows16 = 1);
}

/* ---- one case's problem on the host ----------------------------------------------------- */

typedef struct fwd_prob {
  case_bufs bufs;
  sdpa_fwd_desc desc; /* host pointers, SDPA_DEVICE_CPU */
} fwd_prob;

static sdpa_tensor alloc_data(const fwd_case *c, fwd_prob *f, int rank, const int64_t *shape,
                              int is_out) {
  return case_alloc(&f->bufs, c->dt, rank, shape, c->rows16, c->pad, is_out);
}

static sdpa_tensor alloc_side(fwd_prob *f, sdpa_dtype dt, int rank, const int64_t *shape,
                              int is_out) {
  return case_alloc(&f->bufs, dt, rank, shape, 0, 0, is_out);
}

static void build_bias(const fwd_case *c, fwd_prob *f, test_rng *rng) {
  sdpa_attn *a = &f->desc.attn;
  const int64_t sb[4] = {c->b, c->h, c->sq, c->sk};
  sdpa_tensor t;
  switch (c->bias) {
  case BIAS_SHAPE: {
    const int64_t s[4] = {c->bias_bc & BC_B ? 1 : c->b, c->bias_bc & BC_H ? 1 : c->h,
                          c->bias_bc & BC_Q ? 1 : c->sq, c->sk};
    t = alloc_data(c, f, 4, s, 0);
    if (c->bias_packed)
      for (int64_t k = 3, st = 1; k >= 0; st *= s[k], --k) t.stride[k] = st;
    test_fill_normal(&t, rng, 2.0);
    if (c->bias_inf)
      for (int64_t e = 0; e < test_numel(&t); ++e)
        if (e < c->sk || test_rng_int(rng, 0, 9) == 0) test_set(&t, e, -INFINITY);
    break;
  }
  case BIAS_STRIDE0_H_SK: {
    const int64_t s2[2] = {c->h, c->sk};
    t = alloc_side(f, c->dt, 2, s2, 0);
    test_fill_normal(&t, rng, 1.0);
    t.rank = 4; /* viewed as [b, h, s_q, s_k] with strides (0, s_k, 0, 1) */
    memcpy(t.shape, sb, sizeof sb);
    t.stride[0] = 0, t.stride[1] = c->sk, t.stride[2] = 0, t.stride[3] = 1;
    test_set(&t, c->sk / 2, -INFINITY); /* a -inf column for every row */
    break;
  }
  case BIAS_STRIDE0_H: {
    const int64_t s3[4] = {c->b, 1, c->sq, c->sk};
    t = alloc_side(f, c->dt, 4, s3, 0);
    test_fill_normal(&t, rng, 1.0);
    for (int64_t j = 0; j < c->sk; ++j) test_set(&t, j, -INFINITY); /* row (0, 0) */
    for (int64_t e = 0; e < test_numel(&t); e += 7) test_set(&t, e, -INFINITY);
    t.shape[1] = c->h;
    t.stride[1] = 0;
    break;
  }
  default: /* BIAS_FULL_SPARSE */
    t = alloc_side(f, c->dt, 4, sb, 0);
    test_fill_normal(&t, rng, 1.0);
    for (int64_t e = 3; e < test_numel(&t); e += 11) test_set(&t, e, -INFINITY);
    break;
  }
  a->bias = t;
}

/* Fresh random inputs for case c (varlen lengths drawn here). */
static void build(const fwd_case *c, fwd_prob *f, test_rng *rng) {
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->desc);
  sdpa_attn *a = &f->desc.attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = c->threads ? c->threads : 2;
  int rq = 4;
  int64_t nq = c->b, nk = c->b; /* leading dims: b (dense) or totals (varlen) */
  if (c->varlen) {
    const int64_t n1[1] = {c->b + 1}, nb[1] = {c->b};
    sdpa_tensor cu_q = alloc_side(f, SDPA_DTYPE_I32, 1, n1, 0);
    sdpa_tensor cu_k = alloc_side(f, SDPA_DTYPE_I32, 1, n1, 0);
    sdpa_tensor used = alloc_side(f, SDPA_DTYPE_I32, 1, nb, 0);
    int32_t *cq = (int32_t *)cu_q.data, *ck = (int32_t *)cu_k.data, *us = (int32_t *)used.data;
    cq[0] = ck[0] = 0;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      int64_t lq = b == 1 ? 0 : test_rng_int(rng, 1, c->sq);
      int64_t lk = b == 1 ? 0 : test_rng_int(rng, 1, c->sk);
      if (c->varlen == 2 && b == 2) lk = 0; /* keys empty, queries not */
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > mq) mq = lq;
      if (lk > mk) mk = lk;
    }
    a->cu_seqlens_q = cu_q, a->cu_seqlens_k = cu_k, a->seqused_k = used;
    a->max_seqlen_q = mq, a->max_seqlen_k = mk;
    rq = 3, nq = cq[c->b], nk = ck[c->b];
  }
  /* dense [b, s, h, d]; varlen [total, h, d] (the shapes' tails are shared) */
  const int o = 4 - rq;
  const int64_t sq[4] = {nq, c->sq, c->h, c->d}, sk[4] = {nk, c->sk, c->hk, c->d};
  const int64_t sv[4] = {nk, c->sk, c->hk, c->dv}, so[4] = {nq, c->sq, c->h, c->dv};
  int64_t sqv[4], skv[4], svv[4], sov[4];
  memcpy(sqv, sq, sizeof sq), memcpy(skv, sk, sizeof sk), memcpy(svv, sv, sizeof sv);
  memcpy(sov, so, sizeof so);
  if (o) { /* drop the s dim: [total, h, d] */
    sqv[1] = sq[2], sqv[2] = sq[3], skv[1] = sk[2], skv[2] = sk[3];
    svv[1] = sv[2], svv[2] = sv[3], sov[1] = so[2], sov[2] = so[3];
  }
  a->q = c->q_contig ? case_alloc(&f->bufs, c->dt, rq, sqv, 0, 0, 0) : alloc_data(c, f, rq, sqv, 0);
  a->k = alloc_data(c, f, rq, skv, 0);
  a->v = alloc_data(c, f, rq, svv, 0);
  f->desc.out = alloc_data(c, f, rq, sov, 1);
  if (c->varlen) {
    const int64_t sl[2] = {c->h, nq};
    f->desc.lse = alloc_side(f, SDPA_DTYPE_F32, 2, sl, 1);
  } else {
    const int64_t sl[3] = {c->b, c->h, c->sq};
    f->desc.lse = alloc_side(f, SDPA_DTYPE_F32, 3, sl, 1);
  }
  test_fill_normal(&a->q, rng, 1.0);
  test_fill_normal(&a->k, rng, 1.0);
  test_fill_normal(&a->v, rng, 1.0);
  a->scale = c->scale;
  a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (c->window && !c->causal) a->window_left = c->wl, a->window_right = c->wr;
  if (c->alibi) {
    const int64_t s1[1] = {c->h}, s2[2] = {c->b, c->h};
    a->alibi_slopes = c->alibi == 1 ? alloc_side(f, SDPA_DTYPE_F32, 1, s1, 0)
                                    : alloc_side(f, SDPA_DTYPE_F32, 2, s2, 0);
    test_fill_uniform(&a->alibi_slopes, rng, 0.0, 0.5);
  }
  if (c->bias) build_bias(c, f, rng);
  a->dropout_p = c->dropout;
  a->dropout_seed = 0x1234567890abcdefull ^ test_rng_u64(rng);
  a->dropout_offset = (uint32_t)test_rng_u64(rng);
  if (c->probs) {
    const int64_t sp[4] = {c->b, c->h, c->sq, c->sk};
    f->desc.probs = alloc_side(f, SDPA_DTYPE_F32, 4, sp, 1);
  }
  f->desc.num_splits = c->splits;
}

/* ---- the runner ---------------------------------------------------------------------------- */

static const char *bias_name(const fwd_case *c, char *buf, size_t n) {
  static const char *const names[5] = {"none", "shape", "full-sparse", "stride0-h-sk",
                                       "stride0-h"};
  if (c->bias == BIAS_SHAPE)
    snprintf(buf, n, "shape bc%d inf%d packed%d", c->bias_bc, c->bias_inf, c->bias_packed);
  else
    snprintf(buf, n, "%s", names[c->bias]);
  return buf;
}

/* One line per case: what it is (--list; the before/after case counts). */
static void list_case(const case_env *env, const fwd_case *c) {
  char bs[64], kind[160];
  const int r16 = c->rows16 && (c->d % 8 || c->dv % 8); /* 16-byte rows that are not contiguous */
  const int64_t wl = c->window && !c->causal ? c->wl : -1, wr = c->window && !c->causal ? c->wr : -1;
  static const char *const kinds[4] = {"check", "repeat", "graph", "refuse"};
  if (c->kind == FWD_REFUSE)
    snprintf(kind, sizeof kind, "refuse %s%s", c->refuse_row, c->refuse_why);
  else
    snprintf(kind, sizeof kind, "%s", kinds[c->kind]);
  printf("%sCASE %s|%s|b%lld h%lld/%lld s%lld/%lld d%lld/%lld|c%d tl%d w%lld,%lld|cap%g sc%g "
         "al%d|bias %s|drop%g probs%d|varlen%d L%dp%lld|%s|splits%d",
         c->small ? "small " : "", c->name, sdpa_dtype_string(c->dt), (long long)c->b,
         (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->sk, (long long)c->d,
         (long long)c->dv, c->causal, c->top_left, (long long)wl, (long long)wr,
         (double)c->softcap, (double)c->scale, c->alibi, bias_name(c, bs, sizeof bs),
         (double)c->dropout, c->probs, c->varlen, r16 ? 16 : 0, (long long)c->pad, kind,
         c->splits);
  if (env->primary == ON_CUDA) printf("|sm90 %d|cmp %d", c->sm90, (c->on & ON_CPU) ? 1 : 0);
  printf("\n");
}

/* out, lse and probs (with the dropout bits in probs' signs) against the oracle */
static void check_outputs(const fwd_case *c, const fwd_prob *f, const sdpa_problem *p,
                          int backend, int both, double *r[2][3]) {
  char what[200];
  const int64_t n_lse = test_numel(&f->desc.lse);
  test_check(case_label(what, sizeof what, c->name, backend, both, "out"), &f->desc.out, r[0][0],
             r[1][0], test_atol(c->dt));
  test_check(case_label(what, sizeof what, c->name, backend, both, "lse"), &f->desc.lse, r[0][1],
             r[1][1], test_lse_atol(r[0][1], n_lse));
  if (!c->probs) return;
  test_check(case_label(what, sizeof what, c->name, backend, both, "probs"), &f->desc.probs,
             r[0][2], NULL, backend == ON_CUDA ? 5e-5 : 1e-5);
  if (c->dropout <= 0.0f) return;
  int64_t bad = 0, ndrop = 0;
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t hh = 0; hh < c->h; ++hh)
      for (int64_t i = 0; i < c->sq; ++i)
        for (int64_t j = 0; j < c->sk; ++j) {
          const int64_t e = ((b * c->h + hh) * c->sq + i) * c->sk + j;
          const int want = ref_dropped(p, b, hh, i, j);
          ndrop += want;
          bad += signbit(test_get(&f->desc.probs, e)) != 0 ? !want : want;
        }
  TEST_EXPECT(bad == 0 && ndrop > 0,
              "%s: %lld probs signs differ from the dropout bits (%lld dropped)",
              case_label(what, sizeof what, c->name, backend, both, ""), (long long)bad,
              (long long)ndrop);
}

/* FWD_CHECK (and the CUDA kinds): the oracle once, each backend of the case
 * this binary has, and CUDA's out against the CPU backend's. */
static void run_check(const case_env *env, fwd_cuda_fn cuda, const fwd_case *c, fwd_prob *f) {
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_fwd(&f->desc, &p) == SDPA_OK, "%s: validate: %s", c->name,
                   sdpa_last_error()))
    return;
  const int64_t n_out = test_numel(&f->desc.out), n_lse = test_numel(&f->desc.lse);
  const int64_t n_p = c->probs ? test_numel(&f->desc.probs) : 0;
  double *r[2][3]; /* exact / lowp: out, lse, probs */
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
    r[l][1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    r[l][2] = l == 0 && n_p ? malloc(sizeof(double) * (size_t)n_p) : NULL;
    ref_fwd(&p, l, r[l][0], r[l][1], r[l][2]);
  }
  const unsigned run = c->on & env->backends & (cuda ? ON_BOTH : ON_CPU);
  const int both = run == ON_BOTH;
  double *cpu_out = NULL;
  for (int backend = ON_CPU; backend <= ON_CUDA; backend <<= 1) {
    if (!(run & (unsigned)backend)) continue;
    case_poison_outputs(&f->bufs);
    int ok;
    if (backend == ON_CPU) {
      const sdpa_status st = env->cpu_fwd(&f->desc);
      ok = TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd (cpu) returned %s: %s", c->name,
                       sdpa_status_string(st), sdpa_last_error());
    } else {
      ok = cuda(c, &f->desc, &f->bufs);
    }
    if (!ok) continue;
    check_outputs(c, f, &p, backend, both, r);
    if (backend == ON_CPU && both) {
      cpu_out = case_doubles(&f->desc.out);
    } else if (backend == ON_CUDA && cpu_out) {
      /* both within their bound of the oracle, so within twice it of each other */
      char what[200];
      const double lowp_err = case_max_diff(r[1][0], r[0][0], n_out);
      snprintf(what, sizeof what, "%s out vs CPU backend", c->name);
      test_check(what, &f->desc.out, cpu_out, NULL, 2.0 * (2.0 * lowp_err + test_atol(c->dt)));
    }
  }
  free(cpu_out);
  for (int l = 0; l < 2; ++l)
    for (int k = 0; k < 3; ++k) free(r[l][k]);
}

/* FWD_REPEAT (CPU): the same inputs run again, with 1 and 3 threads too,
 * bitwise equal; every split count 2..16 equal to unsplit within rounding. */
static void run_repeat(const case_env *env, const fwd_case *c, fwd_prob *f) {
  const int threads = c->threads ? c->threads : 2;
  sdpa_fwd_desc d = f->desc;
  sdpa_tensor out1 = test_alloc(c->dt, d.out.rank, d.out.shape);
  sdpa_tensor lse1 = test_alloc(SDPA_DTYPE_F32, d.lse.rank, d.lse.shape);
  d.num_splits = 1;
  d.out = out1;
  d.lse = lse1;
  TEST_EXPECT(env->cpu_fwd(&d) == SDPA_OK, "%s: first run: %s", c->name, sdpa_last_error());
  const int nthreads[3] = {threads, 1, 3};
  for (int k = 0; k < 3; ++k) {
    sdpa_tensor out2 = test_alloc(c->dt, d.out.rank, d.out.shape);
    d.out = out2;
    d.attn.num_threads = nthreads[k];
    TEST_EXPECT(env->cpu_fwd(&d) == SDPA_OK, "%s: rerun", c->name);
    char what[160];
    snprintf(what, sizeof what, "%s bitwise rerun (%d threads)", c->name, nthreads[k]);
    test_check_equal(what, &out1, &out2);
    test_free(&out2);
  }
  const int64_t nl = test_numel(&lse1);
  double *o1 = case_doubles(&out1), *l1 = case_doubles(&lse1);
  d.attn.num_threads = threads;
  int fails = 0;
  for (int s = 2; s <= 16 && !fails; ++s) {
    sdpa_tensor out2 = test_alloc(c->dt, out1.rank, out1.shape);
    sdpa_tensor lse2 = test_alloc(SDPA_DTYPE_F32, lse1.rank, lse1.shape);
    d.out = out2;
    d.lse = lse2;
    d.num_splits = s;
    TEST_EXPECT(env->cpu_fwd(&d) == SDPA_OK, "%s: split %d", c->name, s);
    char what[160];
    snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
    fails += !test_check(what, &out2, o1, NULL, c->dt == F32 ? 2e-6 : test_atol(c->dt));
    snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
    fails += !test_check(what, &lse2, l1, NULL, test_lse_atol(l1, nl));
    test_free(&out2);
    test_free(&lse2);
  }
  free(o1);
  free(l1);
  test_free(&out1);
  test_free(&lse1);
}

void fwd_cases_run(const case_env *env, fwd_cuda_fn cuda) {
  build_table();
  for (int n = 0; n < ntab; ++n) {
    const fwd_case *c = &tab[n];
    if (!case_selected(env, c->name, c->on, c->small)) continue;
    if (env->list) {
      list_case(env, c);
      continue;
    }
    printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld/%lld%s%s%s\n", c->name,
           sdpa_dtype_string(c->dt), (long long)c->b, (long long)c->h, (long long)c->hk,
           (long long)c->sq, (long long)c->sk, (long long)c->d, (long long)c->dv,
           c->varlen ? " varlen" : "", c->pad ? " padded" : "",
           c->kind == FWD_REPEAT ? " (repeat)" : c->kind == FWD_GRAPH ? " (CUDA graph)" :
           c->kind == FWD_REFUSE ? " (sm80 rows decline)" : "");
    fwd_prob f;
    build(c, &f, env->rng);
    if (c->kind == FWD_REPEAT)
      run_repeat(env, c, &f);
    else
      run_check(env, cuda, c, &f);
    case_bufs_free(&f.bufs);
  }
}
