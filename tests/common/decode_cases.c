/*
 * decode_cases.c - the KV-cache decoding table and its runner (decode_cases.h).
 *
 * The table: contiguous caches (with cache_batch_idx, cache_leftpad) and paged
 * ones (page 16 and 256, shuffled block tables, lengths off the page grid,
 * cache_seqlens = 0), in-call append of k_new / v_new with rotary
 * (interleaved and half-split) in both layouts, s_q in {1, 2, 7, 64} (causal
 * chunked prefill), windows, alibi, softcap, GQA / MQA (groups that are not
 * powers of two too), d != d_v, every CUDA head-dim bucket in f16 and bf16,
 * head dims that are not a multiple of 8 in rows padded to one (NaN in the
 * padding), short caches, dense problems with forced splits, split counts
 * (CPU: every count 2..16 vs the first call; CUDA: every forced count 1..64
 * vs 1); CUDA only: the decode rows' twins' shapes, graph capture with and
 * without a caller workspace, paged == contiguous bit for bit, explain's
 * selection, merge_states vs the CPU backend, and the --small set (for
 * compute-sanitizer).
 */
#include "common/decode_cases.h"

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

/* ---- the table ------------------------------------------------------------------------ */

CASE_TABLE(dec_case, 200, "decode_cases")
#define ADD(...) add((dec_case){__VA_ARGS__})

static void build_table(void) {
  const sdpa_dtype dts[3] = {F32, F16, BF16}, dts2[2] = {F16, BF16};
  const int64_t sqs[4] = {1, 2, 7, 64};
  ntab = 0;

  /* ---- the --small set (CUDA, and the CPU backend on the same inputs) */
  {
    const int64_t ds[3] = {64, 128, 256};
    for (int k = 0; k < 3; ++k)
      ADD(.name = "small paged append rotary", .on = ON_BOTH, .small = 1,
          .dt = k == 1 ? F16 : BF16, .b = 2, .h = 4, .hk = 2, .sq = 3, .snew = 2, .d = ds[k],
          .s_cache = 200, .page = 16, .rotary = 2, .rotary_dim = ds[k] / 2, .causal = 1,
          .splits = 3, .zero_seqlen = 1);
  }
  ADD(.name = "small padded rows", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 2, .h = 8, .hk = 2,
      .sq = 2, .snew = 1, .d = 100, .s_cache = 150, .padded = 1, .page = 16, .splits = 2);
  ADD(.name = "small contiguous batch_idx", .on = ON_BOTH, .small = 1, .dt = F16, .b = 2, .h = 8,
      .hk = 1, .sq = 1, .snew = 1, .d = 128, .s_cache = 300, .batch_idx = 1, .rotary = 1,
      .rotary_dim = 64);
  ADD(.name = "merge_states", .on = ON_CUDA, .small = 1, .kind = DEC_MERGE, .dt = F32,
      .merge_out = BF16, .b = 3, .sq = 5, .h = 4, .d = 72);
  ADD(.name = "merge_states", .on = ON_CUDA, .small = 1, .kind = DEC_MERGE, .dt = F32,
      .merge_out = F16, .b = 5, .sq = 2, .h = 3, .d = 30);
  ADD(.name = "small GQA 6/3 (group 2) h_k 3", .on = ON_BOTH, .small = 1, .dt = F16, .b = 2, .h = 6,
      .hk = 3, .sq = 2, .snew = 1, .d = 64, .s_cache = 150, .page = 16, .splits = 3);
  /* the d 128 rows' wide twin (decode_plan.cu): 2 groups, keys the cap */
  ADD(.name = "small wide twin paged append rotary", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 1,
      .h = 8, .hk = 2, .sq = 1, .snew = 1, .d = 128, .s_cache = 512, .page = 16, .rotary = 2,
      .rotary_dim = 128);
  /* sequences ending inside a warp's first tiles, a capacity (70) that is
   * not a whole number of tiles */
  ADD(.name = "small short contiguous caches", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 5,
      .h = 8, .hk = 2, .sq = 1, .snew = 1, .d = 128, .s_cache = 70, .zero_seqlen = 1);
  ADD(.name = "small leftpad append rotary", .on = ON_BOTH, .small = 1, .dt = F16, .b = 2, .h = 4,
      .hk = 2, .sq = 2, .snew = 2, .d = 64, .s_cache = 150, .leftpad = 1, .rotary = 2,
      .rotary_dim = 32);
  /* rows that are not 16-byte aligned / f32: the SIMT row, after kv_append.cu */
  ADD(.name = "small d 59 append rotary (simt)", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 2,
      .h = 4, .hk = 2, .sq = 3, .snew = 3, .d = 59, .s_cache = 120, .leftpad = 1, .rotary = 1,
      .rotary_dim = 32, .causal = 1);
  /* MLA's latent cache (v k's first 512 columns), 64 heads a block, two splits */
  ADD(.name = "small MLA 576 / 512 paged 64", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 2,
      .h = 64, .hk = 1, .sq = 1, .d = 576, .dv = 512, .s_cache = 150, .page = 64, .latent = 1,
      .splits = 2, .zero_seqlen = 1, .hopper_row = "decode_sm90_bf16_hd576_dv512");
  /* the split-O rows' own V tiles: pages of 16, two splits; d 320 (blocks
   * past it never copied) on a contiguous cache, causal at s_q 2 */
  ADD(.name = "small d 512 paged 16", .on = ON_BOTH, .small = 1, .dt = F16, .b = 2, .h = 4,
      .hk = 1, .sq = 1, .d = 512, .s_cache = 90, .page = 16, .splits = 2, .zero_seqlen = 1,
      .hopper_row = "fwd_sm90_f16_hd512");
  ADD(.name = "small d 320 contiguous", .on = ON_BOTH, .small = 1, .dt = BF16, .b = 2, .h = 4,
      .hk = 2, .sq = 2, .d = 320, .s_cache = 70, .causal = 1, .hopper_row = "fwd_sm90_bf16_hd384");
  ADD(.name = "small f32 paged append rotary (simt)", .on = ON_BOTH, .small = 1, .dt = F32, .b = 2,
      .h = 4, .hk = 1, .sq = 2, .snew = 2, .d = 64, .s_cache = 100, .page = 16, .rotary = 2,
      .rotary_dim = 64);

  /* ---- the CPU backend's layouts in every dtype (f32 too), s_q 1 / 2 / 7 / 64 */
  for (int k = 0; k < 4; ++k) {
    const sdpa_dtype dt = dts[k % 3];
    ADD(.name = "contiguous + batch_idx + append + rotary interleaved", .on = ON_CPU, .dt = dt,
        .b = 3, .h = 4, .hk = 2, .sq = sqs[k], .snew = sqs[k], .d = 64, .s_cache = 300,
        .batch_idx = 1, .rotary = 1, .rotary_dim = 32, .causal = 1, .zero_seqlen = 1);
    /* paged, page 16, shuffled block table, half-split rotary over all of d */
    ADD(.name = "paged 16 + append + rotary half", .on = ON_CPU, .dt = dt, .b = 3, .h = 8, .hk = 2,
        .sq = sqs[k], .snew = sqs[k], .d = 64, .s_cache = 400, .page = 16, .rotary = 2,
        .rotary_dim = 64, .causal = k % 2, .zero_seqlen = k == 1);
    ADD(.name = "paged 256", .on = ON_CPU, .dt = dt, .b = 2, .h = 4, .hk = 4, .sq = sqs[k],
        .d = 32, .s_cache = 700, .page = 256, .zero_seqlen = k == 2);
  }
  ADD(.name = "contiguous, no append, d != d_v", .on = ON_CPU, .dt = BF16, .b = 2, .h = 8, .hk = 1,
      .sq = 3, .d = 80, .dv = 48, .s_cache = 500);
  ADD(.name = "append s_new < s_q, gqa 8", .on = ON_CPU, .dt = F16, .b = 2, .h = 8, .hk = 1,
      .sq = 7, .snew = 2, .d = 128, .s_cache = 300, .page = 16, .causal = 1);
  ADD(.name = "append into empty caches", .on = ON_CPU, .dt = F32, .b = 2, .h = 2, .hk = 1,
      .sq = 5, .snew = 5, .d = 16, .s_cache = 64, .zero_seqlen = 1, .rotary = 1, .rotary_dim = 8);
  /* split-KV: every split count vs unsplit, with append (re-applied each run) */
  ADD(.name = "decode splits, paged 16 + append + rotary", .on = ON_CPU, .dt = F32, .b = 2, .h = 8,
      .hk = 2, .sq = 1, .snew = 1, .d = 64, .s_cache = 2000, .page = 16, .rotary = 2,
      .rotary_dim = 32, .splits = 1, .sweep = 1);
  ADD(.name = "decode splits, contiguous bf16", .on = ON_CPU, .dt = BF16, .b = 1, .h = 4, .hk = 4,
      .sq = 2, .d = 128, .s_cache = 1500, .batch_idx = 1, .causal = 1, .splits = 1, .sweep = 1);
  ADD(.name = "decode auto split", .on = ON_CPU, .dt = F16, .b = 1, .h = 2, .hk = 1, .sq = 1,
      .snew = 1, .d = 64, .s_cache = 4000, .page = 256);
  /* cache_leftpad: keys from each sequence's first row; rotary positions stay
   * cache rows; q rotated per row when windowed, at cache_seqlens when not */
  ADD(.name = "leftpad + append + rotary, unmasked", .on = ON_CPU, .dt = F16, .b = 3, .h = 4,
      .hk = 2, .sq = 7, .snew = 7, .d = 64, .s_cache = 300, .leftpad = 1, .rotary = 2,
      .rotary_dim = 32, .zero_seqlen = 1);
  ADD(.name = "leftpad + batch_idx + window + rotary", .on = ON_CPU, .dt = BF16, .b = 3, .h = 4,
      .hk = 4, .sq = 7, .snew = 3, .d = 59, .s_cache = 300, .leftpad = 1, .batch_idx = 1,
      .window = 1, .wl = 5, .wr = 2, .rotary = 1, .rotary_dim = 32);
  ADD(.name = "leftpad splits, causal", .on = ON_CPU, .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 3,
      .snew = 1, .d = 64, .s_cache = 1200, .leftpad = 1, .causal = 1, .splits = 1, .sweep = 1);

  /* ---- which row a paged bf16 d 128 cache gets */
  ADD(.name = "explain", .on = ON_CUDA, .kind = DEC_EXPLAIN, .dt = BF16, .b = 2, .h = 32, .hk = 8,
      .sq = 1, .snew = 1, .d = 128, .s_cache = 512, .page = 16,
      .explain_row = "decode_sm80_bf16_hd128");

  /* ---- the decode rows' layouts, f16 and bf16, s_q 1 / 2 / 7 / 64 */
  for (int k = 0; k < 8; ++k) {
    const sdpa_dtype dt = dts2[k % 2];
    const int64_t sq = sqs[k % 4];
    ADD(.name = "contiguous + batch_idx + append + rotary interleaved", .on = ON_BOTH, .dt = dt,
        .b = 3, .h = 8, .hk = 2, .sq = sq, .snew = sq, .d = 128, .s_cache = 700, .batch_idx = 1,
        .rotary = 1, .rotary_dim = 64, .causal = 1, .zero_seqlen = 1);
    ADD(.name = "paged 16 + append + rotary half", .on = ON_BOTH, .dt = dt, .b = 3, .h = 8,
        .hk = 2, .sq = sq, .snew = k < 4 ? sq : 3, .d = 64, .s_cache = 400, .page = 16,
        .rotary = 2, .rotary_dim = 64, .causal = k % 2, .zero_seqlen = k == 1);
    ADD(.name = "paged 256 no append", .on = ON_BOTH, .dt = dt, .b = 2, .h = 4, .hk = 4, .sq = sq,
        .d = 256, .s_cache = 700, .page = 256, .zero_seqlen = k == 2, .causal = k >= 4);
  }
  /* head-dim buckets, padded inside them, GQA / MQA */
  {
    const int64_t hds[6] = {32, 40, 64, 72, 128, 200};
    for (int k = 0; k < 12; ++k)
      ADD(.name = "head dim", .on = ON_BOTH, .dt = dts2[k / 6], .b = 2, .h = 8,
          .hk = k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 8, .sq = 1 + k % 3, .snew = 1, .d = hds[k % 6],
          .s_cache = 333, .page = k % 2 ? 16 : 0);
  }
  /* d % 8 != 0 in 16-byte aligned rows (NaN in the padding): a part 16-byte
   * chunk at each row's end, zero past d (hd128: d 100 in 13 of 16 chunks;
   * hd64: d 36 in 5 of 8, d 60 in 8 of 8) */
  ADD(.name = "padded rows paged 16 + append + rotary", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8,
      .hk = 2, .sq = 1, .snew = 2, .d = 100, .s_cache = 500, .padded = 1, .page = 16, .rotary = 2,
      .rotary_dim = 64, .splits = 3);
  ADD(.name = "padded rows contiguous causal", .on = ON_BOTH, .dt = F16, .b = 3, .h = 4, .hk = 2,
      .sq = 2, .snew = 2, .d = 36, .s_cache = 300, .padded = 1, .causal = 1);
  ADD(.name = "padded rows dense split-KV", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 4, .hk = 4,
      .sq = 3, .d = 60, .s_cache = 200, .padded = 1, .dense = 1, .splits = 4);
  /* MLA decoding (d_qk 576, d_v 512, one kv head, v k's first 512 columns):
   * 128 heads in two blocks of 64, fewer heads in one block of padding rows,
   * pages of 64 / 32 / 16 (a copy box a page piece), contiguous with
   * cache_batch_idx and leftpad, s_q 2 causal, GQA 2, a window, d 520 /
   * d_v 496 (columns past them zeros), dense k */
  ADD(.name = "MLA paged 64, 128 heads", .on = ON_BOTH, .dt = BF16, .b = 3, .h = 128, .hk = 1,
      .sq = 1, .d = 576, .dv = 512, .s_cache = 700, .page = 64, .latent = 1, .zero_seqlen = 1,
      .hopper_row = "decode_sm90_bf16_hd576_dv512");
  ADD(.name = "MLA paged 64, graph + workspace, 4 splits", .on = ON_CUDA, .kind = DEC_GRAPH_WS,
      .dt = BF16, .b = 2, .h = 128, .hk = 1, .sq = 1, .d = 576, .dv = 512, .s_cache = 900,
      .page = 64, .latent = 1, .splits = 4, .hopper_row = "decode_sm90_bf16_hd576_dv512");
  ADD(.name = "MLA contiguous batch_idx leftpad, 16 heads", .on = ON_BOTH, .dt = F16, .b = 2,
      .h = 16, .hk = 1, .sq = 1, .d = 576, .dv = 512, .s_cache = 1500, .batch_idx = 1,
      .leftpad = 1, .latent = 1, .hopper_row = "decode_sm90_f16_hd576_dv512");
  ADD(.name = "MLA paged 16, s_q 2 causal, every split count", .on = ON_BOTH, .dt = BF16, .b = 2,
      .h = 32, .hk = 1, .sq = 2, .d = 576, .dv = 512, .s_cache = 600, .page = 16, .latent = 1,
      .causal = 1, .splits = 1, .sweep = 1, .hopper_row = "decode_sm90_bf16_hd576_dv512");
  ADD(.name = "MLA paged 32, GQA 2, window", .on = ON_BOTH, .dt = F16, .b = 2, .h = 64, .hk = 2,
      .sq = 3, .d = 576, .dv = 512, .s_cache = 500, .page = 32, .latent = 1, .window = 1,
      .wl = 150, .wr = 0, .hopper_row = "decode_sm90_f16_hd576_dv512");
  ADD(.name = "MLA d 520 / d_v 496, 3 splits", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 24,
      .hk = 1, .sq = 1, .d = 520, .dv = 496, .s_cache = 400, .page = 64, .latent = 1,
      .splits = 3, .hopper_row = "decode_sm90_bf16_hd576_dv512");
  ADD(.name = "MLA dense k, s_q 4 causal", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 16, .hk = 1,
      .sq = 4, .d = 576, .dv = 512, .s_cache = 300, .dense = 1, .latent = 1, .causal = 1,
      .hopper_row = "decode_sm90_bf16_hd576_dv512");
  /* a negative scale (the scores take it before the softmax: the row max
   * is then the right end) */
  ADD(.name = "MLA negative scale", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 16, .hk = 1, .sq = 1,
      .d = 576, .dv = 512, .s_cache = 200, .page = 64, .latent = 1, .scale = -0.05f,
      .hopper_row = "decode_sm90_bf16_hd576_dv512");
  /* a separate v cannot share k's tiles: the latent row refuses it, the
   * split-O row with its own V tiles runs it */
  ADD(.name = "MLA 576 / 512, separate v", .on = ON_CUDA, .kind = DEC_EXPLAIN, .dt = BF16, .b = 2,
      .h = 16, .hk = 1, .sq = 1, .d = 576, .dv = 512, .s_cache = 300, .page = 64,
      .explain_row = "fwd_sm90_bf16_hd576_dv512");
  ADD(.name = "MLA 576 / 512, separate v, paged 64, 128 heads", .on = ON_BOTH, .dt = F16, .b = 2,
      .h = 128, .hk = 1, .sq = 1, .d = 576, .dv = 512, .s_cache = 500, .page = 64,
      .hopper_row = "fwd_sm90_f16_hd576_dv512");
  /* d 257 to 512 (the split-O rows: key tiles of 32, K's and V's boxes):
   * pages of 16 (two boxes a tile), contiguous with leftpad, GQA 8 at s_q 3
   * causal, d 320 / d_v 256 (blocks past them never copied), forced splits,
   * every split count */
  ADD(.name = "d 512 paged 16, GQA 8, s_q 3 causal", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 16,
      .hk = 2, .sq = 3, .d = 512, .s_cache = 400, .page = 16, .causal = 1,
      .hopper_row = "fwd_sm90_bf16_hd512");
  ADD(.name = "d 320 / d_v 256 contiguous leftpad, 3 splits", .on = ON_BOTH, .dt = F16, .b = 3,
      .h = 8, .hk = 1, .sq = 1, .d = 320, .dv = 256, .s_cache = 700, .leftpad = 1, .splits = 3,
      .hopper_row = "fwd_sm90_f16_hd384");
  ADD(.name = "d 384 paged 32, window, every split count", .on = ON_BOTH, .dt = BF16, .b = 2,
      .h = 4, .hk = 4, .sq = 2, .d = 384, .s_cache = 300, .page = 32, .window = 1, .wl = 90,
      .wr = 0, .splits = 1, .sweep = 1, .hopper_row = "fwd_sm90_bf16_hd384");
  ADD(.name = "d 448 / d_v 320 dense, s_q 5 causal", .on = ON_BOTH, .dt = F16, .b = 2, .h = 6,
      .hk = 3, .sq = 5, .d = 448, .dv = 320, .s_cache = 260, .dense = 1, .causal = 1,
      .hopper_row = "fwd_sm90_f16_hd512");
  /* score modifiers */
  ADD(.name = "window", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8, .hk = 2, .sq = 7, .snew = 2,
      .d = 128, .s_cache = 900, .window = 1, .wl = 100, .wr = 3, .page = 16);
  ADD(.name = "alibi [h] + softcap", .on = ON_BOTH, .dt = F16, .b = 2, .h = 8, .hk = 2, .sq = 2,
      .snew = 1, .d = 128, .s_cache = 600, .alibi = 1, .softcap = 20.0f, .causal = 1);
  ADD(.name = "alibi [b, h] + window + GQA 8", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 16, .hk = 2,
      .sq = 1, .snew = 1, .d = 64, .s_cache = 800, .alibi = 2, .window = 1, .wl = 60, .wr = 0,
      .page = 256);
  ADD(.name = "chunked prefill 64 causal", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 32, .hk = 8,
      .sq = 64, .snew = 64, .d = 128, .s_cache = 2000, .causal = 1, .page = 16);
  ADD(.name = "empty caches, no append", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 1,
      .sq = 3, .d = 64, .s_cache = 64, .zero_seqlen = 1);
  /* short contiguous caches: sequences that end inside a warp's first tiles
   * or before them, a capacity (70) that is not a whole number of tiles;
   * with append, cache_batch_idx, part chunks (d 100) and a forced split */
  for (int k = 0; k < 4; ++k) {
    const int64_t hd[4] = {128, 64, 256, 100};
    ADD(.name = "short contiguous caches", .on = ON_BOTH, .dt = dts2[k % 2], .b = 9, .h = 8,
        .hk = 2, .sq = 1 + k % 2, .snew = k % 3, .d = hd[k], .s_cache = k < 2 ? 70 : 150,
        .padded = hd[k] == 100, .batch_idx = k % 2, .zero_seqlen = 1, .causal = k >= 2,
        .splits = k == 3 ? 2 : 0);
  }
  /* cache_leftpad (rows before it NaN): the decode rows, with a window, a
   * forced split and the lean / wide twins' shapes */
  for (int k = 0; k < 4; ++k)
    ADD(.name = "leftpad", .on = ON_BOTH, .dt = dts2[k % 2], .b = 3, .h = 8, .hk = 2, .sq = sqs[k],
        .snew = k % 2 ? sqs[k] : 0, .d = k < 2 ? 128 : 64, .s_cache = 500, .leftpad = 1,
        .batch_idx = k == 1, .rotary = k % 2 ? 2 : 0, .rotary_dim = k % 2 ? 64 : 0,
        .causal = k == 3, .window = k == 2, .wl = 40, .wr = -1, .splits = k == 0 ? 3 : 0,
        .zero_seqlen = 1);
  /* head dims off 16-byte rows, and f32 caches, with append / rotary / leftpad:
   * the SIMT row after kv_append.cu (q rotated into its workspace); each
   * also captured, with the queried workspace */
  {
    const int64_t odd[3] = {59, 100, 161};
    for (int k = 0; k < 3; ++k)
      for (int g = 0; g < 2; ++g)
        ADD(.name = "unaligned rows append + rotary (simt)", .on = ON_BOTH,
            .kind = g ? DEC_GRAPH_WS : DEC_CHECK, .dt = dts2[k % 2], .b = 2, .h = 6, .hk = 2,
            .sq = 1 + 3 * k, .snew = 2, .d = odd[k], .s_cache = 300, .rotary = 1 + k % 2,
            .rotary_dim = 32, .leftpad = k != 1, .page = k == 1 ? 16 : 0, .causal = k == 2);
  }
  ADD(.name = "f32 contiguous append + rotary (simt)", .on = ON_BOTH, .dt = F32, .b = 2, .h = 4,
      .hk = 2, .sq = 7, .snew = 7, .d = 128, .s_cache = 200, .rotary = 2, .rotary_dim = 128,
      .leftpad = 1, .window = 1, .wl = 3, .wr = -1);
  /* groups and kv heads that are not powers of two: the kernel divides its
   * block index and query rows by host-computed multipliers (sdpa_divmod),
   * which are plain shifts for powers of two */
  ADD(.name = "GQA 12/4 (group 3) paged 16 + append", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 12,
      .hk = 4, .sq = 2, .snew = 1, .d = 128, .s_cache = 700, .page = 16, .causal = 1, .splits = 5);
  ADD(.name = "GQA 15/3 (group 5) s_q 7 contiguous", .on = ON_BOTH, .dt = F16, .b = 3, .h = 15,
      .hk = 3, .sq = 7, .d = 64, .s_cache = 500, .causal = 1, .splits = 3);
  /* split counts */
  ADD(.name = "h 6 / h_k 6 split sweep", .on = ON_BOTH, .dt = BF16, .b = 1, .h = 6, .hk = 6,
      .sq = 1, .d = 128, .s_cache = 1300, .sweep = 1);
  ADD(.name = "split sweep paged 16 + append + rotary", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8,
      .hk = 2, .sq = 1, .snew = 1, .d = 128, .s_cache = 3000, .page = 16, .rotary = 2,
      .rotary_dim = 128, .sweep = 1);
  ADD(.name = "split sweep contiguous causal s_q 7", .on = ON_BOTH, .dt = F16, .b = 2, .h = 4,
      .hk = 4, .sq = 7, .d = 64, .s_cache = 2000, .batch_idx = 1, .causal = 1, .sweep = 1);
  ADD(.name = "auto split long", .on = ON_BOTH, .cuda_shape = 1, .dt = BF16, .b = 1, .h = 32, .hk = 8, .sq = 1,
      .snew = 1, .d = 128, .s_cache = 20000, .page = 256);
  /* the d 128 rows' wide twin (decode_plan.cu: few groups, a plan capped
   * by the keys): the benchmark's b 1 s_k 4k, contiguous and paged with
   * append and rotary, s_q 1 and 2 */
  for (int k = 0; k < 2; ++k)
    ADD(.name = "wide twin", .on = ON_BOTH, .cuda_shape = 1, .dt = dts2[k], .b = 1, .h = 32, .hk = 8, .sq = 1 + k,
        .snew = k, .d = 128, .s_cache = 4096, .page = k ? 16 : 0, .rotary = k,
        .rotary_dim = k ? 64 : 0, .causal = k);
  /* the d 128 rows' lean twin (decode_body.cuh: calls on pages of 16 where
   * three of its blocks fit an SM) at the row's split count (the row's grid
   * in one round of lean blocks: b 8 s_k 4k, 4 splits on 132 SMs), with
   * append and rotary; then past one round, at its own planner's count (b 50,
   * 8/8 heads, s_k 2048: the row's 3, lean 4 on 132 SMs) */
  for (int k = 0; k < 2; ++k)
    ADD(.name = "lean twin", .on = ON_BOTH, .cuda_shape = 1, .dt = dts2[k], .b = 8, .h = 32, .hk = 8, .sq = 1 + k,
        .snew = 1, .d = 128, .s_cache = 4096, .page = 16, .rotary = 1 + k, .rotary_dim = 128,
        .causal = k);
  ADD(.name = "lean twin own splits", .on = ON_BOTH, .cuda_shape = 1, .dt = BF16, .b = 50, .h = 8, .hk = 8, .sq = 1,
      .snew = 1, .d = 128, .s_cache = 2048, .page = 16);
  /* a forced count past one round (the caller's count, not the row's plan),
   * above SDPA_DECODE_MAX_FORCED (clamped to 256: most splits empty) */
  ADD(.name = "lean twin own splits", .on = ON_BOTH, .cuda_shape = 1, .dt = BF16, .b = 50, .h = 8, .hk = 8, .sq = 1,
      .snew = 1, .d = 128, .s_cache = 2048, .page = 16, .splits = 300);
  /* dense problems with forced splits */
  ADD(.name = "dense split-KV", .on = ON_BOTH, .dt = BF16, .b = 2, .h = 8, .hk = 2, .sq = 33,
      .d = 128, .s_cache = 500, .dense = 1, .causal = 1, .splits = 5);
  ADD(.name = "dense split-KV softcap", .on = ON_BOTH, .dt = F16, .b = 1, .h = 4, .hk = 1, .sq = 1,
      .d = 256, .s_cache = 1111, .dense = 1, .softcap = 30.0f, .splits = 7);
  /* paged == contiguous, bit for bit: the same tiles in the same order and
   * splits (on sm_90 a call on pages of 16 runs the row's lean twin, the
   * contiguous one the row: the same arithmetic) */
  for (int k = 0; k < 2; ++k) {
    ADD(.name = "paged == contiguous", .on = ON_CUDA, .kind = DEC_PAGED_EQ, .dt = dts2[k], .b = 3,
        .h = 8, .hk = 2, .sq = 1, .d = 128, .s_cache = 1000, .page = 16, .causal = 1, .splits = 4);
    ADD(.name = "paged == contiguous", .on = ON_CUDA, .kind = DEC_PAGED_EQ, .dt = dts2[k], .b = 3,
        .h = 8, .hk = 2, .sq = 7, .d = 128, .s_cache = 1000, .page = 256, .causal = 1, .splits = 1);
  }
  /* CUDA graphs: stream-ordered workspace, and a caller workspace */
  ADD(.name = "graph", .on = ON_BOTH, .kind = DEC_GRAPH, .dt = BF16, .b = 2, .h = 8, .hk = 2,
      .sq = 1, .snew = 1, .d = 128, .s_cache = 1500, .page = 16, .rotary = 1, .rotary_dim = 32,
      .splits = 4);
  ADD(.name = "graph", .on = ON_BOTH, .kind = DEC_GRAPH_WS, .dt = BF16, .b = 2, .h = 8, .hk = 2,
      .sq = 1, .snew = 1, .d = 128, .s_cache = 1500, .page = 16, .rotary = 1, .rotary_dim = 32,
      .splits = 4);
  /* no workspace needed: a pointer with workspace_size = 0 */
  ADD(.name = "graph", .on = ON_BOTH, .kind = DEC_GRAPH_WS, .dt = BF16, .b = 2, .h = 8, .hk = 2,
      .sq = 1, .snew = 1, .d = 128, .s_cache = 1500, .page = 16, .rotary = 1, .rotary_dim = 32,
      .splits = 1);
  /* the twins' workspaces (the planner's split counts): queried, passed, captured */
  ADD(.name = "graph wide twin", .on = ON_BOTH, .cuda_shape = 1, .kind = DEC_GRAPH_WS, .dt = BF16, .b = 1, .h = 32,
      .hk = 8, .sq = 1, .d = 128, .s_cache = 4096);
  ADD(.name = "graph lean twin", .on = ON_BOTH, .cuda_shape = 1, .kind = DEC_GRAPH_WS, .dt = F16, .b = 8, .h = 32,
      .hk = 8, .sq = 1, .snew = 1, .d = 128, .s_cache = 4096, .page = 16);
  ADD(.name = "graph lean twin own splits", .on = ON_BOTH, .cuda_shape = 1, .kind = DEC_GRAPH_WS, .dt = F16,
      .b = 50, .h = 8, .hk = 8, .sq = 1, .d = 128, .s_cache = 2048, .page = 16);
  /* merge_states: parts with empty (+inf) entries, one row all empty; d % 4
   * != 0 (parts and out rows not 4-element aligned: the element paths) */
  {
    const sdpa_dtype pd[5] = {F32, BF16, F16, F32, F32}, od[5] = {F32, F16, BF16, F32, BF16};
    const int64_t mn[5] = {4, 1, 9, 6, 33}, mt[5] = {7, 5, 3, 3, 2}, mh[5] = {3, 2, 8, 5, 3};
    const int64_t md[5] = {64, 300, 128, 30, 30};
    for (int k = 0; k < 5; ++k)
      ADD(.name = "merge_states", .on = ON_CUDA, .kind = DEC_MERGE, .dt = pd[k],
          .merge_out = od[k], .b = mn[k], .sq = mt[k], .h = mh[k], .d = md[k]);
  }
}

/* ---- one case's problem on the host ------------------------------------------------------ */

typedef struct dec_prob {
  case_bufs bufs;
  sdpa_fwd_desc desc; /* host pointers, SDPA_DEVICE_CPU */
} dec_prob;

static sdpa_tensor alloc_rows(const dec_case *c, dec_prob *f, const int64_t *shape, int is_out) {
  return case_alloc(&f->bufs, c->dt, 4, shape, c->padded, 0, is_out);
}

static sdpa_tensor alloc_side(dec_prob *f, sdpa_dtype dt, int rank, const int64_t *shape,
                              int is_out) {
  return case_alloc(&f->bufs, dt, rank, shape, 0, 0, is_out);
}

/* v of the given shape, or for a latent case k's first dv columns (a view
 * with k's strides). */
static sdpa_tensor alloc_v(const dec_case *c, dec_prob *f, const sdpa_tensor *k,
                           const int64_t *shape) {
  if (!c->latent) return alloc_rows(c, f, shape, 0);
  sdpa_tensor v = *k;
  v.shape[3] = c->dv;
  return v;
}

/* A shuffled 0 .. n-1, its first m entries into dst. */
static void perm_into(int32_t *dst, int64_t m, int64_t n, test_rng *rng) {
  int32_t *p = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  for (int64_t k = 0; k < n; ++k) p[k] = (int32_t)k;
  for (int64_t k = n - 1; k > 0; --k) {
    const int64_t r = test_rng_int(rng, 0, k);
    const int32_t t = p[k];
    p[k] = p[r];
    p[r] = t;
  }
  memcpy(dst, p, sizeof(int32_t) * (size_t)m);
  free(p);
}

/* The cache's geometry: its outer index of sequence b's row j, and that row
 * inside it (a block of page rows, or a sequence of s_cache rows). */
static void cache_pos(const dec_case *c, const sdpa_fwd_desc *d, int64_t b, int64_t j,
                      int64_t *outer, int64_t *row) {
  if (c->page > 0 && d->block_table.data) {
    const int64_t maxb = d->block_table.shape[1];
    *outer = ((const int32_t *)d->block_table.data)[b * maxb + j / c->page];
    *row = j % c->page;
  } else {
    *outer = d->cache_batch_idx.data ? ((const int32_t *)d->cache_batch_idx.data)[b] : b;
    *row = j;
  }
}

/* The logical (row-major) index of element e of head hk in the cache row
 * (outer, row) of t ([outer, rows, h_k, d]). */
static int64_t cache_flat(const sdpa_tensor *t, int64_t outer, int64_t row, int64_t hk,
                          int64_t e) {
  return ((outer * t->shape[1] + row) * t->shape[2] + hk) * t->shape[3] + e;
}

/* Every cache row at or past its sequence's length (before the append,
 * which writes over the first s_new of them), and before its cache_leftpad,
 * NaN in K and V, so a kernel that reads one and weighs it by a zero
 * probability returns NaN instead of passing: 0 * NaN is NaN. */
static void poison_past_ends(const dec_case *c, dec_prob *f) {
  sdpa_fwd_desc *d = &f->desc;
  const int32_t *sl = (const int32_t *)d->cache_seqlens.data;
  const int32_t *lp = c->leftpad ? (const int32_t *)d->cache_leftpad.data : NULL;
  const int64_t rows = c->page > 0 ? d->block_table.shape[1] * c->page : c->s_cache;
  sdpa_tensor *kv[2] = {&d->attn.k, &d->attn.v};
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t j = 0; j < rows; ++j) {
      if (j < sl[b] && !(lp && j < lp[b])) continue;
      int64_t outer, row;
      cache_pos(c, d, b, j, &outer, &row);
      for (int x = 0; x < 2; ++x)
        for (int64_t hk = 0; hk < c->hk; ++hk)
          for (int64_t e = 0; e < kv[x]->shape[3]; ++e)
            test_set(kv[x], cache_flat(kv[x], outer, row, hk, e), NAN);
    }
}

/* Fresh random inputs for case c. */
static void build(const dec_case *c, dec_prob *f, const case_env *env) {
  test_rng *rng = env->rng;
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->desc);
  sdpa_fwd_desc *d = &f->desc;
  sdpa_attn *a = &d->attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = env->primary == ON_CUDA ? 4 : 2;
  a->causal = c->causal;
  if (c->window && !c->causal) a->window_left = c->wl, a->window_right = c->wr;
  a->softcap = c->softcap;
  a->scale = c->scale;
  const int64_t sq[4] = {c->b, c->sq, c->h, c->d}, so[4] = {c->b, c->sq, c->h, c->dv};
  const int64_t sl[3] = {c->b, c->h, c->sq}, sb[1] = {c->b};
  a->q = alloc_rows(c, f, sq, 0);
  d->out = alloc_rows(c, f, so, 1);
  d->lse = alloc_side(f, F32, 3, sl, 1);
  test_fill_normal(&a->q, rng, 1.0);
  const int page = c->kind == DEC_PAGED_EQ ? 0 : (int)c->page; /* PAGED_EQ: contiguous first */
  if (c->dense) {
    const int64_t sk[4] = {c->b, c->s_cache, c->hk, c->d}, sv[4] = {c->b, c->s_cache, c->hk, c->dv};
    a->k = alloc_rows(c, f, sk, 0);
    a->v = alloc_v(c, f, &a->k, sv);
  } else {
    d->cache_seqlens = alloc_side(f, SDPA_DTYPE_I32, 1, sb, 0);
    int32_t *sl32 = (int32_t *)d->cache_seqlens.data;
    const int64_t room = c->snew > c->sq ? c->snew : c->sq;
    for (int64_t b = 0; b < c->b; ++b)
      sl32[b] = (int32_t)(c->zero_seqlen && b == 0 ? 0 : test_rng_int(rng, 0, c->s_cache - room));
    if (page > 0) {
      const int64_t maxb = (c->s_cache + page - 1) / page, nblocks = c->b * maxb + 3;
      const int64_t sk[4] = {nblocks, page, c->hk, c->d}, sv[4] = {nblocks, page, c->hk, c->dv};
      const int64_t st[2] = {c->b, maxb};
      a->k = alloc_rows(c, f, sk, 0);
      a->v = alloc_v(c, f, &a->k, sv);
      d->block_table = alloc_side(f, SDPA_DTYPE_I32, 2, st, 0);
      perm_into((int32_t *)d->block_table.data, c->b * maxb, nblocks, rng);
    } else {
      const int64_t bc = c->b + (c->batch_idx ? 2 : 0);
      const int64_t sk[4] = {bc, c->s_cache, c->hk, c->d}, sv[4] = {bc, c->s_cache, c->hk, c->dv};
      a->k = alloc_rows(c, f, sk, 0);
      a->v = alloc_v(c, f, &a->k, sv);
      if (c->batch_idx) {
        d->cache_batch_idx = alloc_side(f, SDPA_DTYPE_I32, 1, sb, 0);
        perm_into((int32_t *)d->cache_batch_idx.data, c->b, bc, rng);
      }
    }
    if (c->leftpad) {
      d->cache_leftpad = alloc_side(f, SDPA_DTYPE_I32, 1, sb, 0);
      for (int64_t b = 0; b < c->b; ++b)
        ((int32_t *)d->cache_leftpad.data)[b] = (int32_t)test_rng_int(rng, 0, sl32[b]);
    }
  }
  test_fill_normal(&a->k, rng, 1.0);
  if (!c->latent) test_fill_normal(&a->v, rng, 1.0);
  if (!c->dense) poison_past_ends(c, f);
  if (c->snew > 0) {
    const int64_t sk[4] = {c->b, c->snew, c->hk, c->d}, sv[4] = {c->b, c->snew, c->hk, c->dv};
    d->k_new = alloc_rows(c, f, sk, 0);
    d->v_new = alloc_rows(c, f, sv, 0);
    test_fill_normal(&d->k_new, rng, 1.0);
    test_fill_normal(&d->v_new, rng, 1.0);
  }
  if (c->rotary) {
    const int64_t half = c->rotary_dim / 2, sr[2] = {c->s_cache, half};
    d->rotary_cos = alloc_side(f, F32, 2, sr, 0);
    d->rotary_sin = alloc_side(f, F32, 2, sr, 0);
    for (int64_t pos = 0; pos < c->s_cache; ++pos)
      for (int64_t t = 0; t < half; ++t) {
        const double ang = (double)pos * pow(10000.0, -2.0 * (double)t / (double)c->rotary_dim);
        test_set(&d->rotary_cos, pos * half + t, cos(ang));
        test_set(&d->rotary_sin, pos * half + t, sin(ang));
      }
    d->rotary_interleaved = c->rotary == 1;
  }
  if (c->alibi) {
    const int64_t s1[1] = {c->h}, s2[2] = {c->b, c->h};
    a->alibi_slopes = c->alibi == 1 ? alloc_side(f, F32, 1, s1, 0) : alloc_side(f, F32, 2, s2, 0);
    test_fill_uniform(&a->alibi_slopes, rng, 0.0, 0.5);
  }
  d->num_splits = c->splits;
}

/* ---- checks ------------------------------------------------------------------------------ */

/* The padding of a tensor of rows padded to 16 bytes (elements d .. of every
 * row, NaN before the call) still NaN after it: nothing wrote a whole 16-byte
 * chunk past the head dim. Nothing to check without padding. */
static void check_padding(const char *what, const sdpa_tensor *t) {
  const int r = t->rank - 1;
  const int64_t d = t->shape[r], row = r > 0 ? t->stride[r - 1] : d;
  if (row <= d || test_numel(t) == 0) return;
  sdpa_tensor pad = *t; /* the padding columns as a tensor of their own */
  pad.shape[r] = row - d;
  pad.data = (char *)t->data + d * (int64_t)sdpa_dtype_size(t->dtype);
  int64_t written = 0;
  for (int64_t e = 0; e < test_numel(&pad); ++e) written += !isnan(test_get(&pad, e));
  TEST_EXPECT(written == 0, "%s: %lld padding elements past d = %lld were written", what,
              (long long)written, (long long)d);
}

/* A view of t over a copy of its buffer (base: the copy of the buffer t
 * lives in, orig: that buffer's start). */
static sdpa_tensor view_in(const sdpa_tensor *t, const void *orig, void *base) {
  sdpa_tensor v = *t;
  v.data = (char *)base + ((const char *)t->data - (const char *)orig);
  return v;
}

/* Elements (of es bytes) where buffers x and y of n bytes differ. */
static int64_t count_diff(const char *x, const char *y, size_t n, size_t es) {
  if (memcmp(x, y, n) == 0) return 0;
  int64_t m = 0;
  for (size_t o = 0; o + es <= n; o += es) m += memcmp(x + o, y + o, es) != 0;
  return m ? m : 1;
}

/* The cache after the append: rows seqlens[b] + i hold k_new (rotated) and
 * v_new (read by strides: any layout); every other byte of the cache buffers
 * (their padding too) is what it was (k0, v0: copies of the buffers before
 * the call). */
static void check_cache(const dec_case *c, const sdpa_fwd_desc *d, const case_bufs *bufs,
                        const void *k0, const void *v0, const char *label) {
  const sdpa_tensor *kc = &d->attn.k, *vc = &d->attn.v;
  const int ik = case_find(bufs, kc->data), iv = case_find(bufs, vc->data);
  const size_t es = sdpa_dtype_size(c->dt);
  /* the buffers as they should be: the copies before the call, with the
   * appended elements as the call left them (checked one by one below) */
  char *want_k = malloc(bufs->bytes[ik] ? bufs->bytes[ik] : 1);
  char *want_v = malloc(bufs->bytes[iv] ? bufs->bytes[iv] : 1);
  memcpy(want_k, k0, bufs->bytes[ik]);
  memcpy(want_v, v0, bufs->bytes[iv]);
  const char *base_k = (const char *)bufs->t[ik].data, *base_v = (const char *)bufs->t[iv].data;
  const int32_t *sl = (const int32_t *)d->cache_seqlens.data;
  const double tol = c->dt == F32 ? 1e-6 : c->dt == F16 ? 1e-3 : 8e-3;
  int64_t bad = 0;
  double *x = malloc(sizeof(double) * (size_t)c->d);
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t i = 0; i < c->snew; ++i)
      for (int64_t hk = 0; hk < c->hk; ++hk) {
        const int64_t pos = sl[b] + i, nb = (b * c->snew + i) * c->hk + hk;
        for (int64_t e = 0; e < c->d; ++e) x[e] = test_get(&d->k_new, nb * c->d + e);
        if (c->rotary) {
          const int64_t half = c->rotary_dim / 2;
          for (int64_t t = 0; t < half; ++t) {
            const double co = test_get(&d->rotary_cos, pos * half + t);
            const double si = test_get(&d->rotary_sin, pos * half + t);
            const int64_t ia = c->rotary == 1 ? 2 * t : t, ib = c->rotary == 1 ? 2 * t + 1 : t + half;
            const double x0 = x[ia], x1 = x[ib];
            x[ia] = x0 * co - x1 * si;
            x[ib] = x0 * si + x1 * co;
          }
        }
        int64_t outer, row;
        cache_pos(c, d, b, pos, &outer, &row);
        for (int64_t e = 0; e < c->d; ++e) {
          const int64_t fl = cache_flat(kc, outer, row, hk, e);
          const double g = test_get(kc, fl);
          const char *at = (const char *)kc->data + test_offset(kc, fl) * (int64_t)es;
          memcpy(want_k + (at - base_k), at, es);
          if (!(fabs(g - x[e]) <= tol * (1.0 + fabs(x[e]))) && bad++ < 10)
            printf("  %s cache k b%lld pos%lld hk%lld e%lld: got %g want %g\n", label,
                   (long long)b, (long long)pos, (long long)hk, (long long)e, g, x[e]);
        }
        for (int64_t e = 0; e < c->dv; ++e) {
          const int64_t fl = cache_flat(vc, outer, row, hk, e);
          const double g = test_get(vc, fl), w = test_get(&d->v_new, nb * c->dv + e);
          const char *at = (const char *)vc->data + test_offset(vc, fl) * (int64_t)es;
          memcpy(want_v + (at - base_v), at, es);
          if (g != w && bad++ < 10)
            printf("  %s cache v b%lld pos%lld: got %g want %g\n", label, (long long)b,
                   (long long)pos, g, w);
        }
      }
  const int64_t changed = count_diff(want_k, base_k, bufs->bytes[ik], es) +
                          count_diff(want_v, base_v, bufs->bytes[iv], es);
  TEST_EXPECT(bad == 0 && changed == 0,
              "%s: cache after append: %lld appended elements wrong, %lld others changed", label,
              (long long)bad, (long long)changed);
  free(x);
  free(want_k);
  free(want_v);
}

/* ---- the runner ---------------------------------------------------------------------------- */

static const char *const kind_names[6] = {"check", "graph", "graph+ws", "paged==contiguous",
                                          "explain", "merge"};

/* One line per case: what it is (--list; the before/after case counts). */
static void list_case(const dec_case *c) {
  if (c->kind == DEC_MERGE) {
    printf("%sCASE merge_states|parts %s out %s|n%lld t%lld h%lld d%lld|merge\n",
           c->small ? "small " : "", sdpa_dtype_string(c->dt), sdpa_dtype_string(c->merge_out),
           (long long)c->b, (long long)c->sq, (long long)c->h, (long long)c->d);
    return;
  }
  const int win = c->window && !c->causal;
  printf("%sCASE %s|%s|b%lld h%lld/%lld sq%lld new%lld d%lld/%lld|cache%lld page%lld bidx%d "
         "lpad%d zero%d dense%d lat%d pad%d|rot%d/%lld|c%d w%lld,%lld cap%g sc%g al%d|splits%d "
         "sweep%d|%s\n",
         c->small ? "small " : "", c->name, sdpa_dtype_string(c->dt), (long long)c->b,
         (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->snew, (long long)c->d,
         (long long)c->dv, (long long)c->s_cache, (long long)c->page, c->batch_idx, c->leftpad,
         c->zero_seqlen, c->dense, c->latent, c->padded, c->rotary, (long long)(c->rotary ? c->rotary_dim : 0),
         c->causal, (long long)(win ? c->wl : -1), (long long)(win ? c->wr : -1),
         (double)c->softcap, (double)c->scale, c->alibi, c->splits, c->sweep,
         kind_names[c->kind]);
}

/* CPU: every split count 2..16 equal to the call's result within rounding
 * (the append is idempotent: the same rows land at the same places again). */
static void cpu_sweep(const case_env *env, const dec_case *c, const sdpa_fwd_desc *desc) {
  const int64_t n_out = test_numel(&desc->out), n_lse = test_numel(&desc->lse);
  double *o1 = case_doubles(&desc->out), *l1 = case_doubles(&desc->lse);
  sdpa_fwd_desc d = *desc;
  for (int s = 2; s <= 16; ++s) {
    sdpa_tensor out2 = test_alloc(c->dt, 4, desc->out.shape);
    sdpa_tensor lse2 = test_alloc(F32, 3, desc->lse.shape);
    d.out = out2;
    d.lse = lse2;
    d.num_splits = s;
    TEST_EXPECT(env->cpu_fwd(&d) == SDPA_OK, "%s: split %d: %s", c->name, s, sdpa_last_error());
    char what[200];
    snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
    test_check(what, &out2, o1, NULL, c->dt == F32 ? 2e-6 : test_atol(c->dt));
    snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
    test_check(what, &lse2, l1, NULL, test_lse_atol(l1, n_lse));
    test_free(&out2);
    test_free(&lse2);
  }
  (void)n_out;
  free(o1);
  free(l1);
}

/* A byte copy of the buffer tensor t lives in. */
static void *buf_copy(const case_bufs *b, const sdpa_tensor *t, int *idx) {
  *idx = case_find(b, t->data);
  void *p = malloc(b->bytes[*idx] ? b->bytes[*idx] : 1);
  memcpy(p, b->t[*idx].data, b->bytes[*idx]);
  return p;
}

/* DEC_CHECK and the graph kinds: the oracle once, each backend of the case
 * this binary has (each from the same cache), CUDA's out and caches against
 * the CPU backend's. */
static void run_check(const case_env *env, dec_cuda_fn cuda, const dec_case *c, dec_prob *f) {
  sdpa_fwd_desc *d = &f->desc;
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_fwd(d, &p) == SDPA_OK, "%s: validate: %s", c->name,
                   sdpa_last_error()))
    return;
  /* the oracle reads the cache before the append */
  const int64_t n_out = test_numel(&d->out), n_lse = test_numel(&d->lse);
  double *r[2][2]; /* exact / lowp: out, lse */
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
    r[l][1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    ref_fwd(&p, l, r[l][0], r[l][1], NULL);
  }
  int ik, iv;
  void *k0 = buf_copy(&f->bufs, &d->attn.k, &ik), *v0 = buf_copy(&f->bufs, &d->attn.v, &iv);
  const unsigned run = c->on & env->backends & (cuda ? ON_BOTH : ON_CPU);
  const int both = run == ON_BOTH;
  double *cpu_out = NULL;
  void *cpu_k = NULL, *cpu_v = NULL;
  char what[240];
  for (int backend = ON_CPU; backend <= ON_CUDA; backend <<= 1) {
    if (!(run & (unsigned)backend)) continue;
    memcpy(f->bufs.t[ik].data, k0, f->bufs.bytes[ik]); /* every backend from the same cache */
    memcpy(f->bufs.t[iv].data, v0, f->bufs.bytes[iv]);
    case_poison_outputs(&f->bufs);
    int ok;
    if (backend == ON_CPU) {
      const sdpa_status st = env->cpu_fwd(d);
      ok = TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd (cpu) returned %s: %s", c->name,
                       sdpa_status_string(st), sdpa_last_error());
    } else {
      ok = cuda(c, d, &f->bufs);
    }
    if (!ok) continue;
    test_check(case_label(what, sizeof what, c->name, backend, both, "out"), &d->out, r[0][0],
               r[1][0], test_atol(c->dt));
    check_padding(what, &d->out);
    test_check(case_label(what, sizeof what, c->name, backend, both, "lse"), &d->lse, r[0][1],
               r[1][1], test_lse_atol(r[0][1], n_lse));
    if (c->snew > 0)
      check_cache(c, d, &f->bufs, k0, v0, case_label(what, sizeof what, c->name, backend, both, ""));
    check_padding(case_label(what, sizeof what, c->name, backend, both, "k cache"), &d->attn.k);
    if (!c->latent) /* a latent v's rows go on with k's columns */
      check_padding(case_label(what, sizeof what, c->name, backend, both, "v cache"), &d->attn.v);
    if (backend == ON_CPU && both) {
      cpu_out = case_doubles(&d->out);
      cpu_k = buf_copy(&f->bufs, &d->attn.k, &ik);
      cpu_v = buf_copy(&f->bufs, &d->attn.v, &iv);
    } else if (backend == ON_CUDA && cpu_out) {
      /* both within their bound of the oracle, so within twice it of each
       * other; the caches after the call equal bit for bit */
      const double lowp_err = case_max_diff(r[1][0], r[0][0], n_out);
      snprintf(what, sizeof what, "%s out vs CPU backend", c->name);
      test_check(what, &d->out, cpu_out, NULL, 2.0 * (2.0 * lowp_err + test_atol(c->dt)));
      const sdpa_tensor ck = view_in(&d->attn.k, f->bufs.t[ik].data, cpu_k);
      const sdpa_tensor cv = view_in(&d->attn.v, f->bufs.t[iv].data, cpu_v);
      snprintf(what, sizeof what, "%s k cache after the call vs CPU backend", c->name);
      test_check_equal(what, &d->attn.k, &ck);
      snprintf(what, sizeof what, "%s v cache after the call vs CPU backend", c->name);
      test_check_equal(what, &d->attn.v, &cv);
    }
    if (backend == ON_CPU && c->sweep && env->primary == ON_CPU) cpu_sweep(env, c, d);
  }
  free(cpu_out);
  free(cpu_k);
  free(cpu_v);
  free(k0);
  free(v0);
  for (int l = 0; l < 2; ++l)
    for (int k = 0; k < 2; ++k) free(r[l][k]);
}

/* Copies element bytes of src (logical index es) to dst (logical index ed). */
static void copy_elem(sdpa_tensor *dst, int64_t ed, const sdpa_tensor *src, int64_t es_) {
  const size_t es = sdpa_dtype_size(src->dtype);
  memcpy((char *)dst->data + test_offset(dst, ed) * (int64_t)es,
         (const char *)src->data + test_offset(src, es_) * (int64_t)es, es);
}

/* DEC_PAGED_EQ (CUDA): the contiguous cache, then the same rows in shuffled
 * pages of c->page: the outputs equal bit for bit. */
static void run_paged_eq(dec_cuda_fn cuda, const dec_case *c, dec_prob *f, test_rng *rng) {
  sdpa_fwd_desc dc = f->desc, dp = f->desc;
  const int64_t page = c->page, maxb = (c->s_cache + page - 1) / page, nblocks = c->b * maxb + 1;
  const int64_t sk[4] = {nblocks, page, c->hk, c->d}, sv[4] = {nblocks, page, c->hk, c->dv};
  const int64_t st[2] = {c->b, maxb};
  dp.attn.k = alloc_rows(c, f, sk, 0);
  dp.attn.v = alloc_rows(c, f, sv, 0);
  dp.block_table = alloc_side(f, SDPA_DTYPE_I32, 2, st, 0);
  test_fill_normal(&dp.attn.k, rng, 1.0); /* blocks past the sequences: random, never read */
  test_fill_normal(&dp.attn.v, rng, 1.0);
  perm_into((int32_t *)dp.block_table.data, c->b * maxb, nblocks, rng);
  const int32_t *bt = (const int32_t *)dp.block_table.data;
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t j = 0; j < c->s_cache; ++j) {
      const int64_t blk = bt[b * maxb + j / page];
      for (int64_t hk = 0; hk < c->hk; ++hk) {
        for (int64_t e = 0; e < c->d; ++e)
          copy_elem(&dp.attn.k, cache_flat(&dp.attn.k, blk, j % page, hk, e), &dc.attn.k,
                    cache_flat(&dc.attn.k, b, j, hk, e));
        for (int64_t e = 0; e < c->dv; ++e)
          copy_elem(&dp.attn.v, cache_flat(&dp.attn.v, blk, j % page, hk, e), &dc.attn.v,
                    cache_flat(&dc.attn.v, b, j, hk, e));
      }
    }
  char what[160];
  snprintf(what, sizeof what, "paged %lld vs contiguous s_q %lld splits %d", (long long)page,
           (long long)c->sq, c->splits);
  case_poison_outputs(&f->bufs);
  if (!cuda(c, &dc, &f->bufs)) return;
  sdpa_tensor out_c = case_copy(&dc.out);
  case_poison_outputs(&f->bufs);
  if (cuda(c, &dp, &f->bufs)) test_check_equal(what, &dp.out, &out_c);
  test_free(&out_c);
}

/* DEC_MERGE (CUDA): n parts, some empty (+inf), one row all empty; CUDA's
 * merge against the CPU backend's. */
static void run_merge(dec_merge_fn merge, const dec_case *c, test_rng *rng) {
  const sdpa_dtype parts_dt = c->dt, out_dt = c->merge_out;
  const int64_t n = c->b, t = c->sq, h = c->h, dd = c->d;
  const int64_t sp[4] = {n, t, h, dd}, sl[3] = {n, t, h}, so[3] = {t, h, dd}, slo[2] = {t, h};
  case_bufs bufs;
  memset(&bufs, 0, sizeof bufs);
  sdpa_merge_desc m;
  sdpa_merge_init(&m);
  m.device = SDPA_DEVICE_CPU;
  m.out_parts = case_alloc(&bufs, parts_dt, 4, sp, 0, 0, 0);
  m.lse_parts = case_alloc(&bufs, F32, 3, sl, 0, 0, 0);
  m.out = case_alloc(&bufs, out_dt, 3, so, 0, 0, 1);
  m.lse = case_alloc(&bufs, F32, 2, slo, 0, 0, 1);
  test_fill_normal(&m.out_parts, rng, 1.0);
  for (int64_t e = 0; e < test_numel(&m.lse_parts); ++e) {
    const int64_t row = e % (t * h);
    const double x = row == 1 ? INFINITY
                     : test_rng_uniform(rng) < 0.2 ? INFINITY
                                                   : 3.0 * test_rng_normal(rng);
    test_set(&m.lse_parts, e, x);
  }
  const int ok_cuda = merge(&m, &bufs);
  sdpa_tensor cout = test_alloc(out_dt, 3, so), clo = test_alloc(F32, 2, slo);
  sdpa_tensor cf = test_alloc(F32, 3, so);
  sdpa_merge_desc mc = m;
  mc.out = cout;
  mc.lse = clo;
  sdpa_status stc = sdpa_merge_states(&mc);
  /* a 16-bit out_dt: the CPU merge in fp32 too, the reference, with the
   * out_dt one as the rounded result (docs/design.md §7's rule), so one
   * rounding of a 16-bit output that lands on the other side of a tie does not
   * fail the check (an fp32 out_dt is checked against the first CPU merge) */
  mc.out = cf;
  mc.lse.data = NULL;
  if (stc == SDPA_OK && out_dt != F32) stc = sdpa_merge_states(&mc);
  if (TEST_EXPECT(ok_cuda && stc == SDPA_OK, "merge_states: %s", sdpa_last_error())) {
    double *co = case_doubles(&cout), *cr = case_doubles(&cf), *cl = case_doubles(&clo);
    if (out_dt == F32)
      test_check("merge_states out vs CPU", &m.out, co, NULL, 1e-5);
    else
      test_check("merge_states out vs CPU", &m.out, cr, co, test_atol(out_dt));
    test_check("merge_states lse vs CPU", &m.lse, cl, NULL, 1e-5);
    free(co);
    free(cr);
    free(cl);
  }
  test_free(&cout);
  test_free(&clo);
  test_free(&cf);
  case_bufs_free(&bufs);
}

void decode_cases_run(const case_env *env, dec_cuda_fn cuda, dec_merge_fn merge) {
  build_table();
  for (int n = 0; n < ntab; ++n) {
    const dec_case *c = &tab[n];
    if (!case_selected(env, c->name, c->on, c->small) || (c->cuda_shape && env->primary == ON_CPU))
      continue;
    if (env->list) {
      list_case(c);
      continue;
    }
    if (c->kind == DEC_MERGE) {
      printf("-- merge_states: parts %s out %s n%lld t%lld h%lld d%lld\n",
             sdpa_dtype_string(c->dt), sdpa_dtype_string(c->merge_out), (long long)c->b,
             (long long)c->sq, (long long)c->h, (long long)c->d);
      if (merge) run_merge(merge, c, env->rng);
      continue;
    }
    printf("-- %s: %s b%lld h%lld/%lld s_q%lld s_new%lld d%lld/%lld cache %lld page %lld "
           "rotary %d causal %d softcap %g alibi %d splits %d%s%s (%s)\n",
           c->name, sdpa_dtype_string(c->dt), (long long)c->b, (long long)c->h, (long long)c->hk,
           (long long)c->sq, (long long)c->snew, (long long)c->d, (long long)c->dv,
           (long long)c->s_cache, (long long)c->page, c->rotary, c->causal, (double)c->softcap,
           c->alibi, c->splits, c->dense ? " dense" : "", c->padded ? " padded" : "",
           kind_names[c->kind]);
    dec_prob f;
    build(c, &f, env);
    if (c->kind == DEC_PAGED_EQ) {
      if (cuda) run_paged_eq(cuda, c, &f, env->rng);
    } else if (c->kind == DEC_EXPLAIN) {
      if (cuda) (void)cuda(c, &f.desc, &f.bufs);
    } else {
      run_check(env, cuda, c, &f);
    }
    case_bufs_free(&f.bufs);
  }
}
