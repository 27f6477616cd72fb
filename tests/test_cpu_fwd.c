/*
 * test_cpu_fwd.c - the CPU forward (dense and varlen) against the fp64 oracle:
 * GQA ratios, lengths off the tile grid (s = 1, s_q > s_k), head dims
 * 1 .. 320 and d != d_v, the three dtypes, causal in both alignments, window,
 * alibi [h] / [b, h], softcap, bias with broadcast strides and -inf entries,
 * fully masked rows, dropout (probs sign pattern = the oracle's dropout bits),
 * varlen with an empty sequence and seqused_k, padded strides, determinism
 * and split-KV (every split count equals the unsplit result).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"
#include "ref/ref.h"

static test_rng rng;

typedef struct fcase {
  const char *name;
  sdpa_dtype dtype;
  int64_t b, h, h_k, s_q, s_k, d, d_v;
  int causal, top_left;
  int64_t wl, wr;      /* window, used when causal == 0 and wl or wr != -1 */
  float softcap;
  int alibi;           /* 0 off, 1 [h], 2 [b, h] */
  int bias;            /* 0 off, 1 full [b,h,s_q,s_k], 2 broadcast [1,h,1,s_k] via strides,
                          3 [b,1,s_q,s_k] with a fully -inf row */
  float dropout;
  int probs;
  int varlen;          /* cu_seqlens with an empty sequence, seqused_k */
  int pad;             /* padded strides for q, k, v, out */
  int splits;          /* num_splits (0 = auto) */
  int threads;
  float scale;
} fcase;

static fcase base_case(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t h_k,
                       int64_t s_q, int64_t s_k, int64_t d) {
  fcase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.dtype = dt;
  c.b = b;
  c.h = h;
  c.h_k = h_k;
  c.s_q = s_q;
  c.s_k = s_k;
  c.d = d;
  c.d_v = d;
  c.wl = c.wr = -1;
  c.threads = 2;
  return c;
}

typedef struct fbufs {
  sdpa_tensor q, k, v, out, lse, probs, alibi, bias, cu_q, cu_k, used;
  sdpa_fwd_desc desc;
} fbufs;

static sdpa_tensor alloc_maybe_padded(sdpa_dtype dt, int rank, const int64_t *shape, int pad) {
  return pad ? test_alloc_padded(dt, rank, shape, 3) : test_alloc(dt, rank, shape);
}

/* Builds the descriptor of case c with fresh random inputs (lengths for varlen
 * are drawn here: sequence 1 is empty, the last uses seqused_k). */
static void build(const fcase *c, fbufs *f) {
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->desc);
  sdpa_attn *a = &f->desc.attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = c->threads;
  if (c->varlen) {
    int64_t shape1[1] = {c->b + 1}, shapeb[1] = {c->b};
    f->cu_q = test_alloc(SDPA_DTYPE_I32, 1, shape1);
    f->cu_k = test_alloc(SDPA_DTYPE_I32, 1, shape1);
    f->used = test_alloc(SDPA_DTYPE_I32, 1, shapeb);
    int32_t *cq = (int32_t *)f->cu_q.data, *ck = (int32_t *)f->cu_k.data;
    int32_t *us = (int32_t *)f->used.data;
    cq[0] = ck[0] = 0;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      int64_t lq = b == 1 ? 0 : test_rng_int(&rng, 1, c->s_q);
      int64_t lk = b == 1 ? 0 : test_rng_int(&rng, 1, c->s_k);
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > mq) mq = lq;
      if (lk > mk) mk = lk;
    }
    int64_t tq = cq[c->b], tk = ck[c->b];
    int64_t sq[3] = {tq, c->h, c->d}, sk[3] = {tk, c->h_k, c->d}, sv[3] = {tk, c->h_k, c->d_v};
    int64_t so[3] = {tq, c->h, c->d_v}, sl[2] = {c->h, tq};
    f->q = alloc_maybe_padded(c->dtype, 3, sq, c->pad);
    f->k = alloc_maybe_padded(c->dtype, 3, sk, c->pad);
    f->v = alloc_maybe_padded(c->dtype, 3, sv, c->pad);
    f->out = alloc_maybe_padded(c->dtype, 3, so, c->pad);
    f->lse = test_alloc(SDPA_DTYPE_F32, 2, sl);
    a->cu_seqlens_q = f->cu_q;
    a->cu_seqlens_k = f->cu_k;
    a->seqused_k = f->used;
    a->max_seqlen_q = mq;
    a->max_seqlen_k = mk;
  } else {
    int64_t sq[4] = {c->b, c->s_q, c->h, c->d}, sk[4] = {c->b, c->s_k, c->h_k, c->d};
    int64_t sv[4] = {c->b, c->s_k, c->h_k, c->d_v}, so[4] = {c->b, c->s_q, c->h, c->d_v};
    int64_t sl[3] = {c->b, c->h, c->s_q};
    f->q = alloc_maybe_padded(c->dtype, 4, sq, c->pad);
    f->k = alloc_maybe_padded(c->dtype, 4, sk, c->pad);
    f->v = alloc_maybe_padded(c->dtype, 4, sv, c->pad);
    f->out = alloc_maybe_padded(c->dtype, 4, so, c->pad);
    f->lse = test_alloc(SDPA_DTYPE_F32, 3, sl);
  }
  test_fill_normal(&f->q, &rng, 1.0);
  test_fill_normal(&f->k, &rng, 1.0);
  test_fill_normal(&f->v, &rng, 1.0);
  a->q = f->q;
  a->k = f->k;
  a->v = f->v;
  f->desc.out = f->out;
  f->desc.lse = f->lse;
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
    f->alibi = c->alibi == 1 ? test_alloc(SDPA_DTYPE_F32, 1, s1) : test_alloc(SDPA_DTYPE_F32, 2, s2);
    test_fill_uniform(&f->alibi, &rng, 0.0, 0.5);
    a->alibi_slopes = f->alibi;
  }
  if (c->bias) {
    int64_t sb[4] = {c->b, c->h, c->s_q, c->s_k};
    if (c->bias == 2) {
      int64_t s2[2] = {c->h, c->s_k};
      f->bias = test_alloc(c->dtype, 2, s2);
      test_fill_normal(&f->bias, &rng, 1.0);
      /* view as [b, h, s_q, s_k] with strides (0, s_k, 0, 1) */
      f->bias.rank = 4;
      memcpy(f->bias.shape, sb, sizeof sb);
      f->bias.stride[0] = 0;
      f->bias.stride[1] = c->s_k;
      f->bias.stride[2] = 0;
      f->bias.stride[3] = 1;
      /* a -inf column for every row */
      test_set(&f->bias, c->s_k / 2, -INFINITY);
    } else if (c->bias == 3) {
      int64_t s3[4] = {c->b, 1, c->s_q, c->s_k};
      f->bias = test_alloc(c->dtype, 4, s3);
      test_fill_normal(&f->bias, &rng, 1.0);
      for (int64_t j = 0; j < c->s_k; ++j) test_set(&f->bias, j, -INFINITY); /* row (0, 0) */
      for (int64_t e = 0; e < test_numel(&f->bias); e += 7) test_set(&f->bias, e, -INFINITY);
      f->bias.shape[1] = c->h;
      f->bias.stride[1] = 0;
    } else {
      f->bias = test_alloc(c->dtype, 4, sb);
      test_fill_normal(&f->bias, &rng, 1.0);
      for (int64_t e = 3; e < test_numel(&f->bias); e += 11) test_set(&f->bias, e, -INFINITY);
    }
    a->bias = f->bias;
  }
  a->dropout_p = c->dropout;
  a->dropout_seed = 0x1234567890abcdefull ^ test_rng_u64(&rng);
  a->dropout_offset = (uint32_t)test_rng_u64(&rng);
  if (c->probs) {
    int64_t sp[4] = {c->b, c->h, c->s_q, c->s_k};
    f->probs = test_alloc(SDPA_DTYPE_F32, 4, sp);
    f->desc.probs = f->probs;
  }
  f->desc.num_splits = c->splits;
}

static void release(fbufs *f) {
  test_free(&f->q);
  test_free(&f->k);
  test_free(&f->v);
  test_free(&f->out);
  test_free(&f->lse);
  test_free(&f->probs);
  test_free(&f->alibi);
  test_free(&f->bias);
  test_free(&f->cu_q);
  test_free(&f->cu_k);
  test_free(&f->used);
}

/* Runs case c and checks out, lse (and probs) against the oracle. */
static void run_case(const fcase *c) {
  printf("-- %s: %s b%lld h%lld/%lld s%lld/%lld d%lld/%lld\n", c->name,
         sdpa_dtype_string(c->dtype), (long long)c->b, (long long)c->h, (long long)c->h_k,
         (long long)c->s_q, (long long)c->s_k, (long long)c->d, (long long)c->d_v);
  fbufs f;
  build(c, &f);
  sdpa_status st = sdpa_fwd(&f.desc);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd returned %s: %s", c->name,
                   sdpa_status_string(st), sdpa_last_error())) {
    release(&f);
    return;
  }
  sdpa_problem p;
  st = sdpa_validate_fwd(&f.desc, &p);
  TEST_EXPECT(st == SDPA_OK, "%s: validate", c->name);
  int64_t n_out = test_numel(&f.out), n_lse = test_numel(&f.lse);
  int64_t n_p = c->probs ? test_numel(&f.probs) : 0;
  double *ro = malloc(sizeof(double) * (size_t)n_out), *lo = malloc(sizeof(double) * (size_t)n_out);
  double *rl = malloc(sizeof(double) * (size_t)n_lse), *ll = malloc(sizeof(double) * (size_t)n_lse);
  double *rp = n_p ? malloc(sizeof(double) * (size_t)n_p) : NULL;
  ref_fwd(&p, 0, ro, rl, rp);
  ref_fwd(&p, 1, lo, ll, NULL);
  char what[160];
  snprintf(what, sizeof what, "%s out", c->name);
  test_check(what, &f.out, ro, lo, test_atol(c->dtype));
  snprintf(what, sizeof what, "%s lse", c->name);
  test_check(what, &f.lse, rl, ll, test_lse_atol(rl, n_lse));
  if (n_p) {
    snprintf(what, sizeof what, "%s probs", c->name);
    test_check(what, &f.probs, rp, NULL, 1e-5);
    if (c->dropout > 0.0f) {
      int64_t bad = 0, ndrop = 0;
      for (int64_t b = 0; b < c->b; ++b)
        for (int64_t hh = 0; hh < c->h; ++hh)
          for (int64_t i = 0; i < c->s_q; ++i)
            for (int64_t j = 0; j < c->s_k; ++j) {
              int64_t e = ((b * c->h + hh) * c->s_q + i) * c->s_k + j;
              int want = ref_dropped(&p, b, hh, i, j);
              ndrop += want;
              bad += signbit(test_get(&f.probs, e)) != 0 ? !want : want;
            }
      TEST_EXPECT(bad == 0 && ndrop > 0, "%s: %lld probs signs differ from the dropout bits "
                  "(%lld dropped)", c->name, (long long)bad, (long long)ndrop);
    }
  }
  free(ro);
  free(lo);
  free(rl);
  free(ll);
  free(rp);
  release(&f);
}

/* Same inputs run twice (and with other thread counts / split counts): the
 * outputs must be bitwise equal (threads) or equal within rounding (splits). */
static void run_repeat(const fcase *c) {
  printf("-- %s (repeat): %s s%lld/%lld d%lld\n", c->name, sdpa_dtype_string(c->dtype),
         (long long)c->s_q, (long long)c->s_k, (long long)c->d);
  fbufs f;
  build(c, &f);
  sdpa_tensor out1 = test_alloc(c->dtype, f.out.rank, f.out.shape);
  sdpa_tensor lse1 = test_alloc(SDPA_DTYPE_F32, f.lse.rank, f.lse.shape);
  f.desc.num_splits = 1;
  f.desc.out = out1;
  f.desc.lse = lse1;
  TEST_EXPECT(sdpa_fwd(&f.desc) == SDPA_OK, "%s: first run: %s", c->name, sdpa_last_error());
  /* bitwise run to run, with 1 and 3 threads too */
  int threads[3] = {c->threads, 1, 3};
  for (int k = 0; k < 3; ++k) {
    sdpa_tensor out2 = test_alloc(c->dtype, f.out.rank, f.out.shape);
    f.desc.out = out2;
    f.desc.attn.num_threads = threads[k];
    TEST_EXPECT(sdpa_fwd(&f.desc) == SDPA_OK, "%s: rerun", c->name);
    char what[160];
    snprintf(what, sizeof what, "%s bitwise rerun (%d threads)", c->name, threads[k]);
    test_check_equal(what, &out1, &out2);
    test_free(&out2);
  }
  /* every split count */
  int64_t n = test_numel(&out1), nl = test_numel(&lse1);
  double *o1 = malloc(sizeof(double) * (size_t)n), *l1 = malloc(sizeof(double) * (size_t)nl);
  for (int64_t e = 0; e < n; ++e) o1[e] = test_get(&out1, e);
  for (int64_t e = 0; e < nl; ++e) l1[e] = test_get(&lse1, e);
  f.desc.attn.num_threads = c->threads;
  int fails = 0;
  for (int s = 2; s <= 16 && !fails; ++s) {
    sdpa_tensor out2 = test_alloc(c->dtype, f.out.rank, f.out.shape);
    sdpa_tensor lse2 = test_alloc(SDPA_DTYPE_F32, f.lse.rank, f.lse.shape);
    f.desc.out = out2;
    f.desc.lse = lse2;
    f.desc.num_splits = s;
    TEST_EXPECT(sdpa_fwd(&f.desc) == SDPA_OK, "%s: split %d", c->name, s);
    char what[160];
    snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
    fails += !test_check(what, &out2, o1, NULL, c->dtype == SDPA_DTYPE_F32 ? 2e-6 : test_atol(c->dtype));
    snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
    fails += !test_check(what, &lse2, l1, NULL, test_lse_atol(l1, nl));
    test_free(&out2);
    test_free(&lse2);
  }
  free(o1);
  free(l1);
  test_free(&out1);
  test_free(&lse1);
  release(&f);
}

int main(void) {
  test_rng_init(&rng, test_seed());
  const sdpa_dtype dts[3] = {SDPA_DTYPE_F32, SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  fcase c;

  /* head dims (d != d_v included), every dtype, GQA 1 / 2 / 8 */
  const int64_t ds[8] = {1, 3, 8, 64, 80, 128, 256, 320};
  for (int k = 0; k < 8; ++k) {
    sdpa_dtype dt = dts[k % 3];
    c = base_case("head dim", dt, 2, 4, k % 2 ? 2 : 4, 37, 301, ds[k]);
    run_case(&c);
  }
  c = base_case("d != d_v", SDPA_DTYPE_F16, 2, 8, 1, 70, 129, 40);
  c.d_v = 72;
  run_case(&c);
  c = base_case("d != d_v small", SDPA_DTYPE_F32, 1, 2, 2, 5, 9, 96);
  c.d_v = 3;
  run_case(&c);
  for (int k = 0; k < 3; ++k) {
    c = base_case("gqa 8", dts[k], 1, 8, 1, 65, 257, 64);
    run_case(&c);
  }
  /* lengths: s = 1, s_q > s_k, off the tile grid */
  c = base_case("s=1", SDPA_DTYPE_BF16, 3, 2, 1, 1, 1, 32);
  run_case(&c);
  c = base_case("s_q=1 long keys", SDPA_DTYPE_F32, 2, 4, 2, 1, 777, 64);
  run_case(&c);
  c = base_case("s_q > s_k", SDPA_DTYPE_F16, 2, 2, 2, 200, 33, 64);
  run_case(&c);

  /* empty problems: no keys (out 0, lse +inf over poisoned outputs), no queries, no batch */
  c = base_case("no keys", SDPA_DTYPE_BF16, 2, 4, 2, 37, 0, 64);
  run_case(&c);
  c = base_case("no keys causal", SDPA_DTYPE_F32, 1, 2, 2, 5, 0, 8);
  c.causal = 1;
  run_case(&c);
  c = base_case("no queries", SDPA_DTYPE_F16, 2, 2, 2, 0, 30, 32);
  run_case(&c);
  c = base_case("no batch", SDPA_DTYPE_F32, 0, 2, 1, 7, 9, 16);
  run_case(&c);

  /* masks: causal both alignments (s_q > s_k gives fully masked rows bottom-right) */
  for (int k = 0; k < 3; ++k) {
    c = base_case("causal bottom-right", dts[k], 2, 2, 1, 131, 300, 64);
    c.causal = 1;
    run_case(&c);
    c = base_case("causal top-left", dts[k], 2, 2, 1, 131, 300, 64);
    c.causal = 1;
    c.top_left = 1;
    run_case(&c);
  }
  c = base_case("causal s_q > s_k (empty rows)", SDPA_DTYPE_F32, 1, 2, 2, 150, 70, 32);
  c.causal = 1;
  run_case(&c);
  c = base_case("window (40, 7)", SDPA_DTYPE_BF16, 2, 4, 2, 300, 300, 64);
  c.wl = 40;
  c.wr = 7;
  run_case(&c);
  c = base_case("window (3, -1) top-left", SDPA_DTYPE_F32, 1, 2, 2, 90, 300, 16);
  c.wl = 3;
  c.top_left = 1;
  run_case(&c);
  c = base_case("window (0, 0)", SDPA_DTYPE_F16, 1, 2, 1, 70, 70, 24);
  c.wl = 0;
  c.wr = 0;
  run_case(&c);

  /* score modifiers */
  c = base_case("softcap", SDPA_DTYPE_BF16, 2, 2, 2, 65, 200, 64);
  c.softcap = 5.0f;
  c.scale = 0.5f;
  run_case(&c);
  c = base_case("alibi [h] causal", SDPA_DTYPE_F32, 2, 4, 2, 100, 150, 32);
  c.alibi = 1;
  c.causal = 1;
  run_case(&c);
  c = base_case("alibi [b,h]", SDPA_DTYPE_F16, 2, 4, 4, 100, 64, 32);
  c.alibi = 2;
  run_case(&c);
  for (int k = 0; k < 3; ++k) {
    c = base_case("bias full with -inf", dts[k], 2, 2, 1, 40, 300, 32);
    c.bias = 1;
    run_case(&c);
  }
  c = base_case("bias broadcast [1,h,1,s_k]", SDPA_DTYPE_BF16, 2, 3, 1, 50, 270, 32);
  c.bias = 2;
  c.probs = 1;
  run_case(&c);
  c = base_case("bias [b,1,s_q,s_k], -inf row + softcap + alibi + causal", SDPA_DTYPE_F32, 2, 2,
                2, 70, 90, 16);
  c.bias = 3;
  c.softcap = 3.0f;
  c.alibi = 1;
  c.causal = 1;
  c.probs = 1;
  run_case(&c);

  /* dropout: exact mask through probs' sign pattern */
  for (int k = 0; k < 3; ++k) {
    c = base_case("dropout 0.17 + probs", dts[k], 2, 2, 1, 67, 270, 32);
    c.dropout = 0.17f;
    c.probs = 1;
    c.causal = k == 1;
    run_case(&c);
  }
  c = base_case("probs f32 no dropout, window", SDPA_DTYPE_F32, 1, 2, 2, 130, 300, 64);
  c.probs = 1;
  c.wl = 50;
  c.wr = 20;
  run_case(&c);

  /* varlen (an empty sequence, seqused_k) */
  for (int k = 0; k < 3; ++k) {
    c = base_case("varlen", dts[k], 4, 4, 2, 150, 280, 64);
    c.varlen = 1;
    c.causal = k == 2;
    run_case(&c);
  }
  c = base_case("varlen window + alibi + dropout", SDPA_DTYPE_F16, 3, 2, 1, 90, 90, 40);
  c.varlen = 1;
  c.wl = 10;
  c.wr = 5;
  c.alibi = 2;
  c.dropout = 0.17f;
  run_case(&c);

  /* padded strides */
  c = base_case("padded", SDPA_DTYPE_F32, 2, 4, 2, 70, 190, 48);
  c.pad = 1;
  c.causal = 1;
  run_case(&c);
  c = base_case("padded varlen", SDPA_DTYPE_BF16, 3, 4, 4, 50, 60, 20);
  c.pad = 1;
  c.varlen = 1;
  run_case(&c);

  /* split-KV forced: oracle check, then every split count vs unsplit and reruns */
  c = base_case("split 5 decode", SDPA_DTYPE_F32, 1, 4, 1, 1, 1500, 128);
  c.splits = 5;
  run_case(&c);
  c = base_case("split 3 causal + dropout + probs", SDPA_DTYPE_F16, 1, 2, 2, 70, 600, 32);
  c.splits = 3;
  c.causal = 1;
  c.dropout = 0.17f;
  c.probs = 1;
  run_case(&c);
  c = base_case("split auto varlen", SDPA_DTYPE_BF16, 3, 2, 1, 2, 900, 64);
  c.varlen = 1;
  run_case(&c);
  c = base_case("repeat decode", SDPA_DTYPE_F32, 2, 4, 2, 1, 3000, 64);
  run_repeat(&c);
  c = base_case("repeat window dropout", SDPA_DTYPE_BF16, 1, 2, 1, 100, 1100, 32);
  c.wl = 300;
  c.wr = 10;
  c.dropout = 0.17f;
  run_repeat(&c);
  c = base_case("repeat varlen causal", SDPA_DTYPE_F16, 3, 2, 2, 40, 700, 16);
  c.varlen = 1;
  c.causal = 1;
  run_repeat(&c);

  /* automatic split count */
  {
    sdpa_problem p;
    memset(&p, 0, sizeof p);
    p.b = 1;
    p.h = 4;
    p.s_q = 1;
    p.s_k = 8192;
    p.num_threads = 16;
    int n = sdpa_cpu_num_splits(&p);
    TEST_EXPECT(n > 1, "decode b1 h4 s_k 8192 on 16 threads should split, got %d", n);
    p.b = 8;
    p.h = 16;
    p.s_q = 2048;
    TEST_EXPECT(sdpa_cpu_num_splits(&p) == 1, "b8 h16 s2048 should not split");
    p.num_splits = 7;
    TEST_EXPECT(sdpa_cpu_num_splits(&p) == 7, "num_splits 7 must be honoured");
  }
  return test_summary();
}
