/*
 * test_dist_ring.c - sdpa_ring_fwd / _bwd over NCCL between the GPUs of one
 * host: `--ranks n` processes, one a GPU (launch.h). Every rank makes the
 * same global inputs from the run's seed and runs the ring on its rows
 * (outputs poisoned first); the gathered out, lse, dq, dk and dv are held by
 * rank 0 to the oracle on the gathered sequence under the harness tolerance,
 * the rule single-GPU sdpa is held to, and compared with single-GPU sdpa on
 * the gathered sequence, which rank 0 also runs (and holds to the same
 * rule). The long case checks sampled rows of out, lse and dq against the
 * oracle and dk, dv against single-GPU sdpa. The backward runs twice where
 * deterministic: bitwise equal. Then refusals: every rank fails, none hangs.
 *
 *   test_dist_ring --ranks 4      (ctest -L dist; 77 = skipped)
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/dtype.h"
#include "common/harness.h"
#include "launch.h"
#include "ref/ref.h"
#include "ring/ring.h"
#include "rows.h"

typedef struct dcase {
  const char *name;
  sdpa_ring_layout layout;
  int causal;
  int64_t b, s, h, hk, d, dv;
  sdpa_dtype dt;
  float softcap;
  int dlse;
  int own_comm_stream, check_peers;
  int sampled; /* too long for the whole oracle: sampled rows */
} dcase;

/* clang-format off */
static const dcase cases[] = {
    /* name, layout, causal, b, s, h, hk, d, dv, dt, softcap, dlse, own comm stream,
       check_peers, sampled */
    {"zigzag-causal-gqa", SDPA_RING_ZIGZAG, 1, 1, 768, 4, 2, 128, 128, SDPA_DTYPE_BF16, 0, 0, 0, 1, 0},
    {"zigzag-causal-uneven-f16", SDPA_RING_ZIGZAG, 1, 2, 517, 4, 4, 64, 64, SDPA_DTYPE_F16, 0, 0, 1, 1, 0},
    {"contiguous-causal", SDPA_RING_CONTIGUOUS, 1, 1, 640, 4, 1, 128, 128, SDPA_DTYPE_BF16, 0, 0, 0, 0, 0},
    {"zigzag-full-gqa", SDPA_RING_ZIGZAG, 0, 1, 600, 4, 2, 64, 64, SDPA_DTYPE_BF16, 0, 0, 0, 1, 0},
    {"contiguous-full-uneven", SDPA_RING_CONTIGUOUS, 0, 1, 701, 2, 2, 128, 128, SDPA_DTYPE_F16, 0, 0, 1, 1, 0},
    {"zigzag-causal-softcap-dlse", SDPA_RING_ZIGZAG, 1, 1, 384, 2, 1, 64, 64, SDPA_DTYPE_BF16, 30.0f, 1, 0, 1, 0},
    {"zigzag-causal-f32", SDPA_RING_ZIGZAG, 1, 1, 384, 2, 2, 64, 64, SDPA_DTYPE_F32, 0, 0, 0, 1, 0},
    {"zigzag-causal-long", SDPA_RING_ZIGZAG, 1, 1, 16387, 8, 2, 128, 128, SDPA_DTYPE_BF16, 0, 0, 0, 1, 1},
};
/* clang-format on */
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static uint64_t run_seed;

/* ---- device buffers ------------------------------------------------------------------ */

static sdpa_tensor dev_like(const sdpa_tensor *host, int upload) {
  sdpa_tensor t = *host;
  const size_t bytes = (size_t)test_numel(host) * sdpa_dtype_size(host->dtype);
  t.data = NULL;
  if (cudaMalloc(&t.data, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
    abort();
  }
  if (upload)
    cudaMemcpy(t.data, host->data, bytes, cudaMemcpyHostToDevice);
  else
    cudaMemset(t.data, 0xff, bytes); /* poison: NaN in every float dtype */
  cudaDeviceSynchronize(); /* the memset is on the legacy stream; the calls run on others */
  return t;
}

static void download(sdpa_tensor *host, const sdpa_tensor *dev) {
  cudaMemcpy(host->data, dev->data, (size_t)test_numel(host) * sdpa_dtype_size(host->dtype),
             cudaMemcpyDeviceToHost);
}

/* ---- the global problem -------------------------------------------------------------- */

typedef struct global_in {
  sdpa_tensor q, k, v, dout, dlse;
} global_in;

static void make_inputs(const dcase *c, int index, global_in *g) {
  test_rng rng;
  test_rng_init(&rng, run_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(index + 1)));
  g->q = rows_t4(NULL, c->dt, c->b, c->s, c->h, c->d);
  g->k = rows_t4(NULL, c->dt, c->b, c->s, c->hk, c->d);
  g->v = rows_t4(NULL, c->dt, c->b, c->s, c->hk, c->dv);
  g->dout = rows_t4(NULL, c->dt, c->b, c->s, c->h, c->dv);
  test_fill_normal(&g->q, &rng, 1.0);
  test_fill_normal(&g->k, &rng, 1.0);
  test_fill_normal(&g->v, &rng, 1.0);
  test_fill_normal(&g->dout, &rng, 1.0);
  memset(&g->dlse, 0, sizeof g->dlse);
  if (c->dlse) {
    g->dlse = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, c->s);
    test_fill_normal(&g->dlse, &rng, 1.0);
  }
}

static void free_inputs(global_in *g) {
  test_free(&g->q), test_free(&g->k), test_free(&g->v), test_free(&g->dout);
  if (g->dlse.data) test_free(&g->dlse);
}

/* The gathered results, in the shared area: out, lse, dq, dk, dv. */
typedef struct gathered {
  sdpa_tensor out, lse, dq, dk, dv;
} gathered;

static size_t gathered_bytes(const dcase *c) {
  const size_t es = sdpa_dtype_size(c->dt);
  const size_t n = (size_t)c->b * (size_t)c->s;
  return n * (size_t)(c->h * c->dv + c->h * c->d + c->hk * c->d + c->hk * c->dv) * es +
         n * (size_t)c->h * 4 + 5 * 256;
}

static gathered gathered_at(char *p, const dcase *c) {
  gathered g;
#define NEXT(x) \
  (p += (((size_t)test_numel(&(x)) * sdpa_dtype_size((x).dtype)) + 255) & ~(size_t)255)
  g.out = rows_t4(p, c->dt, c->b, c->s, c->h, c->dv);
  NEXT(g.out);
  g.lse = rows_t3(p, SDPA_DTYPE_F32, c->b, c->h, c->s);
  NEXT(g.lse);
  g.dq = rows_t4(p, c->dt, c->b, c->s, c->h, c->d);
  NEXT(g.dq);
  g.dk = rows_t4(p, c->dt, c->b, c->s, c->hk, c->d);
  NEXT(g.dk);
  g.dv = rows_t4(p, c->dt, c->b, c->s, c->hk, c->dv);
#undef NEXT
  return g;
}

/* ---- one rank's ring ---------------------------------------------------------------- */

typedef struct shared_head {
  atomic_int failures; /* calls that failed on any rank */
} shared_head;

#define SHARED_HEAD 256

static int ring_run(dist_ctx *ctx, const dcase *c, int index, cudaStream_t stream) {
  global_in g;
  make_inputs(c, index, &g);
  sdpa_ring_shard_t sh;
  sdpa_ring_shard_of(c->s, ctx->world, c->layout, ctx->rank, &sh);
  const int64_t s = sh.len;
  sdpa_tensor lq = rows_t4(NULL, c->dt, c->b, s, c->h, c->d),
              lk = rows_t4(NULL, c->dt, c->b, s, c->hk, c->d);
  sdpa_tensor lv = rows_t4(NULL, c->dt, c->b, s, c->hk, c->dv),
              ldo = rows_t4(NULL, c->dt, c->b, s, c->h, c->dv);
  sdpa_tensor lo = rows_t4(NULL, c->dt, c->b, s, c->h, c->dv),
              ll = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, s);
  sdpa_tensor ldq = rows_t4(NULL, c->dt, c->b, s, c->h, c->d),
              ldk = rows_t4(NULL, c->dt, c->b, s, c->hk, c->d);
  sdpa_tensor ldv = rows_t4(NULL, c->dt, c->b, s, c->hk, c->dv), ldl;
  rows_copy(&g.q, &lq, &sh, 1, 0);
  rows_copy(&g.k, &lk, &sh, 1, 0);
  rows_copy(&g.v, &lv, &sh, 1, 0);
  rows_copy(&g.dout, &ldo, &sh, 1, 0);
  memset(&ldl, 0, sizeof ldl);
  if (c->dlse) {
    ldl = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, s);
    rows_copy(&g.dlse, &ldl, &sh, 2, 0);
  }
  sdpa_tensor q = dev_like(&lq, 1), k = dev_like(&lk, 1), v = dev_like(&lv, 1);
  sdpa_tensor dout = dev_like(&ldo, 1), out = dev_like(&lo, 0), lse = dev_like(&ll, 0);
  sdpa_tensor dq = dev_like(&ldq, 0), dk = dev_like(&ldk, 0), dv = dev_like(&ldv, 0);
  sdpa_tensor dlse = c->dlse ? dev_like(&ldl, 1) : ldl;
  cudaStream_t comm_stream = NULL;
  if (c->own_comm_stream) cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking);

  sdpa_ring_fwd_desc f;
  sdpa_ring_fwd_init(&f);
  rows_attn(&f.attn, SDPA_DEVICE_CUDA, q, k, v, c->causal, 0.f, c->softcap);
  f.attn.stream = stream;
  rows_ring(&f.ring, ctx->rank, ctx->world, c->layout, c->s, c->check_peers);
  f.ring.nccl_comm = ctx->comm;
  f.ring.comm_stream = comm_stream;
  f.out = out, f.lse = lse;
  int fails = 0;
  sdpa_status st = sdpa_ring_fwd(&f);
  fails += !TEST_EXPECT(st == SDPA_OK, "%s: rank %d: sdpa_ring_fwd: %s: %s", c->name, ctx->rank,
                        sdpa_status_string(st), sdpa_last_error());
  sdpa_ring_bwd_desc b;
  sdpa_ring_bwd_init(&b);
  b.attn = f.attn;
  b.ring = f.ring;
  ROWS_BWD_TENSORS(b, out, lse, dout, dlse, dq, dk, dv);
  b.deterministic = 1;
  if (st == SDPA_OK) {
    st = sdpa_ring_bwd(&b);
    fails += !TEST_EXPECT(st == SDPA_OK, "%s: rank %d: sdpa_ring_bwd: %s: %s", c->name, ctx->rank,
                          sdpa_status_string(st), sdpa_last_error());
  }
  cudaError_t e = cudaStreamSynchronize(stream);
  fails +=
      !TEST_EXPECT(e == cudaSuccess, "%s: rank %d: %s", c->name, ctx->rank, cudaGetErrorString(e));
  download(&lo, &out), download(&ll, &lse), download(&ldq, &dq), download(&ldk, &dk);
  download(&ldv, &dv);
  if (!c->sampled && st == SDPA_OK) { /* deterministic: a second backward, bitwise the same */
    sdpa_tensor h2 = rows_t4(NULL, c->dt, c->b, s, c->h, c->d),
                k2 = rows_t4(NULL, c->dt, c->b, s, c->hk, c->d);
    cudaMemset(dq.data, 0xff, (size_t)test_numel(&ldq) * sdpa_dtype_size(c->dt));
    cudaMemset(dk.data, 0xff, (size_t)test_numel(&ldk) * sdpa_dtype_size(c->dt));
    cudaDeviceSynchronize();
    st = sdpa_ring_bwd(&b);
    cudaStreamSynchronize(stream);
    download(&h2, &dq), download(&k2, &dk);
    fails += !TEST_EXPECT(st == SDPA_OK, "%s: rank %d: second sdpa_ring_bwd: %s", c->name,
                          ctx->rank, sdpa_last_error());
    test_check_equal("deterministic dq", &h2, &ldq);
    test_check_equal("deterministic dk", &k2, &ldk);
    test_free(&h2), test_free(&k2);
  }
  /* this rank's rows into the gathered tensors */
  shared_head *head = (shared_head *)ctx->shared;
  gathered gt = gathered_at((char *)ctx->shared + SHARED_HEAD, c);
  rows_copy(&lo, &gt.out, &sh, 1, 1);
  rows_copy(&ll, &gt.lse, &sh, 2, 1);
  rows_copy(&ldq, &gt.dq, &sh, 1, 1);
  rows_copy(&ldk, &gt.dk, &sh, 1, 1);
  rows_copy(&ldv, &gt.dv, &sh, 1, 1);
  if (fails) atomic_fetch_add(&head->failures, 1);

  sdpa_tensor *devs[] = {&q, &k, &v, &dout, &out, &lse, &dq, &dk, &dv};
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; ++i) cudaFree(devs[i]->data);
  if (c->dlse) cudaFree(dlse.data), test_free(&ldl);
  if (comm_stream) cudaStreamDestroy(comm_stream);
  sdpa_tensor *hosts[] = {&lq, &lk, &lv, &ldo, &lo, &ll, &ldq, &ldk, &ldv};
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; ++i) test_free(hosts[i]);
  free_inputs(&g);
  return fails;
}

/* ---- rank 0's checks ----------------------------------------------------------------- */

typedef gathered single; /* the same five tensors, in rank 0's memory */

/* Single-GPU sdpa on the gathered sequence (this rank's device). */
static int single_gpu(const dcase *c, const global_in *g, single *r, cudaStream_t stream) {
  r->out = rows_t4(NULL, c->dt, c->b, c->s, c->h, c->dv);
  r->lse = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, c->s);
  r->dq = rows_t4(NULL, c->dt, c->b, c->s, c->h, c->d);
  r->dk = rows_t4(NULL, c->dt, c->b, c->s, c->hk, c->d);
  r->dv = rows_t4(NULL, c->dt, c->b, c->s, c->hk, c->dv);
  sdpa_tensor q = dev_like(&g->q, 1), k = dev_like(&g->k, 1), v = dev_like(&g->v, 1);
  sdpa_tensor dout = dev_like(&g->dout, 1), out = dev_like(&r->out, 0), lse = dev_like(&r->lse, 0);
  sdpa_tensor dq = dev_like(&r->dq, 0), dk = dev_like(&r->dk, 0), dv = dev_like(&r->dv, 0);
  sdpa_tensor dlse = g->dlse;
  if (c->dlse) dlse = dev_like(&g->dlse, 1);
  sdpa_fwd_desc f;
  sdpa_fwd_init(&f);
  rows_attn(&f.attn, SDPA_DEVICE_CUDA, q, k, v, c->causal, 0.f, c->softcap);
  f.attn.stream = stream;
  f.out = out, f.lse = lse;
  sdpa_status st = sdpa_fwd(&f);
  int ok = TEST_EXPECT(st == SDPA_OK, "%s: single-GPU sdpa_fwd: %s", c->name, sdpa_last_error());
  sdpa_bwd_desc b;
  sdpa_bwd_init(&b);
  b.attn = f.attn;
  ROWS_BWD_TENSORS(b, out, lse, dout, dlse, dq, dk, dv);
  b.deterministic = 1;
  st = sdpa_bwd(&b);
  ok &= TEST_EXPECT(st == SDPA_OK, "%s: single-GPU sdpa_bwd: %s", c->name, sdpa_last_error());
  cudaStreamSynchronize(stream);
  download(&r->out, &out), download(&r->lse, &lse), download(&r->dq, &dq);
  download(&r->dk, &dk), download(&r->dv, &dv);
  sdpa_tensor *devs[] = {&q, &k, &v, &dout, &out, &lse, &dq, &dk, &dv};
  for (size_t i = 0; i < sizeof devs / sizeof devs[0]; ++i) cudaFree(devs[i]->data);
  if (c->dlse) cudaFree(dlse.data);
  return ok;
}

static void free_single(single *r) {
  test_free(&r->out), test_free(&r->lse), test_free(&r->dq), test_free(&r->dk), test_free(&r->dv);
}

/* The problem on host tensors (the oracle reads sdpa_problem). */
static void host_problems(const dcase *c, const global_in *g, const sdpa_tensor *out,
                          const sdpa_tensor *lse, sdpa_problem *pf, sdpa_problem *pb) {
  sdpa_fwd_desc f;
  sdpa_fwd_init(&f);
  rows_attn(&f.attn, SDPA_DEVICE_CPU, g->q, g->k, g->v, c->causal, 0.f, c->softcap);
  f.out = *out, f.lse = *lse;
  sdpa_validate_fwd(&f, pf);
  sdpa_bwd_desc b;
  sdpa_bwd_init(&b);
  b.attn = f.attn;
  b.out = *out, b.lse = *lse, b.dout = g->dout, b.dlse = g->dlse;
  b.dq = g->q, b.dk = g->k, b.dv = g->v; /* never written: the oracle only reads */
  sdpa_validate_bwd(&b, pb);
}

static double *dbl(int64_t n) {
  double *p = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!p) abort();
  return p;
}

/* Every element of every output against the oracle: the ring's and single-GPU sdpa's. */
static void check_full(const dcase *c, const global_in *g, const gathered *rg, const single *sg) {
  sdpa_problem pf, pb;
  host_problems(c, g, &rg->out, &rg->lse, &pf, &pb);
  const int64_t no = test_numel(&rg->out), nl = test_numel(&rg->lse), nq = test_numel(&rg->dq);
  const int64_t nk = test_numel(&rg->dk), nv = test_numel(&rg->dv);
  double *r[2][5];
  for (int l = 0; l < 2; ++l) {
    r[l][0] = dbl(no), r[l][1] = dbl(nl), r[l][2] = dbl(nq), r[l][3] = dbl(nk), r[l][4] = dbl(nv);
    if (ref_fwd(&pf, l, r[l][0], r[l][1], NULL) ||
        ref_bwd(&pb, l, NULL, r[l][2], r[l][3], r[l][4], NULL))
      abort();
  }
  const char *who[2] = {"ring", "single-GPU"};
  const gathered *res[2] = {rg, sg};
  for (int i = 0; i < 2; ++i) {
    char name[160];
    snprintf(name, sizeof name, "%s %s out", c->name, who[i]);
    test_check(name, &res[i]->out, r[0][0], r[1][0], test_atol(c->dt));
    snprintf(name, sizeof name, "%s %s lse", c->name, who[i]);
    test_check(name, &res[i]->lse, r[0][1], r[1][1], test_lse_atol(r[0][1], nl));
    snprintf(name, sizeof name, "%s %s", c->name, who[i]);
    test_check_grad(name, "dq", &res[i]->dq, r[0][2], r[1][2]);
    test_check_grad(name, "dk", &res[i]->dk, r[0][3], r[1][3]);
    test_check_grad(name, "dv", &res[i]->dv, r[0][4], r[1][4]);
  }
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 5; ++i) free(r[l][i]);
}

/* Rows [i0, i0 + m) of a [1, s, h, x] tensor as a tensor of their own. */
static sdpa_tensor take_rows(const sdpa_tensor *t, int64_t i0, int64_t m) {
  sdpa_tensor r = rows_t4(NULL, t->dtype, 1, m, t->shape[2], t->shape[3]);
  const size_t row = (size_t)(t->shape[2] * t->shape[3]) * sdpa_dtype_size(t->dtype);
  memcpy(r.data, (const char *)t->data + (size_t)i0 * row, (size_t)m * row);
  return r;
}

/* Long sequences: out, lse and dq of sampled query rows against the oracle
 * (rows [i0, i0 + m) with their visible keys are a problem of their own:
 * bottom-right, the causal diagonal lands at i0), dk and dv against
 * single-GPU sdpa. b = 1. */
static void check_sampled(const dcase *c, const global_in *g, const gathered *rg,
                          const single *sg) {
  const int64_t m = 16, starts[3] = {0, c->s / 2 - m / 2, c->s - m};
  for (int bi = 0; bi < 3; ++bi) {
    const int64_t i0 = starts[bi], kend = c->causal ? i0 + m : c->s;
    global_in sub = {take_rows(&g->q, i0, m), take_rows(&g->k, 0, kend), take_rows(&g->v, 0, kend),
                     take_rows(&g->dout, i0, m), g->dlse};
    memset(&sub.dlse, 0, sizeof sub.dlse);
    sdpa_tensor o = take_rows(&rg->out, i0, m), gq = take_rows(&rg->dq, i0, m);
    sdpa_tensor l = rows_t3(NULL, SDPA_DTYPE_F32, 1, c->h, m);
    for (int64_t hh = 0; hh < c->h; ++hh)
      memcpy((float *)l.data + hh * m, (const float *)rg->lse.data + hh * c->s + i0,
             sizeof(float) * (size_t)m);
    sdpa_problem pf, pb;
    sdpa_fwd_desc f;
    sdpa_fwd_init(&f);
    f.attn.device = SDPA_DEVICE_CPU;
    f.attn.q = sub.q, f.attn.k = sub.k, f.attn.v = sub.v;
    f.attn.causal = c->causal;
    f.attn.softcap = c->softcap;
    f.out = o, f.lse = l;
    sdpa_validate_fwd(&f, &pf);
    sdpa_bwd_desc b;
    sdpa_bwd_init(&b);
    b.attn = f.attn;
    b.out = o, b.lse = l, b.dout = sub.dout;
    b.dq = sub.q, b.dk = sub.k, b.dv = sub.v;
    sdpa_validate_bwd(&b, &pb);
    double *r[2][3];
    for (int lw = 0; lw < 2; ++lw) {
      r[lw][0] = dbl(test_numel(&o)), r[lw][1] = dbl(test_numel(&l)),
      r[lw][2] = dbl(test_numel(&gq));
      double *dk = dbl(test_numel(&sub.k)), *dv = dbl(test_numel(&sub.v));
      if (ref_fwd(&pf, lw, r[lw][0], r[lw][1], NULL) ||
          ref_bwd(&pb, lw, NULL, r[lw][2], dk, dv, NULL))
        abort();
      free(dk), free(dv);
    }
    char name[160];
    snprintf(name, sizeof name, "%s ring rows %lld.. out", c->name, (long long)i0);
    test_check(name, &o, r[0][0], r[1][0], test_atol(c->dt));
    snprintf(name, sizeof name, "%s ring rows %lld.. lse", c->name, (long long)i0);
    test_check(name, &l, r[0][1], r[1][1], test_lse_atol(r[0][1], test_numel(&l)));
    snprintf(name, sizeof name, "%s ring rows %lld..", c->name, (long long)i0);
    test_check_grad(name, "dq", &gq, r[0][2], r[1][2]);
    for (int lw = 0; lw < 2; ++lw)
      for (int i = 0; i < 3; ++i) free(r[lw][i]);
    test_free(&sub.q), test_free(&sub.k), test_free(&sub.v), test_free(&sub.dout);
    test_free(&o), test_free(&gq), test_free(&l);
  }
  /* dk / dv: no oracle at this length; single-GPU sdpa, at twice its own atol */
  const sdpa_tensor *ring_g[2] = {&rg->dk, &rg->dv}, *single_g[2] = {&sg->dk, &sg->dv};
  for (int i = 0; i < 2; ++i) {
    const int64_t n = test_numel(single_g[i]);
    double *ref = dbl(n);
    for (int64_t e = 0; e < n; ++e) ref[e] = test_get(single_g[i], e);
    const double mx = test_max_abs(ref, n);
    char name[160];
    snprintf(name, sizeof name, "%s ring %s vs single-GPU", c->name, i ? "dv" : "dk");
    test_check(name, ring_g[i], ref, NULL, 2.0 * test_atol(c->dt) * (mx > 1.0 ? mx : 1.0));
    free(ref);
  }
}

static int rank0_checks(dist_ctx *ctx, const dcase *c, int index, cudaStream_t stream) {
  global_in g;
  make_inputs(c, index, &g);
  single sg;
  int ok = single_gpu(c, &g, &sg, stream);
  const gathered rg = gathered_at((char *)ctx->shared + SHARED_HEAD, c);
  if (ok) {
    if (c->sampled)
      check_sampled(c, &g, &rg, &sg);
    else
      check_full(c, &g, &rg, &sg);
    printf("   max |ring - single-GPU sdpa|: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n",
           rows_max_diff(&rg.out, &sg.out), rows_max_diff(&rg.lse, &sg.lse),
           rows_max_diff(&rg.dq, &sg.dq), rows_max_diff(&rg.dk, &sg.dk),
           rows_max_diff(&rg.dv, &sg.dv));
  }
  free_single(&sg);
  free_inputs(&g);
  return ok;
}

/* ---- refusals over NCCL: every rank fails, with no rank left waiting --------------------- */

static void refusal(dist_ctx *ctx, cudaStream_t stream, int kind) {
  const int64_t s_total = 64 * ctx->world;
  sdpa_ring_shard_t sh;
  sdpa_ring_shard_of(s_total, ctx->world, SDPA_RING_ZIGZAG, ctx->rank, &sh);
  sdpa_tensor hq = rows_t4(NULL, SDPA_DTYPE_BF16, 1, sh.len, 2, 64);
  test_rng rng;
  test_rng_init(&rng, 7);
  test_fill_normal(&hq, &rng, 1.0);
  sdpa_tensor q = dev_like(&hq, 1), out = dev_like(&hq, 0), qother = q;
  int other = -1;
  if (kind == 1) { /* rank 0's tensors on another device than its communicator's */
    other = ctx->world > 1 ? 1 : 0;
    cudaSetDevice(other);
    qother = dev_like(&hq, 1);
    cudaSetDevice(ctx->rank);
  }
  sdpa_ring_fwd_desc f;
  sdpa_ring_fwd_init(&f);
  f.attn.stream = stream;
  f.attn.q = q, f.attn.k = q, f.attn.v = q;
  f.attn.causal = 1;
  f.ring.nccl_comm = ctx->comm;
  f.ring.rank = ctx->rank;
  f.ring.world_size = ctx->world;
  f.ring.seqlen = s_total;
  f.out = out;
  const char *want;
  if (kind == 0) { /* the last rank's heads differ: [1, s, 1, 128] over the same bytes */
    if (ctx->rank == ctx->world - 1) {
      sdpa_tensor *ts[4] = {&f.attn.q, &f.attn.k, &f.attn.v, &f.out};
      for (int i = 0; i < 4; ++i) ts[i]->shape[2] = 1, ts[i]->shape[3] = 128;
    }
    want = "on rank 0 but";
  } else {
    if (ctx->rank == 0) f.attn.q = qother;
    want = ctx->rank == 0 ? "expected the communicator of the tensors' device" : "rank 0 of";
  }
  const sdpa_status st = sdpa_ring_fwd(&f);
  TEST_EXPECT(st == SDPA_ERR_INVALID_ARGUMENT && strstr(sdpa_last_error(), want),
              "refusal %d, rank %d: got %s \"%s\", expected a message containing \"%s\"", kind,
              ctx->rank, sdpa_status_string(st), sdpa_last_error(), want);
  if (ctx->rank == 0) printf("   refusal %d: \"%s\"\n", kind, sdpa_last_error());
  cudaFree(q.data), cudaFree(out.data);
  if (kind == 1 && qother.data != q.data) {
    cudaSetDevice(other);
    cudaFree(qother.data);
    cudaSetDevice(ctx->rank);
  }
  test_free(&hq);
}

static int rank_main(dist_ctx *ctx, void *arg) {
  (void)arg;
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (int i = 0; i < NCASES; ++i) {
    const dcase *c = &cases[i];
    if (ctx->rank == 0)
      printf("-- %s: %d ranks, %s %s b%lld s%lld h%lld/%lld d%lld %s%s\n", c->name, ctx->world,
             c->layout == SDPA_RING_ZIGZAG ? "zigzag" : "contiguous", c->causal ? "causal" : "full",
             (long long)c->b, (long long)c->s, (long long)c->h, (long long)c->hk, (long long)c->d,
             sdpa_dtype_string(c->dt), c->dlse ? " dlse" : "");
    fflush(stdout);
    ring_run(ctx, c, i, stream);
    dist_barrier(ctx); /* every rank's rows are in the gathered tensors */
    if (ctx->rank == 0) rank0_checks(ctx, c, i, stream);
    fflush(stdout);
    dist_barrier(ctx); /* the gathered tensors are free again */
  }
  if (ctx->rank == 0) printf("-- refusals\n");
  if (ctx->world > 1) {
    refusal(ctx, stream, 0);
    refusal(ctx, stream, 1);
  }
  cudaStreamDestroy(stream);
  const shared_head *head = (const shared_head *)ctx->shared;
  if (ctx->rank == 0 && atomic_load(&head->failures))
    printf("FAIL: %d ring calls failed (see the ranks' lines above)\n",
           atomic_load(&head->failures));
  return test_summary();
}

int main(int argc, char **argv) {
  int ranks = 2;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--ranks n]\n", argv[0]);
      return 2;
    }
  }
  if (ranks < 1 || ranks > 64) {
    fprintf(stderr, "--ranks %d: expected 1 .. 64\n", ranks);
    return 2;
  }
  run_seed = test_seed();
  size_t shared = 0;
  for (int i = 0; i < NCASES; ++i)
    if (gathered_bytes(&cases[i]) > shared) shared = gathered_bytes(&cases[i]);
  const int rc = dist_launch(ranks, SHARED_HEAD + shared, 1500, rank_main, NULL);
  printf("test_dist_ring --ranks %d: %s\n", ranks,
         rc == 0    ? "passed"
         : rc == 77 ? "skipped"
                    : "FAILED");
  return rc;
}
