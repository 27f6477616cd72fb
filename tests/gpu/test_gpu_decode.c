/*
 * test_gpu_decode.c - the KV-cache decoding table (tests/common/decode_cases.c)
 * on CUDA through the public API: every case whose mask has ON_CUDA, against
 * the fp64 oracle and, where the case has ON_CPU too, the CPU backend on the
 * same inputs (CUDA's out within twice the oracle bound of the CPU's, the
 * caches after the call equal bit for bit). What only CUDA has lives here:
 * CUDA-graph capture with and without a caller workspace (a workspace one
 * byte short refused with the cache untouched), every forced split count
 * 1..64 against 1, paged == contiguous bit for bit, the row explain selects
 * for a paged cache, and merge_states on CUDA. Every call goes through
 * gpu_fwd (the kernel that ran must be the one explain selected).
 *
 *   test_gpu_decode           the table
 *   test_gpu_decode --small   a few small problems (for compute-sanitizer)
 *   ... --only S              either set, the cases whose name contains S
 *   test_gpu_decode --list    the cases, one line each, nothing run
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/decode_cases.h"
#include "common/harness.h"
#include "gpu/gpu_common.h"

/* ---- the CUDA backend of the table ---------------------------------------------------- */

/* The bytes of the buffer holding host address p. */
static size_t buf_bytes(const case_bufs *b, const void *p) { return b->bytes[case_find(b, p)]; }

/* Runs the device descriptor (captured in a graph on a non-default stream
 * and replayed twice when graph). */
static sdpa_status run_dev(sdpa_fwd_desc *desc, int graph, size_t out_bytes, size_t lse_bytes) {
  if (!graph) {
    sdpa_status st = gpu_fwd(desc);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      printf("  device error: %s\n", cudaGetErrorString(e));
      return SDPA_ERR_CUDA;
    }
    return st;
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  desc->attn.stream = s;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ex = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  sdpa_status st = gpu_fwd(desc);
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (st == SDPA_OK && e == cudaSuccess) e = cudaGraphInstantiate(&ex, g, 0);
  /* twice, the outputs poisoned between: the second replay must write them
   * all again (nothing of the first replay's may stand in for it) */
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1 && st == SDPA_OK && e == cudaSuccess) {
      CUDA_OK(cudaMemset(desc->out.data, 0xff, out_bytes));
      if (desc->lse.data) CUDA_OK(cudaMemset(desc->lse.data, 0xff, lse_bytes));
    }
    if (st == SDPA_OK && e == cudaSuccess) e = cudaGraphLaunch(ex, s);
    if (st == SDPA_OK && e == cudaSuccess) e = cudaStreamSynchronize(s);
  }
  if (ex) CUDA_OK(cudaGraphExecDestroy(ex));
  if (g) CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(s));
  desc->attn.stream = NULL;
  if (e != cudaSuccess) {
    printf("  graph error: %s\n", cudaGetErrorString(e));
    return SDPA_ERR_CUDA;
  }
  return st;
}

/* A host copy of the device buffer behind dev tensor t (host tensor h, its
 * twin), viewed as h: free .data with free(). */
static sdpa_tensor download_view(const case_bufs *b, const sdpa_tensor *h, const sdpa_tensor *t) {
  const int k = case_find(b, h->data);
  const char *base = (const char *)b->t[k].data;
  const size_t off = (size_t)((const char *)h->data - base);
  char *copy = malloc(b->bytes[k] ? b->bytes[k] : 1);
  if (b->bytes[k])
    CUDA_OK(cudaMemcpy(copy, (const char *)t->data - off, b->bytes[k], cudaMemcpyDeviceToHost));
  sdpa_tensor v = *h;
  v.data = copy + off;
  return v;
}
static void free_view(const case_bufs *b, const sdpa_tensor *h, sdpa_tensor *v) {
  const int k = case_find(b, h->data);
  free((char *)v->data - ((const char *)h->data - (const char *)b->t[k].data));
}

/* DEC_GRAPH_WS: the queried workspace passed (all ones: a caller's arena
 * holds anything); one byte short is refused naming the size, the cache
 * untouched (the append runs only after every check). Returns the
 * allocation (NULL on a failure, counted). */
static void *with_workspace(const dec_case *c, sdpa_fwd_desc *dev, const sdpa_fwd_desc *host,
                            const case_bufs *b) {
  size_t bytes = 0;
  TEST_EXPECT(sdpa_fwd_workspace_size(dev, &bytes) == SDPA_OK, "%s: workspace size: %s", c->name,
              sdpa_last_error());
  /* the answer passed as it is, 0 included, with a pointer (a caller's arena) */
  void *ws = NULL;
  CUDA_OK(cudaMalloc(&ws, bytes > 0 ? bytes : 16));
  CUDA_OK(cudaMemset(ws, 0xff, bytes > 0 ? bytes : 16));
  dev->workspace = ws;
  if (bytes > 0 && c->snew > 0) {
    dev->workspace_size = bytes - 1;
    TEST_EXPECT_ERROR(gpu_fwd(dev), SDPA_ERR_INVALID_ARGUMENT, "workspace_size",
                      "expected at least");
    CUDA_OK(cudaDeviceSynchronize());
    const sdpa_tensor *hc[2] = {&host->attn.k, &host->attn.v}, *dc[2] = {&dev->attn.k, &dev->attn.v};
    for (int x = 0; x < 2; ++x) {
      sdpa_tensor g = download_view(b, hc[x], dc[x]);
      char what[200];
      snprintf(what, sizeof what, "%s %c cache after the refused call", c->name, "kv"[x]);
      test_check_equal(what, &g, hc[x]);
      free_view(b, hc[x], &g);
    }
  }
  dev->workspace_size = bytes;
  printf("  workspace %zu bytes\n", bytes);
  return ws;
}

/* c->sweep: every forced split count equals the unsplit result (the append
 * is idempotent: the same rows land at the same places again). */
static void sweep(const dec_case *c, sdpa_fwd_desc *dev, const sdpa_fwd_desc *host,
                  const case_bufs *b) {
  const int64_t n_out = test_numel(&host->out), n_lse = test_numel(&host->lse);
  double *b1 = NULL, *bl = NULL;
  int bad = 0;
  for (int s = 1; s <= 64 && !bad; ++s) {
    dev->num_splits = s;
    const sdpa_status st = run_dev(dev, 0, 0, 0);
    if (!TEST_EXPECT(st == SDPA_OK, "%s: splits %d: %s", c->name, s, sdpa_last_error())) break;
    sdpa_tensor o1 = download_view(b, &host->out, &dev->out);
    sdpa_tensor l1 = download_view(b, &host->lse, &dev->lse);
    if (s == 1) {
      b1 = case_doubles(&o1);
      bl = case_doubles(&l1);
    } else {
      char what[200];
      snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
      bad |= !test_check(what, &o1, b1, NULL, test_atol(c->dt));
      snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
      bad |= !test_check(what, &l1, bl, NULL, test_lse_atol(bl, n_lse));
    }
    free_view(b, &host->out, &o1);
    free_view(b, &host->lse, &l1);
  }
  (void)n_out;
  dev->num_splits = c->splits;
  free(b1);
  free(bl);
}

/* dec_cuda_fn: upload, the call of the case's kind, download every buffer. */
static int cuda_decode(const dec_case *c, const sdpa_fwd_desc *host, case_bufs *b) {
  gpu_twins w;
  sdpa_fwd_desc dev = gpu_twins_fwd(&w, b, host);
  int ok = 0;
  if (c->kind == DEC_EXPLAIN) {
    char buf[4096];
    const sdpa_status st = sdpa_explain_fwd(&dev, buf, sizeof buf);
    printf("%s", buf);
    char want[128];
    snprintf(want, sizeof want, "selected: %s", c->explain_row);
    TEST_EXPECT(st == SDPA_OK && strstr(buf, want) != NULL, "explain: expected %s: %s",
                c->explain_row, sdpa_last_error());
  } else {
    if (c->hopper_row) { /* the case is there for that row: it must be the one selected */
      char buf[4096];
      const sdpa_status est = sdpa_explain_fwd(&dev, buf, sizeof buf);
      gpu_expect_hopper_row(c->name, est, buf, c->hopper_row, 1);
    }
    void *ws = c->kind == DEC_GRAPH_WS ? with_workspace(c, &dev, host, b) : NULL;
    const int graph = c->kind == DEC_GRAPH || c->kind == DEC_GRAPH_WS;
    const sdpa_status st =
        run_dev(&dev, graph, buf_bytes(b, host->out.data), buf_bytes(b, host->lse.data));
    ok = TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd on CUDA: %s (%s)", c->name,
                     sdpa_status_string(st), sdpa_last_error());
    if (ok) {
      gpu_twins_down(&w, b, 1); /* the outputs and the caches */
      if (c->sweep) sweep(c, &dev, host, b);
    }
    if (ws) CUDA_OK(cudaFree(ws));
  }
  gpu_twins_free(&w);
  return ok;
}

/* dec_merge_fn: merge_states on CUDA from the host descriptor. */
static int cuda_merge(const sdpa_merge_desc *host, case_bufs *b) {
  gpu_twins w;
  gpu_twins_up(&w, b);
  sdpa_merge_desc m = *host;
  m.device = SDPA_DEVICE_CUDA;
  sdpa_tensor *f[4] = {&m.out_parts, &m.lse_parts, &m.out, &m.lse};
  gpu_twin_fields(&w, b, f, 4);
  const sdpa_status st = sdpa_merge_states(&m);
  CUDA_OK(cudaDeviceSynchronize());
  const int ok = TEST_EXPECT(st == SDPA_OK, "merge_states on CUDA: %s", sdpa_last_error());
  if (ok) gpu_twins_down(&w, b, 0);
  gpu_twins_free(&w);
  return ok;
}

int main(int argc, char **argv) {
  test_rng rng;
  test_rng_init(&rng, test_seed());
  case_env env = case_env_init(argc, argv, ON_CUDA, ON_CPU | ON_CUDA, &rng);
  env.cpu_fwd = gpu_fwd; /* the CPU backend's calls checked against explain too */
  if (!env.list && !sdpa_cuda_available()) {
    printf("no usable CUDA device: skipped\n");
    return 0;
  }
  decode_cases_run(&env, cuda_decode, cuda_merge);
  return env.list ? 0 : test_summary();
}
