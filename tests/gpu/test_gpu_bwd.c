/*
 * test_gpu_bwd.c - the CUDA backward (sdpa_bwd on SDPA_DEVICE_CUDA) through
 * the public API against the fp64 oracle (ref_bwd, exact and lowp) under the
 * harness tolerance, atol scaled by max(1, max |ref|) per tensor as in
 * test_cpu_bwd.c (gradients are not O(1)). out and lse come from the CPU
 * backend's forward on the same inputs. Matrix: f16 / bf16, every head-dim
 * bucket (d = 1 and 3 through rows padded to 16 bytes), GQA 1 / 2 / 8, lengths
 * off the tile grid (1, s_q > s_k, s_q != s_k), causal in both alignments,
 * windows, alibi [h] and [b, h], softcap, dropout 0.17, varlen with an empty
 * sequence and seqused_k, padded strides; bitwise determinism over 5 runs;
 * the Hopper rows' buckets (bwd_sm90_*: explain must select them on sm_90)
 * with d below the bucket, each feature kernel and the deterministic walk;
 * one CUDA-graph capture with a caller workspace on a non-default stream; and
 * the refusal of contiguous d = 3 (rows not 16-byte aligned).
 *
 *   test_gpu_bwd            the whole matrix
 *   test_gpu_bwd --small    one small problem per head-dim bucket and dtype
 *                           (for compute-sanitizer)
 *   test_gpu_bwd --bench    timing: bf16, b*s = 16k, h*d = 2048, s = 4096,
 *                           d = 64 / 128 / 256, causal off / on, atomic and
 *                           deterministic dQ, dropout 0.1; TFLOP/s counts 2.5x
 *                           forward FLOPs
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/harness.h"
#include "gpu/bwd_case.h"
#include "gpu/gpu_common.h"

static test_rng rng;


/* One case: oracle, one CUDA run checked; det_runs > 0 adds that many more
 * deterministic runs compared bit for bit with the first. */
static void run_case(const bcase *c, int det_runs) {
  bbufs f;
  printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld%s\n", c->name, sdpa_dtype_string(c->dt),
         (long long)c->b, (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->sk,
         (long long)c->d, c->varlen ? " varlen" : "");
  double *r[2][3];
  if (!bwd_case_prepare(c, &f, &rng, 1, r)) return;
  f.dev.deterministic = det_runs > 0;
  if (c->sm90) {
    char buf[8192];
    const sdpa_status ex = sdpa_explain_bwd(&f.dev, buf, sizeof buf);
    gpu_expect_hopper_row(c->name, ex, buf, "bwd_sm90_");
  }
  bwd_case_poison(&f);
  const sdpa_status st = gpu_bwd(&f.dev);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd: %s: %s", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    CUDA_OK(cudaDeviceSynchronize());
    dual_download(&f.dq), dual_download(&f.dk), dual_download(&f.dv);
    test_check_grad(c->name, "dq", &f.dq.h, r[0][0], r[1][0]);
    test_check_grad(c->name, "dk", &f.dk.h, r[0][1], r[1][1]);
    test_check_grad(c->name, "dv", &f.dv.h, r[0][2], r[1][2]);
    if (det_runs > 0)
      TEST_EXPECT(bwd_case_rerun_same(c, &f, det_runs),
                  "%s: deterministic = 1: dq / dk / dv differ between %d runs", c->name,
                  det_runs + 1);
  }
  bwd_case_done(&f, r);
}

/* sdpa_bwd captured in a CUDA graph with a caller workspace on a non-default
 * stream, replayed twice (the graph must rezero its accumulator), checked. */
static void run_graph(const bcase *c) {
  bbufs f;
  printf("-- %s (CUDA graph, caller workspace)\n", c->name);
  double *r[2][3];
  if (!bwd_case_prepare(c, &f, &rng, 1, r)) return;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  f.dev.attn.stream = s;
  f.dev.deterministic = 1;
  size_t ws_bytes = 0;
  sdpa_status st = sdpa_bwd_workspace_size(&f.dev, &ws_bytes);
  TEST_EXPECT(st == SDPA_OK && ws_bytes > 0, "%s: workspace size: %s", c->name, sdpa_last_error());
  void *ws = NULL;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  f.dev.workspace = ws, f.dev.workspace_size = ws_bytes;
  bwd_case_poison(&f);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  st = gpu_bwd(&f.dev);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd under capture: %s", c->name, sdpa_last_error());
  if (TEST_EXPECT(ce == cudaSuccess, "%s: capture: %s", c->name, cudaGetErrorString(ce))) {
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    dual_download(&f.dq), dual_download(&f.dk), dual_download(&f.dv);
    test_check_grad(c->name, "graph dq", &f.dq.h, r[0][0], r[1][0]);
    test_check_grad(c->name, "graph dk", &f.dk.h, r[0][1], r[1][1]);
    test_check_grad(c->name, "graph dv", &f.dv.h, r[0][2], r[1][2]);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  /* a workspace one byte short is refused with the size named */
  f.dev.workspace_size = ws_bytes - 1;
  f.dev.attn.stream = NULL;
  TEST_EXPECT_ERROR(gpu_bwd(&f.dev), SDPA_ERR_INVALID_ARGUMENT, "workspace_size");
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaStreamDestroy(s));
  bwd_case_done(&f, r);
}

/* Contiguous d = 3: rows of 6 bytes. Every sm80 row refuses them as unaligned
 * and explain says so; a slower row (the SIMT family, checked against the
 * oracle in test_gpu_simt.c) runs them, so the call itself must succeed. */
static void run_refusal(void) {
  bcase c = bwd_case("unaligned_d3_contiguous", SDPA_DTYPE_BF16, 1, 2, 2, 20, 20, 3);
  bbufs f;
  c.contiguous = 1;
  printf("-- %s\n", c.name);
  if (bwd_case_build(&c, &f, &rng)) {
    char buf[4096];
    sdpa_status st = sdpa_explain_bwd(&f.dev, buf, sizeof buf);
    TEST_EXPECT(st == SDPA_OK && strstr(buf, "bwd_sm80_bf16_hd32") && strstr(buf, "unaligned") &&
                    !strstr(buf, "selected: bwd_sm80"),
                "explain refuses the sm80 rows as 'unaligned' and selects a fallback: %s", buf);
    st = gpu_bwd(&f.dev);
    TEST_EXPECT(st == SDPA_OK, "unaligned backward runs on a fallback row: %s", sdpa_last_error());
  }
  bwd_case_release(&f);

  /* a Hopper bias row named by attn.kernel for a problem without a bias:
     refused by the registry with a message (where the build and the GPU have
     the row), and explain does not select it either */
  c = bwd_case("bias_row_without_bias", SDPA_DTYPE_BF16, 1, 2, 2, 40, 40, 64);
  printf("-- %s\n", c.name);
  if (bwd_case_build(&c, &f, &rng)) {
    char buf[4096];
    const sdpa_status ex = sdpa_explain_bwd(&f.dev, buf, sizeof buf);
    if (gpu_sm90_lists(c.name, ex, buf, "bwd_sm90_bias_bf16_hd64")) {
      f.dev.attn.kernel = "bwd_sm90_bias_bf16_hd64";
      const sdpa_status st = gpu_bwd(&f.dev);
      TEST_EXPECT(st == SDPA_ERR_NOT_SUPPORTED && strstr(sdpa_last_error(), "needs: bias"),
                  "a bias row without a bias: %s: %s", sdpa_status_string(st), sdpa_last_error());
      const char *line = strstr(buf, "bwd_sm90_bias_bf16_hd64 ");
      const char *end = line ? strchr(line, '\n') : NULL;
      const char *why = line ? strstr(line, "no: needs: bias") : NULL;
      TEST_EXPECT(why && end && why < end &&
                      strncmp(buf, "selected: bwd_sm90_bf16_hd64\n", 29) == 0,
                  "explain selects the plain row and refuses the bias row (needs: bias):\n%s", buf);
    }
  }
  bwd_case_release(&f);
}

/* ---- timing ------------------------------------------------------------------------- */
static void bench(void) {
  const int64_t ds[3] = {64, 128, 256};
  printf("bwd timing (bf16, b*s = 16k, h*d = 2048, median of 20; TFLOP/s = 2.5 x fwd FLOPs)\n");
  printf("%5s %6s %4s %4s %7s %13s %13s %13s %13s\n", "d", "s", "h", "b", "causal", "atomic",
         "deterministic", "dropout 0.1", "bias+dbias");
  for (int di = 0; di < 3; ++di)
    for (int causal = 0; causal < 2; ++causal) {
      const int64_t d = ds[di], s = 4096, h = 2048 / d, b = 16384 / s;
      /* buffers: q (also dout), k, v, out, dq, dk, dv (bf16), lse (fp32) */
      void *buf[8];
      const size_t bytes = (size_t)(b * s * h * d) * 2;
      for (int n = 0; n < 7; ++n) CUDA_OK(cudaMalloc(&buf[n], bytes));
      CUDA_OK(cudaMalloc(&buf[7], (size_t)(b * h * s) * 4));
      /* random-ish bf16 bits in [-2, 2) for inputs; lse a typical value */
      uint16_t *hb = malloc(bytes);
      for (size_t e = 0; e < bytes / 2; ++e) hb[e] = (uint16_t)(0x3c00u + (test_rng_u64(&rng) & 0x3ffu)) ^ (uint16_t)((test_rng_u64(&rng) & 1) << 15);
      for (int n = 0; n < 4; ++n) CUDA_OK(cudaMemcpy(buf[n], hb, bytes, cudaMemcpyHostToDevice));
      float *hl = malloc((size_t)(b * h * s) * 4);
      for (int64_t e = 0; e < b * h * s; ++e) hl[e] = 9.0f;
      CUDA_OK(cudaMemcpy(buf[7], hl, (size_t)(b * h * s) * 4, cudaMemcpyHostToDevice));
      free(hb), free(hl);
      void *const t[9] = {buf[0], buf[1], buf[2], buf[3], buf[0], buf[4], buf[5], buf[6], buf[7]};
      sdpa_bwd_desc bd = bwd_case_dense_desc(t, SDPA_DTYPE_BF16, b, s, h, d, causal);
      double flops = 4.0 * (double)(b * h * s) * (double)s * (double)d * 2.5 * (causal ? 0.5 : 1.0);
      /* mode 3: a full [b, h, s, s] bias (zeros) and its gradient */
      const int64_t bsh[4] = {b, h, s, s};
      const size_t bias_bytes = (size_t)(b * h * s) * (size_t)s * 2;
      void *bias = NULL, *dbias = NULL;
      CUDA_OK(cudaMalloc(&bias, bias_bytes));
      CUDA_OK(cudaMalloc(&dbias, bias_bytes));
      CUDA_OK(cudaMemset(bias, 0, bias_bytes));
      double med[4];
      for (int det = 0; det < 4; ++det) { /* 2: dropout p = 0.1; 2, 3 not deterministic */
        bd.deterministic = det == 1;
        bd.attn.dropout_p = det == 2 ? 0.1f : 0.f;
        if (det == 3) {
          bd.attn.bias = sdpa_tensor_contiguous(bias, SDPA_DTYPE_BF16, 4, bsh);
          bd.dbias = sdpa_tensor_contiguous(dbias, SDPA_DTYPE_BF16, 4, bsh);
        }
        med[det] = gpu_median_ms(NULL, &bd, 3, 20);
        if (med[det] < 0) {
          printf("sdpa_bwd failed: %s\n", sdpa_last_error());
          exit(1);
        }
      }
      printf("%5lld %6lld %4lld %4lld %7d %7.3f ms %4.0f %7.3f ms %4.0f %7.3f ms %4.0f %7.3f ms %4.0f\n",
             (long long)d, (long long)s, (long long)h, (long long)b, causal, med[0],
             flops / med[0] / 1e9, med[1], flops / med[1] / 1e9, med[2], flops / med[2] / 1e9,
             med[3], flops / med[3] / 1e9);
      for (int n = 0; n < 8; ++n) CUDA_OK(cudaFree(buf[n]));
      CUDA_OK(cudaFree(bias));
      CUDA_OK(cudaFree(dbias));
    }
}

int main(int argc, char **argv) {
  test_rng_init(&rng, test_seed());
  if (!sdpa_cuda_available()) {
    printf("no CUDA device: skipped\n");
    return test_summary();
  }
  const sdpa_dtype F16 = SDPA_DTYPE_F16, BF16 = SDPA_DTYPE_BF16;
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    bench();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--small") == 0) {
    const int64_t dims[6] = {32, 64, 96, 128, 192, 256};
    for (int di = 0; di < 6; ++di)
      for (int t = 0; t < 2; ++t) {
        bcase c = bwd_case("small", t ? BF16 : F16, 2, 4, 2, 70, 45, dims[di]);
        c.causal = di & 1;
        c.dropout = di == 2 ? 0.17f : 0.f;
        c.softcap = di == 3 ? 4.f : 0.f;
        run_case(&c, di == 1 || di == 5 ? 1 : 0); /* deterministic: d 64 and d 256 (dQ kernel) */
      }
    bcase c = bwd_case("small_empty_queries", BF16, 2, 4, 2, 0, 70, 64);
    run_case(&c, 0);
    c = bwd_case("small_empty_keys", F16, 2, 4, 2, 50, 0, 128), run_case(&c, 0);
    return test_summary();
  }

  bcase c;
  c = bwd_case("basic", F16, 2, 2, 2, 65, 70, 64), run_case(&c, 0);
  c = bwd_case("basic", BF16, 2, 2, 2, 65, 70, 64), run_case(&c, 0);
  c = bwd_case("gqa2_causal_br", BF16, 2, 4, 2, 130, 100, 128), c.causal = 1, run_case(&c, 0);
  c = bwd_case("gqa8_sq_ne_sk_causal_br", F16, 1, 8, 1, 17, 130, 64), c.causal = 1, run_case(&c, 0);
  c = bwd_case("gqa8_sq_gt_sk_causal_tl", BF16, 1, 8, 1, 150, 37, 128), c.causal = 1, c.top_left = 1,
  run_case(&c, 0);
  c = bwd_case("sq_gt_sk_causal_br", F16, 2, 2, 1, 100, 37, 32), c.causal = 1, run_case(&c, 0);
  c = bwd_case("len1", BF16, 1, 2, 2, 1, 1, 64), run_case(&c, 0);
  c = bwd_case("sq1_causal", F16, 2, 2, 1, 1, 77, 96), c.causal = 1, run_case(&c, 0);
  c = bwd_case("sk1_causal_br", BF16, 1, 2, 2, 77, 1, 64), c.causal = 1, run_case(&c, 0);
  c = bwd_case("d1_rows16", F16, 1, 2, 1, 40, 50, 1), run_case(&c, 0);
  c = bwd_case("d3_rows16_causal", BF16, 2, 2, 2, 33, 70, 3), c.causal = 1, run_case(&c, 0);
  c = bwd_case("d160_window_br", F16, 1, 2, 1, 70, 90, 160), c.wl = 8, c.wr = 3, run_case(&c, 0);
  c = bwd_case("d256_window_br", BF16, 1, 2, 1, 70, 90, 256), c.wl = 8, c.wr = 3, run_case(&c, 0);
  c = bwd_case("d256_causal_tl", F16, 1, 2, 2, 70, 50, 256), c.causal = 1, c.top_left = 1, run_case(&c, 0);
  c = bwd_case("d128_window_tl_left", BF16, 1, 2, 2, 80, 80, 128), c.top_left = 1, c.wl = 20,
  run_case(&c, 0);
  c = bwd_case("alibi_h_causal", F16, 2, 4, 2, 50, 60, 32), c.causal = 1, c.alibi = 1, run_case(&c, 0);
  c = bwd_case("alibi_bh", BF16, 2, 2, 2, 40, 30, 64), c.alibi = 2, run_case(&c, 0);
  c = bwd_case("softcap", F16, 2, 2, 1, 45, 66, 64), c.softcap = 5.f, c.scale = 0.3f, run_case(&c, 0);
  c = bwd_case("softcap_causal", BF16, 1, 4, 2, 66, 66, 128), c.causal = 1, c.softcap = 2.f,
  run_case(&c, 0);
  c = bwd_case("dropout", F16, 2, 4, 2, 70, 75, 64), c.dropout = 0.17f, run_case(&c, 0);
  c = bwd_case("dropout_causal", BF16, 1, 2, 1, 66, 80, 128), c.causal = 1, c.dropout = 0.17f,
  run_case(&c, 0);
  c = bwd_case("dropout_d256", BF16, 1, 2, 1, 40, 50, 256), c.dropout = 0.17f, run_case(&c, 0);
  c = bwd_case("varlen_causal_seqused", BF16, 4, 4, 2, 90, 100, 64), c.varlen = 1, c.causal = 1,
  run_case(&c, 0);
  c = bwd_case("varlen_all_mods", F16, 3, 4, 1, 70, 75, 128), c.varlen = 1, c.wl = 7, c.wr = 9,
  c.alibi = 1, c.softcap = 3.f, c.dropout = 0.17f, run_case(&c, 0);
  c = bwd_case("padded_gqa2", BF16, 2, 4, 2, 40, 50, 64), c.pad = 8, c.causal = 1, run_case(&c, 0);
  c = bwd_case("multi_block", F16, 1, 4, 2, 260, 300, 128), c.causal = 1, c.alibi = 1,
  c.dropout = 0.17f, run_case(&c, 0);
  /* deterministic: first run checked, 5 more compared bit for bit */
  c = bwd_case("determinism_dense", BF16, 2, 4, 2, 300, 260, 64), c.causal = 1, run_case(&c, 5);
  c = bwd_case("determinism_varlen_window", F16, 4, 8, 2, 200, 180, 128), c.varlen = 1, c.wl = 40,
  c.wr = 10, c.dropout = 0.17f, run_case(&c, 5);
  /* the Hopper rows' buckets with d below the bucket, several key blocks and
     query steps, each feature kernel and the deterministic walk */
  c = bwd_case("sm90_d40_gqa8_causal", F16, 2, 8, 1, 200, 333, 40), c.causal = 1, c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d64_window_tl", BF16, 1, 4, 2, 300, 290, 64), c.top_left = 1, c.wl = 70,
  c.wr = 20, c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d100_window", BF16, 1, 4, 2, 300, 260, 100), c.wl = 50, c.wr = 20,
  c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d128_softcap_alibi", F16, 2, 4, 1, 260, 200, 128), c.causal = 1, c.softcap = 3.f,
  c.alibi = 2, c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d128_dropout_det", BF16, 1, 4, 2, 190, 300, 128), c.dropout = 0.17f,
  c.sm90 = 1, run_case(&c, 5);
  c = bwd_case("sm90_d200_softcap_alibi", F16, 1, 2, 1, 150, 170, 200), c.causal = 1, c.softcap = 3.f,
  c.alibi = 2, c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d256_dropout_det", BF16, 1, 4, 2, 190, 200, 256), c.dropout = 0.17f,
  c.sm90 = 1, run_case(&c, 5);
  c = bwd_case("sm90_d64_varlen_seqused_gqa4", F16, 4, 8, 2, 150, 170, 64), c.varlen = 1,
  c.causal = 1, c.sm90 = 1, run_case(&c, 0);
  c = bwd_case("sm90_d256_varlen_det", BF16, 3, 2, 1, 130, 140, 256), c.varlen = 1, c.wl = 60,
  c.wr = 5, c.sm90 = 1, run_case(&c, 5);
  /* the Hopper rows' deterministic mode: GQA, causal top-left with s_q > s_k,
     a left window; and more than 16 key blocks, so that each block walks
     several key blocks into its dQ slice (bwd_det_splits: at most 16 slices;
     at d = 256 the dQ kernel instead, over 18 key tiles a query block) */
  c = bwd_case("sm90_d128_det_causal_tl_gqa4", F16, 1, 8, 2, 520, 300, 128), c.causal = 1,
  c.top_left = 1, c.sm90 = 1, run_case(&c, 5);
  c = bwd_case("sm90_d64_det_window_gqa2", BF16, 2, 4, 2, 600, 700, 64), c.wl = 150, c.wr = 30,
  c.sm90 = 1, run_case(&c, 5);
  c = bwd_case("sm90_d256_det_dqkernel_dropout", BF16, 1, 2, 1, 130, 1100, 256), c.dropout = 0.17f,
  c.sm90 = 1, run_case(&c, 5);
  c = bwd_case("sm90_d128_det_walk_causal", F16, 1, 2, 2, 100, 2200, 128), c.causal = 1,
  c.sm90 = 1, run_case(&c, 5);
  /* empty problems: the side with rows gets zero gradients over poison */
  c = bwd_case("empty_queries", BF16, 2, 4, 2, 0, 70, 64), run_case(&c, 0);
  c = bwd_case("empty_keys_causal", F16, 2, 4, 2, 50, 0, 128), c.causal = 1, run_case(&c, 0);
  c = bwd_case("empty_batch", BF16, 0, 2, 2, 9, 9, 64), run_case(&c, 0);
  c = bwd_case("graph", BF16, 2, 4, 2, 200, 333, 128), c.causal = 1, run_graph(&c);
  run_refusal();
  return test_summary();
}
