/*
 * test_gpu_fwd.c - the forward's case table (tests/common/fwd_cases.c) on
 * CUDA through the public API: every case whose mask has ON_CUDA, against
 * the fp64 oracle and, where the case has ON_CPU too, the CPU backend on the
 * same inputs (each within its own bound of the oracle, CUDA's out within
 * twice it of the CPU's). What only CUDA has lives here: the selection
 * checks (a bias problem selects an fwd_sm80 row; the Hopper rows fwd_sm90_*
 * on sm_90), what the sm80 rows decline, a CUDA-graph capture on a
 * non-default stream, and the timing. Every call goes through gpu_fwd (the
 * kernel that ran must be the one explain selected).
 *
 *   test_gpu_fwd            the table
 *   test_gpu_fwd --small    the --small set: one small problem per kernel
 *                           instance (fast and full variants of every row),
 *                           for compute-sanitizer
 *   ... --only S            either set, the cases whose name contains S
 *   test_gpu_fwd --bench    timing: bf16, b*s = 16k, h*d = 2048, median of 20
 *   test_gpu_fwd --list     the cases, one line each, nothing run
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/fwd_cases.h"
#include "common/harness.h"
#include "gpu/gpu_common.h"

/* ---- the CUDA backend of the table ---------------------------------------------------- */

/* The row explain selects, where the case asks: an fwd_sm80 row for a bias
 * problem, a Hopper row on sm_90 for c->sm90, row c->row there. */
static void check_selection(const fwd_case *c, const sdpa_fwd_desc *dev) {
  if (!c->bias && !c->sm90 && !c->row) return;
  char buf[8192];
  sdpa_status ex = sdpa_explain_fwd(dev, buf, sizeof buf);
  if (c->row)
    gpu_expect_hopper_row(c->name, ex, buf, c->row, 1);
  else if (c->bias) /* the sm80 rows take bias problems (all of them: rows of any alignment) */
    TEST_EXPECT(ex == SDPA_OK && strncmp(buf, "selected: fwd_sm80", 18) == 0,
                "%s: a bias problem should select an fwd_sm80 row:\n%s", c->name, buf);
  else
    gpu_expect_hopper_row(c->name, ex, buf, "fwd_sm90_", 0);
}

/* The call on the default stream. */
static int call_plain(const fwd_case *c, const sdpa_fwd_desc *dev) {
  sdpa_status st = gpu_fwd(dev);
  cudaError_t ce = cudaDeviceSynchronize();
  return TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_fwd returned %s (%s), sync: %s",
                     c->name, sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce));
}

/* The call captured in a CUDA graph on a non-default stream, replayed. */
static int call_graph(const fwd_case *c, sdpa_fwd_desc *dev) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  dev->attn.stream = s;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int ok = 0;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  sdpa_status st = gpu_fwd(dev);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: capture: %s (%s), end: %s", c->name,
                  sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce))) {
    ce = cudaGraphInstantiate(&exec, graph, 0);
    if (TEST_EXPECT(ce == cudaSuccess, "%s: instantiate: %s", c->name, cudaGetErrorString(ce))) {
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaGraphExecDestroy(exec));
      ok = 1;
    }
    CUDA_OK(cudaGraphDestroy(graph));
  }
  CUDA_OK(cudaStreamDestroy(s));
  return ok;
}

/* What the sm80 rows do not cover (d != d_v, rows not 16-byte aligned): their
 * row of the same bucket must decline with the reason in sdpa_explain_fwd, no
 * fwd_sm80 row may be selected, and whatever runs instead (a slower CUDA
 * kernel) must still be right; with no such kernel the call must fail with
 * SDPA_ERR_NOT_SUPPORTED naming the reason (nothing to check then). */
static int call_refused(const fwd_case *c, const sdpa_fwd_desc *dev) {
  char buf[8192];
  sdpa_status st = sdpa_explain_fwd(dev, buf, sizeof buf);
  const char *line = strstr(buf, c->refuse_row);
  const char *eol = line ? strchr(line, '\n') : NULL;
  const char *why = line ? strstr(line, c->refuse_why) : NULL;
  TEST_EXPECT(why && eol && why < eol && strncmp(buf, "selected: fwd_sm80", 18) != 0,
              "%s: explain should show %s declining with '%s':\n%s", c->name, c->refuse_row,
              c->refuse_why, buf);
  if (st == SDPA_OK) return call_plain(c, dev);
  TEST_EXPECT(st == SDPA_ERR_NOT_SUPPORTED && strstr(sdpa_last_error(), c->refuse_why) != NULL,
              "%s: expected SDPA_ERR_NOT_SUPPORTED mentioning '%s', got %s: %s", c->name,
              c->refuse_why, sdpa_status_string(st), sdpa_last_error());
  return 0;
}

/* fwd_cuda_fn: upload, the call of the case's kind, download. */
static int cuda_fwd(const fwd_case *c, const sdpa_fwd_desc *host, case_bufs *b) {
  gpu_twins w;
  sdpa_fwd_desc dev = gpu_twins_fwd(&w, b, host);
  if (c->kernel) dev.attn.kernel = c->kernel;
  int ok;
  if (c->kind == FWD_REFUSE) {
    ok = call_refused(c, &dev);
  } else {
    check_selection(c, &dev);
    ok = c->kind == FWD_GRAPH ? call_graph(c, &dev) : call_plain(c, &dev);
  }
  if (ok) gpu_twins_down(&w, b, 0);
  gpu_twins_free(&w);
  return ok;
}

/* ---- timing ---------------------------------------------------------------------------- */

static void bench(void) {
  const int64_t ds[3] = {64, 128, 256}, ss[3] = {1024, 4096, 16384};
  const size_t n = (size_t)16384 * 2048; /* elements of q, k, v, out: 64 MB each, > L2 */
  uint16_t *host = malloc(n * 2);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t e = 0; e < n; ++e) { /* bf16 of uniform(-1, 1): xorshift, exponent 127 - 1 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    host[e] = (uint16_t)(0x3f00u | (x & 0x7fu) | ((x >> 8) & 1u) << 15);
  }
  void *dev[4]; /* q, k, v, out */
  gpu_bench_alloc(host, n, 2, dev);
  free(host);
  printf("%-5s %-6s %-5s %-4s %-6s %-6s %-10s %s\n", "b", "s", "h", "d", "causal", "dtype", "ms",
         "TFLOP/s");
  for (int di = 0; di < 3; ++di)
    for (int si = 0; si < 3; ++si)
      for (int causal = 0; causal < 2; ++causal) {
        int64_t d = ds[di], s = ss[si], b = 16384 / s, h = 2048 / d;
        int64_t shape[4] = {b, s, h, d};
        sdpa_fwd_desc desc = gpu_bench_desc(dev, SDPA_DTYPE_BF16, shape);
        desc.attn.causal = causal;
        const double med = gpu_median_ms(&desc, NULL, 5, 20);
        if (med < 0) {
          printf("FAIL bench d%lld s%lld: %s\n", (long long)d, (long long)s, sdpa_last_error());
          continue;
        }
        double flops = 4.0 * (double)b * h * s * s * d * (causal ? 0.5 : 1.0);
        printf("%-5lld %-6lld %-5lld %-4lld %-6d %-6s %-10.4f %.1f\n", (long long)b, (long long)s,
               (long long)h, (long long)d, causal, "bf16", med, flops / (med * 1e-3) / 1e12);
      }
  CUDA_OK(cudaGetLastError());
  gpu_bench_free(dev);
}

/* ---- main ------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  test_rng rng;
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    bench();
    return 0;
  }
  test_rng_init(&rng, test_seed());
  case_env env = case_env_init(argc, argv, ON_CUDA, ON_CPU | ON_CUDA, &rng);
  env.cpu_fwd = gpu_fwd; /* the CPU backend's calls checked against explain too */
  if (!env.list && !sdpa_cuda_available()) {
    printf("no usable CUDA device: skipped\n");
    return 0;
  }
  fwd_cases_run(&env, cuda_fwd);
  return env.list ? 0 : test_summary();
}
