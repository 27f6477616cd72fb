/*
 * test_gpu_bwd_tf32.c - the fp32 backward on tensor cores (bwd_tf32_* rows,
 * src/cuda/bwd/bwd_tf32_body.cuh: 3xTF32 mma.sync) through the public API on
 * cudaMalloc'd buffers, against the fp64 oracle's backward (ref_bwd):
 * fp32-class accuracy, max |x - ref| / max |ref| <= 1e-5 for each of dq, dk,
 * dv, on q, k, v, dout ~ N(0, 1) (default scale), fresh random inputs,
 * gradients poisoned before every call, every element checked. out and lse
 * come from the CPU backend's fp32 forward (gpu/bwd_case.c). Each case also
 * asks sdpa_explain_bwd which row it gets: the bwd_tf32_ row of d's bucket,
 * or, for what those rows refuse (dropout, d above 256, rows not 16-byte
 * aligned), bwd_simt with the refusal reason on the tf32 row's line; the
 * fallback's result is checked too, at 1e-4 (its own accuracy is
 * test_gpu_simt's business).
 *
 * Matrix: d in {4, 32, 40, 64, 72, 96, 100, 128, 136, 200, 256} causal or not, s_q != s_k
 * and lengths off the tile grid, causal in both alignments with s_q > s_k
 * (rows with no visible key) and s_q < s_k, windows, alibi [h] and [b, h],
 * softcap, explicit and negative scale, GQA 8:1, MQA, varlen with an empty
 * sequence and seqused_k, padded strides, one query, several key and query
 * blocks, long key / query ranges (the dQ and dK / dV accumulation chains),
 * deterministic mode (5 more runs bit for bit equal), and the refusals; above
 * d = 128 (the row whose warp pairs trade S^T / dP^T) masks, GQA, varlen,
 * alibi, softcap, long ranges and the deterministic mode again.
 *
 *   test_gpu_bwd_tf32 [NAME]   the matrix (or the cases whose name contains NAME)
 *   test_gpu_bwd_tf32 --small  one small problem per tf32 row (compute-sanitizer)
 *   test_gpu_bwd_tf32 --bench [D...]  fp32, b*s = 16k, h*d = 2048, d 64 / 128
 *                              (or D...), s 1024 / 4096, causal 0 / 1: median
 *                              ms and TFLOP/s (2.5 x 4 b h s^2 d, halved
 *                              causal) of the dispatched row, atomic and
 *                              deterministic dQ
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "common/harness.h"
#include "gpu/bwd_case.h"
#include "gpu/gpu_common.h"

static test_rng rng;
static double worst[3]; /* largest relative error seen for dq, dk, dv on the tf32 rows */

#define REL_TOL 1e-5
#define REL_TOL_FALLBACK 1e-4

/* ---- checks ------------------------------------------------------------------------ */

/* The first plain bwd_tf32_ row (registry order) whose bucket covers d, else the
 * last one (the largest bucket: the row that declines a wider d); NULL if
 * there is none. *covered says which. */
static const char *tf32_row(int64_t d, int *covered) {
  const char *last = NULL;
  for (int i = 0; i < sdpa_kernel_count(); ++i) {
    sdpa_kernel_info info;
    if (sdpa_kernel_get(i, &info) != SDPA_OK || strncmp(info.name, "bwd_tf32_", 9) != 0 ||
        strstr(info.name, "_bias")) /* the bias rows: test_gpu_simt's */
      continue;
    last = info.name;
    if (info.max_head_dim >= d) {
      *covered = 1;
      return info.name;
    }
  }
  *covered = 0;
  return last;
}

/* explain's selection: the tf32 row of d's bucket, or (refuse != NULL)
 * bwd_simt with the tf32 row's line (the largest bucket's when d is above
 * them all) saying `refuse`; for unaligned rows the staged row instead,
 * running the tf32 row on aligned copies. */
static void check_dispatch(const bcase *c, const bbufs *f, const char *refuse) {
  char buf[8192], want[160];
  if (!TEST_EXPECT(sdpa_explain_bwd(&f->dev, buf, sizeof buf) == SDPA_OK, "%s: explain: %s",
                   c->name, sdpa_last_error()))
    return;
  int covered;
  const char *row = tf32_row(c->d, &covered);
  if (!refuse) {
    snprintf(want, sizeof want, "selected: %s\n", covered ? row : "(no bwd_tf32 row)");
    TEST_EXPECT(covered && strncmp(buf, want, strlen(want)) == 0, "%s: expected %s:\n%s",
                c->name, want, buf);
    return;
  }
  snprintf(want, sizeof want, "  %s ", row ? row : "bwd_tf32_");
  const int staged = strcmp(refuse, "unaligned") == 0;
  gpu_expect_declined(c->name, buf, want, refuse, staged ? "bwd_staged" : "bwd_simt",
                      staged ? (row ? row : "bwd_tf32_") : NULL);
}

/* One case: dispatch, one run checked against the oracle; det_runs > 0 runs
 * deterministic and adds that many reruns compared bit for bit. */
static const char *only;

static void run(const bcase *c, int det_runs, const char *refuse) {
  if (only && !strstr(c->name, only)) return;
  printf("-- %s: b%lld h%lld/%lld s%lld/%lld d%lld%s%s%s%s\n", c->name, (long long)c->b,
         (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->sk, (long long)c->d,
         c->causal ? (c->top_left ? " causal-tl" : " causal-br") : "", c->varlen ? " varlen" : "",
         det_runs ? " deterministic" : "", refuse ? " (refused)" : "");
  bbufs f;
  double *r[2][3];
  if (!bwd_case_prepare(c, &f, &rng, 0, r)) return;
  f.dev.deterministic = det_runs > 0;
  check_dispatch(c, &f, refuse);
  bwd_case_poison(&f);
  const sdpa_status st = gpu_bwd(&f.dev);
  const cudaError_t ce = cudaDeviceSynchronize();
  if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_bwd: %s (%s), sync: %s", c->name,
                  sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce))) {
    dual *g[3] = {&f.dq, &f.dk, &f.dv};
    static const char *names[3] = {"dq", "dk", "dv"};
    const double tol = refuse ? REL_TOL_FALLBACK : REL_TOL;
    for (int n = 0; n < 3; ++n) {
      dual_download(g[n]);
      const double rel = gpu_rel_error(&g[n]->h, r[0][n]);
      if (TEST_EXPECT(rel <= tol, "%s %s: relative error %.3g > %g", c->name, names[n], rel, tol))
        printf("ok   %s %s: relative error %.3g\n", c->name, names[n], rel);
      if (!refuse && !(rel <= worst[n])) worst[n] = rel;
    }
    if (det_runs > 0)
      TEST_EXPECT(bwd_case_rerun_same(c, &f, det_runs),
                  "%s: deterministic = 1: dq / dk / dv differ between %d runs", c->name,
                  det_runs + 1);
  }
  bwd_case_done(&f, r);
}

/* ---- the matrix --------------------------------------------------------------------- */

static void small(void) {
  const sdpa_dtype F32 = SDPA_DTYPE_F32;
  bcase c;
  c = bwd_case("small_hd32_causal", F32, 2, 2, 1, 70, 45, 32), c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("small_hd64_varlen", F32, 4, 2, 2, 40, 150, 40), c.varlen = 1, c.causal = 1;
  c.top_left = 1, run(&c, 0, NULL);
  c = bwd_case("small_hd96_gqa_det", F32, 2, 4, 2, 70, 140, 80), c.alibi = 2, run(&c, 1, NULL);
  c = bwd_case("small_hd128_window", F32, 1, 2, 1, 90, 150, 128), c.wl = 30, c.wr = 7;
  c.softcap = 5.f, run(&c, 0, NULL);
  c = bwd_case("small_hd256_causal_det", F32, 2, 2, 1, 70, 100, 200), c.causal = 1;
  c.alibi = 1, run(&c, 1, NULL);
  c = bwd_case("small_hd256_varlen_window", F32, 3, 2, 2, 50, 90, 256), c.varlen = 1;
  c.wl = 20, c.wr = 3, run(&c, 0, NULL);
}

static void full(void) {
  const sdpa_dtype F32 = SDPA_DTYPE_F32;
  bcase c;
  /* every bucket and widths off it; s_q != s_k, lengths off the tile grid */
  static const int64_t dims[11] = {4, 32, 40, 64, 72, 96, 100, 128, 136, 200, 256};
  for (int k = 0; k < 11; ++k)
    for (int causal = 0; causal < 2; ++causal) {
      c = bwd_case(causal ? "dsweep_causal" : "dsweep", F32, 2, 4, 2, 77, 131, dims[k]);
      c.causal = causal;
      run(&c, 0, NULL);
    }
  /* masks: both alignments, rows without keys, s_q < s_k, windows */
  c = bwd_case("causal_br_sq_gt_sk", F32, 2, 4, 4, 150, 61, 64), c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("causal_tl_sq_gt_sk", F32, 2, 4, 4, 150, 61, 96), c.causal = 1, c.top_left = 1;
  run(&c, 0, NULL);
  c = bwd_case("causal_br_sq_lt_sk", F32, 1, 2, 2, 33, 300, 128), c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("causal_tl_sq_lt_sk", F32, 1, 2, 2, 33, 300, 32), c.causal = 1, c.top_left = 1;
  run(&c, 0, NULL);
  c = bwd_case("window_br", F32, 2, 2, 1, 200, 180, 64), c.wl = 40, c.wr = 3, run(&c, 0, NULL);
  c = bwd_case("window_tl_left_only", F32, 1, 3, 1, 130, 130, 80), c.wl = 17, c.top_left = 1;
  run(&c, 0, NULL);
  /* score modifiers and scale */
  c = bwd_case("alibi_h_causal", F32, 2, 4, 2, 90, 110, 64), c.alibi = 1, c.causal = 1;
  run(&c, 0, NULL);
  c = bwd_case("alibi_bh", F32, 2, 4, 4, 65, 65, 128), c.alibi = 2, run(&c, 0, NULL);
  c = bwd_case("softcap", F32, 2, 2, 2, 70, 129, 128), c.softcap = 3.f, run(&c, 0, NULL);
  c = bwd_case("softcap_alibi_causal", F32, 1, 4, 1, 100, 100, 40), c.softcap = 8.f;
  c.alibi = 1, c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("scale", F32, 2, 2, 2, 64, 64, 32), c.scale = 0.05f, run(&c, 0, NULL);
  c = bwd_case("scale_negative", F32, 1, 2, 2, 40, 72, 64), c.scale = -0.09f, run(&c, 0, NULL);
  /* GQA 8:1, MQA */
  c = bwd_case("gqa8_causal", F32, 1, 8, 1, 150, 200, 64), c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("gqa8_d128", F32, 2, 8, 1, 70, 90, 128), run(&c, 0, NULL);
  c = bwd_case("mqa", F32, 1, 6, 1, 129, 64, 72), run(&c, 0, NULL);
  /* varlen: an empty sequence, seqused_k on the last */
  c = bwd_case("varlen", F32, 5, 4, 2, 90, 130, 64), c.varlen = 1, run(&c, 0, NULL);
  c = bwd_case("varlen_causal_alibi", F32, 4, 2, 1, 150, 100, 128), c.varlen = 1, c.causal = 1;
  c.alibi = 2, run(&c, 0, NULL);
  c = bwd_case("varlen_window_softcap", F32, 4, 4, 4, 70, 70, 32), c.varlen = 1, c.wl = 9;
  c.wr = 2, c.softcap = 2.f, c.top_left = 1, run(&c, 0, NULL);
  /* strides, single rows, several blocks, long accumulation chains */
  c = bwd_case("padded", F32, 2, 2, 1, 50, 60, 40), c.pad = 16, run(&c, 0, NULL);
  c = bwd_case("len1", F32, 1, 2, 2, 1, 1, 64), run(&c, 0, NULL);
  c = bwd_case("multi_block_causal", F32, 1, 4, 2, 700, 650, 128), c.causal = 1, run(&c, 0, NULL);
  c = bwd_case("long_keys_d128", F32, 1, 2, 1, 64, 4096, 128), run(&c, 0, NULL);
  c = bwd_case("long_queries_d64", F32, 1, 2, 2, 2048, 200, 64), run(&c, 0, NULL);
  /* deterministic: the first run checked, 5 more bit for bit equal */
  c = bwd_case("determinism_dense", F32, 2, 4, 2, 300, 900, 64), c.causal = 1, run(&c, 5, NULL);
  c = bwd_case("determinism_varlen_window", F32, 4, 8, 2, 200, 500, 128), c.varlen = 1;
  c.wl = 40, c.wr = 10, run(&c, 5, NULL);
  c = bwd_case("determinism_d96_alibi", F32, 1, 2, 1, 130, 700, 96), c.alibi = 1;
  run(&c, 5, NULL);
  /* above d = 128: warp pairs, each half of dK / dV, trading S^T / dP^T */
  c = bwd_case("hd256_causal_br_sq_gt_sk", F32, 2, 4, 2, 150, 61, 256), c.causal = 1;
  run(&c, 0, NULL);
  c = bwd_case("hd256_causal_tl_sq_lt_sk", F32, 1, 2, 2, 40, 300, 224), c.causal = 1;
  c.top_left = 1, run(&c, 0, NULL);
  c = bwd_case("hd256_window", F32, 2, 2, 1, 200, 180, 256), c.wl = 40, c.wr = 3;
  run(&c, 0, NULL);
  c = bwd_case("hd256_gqa8_alibi", F32, 1, 8, 1, 90, 130, 256), c.alibi = 2, run(&c, 0, NULL);
  c = bwd_case("hd256_mqa_softcap", F32, 1, 6, 1, 129, 64, 160), c.softcap = 3.f;
  run(&c, 0, NULL);
  c = bwd_case("hd256_varlen_causal", F32, 5, 4, 2, 90, 130, 256), c.varlen = 1, c.causal = 1;
  run(&c, 0, NULL);
  c = bwd_case("hd256_varlen_window_softcap_alibi", F32, 4, 2, 1, 100, 70, 192), c.varlen = 1;
  c.wl = 9, c.wr = 2, c.softcap = 2.f, c.alibi = 1, c.top_left = 1, run(&c, 0, NULL);
  c = bwd_case("hd256_scale_padded", F32, 2, 2, 1, 50, 60, 256), c.scale = -0.04f, c.pad = 16;
  run(&c, 0, NULL);
  c = bwd_case("hd256_multi_block_causal", F32, 1, 4, 2, 500, 450, 256), c.causal = 1;
  run(&c, 0, NULL);
  c = bwd_case("hd256_long_keys", F32, 1, 2, 1, 40, 4096, 256), run(&c, 0, NULL);
  c = bwd_case("hd256_long_queries", F32, 1, 2, 2, 2048, 100, 256), run(&c, 0, NULL);
  c = bwd_case("hd256_determinism_causal", F32, 2, 4, 2, 300, 700, 256), c.causal = 1;
  run(&c, 5, NULL);
  c = bwd_case("hd256_determinism_varlen_window", F32, 4, 4, 1, 200, 400, 256), c.varlen = 1;
  c.wl = 40, c.wr = 10, run(&c, 5, NULL);
  /* what the tf32 rows refuse: bwd_simt runs it (unaligned rows: the staged
   * row, through the tf32 row) */
  c = bwd_case("refuse_dropout", F32, 1, 2, 2, 40, 50, 64), c.dropout = 0.2f;
  run(&c, 0, "dropout");
  c = bwd_case("refuse_large_d", F32, 1, 2, 2, 20, 30, 288), run(&c, 0, "head dim");
  c = bwd_case("refuse_unaligned", F32, 1, 2, 2, 40, 50, 6), c.contiguous = 1;
  run(&c, 0, "unaligned");
}

/* ---- timing -------------------------------------------------------------------------- */

static void bench(int nd, const int64_t *ds) {
  const size_t n = (size_t)16384 * 2048; /* elements of each [b, s, h, d] tensor */
  float *host = malloc(n * sizeof(float));
  void *buf[9];
  for (size_t e = 0; e < n; ++e) host[e] = (float)test_rng_normal(&rng);
  for (int k = 0; k < 9; ++k) CUDA_OK(cudaMalloc(&buf[k], n * 4));
  for (int k = 0; k < 5; ++k) CUDA_OK(cudaMemcpy(buf[k], host + k, (n - 5) * 4, cudaMemcpyHostToDevice));
  printf("bwd fp32 timing (b*s = 16k, h*d = 2048, median of 10; TFLOP/s = 2.5 x 4 b h s^2 d, "
         "halved causal)\n%4s %5s %3s %3s %6s %-16s %9s %7s %9s %7s\n", "d", "s", "h", "b",
         "causal", "kernel", "ms", "TFLOP/s", "det ms", "TFLOP/s");
  static const int64_t ss[2] = {1024, 4096};
  for (int di = 0; di < nd; ++di)
    for (int si = 0; si < 2; ++si)
      for (int causal = 0; causal < 2; ++causal) {
        const int64_t d = ds[di], s = ss[si], h = 2048 / d, b = 16384 / s;
        float *lse = malloc((size_t)(b * h * s) * 4);
        for (int64_t e = 0; e < b * h * s; ++e) lse[e] = (float)log((double)s) + 0.5f;
        CUDA_OK(cudaMemcpy(buf[8], lse, (size_t)(b * h * s) * 4, cudaMemcpyHostToDevice));
        free(lse);
        sdpa_bwd_desc bd = bwd_case_dense_desc(buf, SDPA_DTYPE_F32, b, s, h, d, causal);
        char text[4096], name[64] = "?";
        if (sdpa_explain_bwd(&bd, text, sizeof text) == SDPA_OK) sscanf(text, "selected: %63s", name);
        const double flops = 2.5 * 4.0 * (double)(b * h) * (double)s * (double)s * (double)d *
                             (causal ? 0.5 : 1.0);
        double ms[2];
        for (int det = 0; det < 2; ++det) {
          bd.deterministic = det;
          ms[det] = gpu_median_ms(NULL, &bd, 2, 10);
          if (ms[det] < 0) printf("FAIL bench d%lld s%lld: %s\n", (long long)d, (long long)s, sdpa_last_error());
        }
        if (ms[0] < 0 || ms[1] < 0) continue; /* no row of negative times */
        printf("%4lld %5lld %3lld %3lld %6d %-16s %9.3f %7.1f %9.3f %7.1f\n", (long long)d,
               (long long)s, (long long)h, (long long)b, causal, name, ms[0],
               flops / (ms[0] * 1e-3) / 1e12, ms[1], flops / (ms[1] * 1e-3) / 1e12);
      }
  for (int k = 0; k < 9; ++k) CUDA_OK(cudaFree(buf[k]));
  free(host);
}

int main(int argc, char **argv) {
  const int is_bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
  const int is_small = argc > 1 && strcmp(argv[1], "--small") == 0;
  test_rng_init(&rng, test_seed());
  if (sdpa_cuda_available() == 0) {
    printf("no usable CUDA device: skipped\n");
  } else if (is_bench) {
    int64_t ds[8] = {64, 128};
    int nd = 0;
    for (int k = 2; k < argc && nd < 8; ++k) {
      const int64_t d = atoll(argv[k]);
      if (d > 0 && d <= 2048 && 2048 % d == 0) ds[nd++] = d; /* h = 2048 / d heads */
    }
    bench(nd ? nd : 2, ds);
  } else {
    only = is_small || argc < 2 ? NULL : argv[1];
    if (is_small)
      small();
    else
      full();
    printf("largest relative error on the tf32 rows: dq %.3g, dk %.3g, dv %.3g\n", worst[0],
           worst[1], worst[2]);
  }
  return test_summary();
}
