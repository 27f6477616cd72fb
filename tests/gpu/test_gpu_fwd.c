/*
 * test_gpu_fwd.c - the CUDA forward through the public API against the fp64
 * oracle and against the CPU backend on the same inputs: every head-dim
 * bucket (d = 1 .. 256) in f16 and bf16, GQA 1 / 2 / 8, lengths off the tile
 * grid (s = 1, s_q > s_k), causal in both alignments, windows, alibi [h] and
 * [b, h], softcap, an additive bias (full, broadcast over b / h / s_q, -inf
 * entries and rows, rows not 16-byte aligned, with every other modifier),
 * varlen with an empty sequence and seqused_k, dropout with
 * the probs sign pattern checked bit for bit against ref_dropped, padded
 * strides, fully masked rows, what the CUDA rows refuse (d != d_v, rows not
 * 16-byte aligned), the Hopper rows (fwd_sm90_*, selected on sm_90: every
 * bucket, GQA, masks, modifiers, padded strides), and one CUDA-graph capture
 * on a non-default stream (on sm_90 of a Hopper row).
 *
 *   test_gpu_fwd            the whole matrix
 *   test_gpu_fwd --small    one small problem per kernel instance (fast and
 *                           full variants of every row), for compute-sanitizer
 *   test_gpu_fwd --bench    timing: bf16, b*s = 16k, h*d = 2048, median of 20
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/harness.h"
#include "gpu/gpu_common.h"
#include "ref/ref.h"

static test_rng rng;


/* ---- tensors that live on both sides -------------------------------------------- */

/* Index tensors and f32 side tensors (pad < 0) contiguous; the rest with
 * 16-byte rows plus `pad` (a multiple of 8) on every stride. */
static dual alloc_rows16(sdpa_dtype dt, int rank, const int64_t *shape, int64_t pad) {
  const int rows16 = !(dt == SDPA_DTYPE_I32 || (dt == SDPA_DTYPE_F32 && pad < 0));
  return dual_alloc(dt, rank, shape, rows16, pad > 0 ? pad : 0);
}

/* ---- cases --------------------------------------------------------------------------- */

typedef struct gcase {
  const char *name;
  sdpa_dtype dtype;
  int64_t b, h, h_k, s_q, s_k, d, d_v;
  int causal, top_left;
  int64_t wl, wr;
  float softcap, scale;
  int alibi;      /* 0 off, 1 [h], 2 [b, h] */
  float dropout;
  int probs;
  int varlen;     /* cu_seqlens with an empty sequence, seqused_k on the last */
  int64_t pad;    /* extra elements (multiple of 8) on every stride */
  int compare_cpu;
  int bias;        /* 1: bias [b|1, h|1, s_q|1, s_k] */
  int bias_bc;     /* broadcast dims: 1 over b, 2 over h, 4 over s_q */
  int bias_inf;    /* ~10% of the entries -inf, and row 0 of (b, h) = (0, 0) all -inf */
  int bias_packed; /* rows s_k apart (not 16-byte aligned when s_k % 8 != 0) */
  int sm90;        /* on sm_90 (a build with the Hopper rows) explain must select fwd_sm90 */
} gcase;

static gcase base_case(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t h_k,
                       int64_t s_q, int64_t s_k, int64_t d) {
  gcase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.dtype = dt;
  c.b = b;
  c.h = h;
  c.h_k = h_k;
  c.s_q = s_q;
  c.s_k = s_k;
  c.d = c.d_v = d;
  c.wl = c.wr = -1;
  c.compare_cpu = 1;
  return c;
}

typedef struct gbufs {
  dual q, k, v, out, lse, probs, alibi, cu_q, cu_k, used, bias;
  sdpa_fwd_desc host, dev; /* same problem: host pointers (oracle, CPU) / device pointers */
} gbufs;

static void build(const gcase *c, gbufs *f) {
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->host);
  sdpa_attn *a = &f->host.attn;
  a->device = SDPA_DEVICE_CPU;
  if (c->varlen) {
    int64_t shape1[1] = {c->b + 1}, shapeb[1] = {c->b};
    f->cu_q = alloc_rows16(SDPA_DTYPE_I32, 1, shape1, 0);
    f->cu_k = alloc_rows16(SDPA_DTYPE_I32, 1, shape1, 0);
    f->used = alloc_rows16(SDPA_DTYPE_I32, 1, shapeb, 0);
    int32_t *cq = (int32_t *)f->cu_q.h.data, *ck = (int32_t *)f->cu_k.h.data;
    int32_t *us = (int32_t *)f->used.h.data;
    cq[0] = ck[0] = 0;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      int64_t lq = b == 1 ? 0 : test_rng_int(&rng, 1, c->s_q);
      int64_t lk = b == 1 ? 0 : test_rng_int(&rng, 1, c->s_k);
      if (b == 2) lk = 0; /* keys empty, queries not: rows with no visible key */
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > mq) mq = lq;
      if (lk > mk) mk = lk;
    }
    int64_t tq = cq[c->b], tk = ck[c->b];
    int64_t sq[3] = {tq, c->h, c->d}, sk[3] = {tk, c->h_k, c->d}, sv[3] = {tk, c->h_k, c->d_v};
    int64_t so[3] = {tq, c->h, c->d_v}, sl[2] = {c->h, tq};
    f->q = alloc_rows16(c->dtype, 3, sq, c->pad);
    f->k = alloc_rows16(c->dtype, 3, sk, c->pad);
    f->v = alloc_rows16(c->dtype, 3, sv, c->pad);
    f->out = alloc_rows16(c->dtype, 3, so, c->pad);
    f->lse = alloc_rows16(SDPA_DTYPE_F32, 2, sl, -1);
    a->cu_seqlens_q = f->cu_q.h;
    a->cu_seqlens_k = f->cu_k.h;
    a->seqused_k = f->used.h;
    a->max_seqlen_q = mq;
    a->max_seqlen_k = mk;
  } else {
    int64_t sq[4] = {c->b, c->s_q, c->h, c->d}, sk[4] = {c->b, c->s_k, c->h_k, c->d};
    int64_t sv[4] = {c->b, c->s_k, c->h_k, c->d_v}, so[4] = {c->b, c->s_q, c->h, c->d_v};
    int64_t sl[3] = {c->b, c->h, c->s_q};
    f->q = alloc_rows16(c->dtype, 4, sq, c->pad);
    f->k = alloc_rows16(c->dtype, 4, sk, c->pad);
    f->v = alloc_rows16(c->dtype, 4, sv, c->pad);
    f->out = alloc_rows16(c->dtype, 4, so, c->pad);
    f->lse = alloc_rows16(SDPA_DTYPE_F32, 3, sl, -1);
  }
  test_fill_normal(&f->q.h, &rng, 1.0);
  test_fill_normal(&f->k.h, &rng, 1.0);
  test_fill_normal(&f->v.h, &rng, 1.0);
  a->q = f->q.h;
  a->k = f->k.h;
  a->v = f->v.h;
  f->host.out = f->out.h;
  f->host.lse = f->lse.h;
  a->scale = c->scale;
  a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (!c->causal) {
    a->window_left = c->wl;
    a->window_right = c->wr;
  }
  if (c->alibi) {
    int64_t s1[1] = {c->h}, s2[2] = {c->b, c->h};
    f->alibi = c->alibi == 1 ? alloc_rows16(SDPA_DTYPE_F32, 1, s1, -1)
                             : alloc_rows16(SDPA_DTYPE_F32, 2, s2, -1);
    test_fill_uniform(&f->alibi.h, &rng, 0.0, 0.5);
    a->alibi_slopes = f->alibi.h;
  }
  if (c->bias) {
    int64_t sb[4] = {c->bias_bc & 1 ? 1 : c->b, c->bias_bc & 2 ? 1 : c->h,
                     c->bias_bc & 4 ? 1 : c->s_q, c->s_k};
    f->bias = alloc_rows16(c->dtype, 4, sb, c->pad);
    if (c->bias_packed)
      for (int64_t k = 3, st = 1; k >= 0; st *= sb[k], --k)
        f->bias.h.stride[k] = f->bias.d.stride[k] = st;
    test_fill_normal(&f->bias.h, &rng, 2.0);
    if (c->bias_inf) {
      for (int64_t e = 0; e < test_numel(&f->bias.h); ++e)
        if (e < c->s_k || test_rng_int(&rng, 0, 9) == 0) test_set(&f->bias.h, e, -INFINITY);
    }
    a->bias = f->bias.h;
  }
  a->dropout_p = c->dropout;
  a->dropout_seed = 0x1234567890abcdefull ^ test_rng_u64(&rng);
  a->dropout_offset = (uint32_t)test_rng_u64(&rng);
  if (c->probs) {
    int64_t sp[4] = {c->b, c->h, c->s_q, c->s_k};
    f->probs = alloc_rows16(SDPA_DTYPE_F32, 4, sp, -1);
    f->host.probs = f->probs.h;
  }
  /* device side: same descriptor, device pointers, everything uploaded
   * (outputs poisoned) */
  dual *all[11] = {&f->q,     &f->k,    &f->v,    &f->out,  &f->lse, &f->probs,
                   &f->alibi, &f->cu_q, &f->cu_k, &f->used, &f->bias};
  for (int k = 0; k < 11; ++k) dual_upload(all[k]);
  f->dev = f->host;
  sdpa_attn *ad = &f->dev.attn;
  ad->device = SDPA_DEVICE_CUDA;
  ad->q = f->q.d;
  ad->k = f->k.d;
  ad->v = f->v.d;
  f->dev.out = f->out.d;
  f->dev.lse = f->lse.d;
  if (c->alibi) ad->alibi_slopes = f->alibi.d;
  if (c->bias) ad->bias = f->bias.d;
  if (c->probs) f->dev.probs = f->probs.d;
  if (c->varlen) {
    ad->cu_seqlens_q = f->cu_q.d;
    ad->cu_seqlens_k = f->cu_k.d;
    ad->seqused_k = f->used.d;
  }
}

static void release(gbufs *f) {
  dual *all[11] = {&f->q,     &f->k,    &f->v,    &f->out,  &f->lse, &f->probs,
                   &f->alibi, &f->cu_q, &f->cu_k, &f->used, &f->bias};
  for (int k = 0; k < 11; ++k) dual_free(all[k]);
}

/* Copies the device results back and checks them against the oracle (and
 * the CPU backend on the same inputs when asked). */
static void check_results(const gcase *c, gbufs *f) {
  dual_download(&f->out);
  dual_download(&f->lse);
  if (c->probs) dual_download(&f->probs);
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_fwd(&f->host, &p) == SDPA_OK, "%s: validate: %s", c->name,
                   sdpa_last_error()))
    return;
  int64_t n_out = test_numel(&f->out.h), n_lse = test_numel(&f->lse.h);
  int64_t n_p = c->probs ? test_numel(&f->probs.h) : 0;
  double *ro = malloc(sizeof(double) * (size_t)n_out), *lo = malloc(sizeof(double) * (size_t)n_out);
  double *rl = malloc(sizeof(double) * (size_t)n_lse), *ll = malloc(sizeof(double) * (size_t)n_lse);
  double *rp = n_p ? malloc(sizeof(double) * (size_t)n_p) : NULL;
  ref_fwd(&p, 0, ro, rl, rp);
  ref_fwd(&p, 1, lo, ll, NULL);
  char what[200];
  snprintf(what, sizeof what, "%s out", c->name);
  test_check(what, &f->out.h, ro, lo, test_atol(c->dtype));
  snprintf(what, sizeof what, "%s lse", c->name);
  test_check(what, &f->lse.h, rl, ll, test_lse_atol(rl, n_lse));
  if (n_p) {
    snprintf(what, sizeof what, "%s probs", c->name);
    test_check(what, &f->probs.h, rp, NULL, 5e-5);
    if (c->dropout > 0.0f) {
      int64_t bad = 0, ndrop = 0;
      for (int64_t b = 0; b < c->b; ++b)
        for (int64_t hh = 0; hh < c->h; ++hh)
          for (int64_t i = 0; i < c->s_q; ++i)
            for (int64_t j = 0; j < c->s_k; ++j) {
              int64_t e = ((b * c->h + hh) * c->s_q + i) * c->s_k + j;
              int want = ref_dropped(&p, b, hh, i, j);
              ndrop += want;
              bad += signbit(test_get(&f->probs.h, e)) != 0 ? !want : want;
            }
      TEST_EXPECT(bad == 0 && ndrop > 0,
                  "%s: %lld probs signs differ from the dropout bits (%lld dropped)", c->name,
                  (long long)bad, (long long)ndrop);
    }
  }
  if (c->compare_cpu) {
    /* the CPU backend on the same inputs: both within their bound of the
     * oracle, so within twice it of each other */
    sdpa_tensor cout = test_alloc(c->dtype, f->out.h.rank, f->out.h.shape);
    sdpa_fwd_desc cd = f->host;
    cd.out = cout;
    cd.lse.data = NULL;
    cd.probs.data = NULL;
    sdpa_status st = gpu_fwd(&cd);
    if (TEST_EXPECT(st == SDPA_OK, "%s: CPU backend: %s", c->name, sdpa_last_error())) {
      double *co = malloc(sizeof(double) * (size_t)n_out);
      double lowp_err = 0.0;
      for (int64_t e = 0; e < n_out; ++e) {
        co[e] = test_get(&cout, e);
        double x = fabs(lo[e] - ro[e]);
        if (x > lowp_err) lowp_err = x;
      }
      snprintf(what, sizeof what, "%s out vs CPU backend", c->name);
      test_check(what, &f->out.h, co, NULL, 2.0 * (2.0 * lowp_err + test_atol(c->dtype)));
      free(co);
    }
    test_free(&cout);
  }
  free(ro);
  free(lo);
  free(rl);
  free(ll);
  free(rp);
}

/* The row explain selects, where the case asks: an fwd_sm80 row for a bias
 * problem, a Hopper row on sm_90 for c->sm90. */
static void check_selection(const gcase *c, const gbufs *f) {
  if (!c->bias && !c->sm90) return;
  char buf[8192];
  sdpa_status ex = sdpa_explain_fwd(&f->dev, buf, sizeof buf);
  if (c->bias) /* the sm80 rows take bias problems (all of them: rows of any alignment) */
    TEST_EXPECT(ex == SDPA_OK && strncmp(buf, "selected: fwd_sm80", 18) == 0,
                "%s: a bias problem should select an fwd_sm80 row:\n%s", c->name, buf);
  else
    gpu_expect_hopper_row(c->name, ex, buf, "fwd_sm90_");
}

static void run_case(const gcase *c) {
  printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld%s%s\n", c->name, sdpa_dtype_string(c->dtype),
         (long long)c->b, (long long)c->h, (long long)c->h_k, (long long)c->s_q,
         (long long)c->s_k, (long long)c->d, c->varlen ? " varlen" : "", c->pad ? " padded" : "");
  gbufs f;
  build(c, &f);
  check_selection(c, &f);
  sdpa_status st = gpu_fwd(&f.dev);
  cudaError_t ce = cudaDeviceSynchronize();
  if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_fwd returned %s (%s), sync: %s",
                  c->name, sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce)))
    check_results(c, &f);
  release(&f);
}

/* Capture sdpa_fwd in a CUDA graph on a non-default stream, replay it, check. */
static void run_graph(const gcase *c) {
  printf("-- %s (CUDA graph): %s s%lld/%lld d%lld\n", c->name, sdpa_dtype_string(c->dtype),
         (long long)c->s_q, (long long)c->s_k, (long long)c->d);
  gbufs f;
  build(c, &f);
  check_selection(c, &f);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  f.dev.attn.stream = s;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  sdpa_status st = gpu_fwd(&f.dev);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: capture: %s (%s), end: %s", c->name,
                  sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce))) {
    ce = cudaGraphInstantiate(&exec, graph, 0);
    if (TEST_EXPECT(ce == cudaSuccess, "%s: instantiate: %s", c->name, cudaGetErrorString(ce))) {
      CUDA_OK(cudaGraphLaunch(exec, s));
      CUDA_OK(cudaStreamSynchronize(s));
      check_results(c, &f);
      CUDA_OK(cudaGraphExecDestroy(exec));
    }
    CUDA_OK(cudaGraphDestroy(graph));
  }
  CUDA_OK(cudaStreamDestroy(s));
  release(&f);
}

/* What the sm80 rows do not cover (d != d_v, rows not 16-byte aligned): their
 * row of the same bucket must decline with the reason in sdpa_explain_fwd, no
 * fwd_sm80 row may be selected, and whatever runs instead (a slower CUDA
 * kernel) must still be right; with no such kernel the call must fail with
 * SDPA_ERR_NOT_SUPPORTED naming the reason. */
static void run_refusal(const gcase *c, const char *row, const char *needle) {
  printf("-- %s (sm80 rows decline)\n", c->name);
  gbufs f;
  build(c, &f);
  if (c->d % 8) { /* contiguous q rows of d elements: not 16-byte aligned */
    int64_t st = 1;
    for (int k = f.dev.attn.q.rank - 1; k >= 0; --k) {
      f.dev.attn.q.stride[k] = st;
      f.host.attn.q.stride[k] = st;
      st *= f.dev.attn.q.shape[k];
    }
    /* the host copy must hold the same logical values under the new strides */
    sdpa_tensor packed = f.host.attn.q;
    packed.data = malloc(f.q.bytes);
    for (int64_t e = 0; e < test_numel(&packed); ++e) test_set(&packed, e, test_get(&f.q.h, e));
    memcpy(f.q.h.data, packed.data, (size_t)test_numel(&packed) * 2);
    free(packed.data);
    f.q.h.stride[0] = f.host.attn.q.stride[0];
    f.q.h.stride[1] = f.host.attn.q.stride[1];
    f.q.h.stride[2] = f.host.attn.q.stride[2];
    f.q.h.stride[3] = f.host.attn.q.stride[3];
    dual_upload(&f.q);
  }
  char buf[8192];
  sdpa_status st = sdpa_explain_fwd(&f.dev, buf, sizeof buf);
  const char *line = strstr(buf, row);
  const char *eol = line ? strchr(line, '\n') : NULL;
  int declined = line && eol && strstr(line, needle) && strstr(line, needle) < eol;
  TEST_EXPECT(declined && strncmp(buf, "selected: fwd_sm80", 18) != 0,
              "%s: explain should show %s declining with '%s':\n%s", c->name, row, needle, buf);
  if (st == SDPA_OK) {
    st = gpu_fwd(&f.dev);
    cudaError_t ce = cudaDeviceSynchronize();
    if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_fwd: %s (%s)", c->name,
                    sdpa_status_string(st), sdpa_last_error()))
      check_results(c, &f);
  } else {
    TEST_EXPECT(st == SDPA_ERR_NOT_SUPPORTED && strstr(sdpa_last_error(), needle) != NULL,
                "%s: expected SDPA_ERR_NOT_SUPPORTED mentioning '%s', got %s: %s", c->name, needle,
                sdpa_status_string(st), sdpa_last_error());
  }
  release(&f);
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
  int small = argc > 1 && strcmp(argv[1], "--small") == 0;
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    test_rng_init(&rng, 1);
    bench();
    return 0;
  }
  test_rng_init(&rng, test_seed());
  if (!sdpa_cuda_available()) {
    printf("no usable CUDA device: skipped\n");
    return 0;
  }
  const sdpa_dtype dts[2] = {SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  gcase c;

  if (small) {
    /* every kernel instance once: each bucket and dtype, fast (causal, off
     * the tile grid), fast with dropout, and full (dropout + probs) variants */
    const int64_t ds[8] = {32, 64, 96, 128, 160, 192, 224, 256};
    for (int k = 0; k < 16; ++k) {
      c = base_case("small", dts[k / 8], 1, 2, 1, 70, 150, ds[k % 8]);
      c.causal = 1;
      c.compare_cpu = 0;
      run_case(&c);
      c.dropout = 0.17f;
      run_case(&c);
      c.probs = 1;
      c.causal = 0;
      c.wl = 20;
      c.wr = 3;
      run_case(&c);
    }
    /* the Hopper rows (one instance per bucket and dtype): causal, GQA, off
     * the tile grid, d below the bucket */
    for (int k = 0; k < 6; ++k) {
      const int64_t d9[3] = {40, 128, 232};
      c = base_case("small sm90", dts[k / 3], 1, 4, 2, 130, 200, d9[k % 3]);
      c.causal = 1;
      c.compare_cpu = 0;
      c.sm90 = 1, run_case(&c);
    }
    /* empty problems: no keys (out 0, lse +inf over poison), no queries */
    c = base_case("small no keys", SDPA_DTYPE_BF16, 2, 4, 2, 37, 0, 128);
    run_case(&c);
    c = base_case("small no queries", SDPA_DTYPE_F16, 2, 4, 2, 0, 37, 64);
    run_case(&c);
    /* bias: the fast kernels' shared tile and the full kernels' global loads
     * (rows not 16-byte aligned, s_k % 8 != 0), -inf entries and rows */
    for (int k = 0; k < 2; ++k) {
      c = base_case("small bias", dts[k], 1, 2, 1, 70, 152, k ? 128 : 64);
      c.causal = 1;
      c.compare_cpu = 0;
      c.bias = 1;
      c.bias_inf = 1;
      run_case(&c);
      c.s_k = 147;
      c.bias_packed = 1;
      run_case(&c);
    }
    return test_summary();
  }

  /* head dims (every bucket, padded inside it), both dtypes, GQA 1 / 2 / 8 */
  const int64_t ds[10] = {1, 3, 32, 64, 80, 96, 128, 160, 192, 256};
  const int64_t gq[3] = {1, 2, 8};
  for (int k = 0; k < 20; ++k) {
    int64_t hk = 8 / gq[k % 3];
    c = base_case("head dim", dts[k / 10], 2, 8, hk, 37 + k, 301, ds[k % 10]);
    run_case(&c);
  }
  /* lengths: s = 1, s_q > s_k, off the tile grid, several tiles */
  c = base_case("s=1", SDPA_DTYPE_BF16, 3, 2, 1, 1, 1, 32);
  run_case(&c);
  c = base_case("s_q=1 long keys", SDPA_DTYPE_F16, 2, 4, 2, 1, 777, 64);
  run_case(&c);
  c = base_case("s_q > s_k", SDPA_DTYPE_F16, 2, 2, 2, 200, 33, 64);
  run_case(&c);
  c = base_case("long causal", SDPA_DTYPE_BF16, 1, 2, 1, 1000, 1030, 128);
  c.causal = 1;
  run_case(&c);
  c = base_case("long", SDPA_DTYPE_F16, 1, 2, 2, 515, 1100, 256);
  run_case(&c);

  /* empty problems: no keys (out 0, lse +inf over poison), no queries, no batch */
  for (int k = 0; k < 2; ++k) {
    c = base_case("no keys", dts[k], 2, 4, 2, 37, 0, k ? 64 : 128);
    c.causal = k;
    run_case(&c);
    c = base_case("no queries", dts[k], 2, 4, 2, 0, 37, 64);
    run_case(&c);
    c = base_case("no batch", dts[k], 0, 4, 2, 5, 7, 128);
    run_case(&c);
  }

  /* masks: causal both alignments; s_q > s_k bottom-right gives empty rows */
  for (int k = 0; k < 2; ++k) {
    c = base_case("causal bottom-right", dts[k], 2, 2, 1, 131, 300, 64);
    c.causal = 1;
    run_case(&c);
    c = base_case("causal top-left", dts[k], 2, 2, 1, 131, 300, 128);
    c.causal = 1;
    c.top_left = 1;
    run_case(&c);
    c = base_case("causal s_q > s_k (empty rows)", dts[k], 1, 2, 2, 150, 70, 96);
    c.causal = 1;
    run_case(&c);
  }
  c = base_case("window (40, 7)", SDPA_DTYPE_BF16, 2, 4, 2, 300, 300, 64);
  c.wl = 40;
  c.wr = 7;
  run_case(&c);
  c = base_case("window (3, -1) top-left", SDPA_DTYPE_F16, 1, 2, 2, 90, 300, 32);
  c.wl = 3;
  c.top_left = 1;
  run_case(&c);
  c = base_case("window (0, 0)", SDPA_DTYPE_F16, 1, 2, 1, 70, 70, 24);
  c.wl = 0;
  c.wr = 0;
  run_case(&c);
  c = base_case("window (-1, 30) top-left d192", SDPA_DTYPE_BF16, 1, 2, 1, 200, 150, 192);
  c.wr = 30;
  c.top_left = 1;
  run_case(&c);

  /* score modifiers */
  for (int k = 0; k < 2; ++k) {
    c = base_case("softcap", dts[k], 2, 2, 2, 65, 200, 128);
    c.softcap = 5.0f;
    c.scale = 0.5f;
    run_case(&c);
  }
  c = base_case("alibi [h] causal", SDPA_DTYPE_F16, 2, 4, 2, 100, 150, 32);
  c.alibi = 1;
  c.causal = 1;
  run_case(&c);
  c = base_case("alibi [b,h]", SDPA_DTYPE_BF16, 2, 4, 4, 100, 64, 160);
  c.alibi = 2;
  run_case(&c);
  c = base_case("softcap + alibi + window", SDPA_DTYPE_BF16, 2, 4, 1, 129, 257, 64);
  c.softcap = 3.0f;
  c.alibi = 1;
  c.wl = 50;
  c.wr = 0;
  run_case(&c);

  /* additive bias: every bucket the benchmark uses in both dtypes, off the
   * tile grid (causal on a third), then broadcasts, -inf, and every modifier.
   * s_k % 8 == 0 with 16-byte rows runs the fast kernels (shared bias tile);
   * the rest the full kernels (global loads): both are covered. */
  {
    const int64_t bd[3] = {64, 128, 256};
    for (int k = 0; k < 6; ++k) {
      c = base_case("bias", dts[k % 2], 2, 4, 2, 77 + 13 * k, 200 + 8 * k, bd[k / 2]);
      c.bias = 1;
      c.causal = k % 3 == 1;
      run_case(&c);
    }
  }
  {
    const int bcs[4] = {1, 2, 4, 7};
    for (int k = 0; k < 4; ++k) {
      c = base_case("bias broadcast", dts[k % 2], 2, 3, 3, 100, 152, k % 2 ? 128 : 64);
      c.bias = 1;
      c.bias_bc = bcs[k];
      c.causal = k == 2;
      run_case(&c);
    }
  }
  for (int k = 0; k < 2; ++k) {
    c = base_case("bias -inf entries and row", dts[k], 2, 2, 1, 90, 264, k ? 128 : 64);
    c.bias = 1;
    c.bias_inf = 1;
    c.causal = 1;
    c.top_left = k;
    run_case(&c);
  }
  c = base_case("bias -inf, broadcast over s_q (rows all -inf)", SDPA_DTYPE_BF16, 2, 2, 2, 70, 136, 128);
  c.bias = 1;
  c.bias_bc = 4;
  c.bias_inf = 1;
  run_case(&c);
  c = base_case("bias + softcap", SDPA_DTYPE_F16, 2, 2, 2, 65, 200, 128);
  c.bias = 1;
  c.softcap = 5.0f;
  c.scale = 0.5f;
  run_case(&c);
  c = base_case("bias + alibi + window", SDPA_DTYPE_BF16, 2, 4, 1, 129, 264, 64);
  c.bias = 1;
  c.alibi = 2;
  c.wl = 50;
  c.wr = 10;
  run_case(&c);
  c = base_case("bias + dropout", SDPA_DTYPE_BF16, 1, 2, 1, 77, 208, 128);
  c.bias = 1;
  c.dropout = 0.17f;
  c.causal = 1;
  run_case(&c);
  c = base_case("bias + dropout + probs", SDPA_DTYPE_F16, 2, 2, 1, 67, 270, 64);
  c.bias = 1;
  c.dropout = 0.17f;
  c.probs = 1;
  run_case(&c);
  c = base_case("bias padded", SDPA_DTYPE_F16, 2, 4, 2, 70, 184, 256);
  c.bias = 1;
  c.pad = 8;
  c.causal = 1;
  run_case(&c);
  for (int k = 0; k < 2; ++k) {
    c = base_case("bias rows not 16-byte aligned", dts[k], 2, 2, 1, 99, 203, k ? 128 : 256);
    c.bias = 1;
    c.bias_packed = 1;
    c.bias_inf = k;
    c.causal = 1;
    run_case(&c);
  }
  c = base_case("bias s_k % 8 != 0", SDPA_DTYPE_BF16, 2, 2, 2, 100, 203, 64);
  c.bias = 1;
  c.causal = 1;
  run_case(&c);
  c = base_case("bias s=1", SDPA_DTYPE_BF16, 3, 2, 1, 1, 1, 32);
  c.bias = 1;
  run_case(&c);
  c = base_case("bias s_q > s_k", SDPA_DTYPE_F16, 2, 2, 1, 200, 72, 128);
  c.bias = 1;
  c.causal = 1;
  run_case(&c);
  c = base_case("bias long", SDPA_DTYPE_F16, 1, 2, 2, 600, 1096, 128);
  c.bias = 1;
  run_case(&c);

  /* dropout: exact mask through probs' sign pattern */
  for (int k = 0; k < 2; ++k) {
    c = base_case("dropout 0.17 + probs", dts[k], 2, 2, 1, 67, 270, 64);
    c.dropout = 0.17f;
    c.probs = 1;
    c.causal = k == 1;
    run_case(&c);
  }
  c = base_case("dropout 0.17 + probs d256", SDPA_DTYPE_BF16, 1, 2, 2, 70, 133, 256);
  c.dropout = 0.17f;
  c.probs = 1;
  run_case(&c);
  c = base_case("dropout only", SDPA_DTYPE_F16, 2, 4, 2, 200, 300, 128);
  c.dropout = 0.17f;
  run_case(&c);
  /* dropout without probs runs the fast instances' drop kernels: out against
   * the oracle (which applies the exact mask) in every bucket and dtype */
  {
    const int64_t ds[8] = {32, 64, 96, 128, 160, 192, 224, 256};
    for (int k = 0; k < 16; ++k) {
      c = base_case("dropout only, every bucket", dts[k / 8], 1, 2, 1, 77, 201, ds[k % 8]);
      c.dropout = 0.17f;
      c.causal = k % 2;
      run_case(&c);
    }
  }
  c = base_case("probs no dropout, window", SDPA_DTYPE_F16, 1, 2, 2, 130, 300, 64);
  c.probs = 1;
  c.wl = 50;
  c.wr = 20;
  run_case(&c);

  /* varlen (empty sequences, seqused_k) */
  for (int k = 0; k < 2; ++k) {
    c = base_case("varlen", dts[k], 5, 4, 2, 150, 280, 64);
    c.varlen = 1;
    c.causal = k == 1;
    run_case(&c);
  }
  c = base_case("varlen window + alibi + dropout", SDPA_DTYPE_F16, 4, 2, 1, 90, 90, 40);
  c.varlen = 1;
  c.wl = 10;
  c.wr = 5;
  c.alibi = 2;
  c.dropout = 0.17f;
  run_case(&c);

  /* padded strides */
  c = base_case("padded", SDPA_DTYPE_BF16, 2, 4, 2, 70, 190, 48);
  c.pad = 8;
  c.causal = 1;
  run_case(&c);
  c = base_case("padded varlen", SDPA_DTYPE_F16, 4, 4, 4, 50, 60, 20);
  c.pad = 16;
  c.varlen = 1;
  run_case(&c);

  /* the Hopper rows (wgmma + tensor copies): every bucket and dtype with d
   * at and below the bucket, lengths off the 64 / 128-row tiles, GQA 8:1 and
   * MQA, both causal alignments, windows, alibi, softcap, empty rows, varlen
   * with seqused_k, dropout */
  {
    const int64_t d9[6] = {64, 40, 128, 100, 256, 232};
    for (int k = 0; k < 12; ++k) {
      c = base_case("sm90", dts[k / 6], 2, 8, k % 3 == 0 ? 1 : 8 >> (k % 3), 65 + 37 * k,
                    129 + 61 * k, d9[k % 6]);
      c.causal = k % 4 == 1;
      c.top_left = k % 8 == 5;
      c.sm90 = 1, run_case(&c);
    }
    c = base_case("sm90 long causal", SDPA_DTYPE_BF16, 1, 4, 2, 1100, 1300, 128);
    c.causal = 1;
    c.sm90 = 1, run_case(&c);
    c = base_case("sm90 s_q > s_k causal (empty rows)", SDPA_DTYPE_F16, 2, 2, 1, 300, 100, 64);
    c.causal = 1;
    c.sm90 = 1, run_case(&c);
    c = base_case("sm90 window (100, 20)", SDPA_DTYPE_BF16, 1, 4, 4, 400, 500, 256);
    c.wl = 100;
    c.wr = 20;
    c.sm90 = 1, run_case(&c);
    c = base_case("sm90 softcap + alibi [b,h]", SDPA_DTYPE_F16, 2, 4, 2, 200, 333, 128);
    c.softcap = 4.0f;
    c.alibi = 2;
    c.causal = 1;
    c.sm90 = 1, run_case(&c);
    c = base_case("sm90 padded", SDPA_DTYPE_BF16, 2, 4, 2, 150, 270, 64);
    c.pad = 24;
    c.sm90 = 1, run_case(&c);
    for (int k = 0; k < 2; ++k) { /* empty sequence, seqused_k on the last: zero_v_tail */
      c = base_case("sm90 varlen", dts[k], 5, 4, 2, 200, 300, k ? 128 : 256);
      c.varlen = 1;
      c.causal = k;
      c.dropout = k ? 0.17f : 0.f;
      c.sm90 = 1, run_case(&c);
    }
    c = base_case("sm90 dropout", SDPA_DTYPE_BF16, 2, 4, 2, 150, 270, 64);
    c.dropout = 0.17f;
    c.causal = 1;
    c.sm90 = 1, run_case(&c);
  }

  /* what the sm80 rows decline */
  c = base_case("d != d_v", SDPA_DTYPE_F16, 1, 2, 2, 10, 10, 64);
  c.d_v = 32;
  run_refusal(&c, "fwd_sm80_f16_hd64 ", "d_v!=d");
  c = base_case("rows not 16-byte aligned", SDPA_DTYPE_BF16, 1, 2, 2, 10, 10, 3);
  run_refusal(&c, "fwd_sm80_bf16_hd32 ", "unaligned");

  /* CUDA graph capture (on sm_90 of the Hopper row explain selects) */
  c = base_case("graph", SDPA_DTYPE_BF16, 2, 4, 2, 200, 333, 128);
  c.causal = 1;
  c.sm90 = 1, run_graph(&c);

  return test_summary();
}
