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


/* ---- cases --------------------------------------------------------------------------- */
typedef struct bcase {
  const char *name;
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d;
  int causal, top_left;
  int64_t wl, wr; /* -1 unbounded; used when !causal */
  float softcap, scale, dropout;
  int alibi;      /* 0 off, 1 [h], 2 [b, h] */
  int varlen;     /* lengths drawn in [1, sq] / [1, sk]; sequence 1 empty, seqused_k on the last */
  int contiguous; /* no 16-byte row padding (d % 8 != 0 is then refused) */
  int64_t pad;
} bcase;

static bcase mk(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t hk, int64_t sq,
                int64_t sk, int64_t d) {
  bcase c;
  memset(&c, 0, sizeof c);
  c.name = name, c.dt = dt, c.b = b, c.h = h, c.hk = hk, c.sq = sq, c.sk = sk, c.d = d;
  c.wl = c.wr = -1;
  return c;
}

typedef struct bbufs {
  dual q, k, v, out, lse, dout, dq, dk, dv, alibi, cu_q, cu_k, used;
  sdpa_bwd_desc host, dev;
  int64_t nq, nk; /* rows of q / k (b * s or totals) */
} bbufs;

/* Inputs, out / lse from the CPU forward, both descriptors. 0 on failure. */
static int build(const bcase *c, bbufs *f) {
  memset(f, 0, sizeof *f);
  sdpa_bwd_init(&f->host);
  sdpa_attn *a = &f->host.attn;
  const int r16 = !c->contiguous;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = 4;
  if (c->varlen) {
    int64_t n1[1] = {c->b + 1}, nb[1] = {c->b};
    f->cu_q = dual_alloc(SDPA_DTYPE_I32, 1, n1, 0, 0);
    f->cu_k = dual_alloc(SDPA_DTYPE_I32, 1, n1, 0, 0);
    f->used = dual_alloc(SDPA_DTYPE_I32, 1, nb, 0, 0);
    int32_t *cq = (int32_t *)f->cu_q.h.data, *ck = (int32_t *)f->cu_k.h.data;
    int32_t *us = (int32_t *)f->used.h.data;
    int64_t mq = 0, mkk = 0;
    cq[0] = ck[0] = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      int64_t lq = b == 1 ? 0 : test_rng_int(&rng, 1, c->sq);
      int64_t lk = b == 1 ? 0 : test_rng_int(&rng, 1, c->sk);
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > mq) mq = lq;
      if (lk > mkk) mkk = lk;
    }
    f->nq = cq[c->b], f->nk = ck[c->b];
    a->cu_seqlens_q = f->cu_q.h, a->cu_seqlens_k = f->cu_k.h, a->seqused_k = f->used.h;
    a->max_seqlen_q = mq, a->max_seqlen_k = mkk;
    int64_t sq[3] = {f->nq, c->h, c->d}, sk[3] = {f->nk, c->hk, c->d}, sl[2] = {c->h, f->nq};
    f->q = dual_alloc(c->dt, 3, sq, r16, c->pad), f->out = dual_alloc(c->dt, 3, sq, r16, c->pad);
    f->dout = dual_alloc(c->dt, 3, sq, r16, c->pad), f->dq = dual_alloc(c->dt, 3, sq, r16, c->pad);
    f->k = dual_alloc(c->dt, 3, sk, r16, c->pad), f->v = dual_alloc(c->dt, 3, sk, r16, c->pad);
    f->dk = dual_alloc(c->dt, 3, sk, r16, c->pad), f->dv = dual_alloc(c->dt, 3, sk, r16, c->pad);
    f->lse = dual_alloc(SDPA_DTYPE_F32, 2, sl, 0, 0);
  } else {
    f->nq = c->b * c->sq, f->nk = c->b * c->sk;
    int64_t sq[4] = {c->b, c->sq, c->h, c->d}, sk[4] = {c->b, c->sk, c->hk, c->d};
    int64_t sl[3] = {c->b, c->h, c->sq};
    f->q = dual_alloc(c->dt, 4, sq, r16, c->pad), f->out = dual_alloc(c->dt, 4, sq, r16, c->pad);
    f->dout = dual_alloc(c->dt, 4, sq, r16, c->pad), f->dq = dual_alloc(c->dt, 4, sq, r16, c->pad);
    f->k = dual_alloc(c->dt, 4, sk, r16, c->pad), f->v = dual_alloc(c->dt, 4, sk, r16, c->pad);
    f->dk = dual_alloc(c->dt, 4, sk, r16, c->pad), f->dv = dual_alloc(c->dt, 4, sk, r16, c->pad);
    f->lse = dual_alloc(SDPA_DTYPE_F32, 3, sl, 0, 0);
  }
  test_fill_normal(&f->q.h, &rng, 1.0);
  test_fill_normal(&f->k.h, &rng, 1.0);
  test_fill_normal(&f->v.h, &rng, 1.0);
  test_fill_normal(&f->dout.h, &rng, 1.0);
  if (c->alibi) {
    int64_t as[2] = {c->b, c->h};
    f->alibi = c->alibi == 1 ? dual_alloc(SDPA_DTYPE_F32, 1, &as[1], 0, 0)
                             : dual_alloc(SDPA_DTYPE_F32, 2, as, 0, 0);
    test_fill_uniform(&f->alibi.h, &rng, 0.05, 0.6);
    a->alibi_slopes = f->alibi.h;
  }
  a->q = f->q.h, a->k = f->k.h, a->v = f->v.h;
  a->scale = c->scale;
  a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (!c->causal) a->window_left = c->wl, a->window_right = c->wr;
  a->dropout_p = c->dropout;
  a->dropout_seed = test_rng_u64(&rng);
  a->dropout_offset = test_rng_u64(&rng) & 0xffffu;

  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  fd.attn = *a;
  fd.out = f->out.h, fd.lse = f->lse.h;
  sdpa_status st = sdpa_fwd(&fd);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: CPU sdpa_fwd: %s", c->name, sdpa_last_error())) return 0;

  f->host.out = f->out.h, f->host.lse = f->lse.h, f->host.dout = f->dout.h;
  f->host.dq = f->dq.h, f->host.dk = f->dk.h, f->host.dv = f->dv.h;

  dual *all[] = {&f->q, &f->k, &f->v, &f->out, &f->lse, &f->dout, &f->alibi, &f->cu_q, &f->cu_k, &f->used};
  for (size_t n = 0; n < sizeof all / sizeof all[0]; ++n) dual_upload(all[n]);
  f->dev = f->host;
  sdpa_attn *g = &f->dev.attn;
  g->device = SDPA_DEVICE_CUDA;
  g->q = f->q.d, g->k = f->k.d, g->v = f->v.d;
  if (c->varlen) g->cu_seqlens_q = f->cu_q.d, g->cu_seqlens_k = f->cu_k.d, g->seqused_k = f->used.d;
  if (c->alibi) g->alibi_slopes = f->alibi.d;
  f->dev.out = f->out.d, f->dev.lse = f->lse.d, f->dev.dout = f->dout.d;
  f->dev.dq = f->dq.d, f->dev.dk = f->dk.d, f->dev.dv = f->dv.d;
  return 1;
}

static void release(bbufs *f) {
  dual *all[] = {&f->q, &f->k, &f->v, &f->out, &f->lse, &f->dout, &f->dq, &f->dk, &f->dv,
                 &f->alibi, &f->cu_q, &f->cu_k, &f->used};
  for (size_t n = 0; n < sizeof all / sizeof all[0]; ++n) dual_free(all[n]);
}

static void poison_grads(bbufs *f) {
  dual *g[3] = {&f->dq, &f->dk, &f->dv};
  for (int n = 0; n < 3; ++n) {
    test_poison(&g[n]->h);
    dual_upload(g[n]);
  }
}

static void check_grad(const char *cname, const char *what, const sdpa_tensor *got,
                       const double *ref, const double *lowp) {
  char label[200];
  double m = 0.0;
  for (int64_t e = 0; e < test_numel(got); ++e)
    if (isfinite(ref[e]) && fabs(ref[e]) > m) m = fabs(ref[e]);
  snprintf(label, sizeof label, "%s %s", cname, what);
  test_check(label, got, ref, lowp, test_atol(got->dtype) * (m > 1.0 ? m : 1.0));
}

/* One case: oracle, one CUDA run checked; det_runs > 0 adds that many more
 * deterministic runs compared bit for bit with the first. */
static void run_case(const bcase *c, int det_runs) {
  bbufs f;
  printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld%s\n", c->name, sdpa_dtype_string(c->dt),
         (long long)c->b, (long long)c->h, (long long)c->hk, (long long)c->sq, (long long)c->sk,
         (long long)c->d, c->varlen ? " varlen" : "");
  if (!build(c, &f)) {
    release(&f);
    return;
  }
  sdpa_problem p;
  sdpa_status st = sdpa_validate_bwd(&f.host, &p);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: validate: %s", c->name, sdpa_last_error())) {
    release(&f);
    return;
  }
  const int64_t ndq = f.nq * c->h * c->d, ndk = f.nk * c->hk * c->d;
  double *r[2][3];
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)(ndq ? ndq : 1));
    r[l][1] = malloc(sizeof(double) * (size_t)(ndk ? ndk : 1));
    r[l][2] = malloc(sizeof(double) * (size_t)(ndk ? ndk : 1));
    if (ref_bwd(&p, l, NULL, r[l][0], r[l][1], r[l][2], NULL)) {
      printf("FATAL ref_bwd: out of memory\n");
      exit(1);
    }
  }
  f.dev.deterministic = det_runs > 0;
  poison_grads(&f);
  st = sdpa_bwd(&f.dev);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd: %s: %s", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    CUDA_OK(cudaDeviceSynchronize());
    dual_download(&f.dq), dual_download(&f.dk), dual_download(&f.dv);
    check_grad(c->name, "dq", &f.dq.h, r[0][0], r[1][0]);
    check_grad(c->name, "dk", &f.dk.h, r[0][1], r[1][1]);
    check_grad(c->name, "dv", &f.dv.h, r[0][2], r[1][2]);
    if (det_runs > 0) {
      dual *g[3] = {&f.dq, &f.dk, &f.dv};
      void *first[3];
      for (int n = 0; n < 3; ++n) {
        first[n] = malloc(g[n]->bytes ? g[n]->bytes : 1);
        memcpy(first[n], g[n]->h.data, g[n]->bytes);
      }
      int same = 1;
      for (int run = 0; run < det_runs; ++run) {
        poison_grads(&f);
        st = sdpa_bwd(&f.dev);
        TEST_EXPECT(st == SDPA_OK, "%s: deterministic run %d: %s", c->name, run, sdpa_last_error());
        for (int n = 0; n < 3; ++n) {
          dual_download(g[n]);
          if (memcmp(first[n], g[n]->h.data, g[n]->bytes) != 0) same = 0;
        }
      }
      TEST_EXPECT(same, "%s: deterministic = 1: dq / dk / dv differ between %d runs", c->name,
                  det_runs + 1);
      for (int n = 0; n < 3; ++n) free(first[n]);
    }
  }
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 3; ++e) free(r[l][e]);
  release(&f);
}

/* sdpa_bwd captured in a CUDA graph with a caller workspace on a non-default
 * stream, replayed twice (the graph must rezero its accumulator), checked. */
static void run_graph(const bcase *c) {
  bbufs f;
  printf("-- %s (CUDA graph, caller workspace)\n", c->name);
  if (!build(c, &f)) {
    release(&f);
    return;
  }
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_bwd(&f.host, &p) == SDPA_OK, "%s: validate", c->name)) {
    release(&f);
    return;
  }
  const int64_t ndq = f.nq * c->h * c->d, ndk = f.nk * c->hk * c->d;
  double *r[2][3];
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)ndq);
    r[l][1] = malloc(sizeof(double) * (size_t)ndk);
    r[l][2] = malloc(sizeof(double) * (size_t)ndk);
    if (ref_bwd(&p, l, NULL, r[l][0], r[l][1], r[l][2], NULL)) exit(1);
  }
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
  poison_grads(&f);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  st = sdpa_bwd(&f.dev);
  cudaError_t ce = cudaStreamEndCapture(s, &graph);
  TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd under capture: %s", c->name, sdpa_last_error());
  if (TEST_EXPECT(ce == cudaSuccess, "%s: capture: %s", c->name, cudaGetErrorString(ce))) {
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    dual_download(&f.dq), dual_download(&f.dk), dual_download(&f.dv);
    check_grad(c->name, "graph dq", &f.dq.h, r[0][0], r[1][0]);
    check_grad(c->name, "graph dk", &f.dk.h, r[0][1], r[1][1]);
    check_grad(c->name, "graph dv", &f.dv.h, r[0][2], r[1][2]);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  /* a workspace one byte short is refused with the size named */
  f.dev.workspace_size = ws_bytes - 1;
  f.dev.attn.stream = NULL;
  TEST_EXPECT_ERROR(sdpa_bwd(&f.dev), SDPA_ERR_INVALID_ARGUMENT, "workspace_size");
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaStreamDestroy(s));
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 3; ++e) free(r[l][e]);
  release(&f);
}

/* Contiguous d = 3: rows of 6 bytes. Every sm80 row refuses them as unaligned
 * and explain says so; a slower row (the SIMT family, checked against the
 * oracle in test_gpu_simt.c) runs them, so the call itself must succeed. */
static void run_refusal(void) {
  bcase c = mk("unaligned_d3_contiguous", SDPA_DTYPE_BF16, 1, 2, 2, 20, 20, 3);
  bbufs f;
  c.contiguous = 1;
  printf("-- %s\n", c.name);
  if (build(&c, &f)) {
    char buf[4096];
    sdpa_status st = sdpa_explain_bwd(&f.dev, buf, sizeof buf);
    TEST_EXPECT(st == SDPA_OK && strstr(buf, "bwd_sm80_bf16_hd32") && strstr(buf, "unaligned") &&
                    !strstr(buf, "selected: bwd_sm80"),
                "explain refuses the sm80 rows as 'unaligned' and selects a fallback: %s", buf);
    st = sdpa_bwd(&f.dev);
    TEST_EXPECT(st == SDPA_OK, "unaligned backward runs on a fallback row: %s", sdpa_last_error());
  }
  release(&f);
}

/* ---- timing ------------------------------------------------------------------------- */
static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static void bench(void) {
  const int64_t ds[3] = {64, 128, 256};
  printf("bwd timing (bf16, b*s = 16k, h*d = 2048, median of 20; TFLOP/s = 2.5 x fwd FLOPs)\n");
  printf("%5s %6s %4s %4s %7s %13s %13s %13s %13s\n", "d", "s", "h", "b", "causal", "atomic",
         "deterministic", "dropout 0.1", "bias+dbias");
  for (int di = 0; di < 3; ++di)
    for (int causal = 0; causal < 2; ++causal) {
      const int64_t d = ds[di], s = 4096, h = 2048 / d, b = 16384 / s;
      const int64_t shp[4] = {b, s, h, d}, sl[3] = {b, h, s};
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
      sdpa_bwd_desc bd;
      sdpa_bwd_init(&bd);
      bd.attn.device = SDPA_DEVICE_CUDA;
      bd.attn.causal = causal;
      bd.attn.q = sdpa_tensor_contiguous(buf[0], SDPA_DTYPE_BF16, 4, shp);
      bd.attn.k = sdpa_tensor_contiguous(buf[1], SDPA_DTYPE_BF16, 4, shp);
      bd.attn.v = sdpa_tensor_contiguous(buf[2], SDPA_DTYPE_BF16, 4, shp);
      bd.out = sdpa_tensor_contiguous(buf[3], SDPA_DTYPE_BF16, 4, shp);
      bd.dout = sdpa_tensor_contiguous(buf[0], SDPA_DTYPE_BF16, 4, shp);
      bd.dq = sdpa_tensor_contiguous(buf[4], SDPA_DTYPE_BF16, 4, shp);
      bd.dk = sdpa_tensor_contiguous(buf[5], SDPA_DTYPE_BF16, 4, shp);
      bd.dv = sdpa_tensor_contiguous(buf[6], SDPA_DTYPE_BF16, 4, shp);
      bd.lse = sdpa_tensor_contiguous(buf[7], SDPA_DTYPE_F32, 3, sl);
      double flops = 4.0 * (double)(b * h * s) * (double)s * (double)d * 2.5 * (causal ? 0.5 : 1.0);
      /* mode 3: a full [b, h, s, s] bias (zeros) and its gradient */
      const int64_t bsh[4] = {b, h, s, s};
      const size_t bias_bytes = (size_t)(b * h * s) * (size_t)s * 2;
      void *bias = NULL, *dbias = NULL;
      CUDA_OK(cudaMalloc(&bias, bias_bytes));
      CUDA_OK(cudaMalloc(&dbias, bias_bytes));
      CUDA_OK(cudaMemset(bias, 0, bias_bytes));
      float med[4];
      for (int det = 0; det < 4; ++det) { /* 2: dropout p = 0.1; 2, 3 not deterministic */
        bd.deterministic = det == 1;
        bd.attn.dropout_p = det == 2 ? 0.1f : 0.f;
        if (det == 3) {
          bd.attn.bias = sdpa_tensor_contiguous(bias, SDPA_DTYPE_BF16, 4, bsh);
          bd.dbias = sdpa_tensor_contiguous(dbias, SDPA_DTYPE_BF16, 4, bsh);
        }
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        float ms[20];
        for (int it = -3; it < 20; ++it) {
          CUDA_OK(cudaEventRecord(e0, 0));
          sdpa_status st = sdpa_bwd(&bd);
          CUDA_OK(cudaEventRecord(e1, 0));
          CUDA_OK(cudaEventSynchronize(e1));
          if (st != SDPA_OK) {
            printf("sdpa_bwd failed: %s\n", sdpa_last_error());
            exit(1);
          }
          if (it >= 0) CUDA_OK(cudaEventElapsedTime(&ms[it], e0, e1));
        }
        qsort(ms, 20, sizeof ms[0], cmp_float);
        med[det] = ms[10];
        CUDA_OK(cudaEventDestroy(e0));
        CUDA_OK(cudaEventDestroy(e1));
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
        bcase c = mk("small", t ? BF16 : F16, 2, 4, 2, 70, 45, dims[di]);
        c.causal = di & 1;
        c.dropout = di == 2 ? 0.17f : 0.f;
        c.softcap = di == 3 ? 4.f : 0.f;
        run_case(&c, di == 1 ? 1 : 0);
      }
    return test_summary();
  }

  bcase c;
  c = mk("basic", F16, 2, 2, 2, 65, 70, 64), run_case(&c, 0);
  c = mk("basic", BF16, 2, 2, 2, 65, 70, 64), run_case(&c, 0);
  c = mk("gqa2_causal_br", BF16, 2, 4, 2, 130, 100, 128), c.causal = 1, run_case(&c, 0);
  c = mk("gqa8_sq_ne_sk_causal_br", F16, 1, 8, 1, 17, 130, 64), c.causal = 1, run_case(&c, 0);
  c = mk("gqa8_sq_gt_sk_causal_tl", BF16, 1, 8, 1, 150, 37, 128), c.causal = 1, c.top_left = 1,
  run_case(&c, 0);
  c = mk("sq_gt_sk_causal_br", F16, 2, 2, 1, 100, 37, 32), c.causal = 1, run_case(&c, 0);
  c = mk("len1", BF16, 1, 2, 2, 1, 1, 64), run_case(&c, 0);
  c = mk("sq1_causal", F16, 2, 2, 1, 1, 77, 96), c.causal = 1, run_case(&c, 0);
  c = mk("sk1_causal_br", BF16, 1, 2, 2, 77, 1, 64), c.causal = 1, run_case(&c, 0);
  c = mk("d1_rows16", F16, 1, 2, 1, 40, 50, 1), run_case(&c, 0);
  c = mk("d3_rows16_causal", BF16, 2, 2, 2, 33, 70, 3), c.causal = 1, run_case(&c, 0);
  c = mk("d160_window_br", F16, 1, 2, 1, 70, 90, 160), c.wl = 8, c.wr = 3, run_case(&c, 0);
  c = mk("d256_window_br", BF16, 1, 2, 1, 70, 90, 256), c.wl = 8, c.wr = 3, run_case(&c, 0);
  c = mk("d256_causal_tl", F16, 1, 2, 2, 70, 50, 256), c.causal = 1, c.top_left = 1, run_case(&c, 0);
  c = mk("d128_window_tl_left", BF16, 1, 2, 2, 80, 80, 128), c.top_left = 1, c.wl = 20,
  run_case(&c, 0);
  c = mk("alibi_h_causal", F16, 2, 4, 2, 50, 60, 32), c.causal = 1, c.alibi = 1, run_case(&c, 0);
  c = mk("alibi_bh", BF16, 2, 2, 2, 40, 30, 64), c.alibi = 2, run_case(&c, 0);
  c = mk("softcap", F16, 2, 2, 1, 45, 66, 64), c.softcap = 5.f, c.scale = 0.3f, run_case(&c, 0);
  c = mk("softcap_causal", BF16, 1, 4, 2, 66, 66, 128), c.causal = 1, c.softcap = 2.f,
  run_case(&c, 0);
  c = mk("dropout", F16, 2, 4, 2, 70, 75, 64), c.dropout = 0.17f, run_case(&c, 0);
  c = mk("dropout_causal", BF16, 1, 2, 1, 66, 80, 128), c.causal = 1, c.dropout = 0.17f,
  run_case(&c, 0);
  c = mk("dropout_d256", BF16, 1, 2, 1, 40, 50, 256), c.dropout = 0.17f, run_case(&c, 0);
  c = mk("varlen_causal_seqused", BF16, 4, 4, 2, 90, 100, 64), c.varlen = 1, c.causal = 1,
  run_case(&c, 0);
  c = mk("varlen_all_mods", F16, 3, 4, 1, 70, 75, 128), c.varlen = 1, c.wl = 7, c.wr = 9,
  c.alibi = 1, c.softcap = 3.f, c.dropout = 0.17f, run_case(&c, 0);
  c = mk("padded_gqa2", BF16, 2, 4, 2, 40, 50, 64), c.pad = 8, c.causal = 1, run_case(&c, 0);
  c = mk("multi_block", F16, 1, 4, 2, 260, 300, 128), c.causal = 1, c.alibi = 1,
  c.dropout = 0.17f, run_case(&c, 0);
  /* deterministic: first run checked, 5 more compared bit for bit */
  c = mk("determinism_dense", BF16, 2, 4, 2, 300, 260, 64), c.causal = 1, run_case(&c, 5);
  c = mk("determinism_varlen_window", F16, 4, 8, 2, 200, 180, 128), c.varlen = 1, c.wl = 40,
  c.wr = 10, c.dropout = 0.17f, run_case(&c, 5);
  c = mk("graph", BF16, 2, 4, 2, 200, 333, 128), c.causal = 1, run_graph(&c);
  run_refusal();
  return test_summary();
}
