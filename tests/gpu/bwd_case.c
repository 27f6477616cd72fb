/*
 * bwd_case.c - the shared backward test problem (bwd_case.h).
 */
#include "gpu/bwd_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ref/ref.h"

bcase bwd_case(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t hk, int64_t sq,
               int64_t sk, int64_t d) {
  bcase c;
  memset(&c, 0, sizeof c);
  c.name = name, c.dt = dt, c.b = b, c.h = h, c.hk = hk, c.sq = sq, c.sk = sk, c.d = d;
  c.wl = c.wr = -1;
  return c;
}

/* Inputs, out / lse from the CPU forward, both descriptors. 0 on failure. */
int bwd_case_build(const bcase *c, bbufs *f, test_rng *rng) {
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
      int64_t lq = b == 1 ? 0 : test_rng_int(rng, 1, c->sq);
      int64_t lk = b == 1 ? 0 : test_rng_int(rng, 1, c->sk);
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
  test_fill_normal(&f->q.h, rng, 1.0);
  test_fill_normal(&f->k.h, rng, 1.0);
  test_fill_normal(&f->v.h, rng, 1.0);
  test_fill_normal(&f->dout.h, rng, 1.0);
  if (c->alibi) {
    int64_t as[2] = {c->b, c->h};
    f->alibi = c->alibi == 1 ? dual_alloc(SDPA_DTYPE_F32, 1, &as[1], 0, 0)
                             : dual_alloc(SDPA_DTYPE_F32, 2, as, 0, 0);
    test_fill_uniform(&f->alibi.h, rng, 0.05, 0.6);
    a->alibi_slopes = f->alibi.h;
  }
  a->q = f->q.h, a->k = f->k.h, a->v = f->v.h;
  a->scale = c->scale;
  a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (!c->causal) a->window_left = c->wl, a->window_right = c->wr;
  a->dropout_p = c->dropout;
  a->dropout_seed = test_rng_u64(rng);
  a->dropout_offset = test_rng_u64(rng) & 0xffffu;

  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  fd.attn = *a;
  fd.out = f->out.h, fd.lse = f->lse.h;
  sdpa_status st = gpu_fwd(&fd);
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

void bwd_case_release(bbufs *f) {
  dual *all[] = {&f->q, &f->k, &f->v, &f->out, &f->lse, &f->dout, &f->dq, &f->dk, &f->dv,
                 &f->alibi, &f->cu_q, &f->cu_k, &f->used};
  for (size_t n = 0; n < sizeof all / sizeof all[0]; ++n) dual_free(all[n]);
}

void bwd_case_poison(bbufs *f) {
  dual *g[3] = {&f->dq, &f->dk, &f->dv};
  for (int n = 0; n < 3; ++n) {
    test_poison(&g[n]->h);
    dual_upload(g[n]);
  }
}

/* The oracle's dq, dk, dv (ref_bwd, lowp 0 or 1) in r[0..2], malloc'd (the
 * caller frees them); exits on allocation failure. 0 if the host descriptor
 * fails validation (reported). */
static int bwd_case_oracle(const bcase *c, const bbufs *f, int lowp, double *r[3]) {
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_bwd(&f->host, &p) == SDPA_OK, "%s: validate: %s", c->name,
                   sdpa_last_error()))
    return 0;
  const int64_t n[3] = {f->nq * c->h * c->d, f->nk * c->hk * c->d, f->nk * c->hk * c->d};
  for (int e = 0; e < 3; ++e) r[e] = malloc(sizeof(double) * (size_t)(n[e] ? n[e] : 1));
  if (!r[0] || !r[1] || !r[2] || ref_bwd(&p, lowp, NULL, r[0], r[1], r[2], NULL)) {
    printf("FATAL ref_bwd: out of memory\n");
    exit(1);
  }
  return 1;
}

int bwd_case_prepare(const bcase *c, bbufs *f, test_rng *rng, int with_lowp, double *r[2][3]) {
  for (int e = 0; e < 3; ++e) r[0][e] = r[1][e] = NULL;
  if (bwd_case_build(c, f, rng) && bwd_case_oracle(c, f, 0, r[0]) &&
      (!with_lowp || bwd_case_oracle(c, f, 1, r[1])))
    return 1;
  bwd_case_done(f, r);
  return 0;
}

void bwd_case_done(bbufs *f, double *r[2][3]) {
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 3; ++e) {
      free(r[l][e]);
      r[l][e] = NULL;
    }
  bwd_case_release(f);
}

int bwd_case_rerun_same(const bcase *c, bbufs *f, int runs) {
  dual *g[3] = {&f->dq, &f->dk, &f->dv};
  void *first[3];
  int same = 1;
  for (int n = 0; n < 3; ++n) {
    first[n] = malloc(g[n]->bytes ? g[n]->bytes : 1);
    memcpy(first[n], g[n]->h.data, g[n]->bytes);
  }
  for (int run = 0; run < runs; ++run) {
    bwd_case_poison(f);
    const sdpa_status st = gpu_bwd(&f->dev);
    TEST_EXPECT(st == SDPA_OK, "%s: rerun %d: %s", c->name, run, sdpa_last_error());
    for (int n = 0; n < 3; ++n) {
      dual_download(g[n]);
      if (memcmp(first[n], g[n]->h.data, g[n]->bytes) != 0) same = 0;
    }
  }
  for (int n = 0; n < 3; ++n) free(first[n]);
  return same;
}

sdpa_bwd_desc bwd_case_dense_desc(void *const t[9], sdpa_dtype dt, int64_t b, int64_t s, int64_t h,
                                  int64_t d, int causal) {
  const int64_t shp[4] = {b, s, h, d}, sl[3] = {b, h, s};
  sdpa_tensor x[8];
  for (int n = 0; n < 8; ++n) x[n] = sdpa_tensor_contiguous(t[n], dt, 4, shp);
  sdpa_bwd_desc bd;
  sdpa_bwd_init(&bd);
  bd.attn.device = SDPA_DEVICE_CUDA;
  bd.attn.causal = causal;
  bd.attn.q = x[0], bd.attn.k = x[1], bd.attn.v = x[2];
  bd.out = x[3], bd.dout = x[4], bd.dq = x[5], bd.dk = x[6], bd.dv = x[7];
  bd.lse = sdpa_tensor_contiguous(t[8], SDPA_DTYPE_F32, 3, sl);
  return bd;
}
