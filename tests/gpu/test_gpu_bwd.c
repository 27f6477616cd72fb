/*
 * test_gpu_bwd.c - the backward's case table (tests/common/bwd_cases.c) on
 * CUDA through the public API: every case whose mask has ON_CUDA, against the
 * fp64 oracle (ref_bwd, exact and lowp) under the harness tolerance, atol
 * scaled by max(1, max |ref|) per tensor (gradients are not O(1)), and, where
 * the case has ON_CPU too, the CPU backend on the same inputs (CUDA's
 * gradients within twice that bound of the CPU's). out and lse come from the
 * CPU backend's forward. What only CUDA has lives here: bitwise determinism
 * over `det` more runs; the Hopper rows' selection (bwd_sm90_*: explain must
 * select them on sm_90); one CUDA-graph capture with a caller workspace on a
 * non-default stream (a workspace one byte short refused); the refusal of
 * contiguous d = 3 (rows not 16-byte aligned) by the sm80 rows and of a
 * Hopper bias row for a problem without a bias; varlen padding rows kept
 * through the staged rows (forward and backward); and the timing. Every call goes through gpu_bwd
 * (the kernel that ran must be the one explain selected).
 *
 *   test_gpu_bwd            the table
 *   test_gpu_bwd --small    one small problem per head-dim bucket and dtype
 *                           (for compute-sanitizer)
 *   ... --only S            either set, the cases whose name contains S
 *   test_gpu_bwd --bench    timing: bf16, b*s = 16k, h*d = 2048, s = 4096,
 *                           d = 64 / 128 / 256, causal off / on, atomic and
 *                           deterministic dQ, dropout 0.1; TFLOP/s counts 2.5x
 *                           forward FLOPs
 *   test_gpu_bwd --list     the cases, one line each, nothing run
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/bwd_cases.h"
#include "common/harness.h"
#include "gpu/bwd_case.h"
#include "gpu/gpu_common.h"

static test_rng rng;

/* ---- the CUDA backend of the table ---------------------------------------------------- */

/* det more runs on fresh poison: the gradients (downloaded into b) bit for
 * bit the same each time. */
static int reruns_same(const gpu_twins *w, const case_bufs *b, const sdpa_bwd_desc *dev,
                       const char *name, int det) {
  int same = 1;
  for (int run = 0; run < det; ++run) {
    for (int k = 0; k < w->n; ++k)
      if (b->out[k] && b->bytes[k]) CUDA_OK(cudaMemset(w->dev[k], 0xff, b->bytes[k]));
    const sdpa_status st = gpu_bwd(dev);
    CUDA_OK(cudaDeviceSynchronize());
    TEST_EXPECT(st == SDPA_OK, "%s: rerun %d: %s", name, run, sdpa_last_error());
    for (int k = 0; k < w->n; ++k) {
      if (!b->out[k] || !b->bytes[k]) continue;
      void *tmp = malloc(b->bytes[k]);
      CUDA_OK(cudaMemcpy(tmp, w->dev[k], b->bytes[k], cudaMemcpyDeviceToHost));
      if (memcmp(tmp, b->t[k].data, b->bytes[k]) != 0) same = 0;
      free(tmp);
    }
  }
  return same;
}

/* BWD_GRAPH: captured with a caller workspace on a non-default stream,
 * deterministic, replayed twice (the graph must rezero its accumulator);
 * then a workspace one byte short is refused with the size named. */
static int call_graph(const bwd_tcase *c, sdpa_bwd_desc *dev) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  dev->attn.stream = s;
  dev->deterministic = 1;
  size_t ws_bytes = 0;
  sdpa_status st = sdpa_bwd_workspace_size(dev, &ws_bytes);
  TEST_EXPECT(st == SDPA_OK && ws_bytes > 0, "%s: workspace size: %s", c->name, sdpa_last_error());
  void *ws = NULL;
  CUDA_OK(cudaMalloc(&ws, ws_bytes ? ws_bytes : 16));
  dev->workspace = ws, dev->workspace_size = ws_bytes;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  st = gpu_bwd(dev);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd under capture: %s", c->name, sdpa_last_error());
  int ok = 0;
  if (TEST_EXPECT(ce == cudaSuccess, "%s: capture: %s", c->name, cudaGetErrorString(ce))) {
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    ok = st == SDPA_OK;
  }
  /* a workspace one byte short is refused with the size named (before
   * anything runs: the gradients stay the replays') */
  dev->workspace_size = ws_bytes - 1;
  dev->attn.stream = NULL;
  TEST_EXPECT_ERROR(gpu_bwd(dev), SDPA_ERR_INVALID_ARGUMENT, "workspace_size");
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaStreamDestroy(s));
  return ok;
}

/* BWD_REFUSE: contiguous d = 3, rows of 6 bytes. Every sm80 row refuses them
 * as unaligned and explain says so; a slower row runs them, so the call
 * itself must succeed. */
static void call_refused(const sdpa_bwd_desc *dev) {
  char buf[4096];
  sdpa_status st = sdpa_explain_bwd(dev, buf, sizeof buf);
  TEST_EXPECT(st == SDPA_OK && strstr(buf, "bwd_sm80_bf16_hd32") && strstr(buf, "unaligned") &&
                  !strstr(buf, "selected: bwd_sm80"),
              "explain refuses the sm80 rows as 'unaligned' and selects a fallback: %s", buf);
  st = gpu_bwd(dev);
  TEST_EXPECT(st == SDPA_OK, "unaligned backward runs on a fallback row: %s", sdpa_last_error());
  CUDA_OK(cudaDeviceSynchronize());
}

/* BWD_BIAS_ROW: a Hopper bias row named by attn.kernel for a problem without
 * a bias: refused by the registry with a message (where the build and the
 * GPU have the row), and explain does not select it either. */
static void call_bias_row(const bwd_tcase *c, sdpa_bwd_desc *dev) {
  char buf[4096];
  const sdpa_status ex = sdpa_explain_bwd(dev, buf, sizeof buf);
  if (!gpu_sm90_lists(c->name, ex, buf, "bwd_sm90_bias_bf16_hd64")) return;
  dev->attn.kernel = "bwd_sm90_bias_bf16_hd64";
  const sdpa_status st = gpu_bwd(dev);
  TEST_EXPECT(st == SDPA_ERR_NOT_SUPPORTED && strstr(sdpa_last_error(), "needs: bias"),
              "a bias row without a bias: %s: %s", sdpa_status_string(st), sdpa_last_error());
  gpu_expect_declined(c->name, buf, "bwd_sm90_bias_bf16_hd64 ", "no: needs: bias",
                      "bwd_sm90_ws_bf16_hd64", NULL);
}

/* bwd_cuda_fn: upload, the call of the case's kind, download the gradients. */
static int cuda_bwd(const bwd_tcase *c, const sdpa_bwd_desc *host, case_bufs *b) {
  gpu_twins w;
  sdpa_bwd_desc dev = gpu_twins_bwd(&w, b, host);
  if (c->kernel && strncmp(c->kernel, "bwd_sm90_", 9) == 0) {
    /* a Hopper row forced: only on sm_90 in a build that has it (the whole
       registry's explanation: the row may come late in it) */
    static char buf[1 << 16];
    if (!gpu_sm90_lists(c->name, sdpa_explain_bwd(&dev, buf, sizeof buf), buf, c->kernel)) {
      printf("skip %s: %s is not on this device or in this build\n", c->name, c->kernel);
      gpu_twins_free(&w);
      return 0;
    }
  }
  if (c->kernel) dev.attn.kernel = c->kernel;
  int ok = 0;
  if (c->kind == BWD_REFUSE) {
    call_refused(&dev);
  } else if (c->kind == BWD_BIAS_ROW) {
    call_bias_row(c, &dev);
  } else if (c->kind == BWD_GRAPH) {
    ok = call_graph(c, &dev);
  } else {
    if (c->sm90) {
      char buf[8192];
      const sdpa_status ex = sdpa_explain_bwd(&dev, buf, sizeof buf);
      gpu_expect_hopper_row(c->name, ex, buf, c->row ? c->row : "bwd_sm90_", c->row != NULL);
    }
    const sdpa_status st = gpu_bwd(&dev);
    const cudaError_t ce = cudaDeviceSynchronize();
    ok = TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_bwd: %s: %s, sync: %s",
                     c->name, sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce));
  }
  if (ok) gpu_twins_down(&w, b, 0);
  if (ok && c->det > 0)
    TEST_EXPECT(reruns_same(&w, b, &dev, c->name, c->det),
                "%s: deterministic = 1: dq / dk / dv differ between %d runs", c->name, c->det + 1);
  gpu_twins_free(&w);
  return ok;
}

/* ---- the staged rows and varlen padding rows --------------------------------------- */

/* Rows past the last sequence (cu_seqlens[b] < total) are the caller's: a
 * varlen problem with unaligned rows (d 100: rows of 200 bytes) through the
 * staged rows, forward then backward, must leave out's, dq's, dk's and dv's
 * padding rows as they were (a sentinel) and write finite rows elsewhere. */
static void staged_varlen_padding(const case_env *env) {
  const char *name = "staged varlen padding rows";
  if (env->only && !strstr(name, env->only)) return;
  const int64_t b = 2, h = 2, d = 100, tq = 75, tk = 96, nq = 70, nk = 90;
  const int64_t qs[3] = {tq, h, d}, ks[3] = {tk, h, d}, ls[2] = {h, tq}, cs[1] = {b + 1};
  dual q = dual_alloc(SDPA_DTYPE_BF16, 3, qs, 0, 0), k = dual_alloc(SDPA_DTYPE_BF16, 3, ks, 0, 0);
  dual v = dual_alloc(SDPA_DTYPE_BF16, 3, ks, 0, 0), out = dual_alloc(SDPA_DTYPE_BF16, 3, qs, 0, 0);
  dual dout = dual_alloc(SDPA_DTYPE_BF16, 3, qs, 0, 0), dq = dual_alloc(SDPA_DTYPE_BF16, 3, qs, 0, 0);
  dual dk = dual_alloc(SDPA_DTYPE_BF16, 3, ks, 0, 0), dv = dual_alloc(SDPA_DTYPE_BF16, 3, ks, 0, 0);
  dual lse = dual_alloc(SDPA_DTYPE_F32, 2, ls, 0, 0);
  dual cq = dual_alloc(SDPA_DTYPE_I32, 1, cs, 0, 0), ck = dual_alloc(SDPA_DTYPE_I32, 1, cs, 0, 0);
  const int32_t cqv[3] = {0, 30, (int32_t)nq}, ckv[3] = {0, 40, (int32_t)nk};
  memcpy(cq.h.data, cqv, sizeof cqv);
  memcpy(ck.h.data, ckv, sizeof ckv);
  dual *ins[4] = {&q, &k, &v, &dout}, *outs[4] = {&out, &dq, &dk, &dv};
  for (int t = 0; t < 4; ++t) test_fill_normal(&ins[t]->h, &rng, 1.0);
  for (int t = 0; t < 4; ++t) /* the sentinel: 7 in every row, padding rows included */
    for (int64_t e = 0; e < test_numel(&outs[t]->h); ++e) test_set(&outs[t]->h, e, 7.0);
  dual *all[11] = {&q, &k, &v, &dout, &out, &dq, &dk, &dv, &lse, &cq, &ck};
  for (int t = 0; t < 11; ++t) dual_upload(all[t]);
  sdpa_fwd_desc f;
  sdpa_fwd_init(&f);
  f.attn.device = SDPA_DEVICE_CUDA;
  f.attn.q = q.d, f.attn.k = k.d, f.attn.v = v.d;
  f.attn.cu_seqlens_q = cq.d, f.attn.cu_seqlens_k = ck.d;
  f.attn.max_seqlen_q = 40, f.attn.max_seqlen_k = 50, f.attn.causal = 1;
  f.out = out.d, f.lse = lse.d;
  char buf[8192];
  sdpa_status ex = sdpa_explain_fwd(&f, buf, sizeof buf);
  gpu_expect_hopper_row(name, ex, buf, "fwd_staged", 1);
  sdpa_status st = gpu_fwd(&f);
  TEST_EXPECT(st == SDPA_OK, "%s: forward: %s", name, sdpa_last_error());
  sdpa_bwd_desc g;
  sdpa_bwd_init(&g);
  g.attn = f.attn;
  g.out = out.d, g.lse = lse.d, g.dout = dout.d, g.dq = dq.d, g.dk = dk.d, g.dv = dv.d;
  ex = sdpa_explain_bwd(&g, buf, sizeof buf);
  gpu_expect_hopper_row(name, ex, buf, "bwd_staged", 1);
  st = gpu_bwd(&g);
  TEST_EXPECT(st == SDPA_OK, "%s: backward: %s", name, sdpa_last_error());
  CUDA_OK(cudaDeviceSynchronize());
  const char *names[4] = {"out", "dq", "dk", "dv"};
  for (int t = 0; t < 4; ++t) {
    dual_download(outs[t]);
    const int64_t rows = t < 2 ? nq : nk, per = h * d, n = test_numel(&outs[t]->h);
    int64_t changed = 0, bad = 0;
    for (int64_t e = 0; e < n; ++e) {
      const double x = test_get(&outs[t]->h, e);
      if (e >= rows * per)
        changed += x != 7.0;
      else
        bad += !isfinite(x);
    }
    TEST_EXPECT(changed == 0 && bad == 0,
                "%s: %s: %lld padding elements changed, %lld non-finite in the sequences' rows",
                name, names[t], (long long)changed, (long long)bad);
  }
  for (int t = 0; t < 11; ++t) dual_free(all[t]);
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

/* ---- main ------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  test_rng_init(&rng, test_seed());
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    if (!sdpa_cuda_available()) {
      printf("no CUDA device: skipped\n");
      return 0;
    }
    bench();
    return 0;
  }
  case_env env = case_env_init(argc, argv, ON_CUDA, ON_CPU | ON_CUDA, &rng);
  env.cpu_fwd = gpu_fwd; /* the CPU backend's calls checked against explain too */
  env.cpu_bwd = gpu_bwd;
  if (!env.list && !sdpa_cuda_available()) {
    printf("no CUDA device: skipped\n");
    return test_summary();
  }
  bwd_cases_run(&env, cuda_bwd);
  if (!env.list && !env.small) staged_varlen_padding(&env);
  return env.list ? 0 : test_summary();
}
