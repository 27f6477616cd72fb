/*
 * gpu_common.c - CUDA_OK's fatal path, the host/device `dual` tensors of
 * the GPU tests, the benchmarks' device tensors and median timing, the
 * relative-error measure of the fp32 (tf32) tests, the Hopper rows'
 * selection checks, and the calls checked against explain (gpu_common.h).
 */
#include "gpu_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/harness.h"
#include "registry.h"

void gpu_cuda_fatal(const char *file, int line, const char *call, cudaError_t e) {
  printf("FATAL %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
  exit(1);
}

static char explained_text[1 << 15];

/* st, after the check of the kernel that ran against explained_text's
 * "selected: <name>" line (explain's status: explained). */
static sdpa_status expect_ran(const char *op, sdpa_status explained, sdpa_status st) {
  const char *ran = sdpa_trace_take();
  if (st != SDPA_OK) return st;
  char chosen[128] = "";
  if (!TEST_EXPECT(explained == SDPA_OK &&
                       sscanf(explained_text, "selected: %127s", chosen) == 1,
                   "%s: the call succeeded but explain did not select a kernel: %.200s", op,
                   explained_text))
    return st;
  TEST_EXPECT(ran != NULL && strcmp(ran, chosen) == 0, "%s: explain selected %s, %s ran", op,
              chosen, ran ? ran : "no kernel");
  return st;
}

sdpa_status gpu_fwd(const sdpa_fwd_desc *desc) {
  const sdpa_status ex = sdpa_explain_fwd(desc, explained_text, sizeof explained_text);
  (void)sdpa_trace_take();
  return expect_ran("sdpa_fwd", ex, sdpa_fwd(desc));
}

sdpa_status gpu_bwd(const sdpa_bwd_desc *desc) {
  const sdpa_status ex = sdpa_explain_bwd(desc, explained_text, sizeof explained_text);
  (void)sdpa_trace_take();
  return expect_ran("sdpa_bwd", ex, sdpa_bwd(desc));
}

dual dual_alloc(sdpa_dtype dt, int rank, const int64_t *shape, int rows16, int64_t pad) {
  dual x;
  memset(&x, 0, sizeof x);
  sdpa_tensor *t = &x.h;
  const size_t es = sdpa_dtype_size(dt);
  t->dtype = dt;
  t->rank = rank;
  int64_t stride = 1, span = 1;
  for (int k = rank - 1; k >= 0; --k) {
    t->shape[k] = shape[k];
    t->stride[k] = stride;
    if (shape[k] == 0) span = 0;
    if (span) span += (shape[k] - 1) * stride;
    if (!rows16)
      stride *= shape[k];
    else if (k == rank - 1)
      stride = (shape[k] + 7) / 8 * 8 + pad;
    else
      stride = stride * shape[k] + pad;
  }
  x.bytes = (size_t)span * es;
  t->data = malloc(x.bytes ? x.bytes : 16);
  test_poison(t);
  x.d = *t;
  CUDA_OK(cudaMalloc(&x.d.data, x.bytes ? x.bytes : 16));
  return x;
}

void dual_upload(dual *x) {
  if (x->h.data && x->bytes)
    CUDA_OK(cudaMemcpy(x->d.data, x->h.data, x->bytes, cudaMemcpyHostToDevice));
}

void dual_download(dual *x) {
  if (x->h.data && x->bytes)
    CUDA_OK(cudaMemcpy(x->h.data, x->d.data, x->bytes, cudaMemcpyDeviceToHost));
}

void dual_free(dual *x) {
  if (x->h.data) {
    free(x->h.data);
    CUDA_OK(cudaFree(x->d.data));
  }
  memset(x, 0, sizeof *x);
}

void gpu_twins_up(gpu_twins *w, const case_bufs *b) {
  memset(w, 0, sizeof *w);
  for (int k = 0; k < b->n; ++k) {
    const size_t alloc = (b->bytes[k] + 15) & ~(size_t)15;
    CUDA_OK(cudaMalloc(&w->dev[k], alloc ? alloc : 16));
    if (b->bytes[k])
      CUDA_OK(cudaMemcpy(w->dev[k], b->t[k].data, b->bytes[k], cudaMemcpyHostToDevice));
  }
  w->n = b->n;
}

void *gpu_twin_ptr(const gpu_twins *w, const case_bufs *b, const void *p) {
  const int k = case_find(b, p);
  if (k < 0 || k >= w->n) {
    printf("FATAL gpu_twin_ptr: %p is in no buffer of the case\n", p);
    exit(1);
  }
  return (char *)w->dev[k] + ((const char *)p - (const char *)b->t[k].data);
}

void gpu_twin_fields(const gpu_twins *w, const case_bufs *b, sdpa_tensor **f, int n) {
  for (int k = 0; k < n; ++k)
    if (f[k]->data) f[k]->data = gpu_twin_ptr(w, b, f[k]->data);
}

/* attn on the device and its tensors (n fields in f) on the twins of b's
 * buffers, uploaded into w: what both descriptors' twins do. */
static void twin_desc(gpu_twins *w, const case_bufs *b, sdpa_attn *attn, sdpa_tensor **f, int n) {
  gpu_twins_up(w, b);
  attn->device = SDPA_DEVICE_CUDA;
  gpu_twin_fields(w, b, f, n);
}

sdpa_fwd_desc gpu_twins_fwd(gpu_twins *w, const case_bufs *b, const sdpa_fwd_desc *host) {
  sdpa_fwd_desc d = *host;
  sdpa_tensor *f[32];
  twin_desc(w, b, &d.attn, f, case_fwd_fields(&d, f));
  return d;
}

sdpa_bwd_desc gpu_twins_bwd(gpu_twins *w, const case_bufs *b, const sdpa_bwd_desc *host) {
  sdpa_bwd_desc d = *host;
  sdpa_tensor *f[32];
  twin_desc(w, b, &d.attn, f, case_bwd_fields(&d, f));
  return d;
}

void gpu_twins_down(const gpu_twins *w, case_bufs *b, int all) {
  for (int k = 0; k < w->n; ++k)
    if ((all || b->out[k]) && b->bytes[k])
      CUDA_OK(cudaMemcpy(b->t[k].data, w->dev[k], b->bytes[k], cudaMemcpyDeviceToHost));
}

void gpu_twins_free(gpu_twins *w) {
  for (int k = 0; k < w->n; ++k) CUDA_OK(cudaFree(w->dev[k]));
  memset(w, 0, sizeof *w);
}

void gpu_bench_alloc(const void *host, size_t n, size_t es, void *buf[4]) {
  static const size_t shift[3] = {0, 7, 13};
  for (int k = 0; k < 4; ++k) CUDA_OK(cudaMalloc(&buf[k], n * es));
  for (int k = 0; k < 3; ++k)
    CUDA_OK(cudaMemcpy(buf[k], (const char *)host + shift[k] * es, (n - shift[k]) * es,
                       cudaMemcpyHostToDevice));
}

void gpu_bench_free(void *buf[4]) {
  for (int k = 0; k < 4; ++k) CUDA_OK(cudaFree(buf[k]));
}

sdpa_fwd_desc gpu_bench_desc(void *buf[4], sdpa_dtype dt, const int64_t shape[4]) {
  sdpa_fwd_desc desc;
  sdpa_fwd_init(&desc);
  desc.attn.device = SDPA_DEVICE_CUDA;
  desc.attn.q = sdpa_tensor_contiguous(buf[0], dt, 4, shape);
  desc.attn.k = sdpa_tensor_contiguous(buf[1], dt, 4, shape);
  desc.attn.v = sdpa_tensor_contiguous(buf[2], dt, 4, shape);
  desc.out = sdpa_tensor_contiguous(buf[3], dt, 4, shape);
  return desc;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static sdpa_status gpu_call(const sdpa_fwd_desc *fwd, const sdpa_bwd_desc *bwd) {
  return fwd ? sdpa_fwd(fwd) : sdpa_bwd(bwd);
}

double gpu_median_ms(const sdpa_fwd_desc *fwd, const sdpa_bwd_desc *bwd, int warmup, int reps) {
  for (int it = 0; it < warmup; ++it)
    if (gpu_call(fwd, bwd) != SDPA_OK) return -1.0;
  float *ms = malloc(sizeof(float) * (size_t)reps);
  if (!ms) {
    printf("FATAL gpu_median_ms: out of host memory\n");
    exit(1);
  }
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  int ok = 1;
  for (int r = 0; r < reps && ok; ++r) {
    CUDA_OK(cudaEventRecord(e0, 0));
    ok = gpu_call(fwd, bwd) == SDPA_OK;
    CUDA_OK(cudaEventRecord(e1, 0));
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(&ms[r], e0, e1));
  }
  CUDA_OK(cudaEventDestroy(e0));
  CUDA_OK(cudaEventDestroy(e1));
  double med = -1.0;
  if (ok) {
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  }
  free(ms);
  return med;
}

/* max |got - ref| / max |ref| over the finite refs; equal values (inf == inf)
 * count 0, NaN (or the poison) fails. */
double gpu_rel_error(const sdpa_tensor *got, const double *ref) {
  const int64_t n = test_numel(got);
  const double m = test_max_abs(ref, n);
  double err = 0.0;
  for (int64_t e = 0; e < n; ++e) {
    const double x = test_get(got, e);
    const double dx = x == ref[e] ? 0.0 : fabs(x - ref[e]);
    if (!(dx <= err)) err = dx; /* NaN sticks */
  }
  return m > 0.0 ? err / m : err;
}

int gpu_sm90_lists(const char *name, sdpa_status explain_status, const char *explain,
                   const char *row) {
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major != 9) return 0;
  if (!TEST_EXPECT(explain_status == SDPA_OK, "%s: explain failed on an sm_90 device: %s", name,
                   sdpa_last_error()))
    return 0;
  return strstr(explain, row) != NULL;
}

/* 1 when explain lists `row` as a whole name (not only as the prefix of a
 * longer one: bwd_sm90_f16_hd192 of bwd_sm90_f16_hd192_dv128) */
static int lists_whole(const char *explain, const char *row) {
  const size_t n = strlen(row);
  for (const char *at = strstr(explain, row); at; at = strstr(at + 1, row)) {
    const char c = at[n];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return 1;
  }
  return 0;
}

void gpu_expect_declined(const char *name, const char *explain, const char *line_key,
                         const char *why, const char *selected, const char *runs) {
  char sel[160], note[160];
  snprintf(sel, sizeof sel, "selected: %s\n", selected);
  snprintf(note, sizeof note, "runs %s on", runs ? runs : "");
  const char *line = strstr(explain, line_key), *eol = line ? strchr(line, '\n') : NULL;
  const char *hit = line ? strstr(line, why) : NULL;
  TEST_EXPECT(strncmp(explain, sel, strlen(sel)) == 0 && hit && hit < eol &&
                  (!runs || strstr(explain, note)),
              "%s: expected %s, with %s declining: '%s'%s%s:\n%s", name, selected, line_key, why,
              runs ? ", running " : "", runs ? runs : "", explain);
}

void gpu_expect_hopper_row(const char *name, sdpa_status explain_status, const char *explain,
                           const char *prefix, int whole) {
  if (!gpu_sm90_lists(name, explain_status, explain, prefix)) return;
  if (whole && !lists_whole(explain, prefix)) return; /* a build without the row */
  char want[128];
  snprintf(want, sizeof want, "selected: %s%s", prefix, whole ? "\n" : "");
  TEST_EXPECT(strncmp(explain, want, strlen(want)) == 0, "%s: should select %s%s%s:\n%s", name,
              whole ? "" : "a ", prefix, whole ? "" : " row", explain);
}
