/*
 * test_cpu_merge.c - sdpa_merge_states on the CPU: against a direct fp64
 * computation (f32 / f16 / bf16 parts and outputs, lse through [n, h, t]
 * strides, +inf parts and all-empty rows), and end to end: attention over
 * disjoint key chunks merged equals attention over all keys (the oracle).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"
#include "ref/ref.h"

static test_rng rng;

static void direct_case(sdpa_dtype pdt, sdpa_dtype odt, int64_t n, int64_t t, int64_t h,
                        int64_t d, int lse_nht) {
  printf("-- merge direct: parts %s out %s n%lld t%lld h%lld d%lld%s\n", sdpa_dtype_string(pdt),
         sdpa_dtype_string(odt), (long long)n, (long long)t, (long long)h, (long long)d,
         lse_nht ? " lse [n,h,t]" : "");
  int64_t sp[4] = {n, t, h, d}, so[3] = {t, h, d}, sl[2] = {t, h};
  sdpa_tensor parts = test_alloc(pdt, 4, sp), out = test_alloc(odt, 3, so);
  sdpa_tensor lse = test_alloc(SDPA_DTYPE_F32, 2, sl);
  test_fill_normal(&parts, &rng, 1.0);
  sdpa_tensor lp;
  if (lse_nht) {
    int64_t s3[3] = {n, h, t};
    lp = test_alloc(SDPA_DTYPE_F32, 3, s3);
  } else {
    int64_t s3[3] = {n, t, h};
    lp = test_alloc(SDPA_DTYPE_F32, 3, s3);
  }
  test_fill_uniform(&lp, &rng, -20.0, 5.0);
  /* lse value of (part k, token tt, head hh) through the layout */
#define LIDX(k, tt, hh) (lse_nht ? ((k) * h + (hh)) * t + (tt) : ((k) * t + (tt)) * h + (hh))
  for (int64_t tt = 0; tt < t; ++tt)
    for (int64_t hh = 0; hh < h; ++hh) {
      int64_t mode = (tt * h + hh) % 5; /* 0: all empty, 1: first empty, 2: one left */
      for (int64_t k = 0; k < n; ++k) {
        int empty = mode == 0 || (mode == 1 && k == 0) || (mode == 2 && k != n - 1);
        if (empty) {
          test_set(&lp, LIDX(k, tt, hh), INFINITY);
          /* an empty part's out must not be read: poison it */
          for (int64_t e = 0; e < d; ++e) test_set(&parts, ((k * t + tt) * h + hh) * d + e, NAN);
        }
      }
    }
  sdpa_tensor lview = lp;
  if (lse_nht) { /* [n, h, t] storage viewed as [n, t, h] */
    lview.shape[1] = t;
    lview.shape[2] = h;
    lview.stride[0] = h * t;
    lview.stride[1] = 1;
    lview.stride[2] = t;
  }
  double *ro = malloc(sizeof(double) * (size_t)(t * h * d)), *rl = malloc(sizeof(double) * (size_t)(t * h));
  for (int64_t tt = 0; tt < t; ++tt)
    for (int64_t hh = 0; hh < h; ++hh) {
      double mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        double l = test_get(&lp, LIDX(k, tt, hh));
        if (l != INFINITY && l > mx) mx = l;
      }
      double *o = ro + (tt * h + hh) * d;
      for (int64_t e = 0; e < d; ++e) o[e] = 0.0;
      if (mx == -INFINITY) {
        rl[tt * h + hh] = INFINITY;
        continue;
      }
      double s = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        double l = test_get(&lp, LIDX(k, tt, hh));
        if (l != INFINITY) s += exp(l - mx);
      }
      double lse_all = mx + log(s);
      rl[tt * h + hh] = lse_all;
      for (int64_t k = 0; k < n; ++k) {
        double l = test_get(&lp, LIDX(k, tt, hh));
        if (l == INFINITY) continue;
        for (int64_t e = 0; e < d; ++e)
          o[e] += exp(l - lse_all) * test_get(&parts, ((k * t + tt) * h + hh) * d + e);
      }
    }
#undef LIDX
  sdpa_merge_desc m;
  sdpa_merge_init(&m);
  m.device = SDPA_DEVICE_CPU;
  m.out_parts = parts;
  m.lse_parts = lview;
  m.out = out;
  m.lse = lse;
  sdpa_status st = sdpa_merge_states(&m);
  if (TEST_EXPECT(st == SDPA_OK, "merge_states: %s", sdpa_last_error())) {
    /* 16-bit outputs: the output rounding is the error; fp32: the merge's own
       fp32 arithmetic (expf of lse differences, weighted sums over parts),
       ~1e-6 on these magnitudes */
    double atol = odt == SDPA_DTYPE_F32 ? 1e-5 : odt == SDPA_DTYPE_F16 ? 4e-3 : 3e-2;
    test_check("merge out", &out, ro, NULL, atol);
    test_check("merge lse", &lse, rl, NULL, 2e-5);
  }
  free(ro);
  free(rl);
  test_free(&parts);
  test_free(&out);
  test_free(&lse);
  test_free(&lp);
}

/* Attention over key chunks [c0, c1) (as dense problems on views of k / v),
 * merged, against the oracle over all keys. */
static void chunks_case(sdpa_dtype dt, int64_t b, int64_t h, int64_t s_q, int64_t s_k, int64_t d,
                        int nchunks) {
  printf("-- merge of key chunks: %s b%lld h%lld s%lld/%lld d%lld, %d chunks\n",
         sdpa_dtype_string(dt), (long long)b, (long long)h, (long long)s_q, (long long)s_k,
         (long long)d, nchunks);
  int64_t sq[4] = {b, s_q, h, d}, sk[4] = {b, s_k, h, d}, so[4] = {b, s_q, h, d};
  sdpa_tensor q = test_alloc(dt, 4, sq), k = test_alloc(dt, 4, sk), v = test_alloc(dt, 4, sk);
  sdpa_tensor out = test_alloc(dt, 4, so);
  test_fill_normal(&q, &rng, 1.0);
  test_fill_normal(&k, &rng, 1.0);
  test_fill_normal(&v, &rng, 1.0);
  /* parts: out [n, b*s_q, h, d] in dt, lse [n, b*s_q, h] via the forward's [b, h, s_q] */
  int64_t t = b * s_q;
  int64_t spo[4] = {nchunks, t, h, d}, spl[4] = {nchunks, b, h, s_q};
  sdpa_tensor parts = test_alloc(dt, 4, spo), lparts = test_alloc(SDPA_DTYPE_F32, 4, spl);
  size_t es = dt == SDPA_DTYPE_F32 ? 4 : 2;
  for (int c = 0; c < nchunks; ++c) {
    int64_t c0 = s_k * c / nchunks, c1 = s_k * (c + 1) / nchunks;
    sdpa_fwd_desc f;
    sdpa_fwd_init(&f);
    f.attn.device = SDPA_DEVICE_CPU;
    f.attn.num_threads = 2;
    f.attn.q = q;
    f.attn.k = k;
    f.attn.v = v;
    f.attn.k.data = (char *)k.data + (size_t)(c0 * k.stride[1]) * es;
    f.attn.v.data = (char *)v.data + (size_t)(c0 * v.stride[1]) * es;
    f.attn.k.shape[1] = f.attn.v.shape[1] = c1 - c0;
    f.attn.scale = 1.0f / sqrtf((float)d);
    f.out = parts;
    f.out.data = (char *)parts.data + (size_t)(c * parts.stride[0]) * es;
    f.out.rank = 4;
    int64_t o4[4] = {b, s_q, h, d};
    memcpy(f.out.shape, o4, sizeof o4);
    f.out.stride[0] = s_q * h * d;
    f.out.stride[1] = h * d;
    f.out.stride[2] = d;
    f.out.stride[3] = 1;
    f.lse = lparts;
    f.lse.rank = 3;
    f.lse.data = (char *)lparts.data + (size_t)(c * lparts.stride[0]) * 4;
    int64_t l3[3] = {b, h, s_q};
    memcpy(f.lse.shape, l3, sizeof l3);
    f.lse.stride[0] = h * s_q;
    f.lse.stride[1] = s_q;
    f.lse.stride[2] = 1;
    sdpa_status st = sdpa_fwd(&f);
    TEST_EXPECT(st == SDPA_OK, "chunk %d forward: %s", c, sdpa_last_error());
  }
  sdpa_merge_desc m;
  sdpa_merge_init(&m);
  m.device = SDPA_DEVICE_CPU;
  m.out_parts = parts;
  /* lse parts [n, b, h, s_q] viewed as [n, t = b*s_q, h]: only when b == 1 is that
   * a single stride; the cases below use b == 1 */
  m.lse_parts = lparts;
  m.lse_parts.rank = 3;
  m.lse_parts.shape[0] = nchunks;
  m.lse_parts.shape[1] = t;
  m.lse_parts.shape[2] = h;
  m.lse_parts.stride[0] = b * h * s_q;
  m.lse_parts.stride[1] = 1;
  m.lse_parts.stride[2] = s_q;
  m.out = out;
  m.out.rank = 3;
  m.out.shape[0] = t;
  m.out.shape[1] = h;
  m.out.shape[2] = d;
  m.out.stride[0] = h * d;
  m.out.stride[1] = d;
  m.out.stride[2] = 1;
  sdpa_status st = sdpa_merge_states(&m);
  TEST_EXPECT(st == SDPA_OK, "merge: %s", sdpa_last_error());
  /* the oracle over all keys */
  sdpa_fwd_desc full;
  sdpa_fwd_init(&full);
  full.attn.device = SDPA_DEVICE_CPU;
  full.attn.q = q;
  full.attn.k = k;
  full.attn.v = v;
  full.attn.scale = 1.0f / sqrtf((float)d);
  full.out = out;
  sdpa_problem p;
  TEST_EXPECT(sdpa_validate_fwd(&full, &p) == SDPA_OK, "validate full: %s", sdpa_last_error());
  double *ro = malloc(sizeof(double) * (size_t)(t * h * d)), *lo = malloc(sizeof(double) * (size_t)(t * h * d));
  ref_fwd(&p, 0, ro, NULL, NULL);
  ref_fwd(&p, 1, lo, NULL, NULL);
  /* parts rounded to dt add one more rounding than the lowp oracle models */
  test_check("merged chunks out", &out, ro, lo, 2.0 * test_atol(dt));
  free(ro);
  free(lo);
  test_free(&q);
  test_free(&k);
  test_free(&v);
  test_free(&out);
  test_free(&parts);
  test_free(&lparts);
}

int main(void) {
  test_rng_init(&rng, test_seed());
  direct_case(SDPA_DTYPE_F32, SDPA_DTYPE_F32, 4, 13, 5, 64, 0);
  direct_case(SDPA_DTYPE_F32, SDPA_DTYPE_F32, 1, 7, 3, 16, 1);
  direct_case(SDPA_DTYPE_F16, SDPA_DTYPE_BF16, 3, 9, 4, 33, 1);
  direct_case(SDPA_DTYPE_BF16, SDPA_DTYPE_F16, 7, 20, 2, 128, 0);
  direct_case(SDPA_DTYPE_F32, SDPA_DTYPE_F32, 16, 300, 8, 128, 0); /* large: threaded */
  chunks_case(SDPA_DTYPE_F32, 1, 4, 33, 700, 64, 3);
  chunks_case(SDPA_DTYPE_F32, 1, 2, 1, 1000, 128, 7);
  chunks_case(SDPA_DTYPE_BF16, 1, 2, 17, 300, 32, 2);
  return test_summary();
}
