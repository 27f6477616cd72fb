/*
 * gpu_common.h - what the GPU tests share: CUDA_OK (a failed CUDA call in a
 * test is fatal: the run stops with the call and its error), and `dual`, a
 * host tensor under the harness's conventions (poisoned, any strides) paired
 * with a device allocation of the same span and strides, so a case builds
 * its inputs on the host, uploads, calls sdpa on the device and downloads the
 * outputs for the oracle checks; the device tensors of the benchmarks and
 * their median timing; the relative-error measure of the fp32 (tf32) tests;
 * the Hopper rows' selection checks; the calls that check explain against
 * the kernel that ran.
 */
#ifndef SDPA_TEST_GPU_COMMON_H
#define SDPA_TEST_GPU_COMMON_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "common/cases.h"
#include "sdpa.h"

void gpu_cuda_fatal(const char *file, int line, const char *call, cudaError_t e);

#define CUDA_OK(call)                                                     \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess) gpu_cuda_fatal(__FILE__, __LINE__, #call, e_); \
  } while (0)

typedef struct dual {
  sdpa_tensor h, d;
  size_t bytes;
} dual;

/* Row-major; with rows16 the last dim's stride is rounded up to 8 elements
 * (16-byte rows, as the fast CUDA rows need) and `pad` (a multiple of 8) is
 * added to every stride; without it the tensor is contiguous. */
dual dual_alloc(sdpa_dtype dt, int rank, const int64_t *shape, int rows16, int64_t pad);
void dual_upload(dual *x);
void dual_download(dual *x);
void dual_free(dual *x); /* accepts a zeroed dual */

/* Device twins of a case's host buffers (tests/common/cases.h): each buffer
 * copied whole (its padding too) into an allocation of whole 16-byte chunks
 * (the kernels copy aligned chunks whole: compute-sanitizer counts a chunk's
 * bytes past the allocation as read), and the descriptors of the case with
 * their tensors pointing at the twins (the same offsets and strides). */
typedef struct gpu_twins {
  int n;
  void *dev[CASE_MAX_BUFS];
} gpu_twins;
/* Uploads every buffer of b. */
void gpu_twins_up(gpu_twins *w, const case_bufs *b);
/* Uploads every buffer of b (gpu_twins_up) and returns host with
 * SDPA_DEVICE_CUDA and every tensor on its twin. */
sdpa_fwd_desc gpu_twins_fwd(gpu_twins *w, const case_bufs *b, const sdpa_fwd_desc *host);
sdpa_bwd_desc gpu_twins_bwd(gpu_twins *w, const case_bufs *b, const sdpa_bwd_desc *host);
/* The device address of host address p (inside one of b's buffers). */
void *gpu_twin_ptr(const gpu_twins *w, const case_bufs *b, const void *p);
/* Every non-NULL tensor of f[0..n) moved onto its twin. */
void gpu_twin_fields(const gpu_twins *w, const case_bufs *b, sdpa_tensor **f, int n);
/* Brings back the outputs (b->out) or every buffer (all). */
void gpu_twins_down(const gpu_twins *w, case_bufs *b, int all);
void gpu_twins_free(gpu_twins *w);

/* The Hopper rows' selection check: on an sm_90 device the explain call must
 * have succeeded and, when its text lists a row whose name starts with prefix
 * (the build has them), the problem must have selected one, or with whole
 * the row named prefix itself (a test failure naming the case otherwise). */
void gpu_expect_hopper_row(const char *name, sdpa_status explain_status, const char *explain,
                           const char *prefix, int whole);
/* A declined row's check: explain's text must select `selected` and the
 * line starting with `line_key` (the declining row's) must say `why`; with
 * `runs` (the staged rows) the text must also name that row as the one run
 * on aligned copies. A test failure naming `name` otherwise. */
void gpu_expect_declined(const char *name, const char *explain, const char *line_key,
                         const char *why, const char *selected, const char *runs);
/* 1 on a device of compute capability 9 whose explain text lists `row` (a row
 * name, or the start of one): the build has the row and the GPU can run it.
 * There the explain call (explain_status) must have succeeded: a test failure
 * naming `name` otherwise, and 0. */
int gpu_sm90_lists(const char *name, sdpa_status explain_status, const char *explain,
                   const char *row);

/* sdpa_fwd / sdpa_bwd, and where the call succeeds a test failure unless the
 * kernel that ran (the name its run function gave, sdpa_trace_take) is the
 * one sdpa_explain_* selected for the same descriptor just before: the
 * registry is the only dispatcher. Every GPU test calls through these. */
sdpa_status gpu_fwd(const sdpa_fwd_desc *desc);
sdpa_status gpu_bwd(const sdpa_bwd_desc *desc);

/* Benchmark tensors: buf[0..3] = q, k, v, out, n elements of es bytes each
 * on the device; q, k and v hold host[0..n) shifted by 0, 7 and 13 elements
 * (so the three differ; the tail is left as cudaMalloc returned it). */
void gpu_bench_alloc(const void *host, size_t n, size_t es, void *buf[4]);
void gpu_bench_free(void *buf[4]);
/* A forward on them: dense [b, s, h, d] = shape of dtype dt on CUDA, the
 * rest as sdpa_fwd_init leaves it. */
sdpa_fwd_desc gpu_bench_desc(void *buf[4], sdpa_dtype dt, const int64_t shape[4]);
/* Median milliseconds (CUDA events on the default stream) of `reps` calls of
 * sdpa_fwd(fwd) or, with fwd NULL, sdpa_bwd(bwd), after `warmup` untimed
 * calls; -1 if any call fails (sdpa_last_error() says why). */
double gpu_median_ms(const sdpa_fwd_desc *fwd, const sdpa_bwd_desc *bwd, int warmup, int reps);
/* max |got - ref| / max |ref| over the finite refs (the fp32 rows' accuracy
 * measure); equal values (inf == inf) count 0, NaN (or the poison) gives NaN. */
double gpu_rel_error(const sdpa_tensor *got, const double *ref);

#endif /* SDPA_TEST_GPU_COMMON_H */
