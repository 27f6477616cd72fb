/*
 * test_cpu_cache.c - the CPU forward on a KV cache against the fp64 oracle:
 * contiguous cache with cache_batch_idx, paged caches (page 16 and 256) with
 * shuffled block tables, in-call append of k_new / v_new with rotary in both
 * layouts (and the cache contents afterwards: appended rows rotated, every
 * other byte untouched), cache_seqlens 0, s_q in {1, 2, 7, 64}, GQA,
 * cache_leftpad, windows, and every split count 1..16 equal to the unsplit
 * result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"
#include "ref/ref.h"

static test_rng rng;

typedef struct ccase {
  const char *name;
  sdpa_dtype dtype;
  int64_t b, h, h_k, s_q, s_new, d, d_v, s_cache;
  int64_t page;     /* 0 = contiguous cache */
  int batch_idx;    /* contiguous: cache_batch_idx, a shuffled subset of b + 2 rows */
  int rotary;       /* 0 off, 1 interleaved, 2 half-split */
  int64_t rotary_dim;
  int causal;
  int zero_seqlen;  /* sequence 0 starts with an empty cache */
  int splits;
  int leftpad;      /* contiguous: cache_leftpad drawn in [0, cache_seqlens[b]] */
  int64_t wl;       /* window_left when > 0 (a windowed, non-causal mask) */
} ccase;

static ccase cbase(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t h_k,
                   int64_t s_q, int64_t s_new, int64_t d, int64_t s_cache) {
  ccase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.dtype = dt;
  c.b = b;
  c.h = h;
  c.h_k = h_k;
  c.s_q = s_q;
  c.s_new = s_new;
  c.d = c.d_v = d;
  c.s_cache = s_cache;
  return c;
}

typedef struct cbufs {
  sdpa_tensor q, kc, vc, kn, vn, out, lse, seqlens, bt, bidx, cos, sin, lpad;
  sdpa_fwd_desc desc;
} cbufs;

static void shuffle(int32_t *a, int64_t n) {
  for (int64_t k = n - 1; k > 0; --k) {
    int64_t r = test_rng_int(&rng, 0, k);
    int32_t t = a[k];
    a[k] = a[r];
    a[r] = t;
  }
}

static void build(const ccase *c, cbufs *f) {
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->desc);
  sdpa_attn *a = &f->desc.attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = 2;
  a->causal = c->causal;
  int64_t sq[4] = {c->b, c->s_q, c->h, c->d}, so[4] = {c->b, c->s_q, c->h, c->d_v};
  int64_t sl[3] = {c->b, c->h, c->s_q}, sb[1] = {c->b};
  f->q = test_alloc(c->dtype, 4, sq);
  f->out = test_alloc(c->dtype, 4, so);
  f->lse = test_alloc(SDPA_DTYPE_F32, 3, sl);
  test_fill_normal(&f->q, &rng, 1.0);
  f->seqlens = test_alloc(SDPA_DTYPE_I32, 1, sb);
  int32_t *sl32 = (int32_t *)f->seqlens.data;
  int64_t room = c->s_new > c->s_q ? c->s_new : c->s_q;
  for (int64_t b = 0; b < c->b; ++b)
    sl32[b] = (int32_t)(c->zero_seqlen && b == 0 ? 0 : test_rng_int(&rng, 0, c->s_cache - room));
  if (c->page > 0) {
    int64_t maxb = (c->s_cache + c->page - 1) / c->page, nblocks = c->b * maxb + 3;
    int64_t sk[4] = {nblocks, c->page, c->h_k, c->d}, sv[4] = {nblocks, c->page, c->h_k, c->d_v};
    int64_t st[2] = {c->b, maxb};
    f->kc = test_alloc(c->dtype, 4, sk);
    f->vc = test_alloc(c->dtype, 4, sv);
    f->bt = test_alloc(SDPA_DTYPE_I32, 2, st);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)nblocks);
    for (int64_t k = 0; k < nblocks; ++k) perm[k] = (int32_t)k;
    shuffle(perm, nblocks);
    memcpy(f->bt.data, perm, sizeof(int32_t) * (size_t)(c->b * maxb));
    free(perm);
    f->desc.block_table = f->bt;
  } else {
    int64_t bc = c->b + (c->batch_idx ? 2 : 0);
    int64_t sk[4] = {bc, c->s_cache, c->h_k, c->d}, sv[4] = {bc, c->s_cache, c->h_k, c->d_v};
    f->kc = test_alloc(c->dtype, 4, sk);
    f->vc = test_alloc(c->dtype, 4, sv);
    if (c->batch_idx) {
      f->bidx = test_alloc(SDPA_DTYPE_I32, 1, sb);
      int32_t *perm = malloc(sizeof(int32_t) * (size_t)bc);
      for (int64_t k = 0; k < bc; ++k) perm[k] = (int32_t)k;
      shuffle(perm, bc);
      memcpy(f->bidx.data, perm, sizeof(int32_t) * (size_t)c->b);
      free(perm);
      f->desc.cache_batch_idx = f->bidx;
    }
  }
  test_fill_normal(&f->kc, &rng, 1.0);
  test_fill_normal(&f->vc, &rng, 1.0);
  a->q = f->q;
  a->k = f->kc;
  a->v = f->vc;
  f->desc.out = f->out;
  f->desc.lse = f->lse;
  f->desc.cache_seqlens = f->seqlens;
  if (c->s_new > 0) {
    int64_t sk[4] = {c->b, c->s_new, c->h_k, c->d}, sv[4] = {c->b, c->s_new, c->h_k, c->d_v};
    f->kn = test_alloc(c->dtype, 4, sk);
    f->vn = test_alloc(c->dtype, 4, sv);
    test_fill_normal(&f->kn, &rng, 1.0);
    test_fill_normal(&f->vn, &rng, 1.0);
    f->desc.k_new = f->kn;
    f->desc.v_new = f->vn;
  }
  if (c->rotary) {
    int64_t half = c->rotary_dim / 2, sr[2] = {c->s_cache, half};
    f->cos = test_alloc(SDPA_DTYPE_F32, 2, sr);
    f->sin = test_alloc(SDPA_DTYPE_F32, 2, sr);
    for (int64_t pos = 0; pos < c->s_cache; ++pos)
      for (int64_t t = 0; t < half; ++t) {
        double ang = (double)pos * pow(10000.0, -2.0 * (double)t / (double)c->rotary_dim);
        test_set(&f->cos, pos * half + t, cos(ang));
        test_set(&f->sin, pos * half + t, sin(ang));
      }
    f->desc.rotary_cos = f->cos;
    f->desc.rotary_sin = f->sin;
    f->desc.rotary_interleaved = c->rotary == 1;
  }
  if (c->leftpad) {
    f->lpad = test_alloc(SDPA_DTYPE_I32, 1, sb);
    for (int64_t b = 0; b < c->b; ++b)
      ((int32_t *)f->lpad.data)[b] = (int32_t)test_rng_int(&rng, 0, sl32[b]);
    f->desc.cache_leftpad = f->lpad;
  }
  if (c->wl > 0) {
    a->window_left = c->wl;
    a->window_right = 2;
  }
  f->desc.num_splits = c->splits;
}

static void release(cbufs *f) {
  sdpa_tensor *all[13] = {&f->q,       &f->kc,  &f->vc, &f->kn,  &f->vn,  &f->out, &f->lse,
                          &f->seqlens, &f->bt, &f->bidx, &f->cos, &f->sin, &f->lpad};
  for (int k = 0; k < 13; ++k) test_free(all[k]);
}

/* element offset of cache row pos (head hk) of sequence b, computed here from
 * the tensors (not through src/problem.h) */
static int64_t cache_off(const ccase *c, const cbufs *f, const sdpa_tensor *t, int64_t b,
                         int64_t pos, int64_t hk) {
  if (c->page > 0) {
    int64_t blk = ((const int32_t *)f->bt.data)[b * f->bt.stride[0] + pos / c->page];
    return blk * t->stride[0] + (pos % c->page) * t->stride[1] + hk * t->stride[2];
  }
  int64_t row = c->batch_idx ? ((const int32_t *)f->bidx.data)[b] : b;
  return row * t->stride[0] + pos * t->stride[1] + hk * t->stride[2];
}

/* Checks the cache after the append: rows seqlens[b] + i hold k_new (rotated)
 * and v_new; every other element is bitwise what it was (snapshots k0, v0). */
static void check_cache(const ccase *c, const cbufs *f, const void *k0, const void *v0) {
  size_t es = c->dtype == SDPA_DTYPE_F32 ? 4 : 2;
  int64_t nk = test_numel(&f->kc), nv = test_numel(&f->vc);
  char *touched_k = calloc((size_t)nk, 1), *touched_v = calloc((size_t)nv, 1);
  const int32_t *sl = (const int32_t *)f->seqlens.data;
  double tol = c->dtype == SDPA_DTYPE_F32 ? 1e-6 : c->dtype == SDPA_DTYPE_F16 ? 1e-3 : 8e-3;
  int64_t bad = 0;
  double x[512];
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t i = 0; i < c->s_new; ++i)
      for (int64_t hk = 0; hk < c->h_k; ++hk) {
        int64_t pos = sl[b] + i;
        int64_t nb = ((b * c->s_new + i) * c->h_k + hk);
        for (int64_t e = 0; e < c->d; ++e) x[e] = test_get(&f->kn, nb * c->d + e);
        if (c->rotary) {
          int64_t half = c->rotary_dim / 2;
          for (int64_t t = 0; t < half; ++t) {
            double co = test_get(&f->cos, pos * half + t), si = test_get(&f->sin, pos * half + t);
            int64_t ia = c->rotary == 1 ? 2 * t : t, ib = c->rotary == 1 ? 2 * t + 1 : t + half;
            double x0 = x[ia], x1 = x[ib];
            x[ia] = x0 * co - x1 * si;
            x[ib] = x0 * si + x1 * co;
          }
        }
        int64_t ko = cache_off(c, f, &f->kc, b, pos, hk), vo = cache_off(c, f, &f->vc, b, pos, hk);
        for (int64_t e = 0; e < c->d; ++e) {
          /* the flat logical index equals the offset: the cache is contiguous */
          double g = test_get(&f->kc, ko + e);
          touched_k[ko + e] = 1;
          if (!(fabs(g - x[e]) <= tol * (1.0 + fabs(x[e])))) {
            if (bad++ < 10)
              printf("  %s cache k b%lld pos%lld hk%lld e%lld: got %g want %g\n", c->name,
                     (long long)b, (long long)pos, (long long)hk, (long long)e, g, x[e]);
          }
        }
        for (int64_t e = 0; e < c->d_v; ++e) {
          double g = test_get(&f->vc, vo + e), w = test_get(&f->vn, nb * c->d_v + e);
          touched_v[vo + e] = 1;
          if (g != w && bad++ < 10)
            printf("  %s cache v b%lld pos%lld: got %g want %g\n", c->name, (long long)b,
                   (long long)pos, g, w);
        }
      }
  int64_t changed = 0;
  for (int64_t e = 0; e < nk; ++e)
    if (!touched_k[e] && memcmp((const char *)f->kc.data + e * (int64_t)es, (const char *)k0 + e * (int64_t)es, es))
      ++changed;
  for (int64_t e = 0; e < nv; ++e)
    if (!touched_v[e] && memcmp((const char *)f->vc.data + e * (int64_t)es, (const char *)v0 + e * (int64_t)es, es))
      ++changed;
  TEST_EXPECT(bad == 0 && changed == 0,
              "%s: cache after append: %lld appended elements wrong, %lld others changed",
              c->name, (long long)bad, (long long)changed);
  free(touched_k);
  free(touched_v);
}

static void run_case(const ccase *c) {
  printf("-- %s: %s b%lld h%lld/%lld s_q%lld s_new%lld d%lld cache %lld page %lld rotary %d\n",
         c->name, sdpa_dtype_string(c->dtype), (long long)c->b, (long long)c->h,
         (long long)c->h_k, (long long)c->s_q, (long long)c->s_new, (long long)c->d,
         (long long)c->s_cache, (long long)c->page, c->rotary);
  cbufs f;
  build(c, &f);
  sdpa_problem p;
  sdpa_status st = sdpa_validate_fwd(&f.desc, &p);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: validate: %s", c->name, sdpa_last_error())) {
    release(&f);
    return;
  }
  /* the oracle reads the cache before the append */
  int64_t n_out = test_numel(&f.out), n_lse = test_numel(&f.lse);
  double *ro = malloc(sizeof(double) * (size_t)n_out), *lo = malloc(sizeof(double) * (size_t)n_out);
  double *rl = malloc(sizeof(double) * (size_t)n_lse), *ll = malloc(sizeof(double) * (size_t)n_lse);
  ref_fwd(&p, 0, ro, rl, NULL);
  ref_fwd(&p, 1, lo, ll, NULL);
  size_t es = c->dtype == SDPA_DTYPE_F32 ? 4 : 2;
  size_t kbytes = (size_t)test_numel(&f.kc) * es, vbytes = (size_t)test_numel(&f.vc) * es;
  void *k0 = malloc(kbytes), *v0 = malloc(vbytes);
  memcpy(k0, f.kc.data, kbytes);
  memcpy(v0, f.vc.data, vbytes);
  st = sdpa_fwd(&f.desc);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd: %s", c->name, sdpa_last_error())) {
    char what[200];
    snprintf(what, sizeof what, "%s out", c->name);
    test_check(what, &f.out, ro, lo, test_atol(c->dtype));
    snprintf(what, sizeof what, "%s lse", c->name);
    test_check(what, &f.lse, rl, ll, test_lse_atol(rl, n_lse));
    if (c->s_new > 0) check_cache(c, &f, k0, v0);
    /* every split count equals the unsplit result (the append is idempotent) */
    if (c->splits == 1) {
      for (int s = 2; s <= 16; ++s) {
        sdpa_tensor out2 = test_alloc(c->dtype, 4, f.out.shape);
        sdpa_tensor lse2 = test_alloc(SDPA_DTYPE_F32, 3, f.lse.shape);
        double *o1 = malloc(sizeof(double) * (size_t)n_out), *l1 = malloc(sizeof(double) * (size_t)n_lse);
        for (int64_t e = 0; e < n_out; ++e) o1[e] = test_get(&f.out, e);
        for (int64_t e = 0; e < n_lse; ++e) l1[e] = test_get(&f.lse, e);
        f.desc.out = out2;
        f.desc.lse = lse2;
        f.desc.num_splits = s;
        TEST_EXPECT(sdpa_fwd(&f.desc) == SDPA_OK, "%s: split %d", c->name, s);
        snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
        test_check(what, &out2, o1, NULL, c->dtype == SDPA_DTYPE_F32 ? 2e-6 : test_atol(c->dtype));
        snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
        test_check(what, &lse2, l1, NULL, test_lse_atol(l1, n_lse));
        free(o1);
        free(l1);
        test_free(&out2);
        test_free(&lse2);
      }
      f.desc.out = f.out;
      f.desc.lse = f.lse;
    }
  }
  free(k0);
  free(v0);
  free(ro);
  free(lo);
  free(rl);
  free(ll);
  release(&f);
}

int main(void) {
  test_rng_init(&rng, test_seed());
  const sdpa_dtype dts[3] = {SDPA_DTYPE_F32, SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  const int64_t sqs[4] = {1, 2, 7, 64};
  ccase c;
  for (int k = 0; k < 4; ++k) {
    sdpa_dtype dt = dts[k % 3];
    /* contiguous cache, cache_batch_idx, append with rotary (interleaved) */
    c = cbase("contiguous + batch_idx + append + rotary interleaved", dt, 3, 4, 2, sqs[k],
              sqs[k], 64, 300);
    c.batch_idx = 1;
    c.rotary = 1;
    c.rotary_dim = 32;
    c.causal = 1;
    c.zero_seqlen = 1;
    run_case(&c);
    /* paged, page 16, shuffled block table, half-split rotary over all of d */
    c = cbase("paged 16 + append + rotary half", dt, 3, 8, 2, sqs[k], sqs[k], 64, 400);
    c.page = 16;
    c.rotary = 2;
    c.rotary_dim = 64;
    c.causal = k % 2;
    c.zero_seqlen = k == 1;
    run_case(&c);
    /* paged, page 256, no append */
    c = cbase("paged 256", dt, 2, 4, 4, sqs[k], 0, 32, 700);
    c.page = 256;
    c.zero_seqlen = k == 2;
    run_case(&c);
  }
  c = cbase("contiguous, no append, d != d_v", SDPA_DTYPE_BF16, 2, 8, 1, 3, 0, 80, 500);
  c.d_v = 48;
  run_case(&c);
  c = cbase("append s_new < s_q, gqa 8", SDPA_DTYPE_F16, 2, 8, 1, 7, 2, 128, 300);
  c.page = 16;
  c.causal = 1;
  run_case(&c);
  c = cbase("append into empty caches", SDPA_DTYPE_F32, 2, 2, 1, 5, 5, 16, 64);
  c.zero_seqlen = 1;
  c.rotary = 1;
  c.rotary_dim = 8;
  run_case(&c);

  /* split-KV: every split count vs unsplit, with append (re-applied each run) */
  c = cbase("decode splits, paged 16 + append + rotary", SDPA_DTYPE_F32, 2, 8, 2, 1, 1, 64, 2000);
  c.page = 16;
  c.rotary = 2;
  c.rotary_dim = 32;
  c.splits = 1;
  run_case(&c);
  c = cbase("decode splits, contiguous bf16", SDPA_DTYPE_BF16, 1, 4, 4, 2, 0, 128, 1500);
  c.batch_idx = 1;
  c.causal = 1;
  c.splits = 1;
  run_case(&c);
  c = cbase("decode auto split", SDPA_DTYPE_F16, 1, 2, 1, 1, 1, 64, 4000);
  c.page = 256;
  run_case(&c);

  /* cache_leftpad: keys from each sequence's first row; rotary positions stay
     cache rows; q rotated per row when windowed, at cache_seqlens when not */
  c = cbase("leftpad + append + rotary, unmasked", SDPA_DTYPE_F16, 3, 4, 2, 7, 7, 64, 300);
  c.leftpad = 1;
  c.rotary = 2;
  c.rotary_dim = 32;
  c.zero_seqlen = 1;
  run_case(&c);
  c = cbase("leftpad + batch_idx + window + rotary", SDPA_DTYPE_BF16, 3, 4, 4, 7, 3, 59, 300);
  c.leftpad = 1;
  c.batch_idx = 1;
  c.wl = 5;
  c.rotary = 1;
  c.rotary_dim = 32;
  run_case(&c);
  c = cbase("leftpad splits, causal", SDPA_DTYPE_F32, 2, 4, 2, 3, 1, 64, 1200);
  c.leftpad = 1;
  c.causal = 1;
  c.splits = 1;
  run_case(&c);
  return test_summary();
}
