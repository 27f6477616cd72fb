/*
 * cli_run.c - `sdpa run` and `sdpa explain`. run: build the problem, ask the
 * registry which kernel it gets, run a warm-up and --iters timed calls
 * (wall clock on the CPU, CUDA events on the GPU; the median is reported),
 * then check the outputs against the oracle. With --bwd the same for the
 * backward, fed by the forward's out and lse.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/dtype.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"

#ifdef SDPA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { EXPLAIN_BUF = 1 << 16 };

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int device_ok(const char *cmd, const cli_opts *o) {
  if (o->device != SDPA_DEVICE_CUDA) return CLI_OK;
#ifdef SDPA_HAVE_CUDA
  if (sdpa_cuda_available()) return CLI_OK;
  fprintf(stderr, "sdpa %s: --device cuda: no CUDA device is visible\n", cmd);
#else
  fprintf(stderr, "sdpa %s: --device cuda: this build has no CUDA backend\n", cmd);
#endif
  return CLI_FAIL;
}

static void print_device(const cli_opts *o) {
  if (o->device == SDPA_DEVICE_CPU) {
    printf("device:   cpu, %d threads, tile products by %s\n", sdpa_cpu_resolve_threads(o->threads),
           sdpa_cpu_gemm_impl());
    return;
  }
#ifdef SDPA_HAVE_CUDA
  int dev = 0;
  struct cudaDeviceProp prop;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    printf("device:   cuda:%d %s (sm_%d%d, %d SMs)\n", dev, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
  else
    printf("device:   cuda (properties unavailable)\n");
#endif
}

/* The first line of the explanation names the kernel that runs ("selected: NAME"). */
static void print_kernel(const char *label, const char *expl) {
  const char *nl = strchr(expl, '\n');
  int n = nl ? (int)(nl - expl) : (int)strlen(expl);
  static const char prefix[] = "selected: ";
  if (!strncmp(expl, prefix, sizeof prefix - 1)) expl += sizeof prefix - 1, n -= (int)sizeof prefix - 1;
  printf("%-9s %.*s\n", label, n, expl);
}

/* One call of the forward (bwd = 0) or backward. */
static sdpa_status call(const sdpa_fwd_desc *fd, const sdpa_bwd_desc *bd, int bwd) {
  return bwd ? sdpa_bwd(bd) : sdpa_fwd(fd);
}

/* Warm-up and iters timed calls; writes the median seconds. */
static int time_calls(cli_problem *P, const sdpa_fwd_desc *fd, const sdpa_bwd_desc *bd, int bwd,
                      double *median) {
  const int iters = P->o.iters;
  const char *what = bwd ? "sdpa_bwd" : "sdpa_fwd";
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return CLI_FAIL;
  double t0 = cli_now();
  sdpa_status st = call(fd, bd, bwd); /* warm-up: first-touch, thread start, lazy setup */
#ifdef SDPA_HAVE_CUDA
  if (st == SDPA_OK && P->device == SDPA_DEVICE_CUDA) {
    st = call(fd, bd, bwd);
    cudaDeviceSynchronize();
  }
#endif
  if (st != SDPA_OK) {
    free(t);
    return cli_library_error("run", what, st);
  }
  double warm = cli_now() - t0;
  if (warm * iters > 1.0)
    fprintf(stderr, "running %d %s iterations (about %.0f s)...\n", iters, bwd ? "backward" : "forward",
            warm * iters);
  if (P->device == SDPA_DEVICE_CPU) {
    for (int i = 0; i < iters && st == SDPA_OK; ++i) {
      double s = cli_now();
      st = call(fd, bd, bwd);
      t[i] = cli_now() - s;
    }
  }
#ifdef SDPA_HAVE_CUDA
  else {
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)iters);
    if (!ev) {
      free(t);
      return CLI_FAIL;
    }
    for (int i = 0; i < 2 * iters; ++i) cudaEventCreate(&ev[i]);
    for (int i = 0; i < iters && st == SDPA_OK; ++i) {
      cudaEventRecord(ev[2 * i], NULL);
      st = call(fd, bd, bwd);
      cudaEventRecord(ev[2 * i + 1], NULL);
    }
    cudaError_t ce = cudaDeviceSynchronize();
    for (int i = 0; i < iters && st == SDPA_OK && ce == cudaSuccess; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
      t[i] = 1e-3 * ms;
    }
    for (int i = 0; i < 2 * iters; ++i) cudaEventDestroy(ev[i]);
    free(ev);
    if (st == SDPA_OK && ce != cudaSuccess) {
      fprintf(stderr, "sdpa run: %s on the device failed: %s\n", what, cudaGetErrorString(ce));
      free(t);
      return CLI_FAIL;
    }
  }
#endif
  if (st != SDPA_OK) {
    free(t);
    return cli_library_error("run", what, st);
  }
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  *median = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
  free(t);
  return CLI_OK;
}

/* Bytes of K/V a decoding call reads (the cache's visible rows plus the new ones). */
static double kv_bytes(const cli_problem *P) {
  const cli_opts *o = &P->o;
  double rows = 0;
  for (int64_t i = 0; i < o->b; ++i)
    rows += (double)((const int32_t *)P->cache_seqlens.t.data)[i] + (double)o->new_kv;
  return rows * (double)o->h_k * (double)(o->d + o->d_v) * (double)sdpa_dtype_size(o->dtype);
}

int cli_cmd_run(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse("run", argc, argv, &o);
  if (rc != CLI_OK) return rc;
  if ((rc = device_ok("run", &o)) != CLI_OK) return rc;
  char desc[512];
  cli_describe(&o, desc, sizeof desc);
  printf("problem:  %s\n", desc);
  print_device(&o);

  cli_problem P;
  if ((rc = cli_problem_build(&P, &o, (sdpa_device)o.device, 1)) != CLI_OK) return rc;
  sdpa_fwd_desc fd;
  sdpa_bwd_desc bd;
  cli_problem_desc(&P, 1, &fd, &bd);
  char *expl = malloc(EXPLAIN_BUF);
  if (!expl) goto fail;
  sdpa_status st = sdpa_explain_fwd(&fd, expl, EXPLAIN_BUF);
  if (st != SDPA_OK) {
    rc = cli_library_error("run", "sdpa_explain_fwd", st);
    goto done;
  }
  print_kernel("kernel:", expl);

  const double flops = cli_problem_flops(&P);
  double med = 0;
  if (cli_problem_poison(&P, 0) != CLI_OK || (rc = time_calls(&P, &fd, &bd, 0, &med)) != CLI_OK)
    goto fail;
  printf("forward:  %.3f ms median of %d, %.3f TFLOP/s", 1e3 * med, o.iters, flops / med * 1e-12);
  if (o.cache >= 0) printf(", %.1f GB/s of K/V", kv_bytes(&P) / med * 1e-9);
  printf("   (FLOPs 2*(d+d_v) per (query, key) pair the mask keeps, times b*h)\n");
  if (cli_problem_download(&P, 0) != CLI_OK) goto fail;
  int pass = 1;
  if (o.check) pass &= cli_check(&P, 0) == CLI_OK;

  if (o.bwd) {
    st = sdpa_explain_bwd(&bd, expl, EXPLAIN_BUF);
    if (st != SDPA_OK) {
      rc = cli_library_error("run", "sdpa_explain_bwd", st);
      goto done;
    }
    print_kernel("bwd kernel:", expl);
    if (cli_problem_poison(&P, 1) != CLI_OK || (rc = time_calls(&P, &fd, &bd, 1, &med)) != CLI_OK)
      goto fail;
    printf("backward: %.3f ms median of %d, %.3f TFLOP/s   (FLOPs 2.5 x forward)\n", 1e3 * med,
           o.iters, 2.5 * flops / med * 1e-12);
    if (cli_problem_download(&P, 1) != CLI_OK) goto fail;
    if (o.check) pass &= cli_check(&P, 1) == CLI_OK;
  }
  if (o.check) printf("%s\n", pass ? "PASS" : "FAIL");
  rc = pass ? CLI_OK : CLI_FAIL;
  goto done;
fail:
  if (rc == CLI_OK) rc = CLI_FAIL;
done:
  free(expl);
  cli_problem_free(&P);
  return rc;
}

int cli_cmd_explain(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse("explain", argc, argv, &o);
  if (rc != CLI_OK) return rc;
  if ((rc = device_ok("explain", &o)) != CLI_OK) return rc;
  cli_problem P;
  if ((rc = cli_problem_build(&P, &o, (sdpa_device)o.device, 0)) != CLI_OK) return rc;
  sdpa_fwd_desc fd;
  sdpa_bwd_desc bd;
  cli_problem_desc(&P, 1, &fd, &bd);
  char *expl = malloc(EXPLAIN_BUF);
  char desc[512];
  cli_describe(&o, desc, sizeof desc);
  printf("problem: %s on %s\n", desc, o.device == SDPA_DEVICE_CUDA ? "cuda" : "cpu");
  sdpa_status st = expl ? sdpa_explain_fwd(&fd, expl, EXPLAIN_BUF) : SDPA_ERR_OUT_OF_MEMORY;
  if (st != SDPA_OK) {
    rc = cli_library_error("explain", "sdpa_explain_fwd", st);
  } else {
    printf("forward:\n%s%s", expl, expl[0] && expl[strlen(expl) - 1] == '\n' ? "" : "\n");
    if (o.bwd) {
      st = sdpa_explain_bwd(&bd, expl, EXPLAIN_BUF);
      if (st != SDPA_OK)
        rc = cli_library_error("explain", "sdpa_explain_bwd", st);
      else
        printf("backward:\n%s%s", expl, expl[0] && expl[strlen(expl) - 1] == '\n' ? "" : "\n");
    }
  }
  free(expl);
  cli_problem_free(&P);
  return rc;
}
