/*
 * test_ref.c - tests of the oracle itself (tests/ref/), which every backend is
 * checked against, so it has to be right on its own evidence:
 *   (a) Philox4x32-10 against the Random123 known-answer vectors, for both the
 *       oracle's own implementation and src/common/philox.h, and the two
 *       dropout masks against each other;
 *   (b) ref_bwd against central finite differences of ref_fwd for every score
 *       modifier, dropout, GQA and varlen with empty sequences;
 *   (c) cases whose answer is known by hand (one key, a fully masked row,
 *       uniform scores), and the KV-cache / seqused_k layouts against dense
 *       problems assembled here from the same numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness.h"
#include "common/philox.h"
#include "ref/ref.h"

static test_rng rng;

/* ---- (a) Philox known answers -------------------------------------------------- */

/* Random123's kat_vectors for philox4x32_10 (counter, key, expected output), as
 * reproduced in e.g. TensorFlow's stateful random op tests. */
static const uint32_t philox_kat[3][10] = {
    {0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
     0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
    {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
     0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
    {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
     0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
};

static void test_philox_kat(void) {
  for (int v = 0; v < 3; ++v) {
    const uint32_t *kat = philox_kat[v];
    uint32_t out[4];
    ref_philox4x32_10(kat, kat + 4, out);
    sdpa_u32x4 c = {{kat[0], kat[1], kat[2], kat[3]}};
    sdpa_u32x4 lib = sdpa_philox4x32_10(c, kat[4], kat[5]);
    for (int w = 0; w < 4; ++w) {
      TEST_EXPECT(out[w] == kat[6 + w], "ref philox KAT %d word %d: %08x, want %08x", v, w,
                  out[w], kat[6 + w]);
      TEST_EXPECT(lib.x[w] == kat[6 + w], "philox.h KAT %d word %d: %08x, want %08x", v, w,
                  lib.x[w], kat[6 + w]);
    }
  }
}

/* ---- building problems (f32 storage, contiguous) ---------------------------------- */

typedef struct cfg {
  const char *name;
  int64_t b, sq, sk, h, hk, d, dv;
  int causal, top_left;
  int64_t wl, wr;      /* window, used when !causal; -1 = unbounded */
  float scale;         /* 0 = 1/sqrt(d) */
  float softcap;
  int bias;            /* 1 full [b,h,s_q,s_k]; 2 broadcast over batch (stride 0) */
  int alibi;           /* 1 [h]; 2 [b,h] */
  float dropout;
  int varlen;          /* uses the fixed varlen lengths below (b = 3) */
} cfg;

/* varlen: seq 0 (3 queries, 4 keys), seq 1 (2 queries, no key), seq 2 (no query, 3 keys) */
static const int32_t vl_cu_q[4] = {0, 3, 5, 5};
static const int32_t vl_cu_k[4] = {0, 4, 4, 7};

typedef struct fixture {
  sdpa_problem p;
  float *q, *k, *v, *bias, *alibi;
  int64_t nq, nk, nv, nbias; /* element counts */
  int64_t rows_q, rows_k;
} fixture;

static float *normal_array(int64_t n, double stddev) {
  float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t e = 0; e < n; ++e) x[e] = (float)(stddev * test_rng_normal(&rng));
  return x;
}

static void set_dense_strides(sdpa_bshd *st, int64_t s, int64_t h, int64_t x) {
  st->ss = h * x;
  st->sh = x;
  st->sb = s * h * x;
}

static void fixture_init(fixture *f, const cfg *c) {
  memset(f, 0, sizeof *f);
  sdpa_problem *p = &f->p;
  p->dtype = SDPA_DTYPE_F32;
  p->b = c->b;
  p->h = c->h;
  p->h_k = c->hk;
  p->d = c->d;
  p->d_v = c->dv;
  p->s_q = c->sq;
  p->s_k = c->sk;
  if (c->varlen) {
    p->layout = SDPA_LAYOUT_VARLEN;
    p->b = 3;
    p->cu_q = vl_cu_q;
    p->cu_k = vl_cu_k;
    p->total_q = vl_cu_q[3];
    p->total_k = vl_cu_k[3];
    p->s_q = 3;
    p->s_k = 4;
  } else {
    p->layout = SDPA_LAYOUT_DENSE;
    p->total_q = p->b * p->s_q;
    p->total_k = p->b * p->s_k;
  }
  f->rows_q = p->total_q;
  f->rows_k = p->total_k;
  set_dense_strides(&p->q_st, p->s_q, p->h, p->d);
  set_dense_strides(&p->k_st, p->s_k, p->h_k, p->d);
  set_dense_strides(&p->v_st, p->s_k, p->h_k, p->d_v);
  set_dense_strides(&p->o_st, p->s_q, p->h, p->d_v);
  if (c->varlen) p->q_st.sb = p->k_st.sb = p->v_st.sb = p->o_st.sb = 0;
  f->nq = f->rows_q * p->h * p->d;
  f->nk = f->rows_k * p->h_k * p->d;
  f->nv = f->rows_k * p->h_k * p->d_v;
  f->q = normal_array(f->nq, 1.0);
  f->k = normal_array(f->nk, 1.0);
  f->v = normal_array(f->nv, 1.0);
  p->q = f->q;
  p->k = f->k;
  p->v = f->v;
  p->scale = c->scale > 0 ? c->scale : 1.0f / sqrtf((float)c->d);
  p->softcap = c->softcap;
  p->window_left = c->causal ? -1 : c->wl;
  p->window_right = c->causal ? 0 : c->wr;
  p->bottom_right = !c->top_left;
  if (c->bias) {
    /* [b|1, h, s_q, s_k] contiguous over what is stored */
    int64_t nb = c->bias == 2 ? 1 : p->b;
    f->nbias = nb * p->h * p->s_q * p->s_k;
    f->bias = normal_array(f->nbias, 1.0);
    p->bias = f->bias;
    p->bias_sk = 1;
    p->bias_sq = p->s_k;
    p->bias_sh = p->s_q * p->s_k;
    p->bias_sb = c->bias == 2 ? 0 : p->h * p->s_q * p->s_k;
  }
  if (c->alibi) {
    int64_t n = c->alibi == 2 ? p->b * p->h : p->h;
    f->alibi = malloc(sizeof(float) * (size_t)n);
    for (int64_t e = 0; e < n; ++e) f->alibi[e] = (float)(0.1 + 0.9 * test_rng_uniform(&rng));
    p->alibi = f->alibi;
    p->alibi_sh = 1;
    p->alibi_sb = c->alibi == 2 ? p->h : 0;
  }
  if (c->dropout > 0) {
    p->dropout_p = c->dropout;
    p->drop_threshold = (uint32_t)llround(c->dropout * 256.0);
    p->drop_scale = 1.0f / (1.0f - c->dropout);
    p->seed = test_rng_u64(&rng);
    p->offset = (uint32_t)test_rng_u64(&rng);
  }
}

static void fixture_free(fixture *f) {
  free(f->q);
  free(f->k);
  free(f->v);
  free(f->bias);
  free(f->alibi);
}

static double *dalloc(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(double)); }

/* ---- (b) backward against finite differences ------------------------------------- */

static double loss(const sdpa_problem *p, const double *w, int64_t nout, double *out) {
  ref_fwd(p, 0, out, NULL, NULL);
  double l = 0.0;
  for (int64_t e = 0; e < nout; ++e) l += out[e] * w[e];
  return l;
}

/*
 * Central differences in f32 storage: x +- eps is rounded to f32, so the step
 * actually taken, (float)(x+eps) - (float)(x-eps), is the divisor. The loss is
 * evaluated in double, so the error is the truncation term eps^2/6 * L'''
 * plus the loss's rounding noise (~1e-16 / eps). Measured over 300 seeds the
 * error scales exactly as eps^2 (eps 1e-3 -> 1e-4 -> 3e-5 shrinks it 100x,
 * then 11x), so it is all truncation; the worst case is softcap 0.5 (largest
 * curvature): 2e-5 at eps = 1e-3 (too close to a 1e-5 bound), 1.5e-7 at
 * eps = 1e-4. With eps = 1e-4 a bound of 1e-5 times the tensor's largest
 * gradient (or 1e-5 when all are below 1) keeps ~60x margin, while a wrong term
 * in the backward is off by O(gradient).
 */
static const double fd_eps = 1e-4;
static const double fd_rtol = 1e-5;

/* Compares the gradient of every element of x (n of them) with the analytic
 * one: g[e] summed over `batch` copies bstride apart (batch = 1: g[e] itself;
 * a bias broadcast over the batch gets dbias summed over b). */
static void fd_compare(const char *cname, const char *tname, const sdpa_problem *p, float *x,
                       int64_t n, const double *g, int64_t batch, int64_t bstride,
                       const double *w, int64_t nout, double *out) {
  double max_err = 0.0, max_g = 0.0;
  int64_t worst = 0;
  for (int64_t e = 0; e < n; ++e) {
    float orig = x[e];
    float xp = (float)((double)orig + fd_eps), xm = (float)((double)orig - fd_eps);
    x[e] = xp;
    double lp = loss(p, w, nout, out);
    x[e] = xm;
    double lm = loss(p, w, nout, out);
    x[e] = orig;
    double fd = (lp - lm) / ((double)xp - (double)xm);
    double an = 0.0;
    for (int64_t bb = 0; bb < batch; ++bb) an += g[bb * bstride + e];
    double err = fabs(an - fd);
    if (!(err <= max_err)) {
      max_err = err;
      worst = e;
    }
    if (fabs(fd) > max_g) max_g = fabs(fd);
  }
  double bound = fd_rtol * (max_g > 1.0 ? max_g : 1.0);
  if (TEST_EXPECT(max_err <= bound, "%s: d%s max |analytic - fd| %.3g > %.3g (at flat %lld)",
                  cname, tname, max_err, bound, (long long)worst))
    printf("ok   %s: d%s max err %.3g (max |grad| %.3g)\n", cname, tname, max_err, max_g);
}

static void test_fd(const cfg *c) {
  fixture f;
  fixture_init(&f, c);
  const sdpa_problem *p = &f.p;
  int64_t nout = f.rows_q * p->h * p->d_v;
  double *w = dalloc(nout), *out = dalloc(nout);
  for (int64_t e = 0; e < nout; ++e) w[e] = test_rng_normal(&rng);
  int64_t nfull = p->b * p->h * p->s_q * p->s_k;
  double *dq = dalloc(f.nq), *dk = dalloc(f.nk), *dv = dalloc(f.nv), *dbias = dalloc(nfull);
  TEST_EXPECT(ref_bwd(p, 0, w, dq, dk, dv, f.bias ? dbias : NULL) == 0, "%s: ref_bwd", c->name);
  fd_compare(c->name, "q", p, f.q, f.nq, dq, 1, 0, w, nout, out);
  fd_compare(c->name, "k", p, f.k, f.nk, dk, 1, 0, w, nout, out);
  fd_compare(c->name, "v", p, f.v, f.nv, dv, 1, 0, w, nout, out);
  if (c->bias == 1) fd_compare(c->name, "bias", p, f.bias, f.nbias, dbias, 1, 0, w, nout, out);
  if (c->bias == 2)
    fd_compare(c->name, "bias(bcast b)", p, f.bias, f.nbias, dbias, p->b,
               p->h * p->s_q * p->s_k, w, nout, out);

  /* lowp with f32 storage is the exact oracle, bit for bit */
  double *out2 = dalloc(nout), *dq2 = dalloc(f.nq);
  ref_fwd(p, 0, out, NULL, NULL);
  ref_fwd(p, 1, out2, NULL, NULL);
  ref_bwd(p, 1, w, dq2, NULL, NULL, NULL);
  TEST_EXPECT(memcmp(out, out2, sizeof(double) * (size_t)nout) == 0 &&
                  memcmp(dq, dq2, sizeof(double) * (size_t)f.nq) == 0,
              "%s: lowp with f32 storage differs from exact", c->name);
  /* no NaN anywhere, ever */
  int nan = 0;
  for (int64_t e = 0; e < nout; ++e) nan |= isnan(out[e]);
  for (int64_t e = 0; e < f.nq; ++e) nan |= isnan(dq[e]);
  for (int64_t e = 0; e < f.nk; ++e) nan |= isnan(dk[e]);
  for (int64_t e = 0; e < f.nv; ++e) nan |= isnan(dv[e]);
  TEST_EXPECT(!nan, "%s: NaN in the oracle's output", c->name);
  free(w);
  free(out);
  free(out2);
  free(dq2);
  free(dq);
  free(dk);
  free(dv);
  free(dbias);
  fixture_free(&f);
}

static void test_backward(void) {
  /*                name               b  sq sk h hk d dv causal tl  wl  wr scale cap  bias alibi drop varlen */
  const cfg cases[] = {
      {"plain",           2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0},
      {"causal br",       2, 5, 7, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 0, 0, 0, 0},
      {"causal br sq>sk", 2, 7, 5, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 0, 0, 0, 0},
      {"causal tl sq>sk", 2, 7, 5, 4, 2, 3, 4, 1, 1, -1, -1, 0, 0, 0, 0, 0, 0},
      {"window (2,1)",    2, 5, 7, 4, 2, 3, 4, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0},
      {"window tl (1,-1)",2, 5, 7, 4, 2, 3, 4, 0, 1, 1, -1, 0, 0, 0, 0, 0, 0},
      {"softcap",         2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0.9f, 0.5f, 0, 0, 0, 0},
      {"bias",            2, 5, 7, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 1, 0, 0, 0},
      {"bias bcast",      2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0, 2, 0, 0, 0},
      {"softcap+bias",    2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0.7f, 1, 0, 0, 0},
      {"alibi [h]",       2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0, 0, 1, 0, 0},
      {"alibi [b,h]",     2, 5, 7, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 0, 2, 0, 0},
      {"dropout 0.3",     2, 5, 7, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0, 0, 0, 0.3f, 0},
      {"dropout+causal",  2, 5, 7, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 1, 0, 0.3f, 0},
      {"MQA h_k=1",       2, 5, 7, 4, 1, 3, 4, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0},
      {"MHA h_k=h",       1, 5, 7, 3, 3, 5, 2, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0},
      {"varlen",          0, 0, 0, 4, 2, 3, 4, 0, 0, -1, -1, 0, 0, 0, 0, 0, 1},
      {"varlen causal",   0, 0, 0, 4, 2, 3, 4, 1, 0, -1, -1, 0, 0, 0, 1, 0.3f, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) test_fd(&cases[c]);
}

/* ---- (c) hand-checkable cases ------------------------------------------------------ */

static int close_to(double a, double b, double tol) {
  return a == b || fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* One key: softmax is 1, out = v, lse = the score itself. */
static void test_single_key(void) {
  cfg c = {"one key", 2, 3, 1, 4, 2, 5, 3, 0, 0, -1, -1, 0, 0.8f, 1, 1, 0, 0};
  fixture f;
  fixture_init(&f, &c);
  const sdpa_problem *p = &f.p;
  double *out = dalloc(p->b * p->s_q * p->h * p->d_v), *lse = dalloc(p->b * p->h * p->s_q);
  double *probs = dalloc(p->b * p->h * p->s_q);
  ref_fwd(p, 0, out, lse, probs);
  int ok = 1;
  for (int64_t b = 0; b < p->b; ++b)
    for (int64_t i = 0; i < p->s_q; ++i)
      for (int64_t hh = 0; hh < p->h; ++hh) {
        int64_t hk = hh / (p->h / p->h_k);
        double dot = 0.0;
        for (int64_t e = 0; e < p->d; ++e)
          dot += (double)f.q[((b * p->s_q + i) * p->h + hh) * p->d + e] *
                 (double)f.k[(b * p->h_k + hk) * p->d + e];
        double s = p->softcap * tanh(p->scale * dot / p->softcap);
        s += f.bias[((b * p->h + hh) * p->s_q + i) * p->s_k];
        s -= f.alibi[hh] * fabs((double)(i + p->s_k - p->s_q)); /* j = 0 */
        ok &= close_to(lse[(b * p->h + hh) * p->s_q + i], s, 1e-12);
        ok &= probs[(b * p->h + hh) * p->s_q + i] == 1.0;
        for (int64_t e = 0; e < p->d_v; ++e)
          ok &= close_to(out[((b * p->s_q + i) * p->h + hh) * p->d_v + e],
                         f.v[(b * p->h_k + hk) * p->d_v + e], 1e-12);
      }
  TEST_EXPECT(ok, "one key: out != v or lse != score");
  free(out);
  free(lse);
  free(probs);
  fixture_free(&f);
}

/* Rows with no visible key: out = 0 and lse = +inf, gradients 0, no NaN.
 * Bottom-right causal with s_q = 4 > s_k = 2 hides every key from rows 0, 1;
 * a -inf bias row hides them from a row of the other batch. */
static void test_masked_rows(void) {
  cfg c = {"masked", 2, 4, 2, 2, 1, 3, 3, 1, 0, -1, -1, 0, 0, 1, 0, 0.25f, 0};
  fixture f;
  fixture_init(&f, &c);
  sdpa_problem *p = &f.p;
  for (int64_t hh = 0; hh < p->h; ++hh)
    for (int64_t j = 0; j < p->s_k; ++j)
      f.bias[((1 * p->h + hh) * p->s_q + 3) * p->s_k + j] = -INFINITY; /* b=1, row 3 */
  int64_t nout = p->b * p->s_q * p->h * p->d_v;
  double *out = dalloc(nout), *lse = dalloc(p->b * p->h * p->s_q);
  double *probs = dalloc(p->b * p->h * p->s_q * p->s_k);
  double *w = dalloc(nout), *dq = dalloc(f.nq), *dk = dalloc(f.nk), *dv = dalloc(f.nv);
  double *dbias = dalloc(p->b * p->h * p->s_q * p->s_k);
  for (int64_t e = 0; e < nout; ++e) w[e] = test_rng_normal(&rng);
  ref_fwd(p, 0, out, lse, probs);
  ref_bwd(p, 0, w, dq, dk, dv, dbias);
  int ok = 1, nan = 0;
  for (int64_t b = 0; b < p->b; ++b)
    for (int64_t hh = 0; hh < p->h; ++hh)
      for (int64_t i = 0; i < p->s_q; ++i) {
        int empty = i < 2 || (b == 1 && i == 3);
        double l = lse[(b * p->h + hh) * p->s_q + i];
        nan |= isnan(l);
        ok &= empty ? l == INFINITY : isfinite(l);
        for (int64_t e = 0; e < p->d_v; ++e) {
          double o = out[((b * p->s_q + i) * p->h + hh) * p->d_v + e];
          nan |= isnan(o);
          if (empty) ok &= o == 0.0;
        }
        for (int64_t e = 0; e < p->d; ++e) {
          double g = dq[((b * p->s_q + i) * p->h + hh) * p->d + e];
          nan |= isnan(g);
          if (empty) ok &= g == 0.0;
        }
        for (int64_t j = 0; j < p->s_k; ++j) {
          int64_t at = ((b * p->h + hh) * p->s_q + i) * p->s_k + j;
          nan |= isnan(probs[at]) || isnan(dbias[at]);
          if (empty) ok &= probs[at] == 0.0 && dbias[at] == 0.0;
        }
      }
  for (int64_t e = 0; e < f.nk; ++e) nan |= isnan(dk[e]);
  for (int64_t e = 0; e < f.nv; ++e) nan |= isnan(dv[e]);
  TEST_EXPECT(ok, "masked rows: out/lse/probs/dq/dbias of empty rows not (0, +inf, 0, 0, 0)");
  TEST_EXPECT(!nan, "masked rows: NaN in the oracle's output");
  free(out);
  free(lse);
  free(probs);
  free(w);
  free(dq);
  free(dk);
  free(dv);
  free(dbias);
  fixture_free(&f);
}

/* q = 0: every visible score is 0, so out is the mean of the visible values and
 * lse = log(count). Top-left causal: row i sees keys 0..i. */
static void test_uniform(void) {
  cfg c = {"uniform", 2, 5, 7, 4, 2, 3, 4, 1, 1, -1, -1, 0, 0, 0, 0, 0, 0};
  fixture f;
  fixture_init(&f, &c);
  const sdpa_problem *p = &f.p;
  for (int64_t e = 0; e < f.nq; ++e) f.q[e] = 0.0f;
  double *out = dalloc(p->b * p->s_q * p->h * p->d_v), *lse = dalloc(p->b * p->h * p->s_q);
  ref_fwd(p, 0, out, lse, NULL);
  int ok = 1;
  for (int64_t b = 0; b < p->b; ++b)
    for (int64_t hh = 0; hh < p->h; ++hh)
      for (int64_t i = 0; i < p->s_q; ++i) {
        int64_t hk = hh / (p->h / p->h_k);
        ok &= close_to(lse[(b * p->h + hh) * p->s_q + i], log((double)(i + 1)), 1e-14);
        for (int64_t e = 0; e < p->d_v; ++e) {
          double mean = 0.0;
          for (int64_t j = 0; j <= i; ++j)
            mean += f.v[((b * p->s_k + j) * p->h_k + hk) * p->d_v + e];
          mean /= (double)(i + 1);
          ok &= close_to(out[((b * p->s_q + i) * p->h + hh) * p->d_v + e], mean, 1e-13);
        }
      }
  TEST_EXPECT(ok, "uniform scores: out != mean of visible v or lse != log(count)");
  free(out);
  free(lse);
  fixture_free(&f);
}

/* The kernels' sixteen-at-once field tests (sdpa_dropout_keep_bytes: bit 7
 * of each byte; sdpa_dropout_keep16: those bits gathered in one word, bytes
 * compared four to a word) against the field-by-field one, for every
 * threshold 0 .. 256: random blocks, blocks of the bytes next to the
 * threshold and of 0x00 / 0x7f / 0x80 / 0xff, where a borrow across bytes or a
 * wrong high-bit rule would show. */
static void test_keep16(void) {
  int bad = 0, first_t = -1, bad_bytes = 0, first_tb = -1;
  for (uint32_t t = 0; t <= 256; ++t)
    for (int v = 0; v < 64; ++v) {
      sdpa_u32x4 r;
      for (int k = 0; k < 4; ++k) {
        uint32_t w = (uint32_t)test_rng_u64(&rng);
        if (v & 1) { /* bytes t - 1, t, t + 1 and the edges, shuffled by the random word */
          static const uint32_t edge[4] = {0x00u, 0x7fu, 0x80u, 0xffu};
          uint32_t x = 0;
          for (int m = 0; m < 4; ++m) {
            const uint32_t sel = (w >> (8 * m)) & 7u;
            const uint32_t byte = sel < 3 ? ((t + sel - 1u) & 0xffu) : edge[sel & 3u];
            x |= byte << (8 * m);
          }
          w = x;
        }
        r.x[k] = w;
      }
      const uint32_t keep = sdpa_dropout_keep16(r, t);
      const sdpa_u32x4 kb = sdpa_dropout_keep_bytes(r, t);
      uint32_t want = 0;
      int bytes_ok = 1;
      for (uint32_t j = 0; j < 16; ++j) {
        const uint32_t kept = sdpa_dropout_field(r, j) >= t;
        want |= kept << sdpa_keep16_pos(j);
        bytes_ok &= ((kb.x[j / 4] >> (8 * (j % 4) + 7)) & 1u) == kept;
      }
      if (keep != want && !bad++) first_t = (int)t;
      if (!bytes_ok && !bad_bytes++) first_tb = (int)t;
    }
  TEST_EXPECT(bad == 0, "sdpa_dropout_keep16: %d of 257 x 64 blocks differ from the field test "
              "(first at threshold %d)", bad, first_t);
  TEST_EXPECT(bad_bytes == 0, "sdpa_dropout_keep_bytes: %d of 257 x 64 blocks differ from the "
              "field test (first at threshold %d)", bad_bytes, first_tb);
}

/* Dropout: the oracle's mask equals philox.h's on every element, about p of the
 * elements drop, and probs carries exactly the dropped ones negated. */
static void test_dropout_mask(void) {
  cfg c = {"dropout", 2, 33, 70, 3, 3, 2, 2, 0, 0, -1, -1, 0, 0, 0, 0, 0.3f, 0};
  fixture f;
  fixture_init(&f, &c);
  const sdpa_problem *p = &f.p;
  int64_t n = p->b * p->h * p->s_q * p->s_k, dropped = 0, agree = 1, sign_ok = 1;
  double *probs = dalloc(n), *out = dalloc(p->b * p->s_q * p->h * p->d_v);
  ref_fwd(p, 0, out, NULL, probs);
  uint32_t threshold = (uint32_t)llround(0.3f * 256.0);
  for (int64_t b = 0; b < p->b; ++b)
    for (int64_t hh = 0; hh < p->h; ++hh)
      for (int64_t i = 0; i < p->s_q; ++i) {
        double row = 0.0;
        for (int64_t j = 0; j < p->s_k; ++j) {
          int r = ref_dropped(p, b, hh, i, j);
          int l = sdpa_dropped(p->seed, p->offset, threshold, (uint32_t)(b * p->h + hh),
                               (uint32_t)i, (uint32_t)j);
          agree &= r == l;
          dropped += r;
          double pr = probs[((b * p->h + hh) * p->s_q + i) * p->s_k + j];
          sign_ok &= r ? pr < 0 : pr > 0;
          row += fabs(pr);
        }
        sign_ok &= close_to(row, 1.0, 1e-12);
      }
  double frac = (double)dropped / (double)n;
  double sigma = sqrt(0.3 * 0.7 / (double)n);
  TEST_EXPECT(agree, "dropout: ref_dropped and philox.h's sdpa_dropped disagree");
  TEST_EXPECT(fabs(frac - 0.3) < 6 * sigma, "dropout: dropped fraction %.4f, want 0.3 +- %.4f",
              frac, 6 * sigma);
  TEST_EXPECT(sign_ok, "dropout: probs signs do not match the mask, or |probs| rows do not sum to 1");
  free(probs);
  free(out);
  fixture_free(&f);
}

/* lowp on f16 / bf16 storage: outputs representable in the dtype, close to exact. */
static void test_lowp(void) {
  for (int t = 0; t < 2; ++t) {
    sdpa_dtype dt = t ? SDPA_DTYPE_BF16 : SDPA_DTYPE_F16;
    int64_t shape_q[4] = {2, 5, 4, 8}, shape_k[4] = {2, 9, 2, 8};
    sdpa_tensor q = test_alloc(dt, 4, shape_q), k = test_alloc(dt, 4, shape_k),
                v = test_alloc(dt, 4, shape_k);
    test_fill_normal(&q, &rng, 1.0);
    test_fill_normal(&k, &rng, 1.0);
    test_fill_normal(&v, &rng, 1.0);
    sdpa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = dt;
    p.layout = SDPA_LAYOUT_DENSE;
    p.b = 2, p.s_q = 5, p.s_k = 9, p.h = 4, p.h_k = 2, p.d = 8, p.d_v = 8;
    p.total_q = 10, p.total_k = 18;
    p.q = q.data, p.k = k.data, p.v = v.data;
    set_dense_strides(&p.q_st, 5, 4, 8);
    set_dense_strides(&p.k_st, 9, 2, 8);
    set_dense_strides(&p.v_st, 9, 2, 8);
    p.scale = 1.0f / sqrtf(8.0f);
    p.window_left = p.window_right = -1;
    int64_t n = 2 * 5 * 4 * 8;
    double *ex = dalloc(n), *lo = dalloc(n);
    ref_fwd(&p, 0, ex, NULL, NULL);
    ref_fwd(&p, 1, lo, NULL, NULL);
    sdpa_tensor o = test_alloc(dt, 4, shape_q);
    double max_diff = 0.0;
    int representable = 1;
    for (int64_t e = 0; e < n; ++e) {
      test_set(&o, e, lo[e]);
      representable &= test_get(&o, e) == lo[e];
      if (fabs(lo[e] - ex[e]) > max_diff) max_diff = fabs(lo[e] - ex[e]);
    }
    double eps = t ? 0x1p-8 : 0x1p-11;
    TEST_EXPECT(representable, "lowp %s: outputs not representable in the dtype",
                sdpa_dtype_string(dt));
    TEST_EXPECT(max_diff > 0 && max_diff < 16 * eps, "lowp %s: max |lowp - exact| = %.3g",
                sdpa_dtype_string(dt), max_diff);
    free(ex);
    free(lo);
    test_free(&q);
    test_free(&k);
    test_free(&v);
    test_free(&o);
  }
}

/* ---- KV cache and seqused_k against dense problems built here --------------------- */

/* The same rotation as the contract, written out separately: pairs (2t, 2t+1)
 * or (t, t + rd/2) turned by the angle of row pos. */
static void rotate_here(float *x, int64_t rd, int interleaved, const float *cosv,
                        const float *sinv, int64_t stride, int64_t pos) {
  for (int64_t t = 0; t < rd / 2; ++t) {
    int64_t i0 = interleaved ? 2 * t : t, i1 = interleaved ? 2 * t + 1 : t + rd / 2;
    double c = cosv[pos * stride + t], s = sinv[pos * stride + t];
    double a = x[i0], b = x[i1];
    x[i0] = (float)(a * c - b * s);
    x[i1] = (float)(a * s + b * c);
  }
}

/*
 * b = 2 sequences decode s_q = 2 queries against a cache holding cache_seqlens
 * = {19, 5} tokens plus s_new = 3 appended ones. paged: page 16, blocks
 * shuffled in the block table; contiguous: cache_batch_idx = {2, 0} of 3 rows.
 * Causal bottom-right, GQA 4/2, d = 6 with rotary_dim 4, d_v = 3.
 */
static void test_cache(int paged, int interleaved) {
  enum { B = 2, SQ = 2, H = 4, HK = 2, D = 6, DV = 3, SNEW = 3, RD = 4, PAGE = 16, NBLK = 5,
         BCACHE = 3, SCACHE = 32, SMAX = 40 };
  const int32_t cache_seqlens[B] = {19, 5};
  const int32_t block_table[B * 2] = {3, 0, 4, 1}; /* seq 0: blocks 3, 0; seq 1: blocks 4, 1 */
  const int32_t batch_idx[B] = {2, 0};
  int64_t cache_rows = paged ? NBLK * PAGE : BCACHE * SCACHE;
  float *kc = normal_array(cache_rows * HK * D, 1.0), *vc = normal_array(cache_rows * HK * DV, 1.0);
  float *kn = normal_array(B * SNEW * HK * D, 1.0), *vn = normal_array(B * SNEW * HK * DV, 1.0);
  float *q = normal_array(B * SQ * H * D, 1.0);
  float cosv[SMAX * RD / 2], sinv[SMAX * RD / 2];
  for (int64_t pos = 0; pos < SMAX; ++pos)
    for (int64_t t = 0; t < RD / 2; ++t) {
      double angle = (double)pos * pow(10000.0, -2.0 * (double)t / RD);
      cosv[pos * (RD / 2) + t] = (float)cos(angle);
      sinv[pos * (RD / 2) + t] = (float)sin(angle);
    }

  sdpa_problem p;
  memset(&p, 0, sizeof p);
  p.dtype = SDPA_DTYPE_F32;
  p.layout = SDPA_LAYOUT_CACHE;
  p.b = B, p.s_q = SQ, p.h = H, p.h_k = HK, p.d = D, p.d_v = DV;
  p.s_k = paged ? 2 * PAGE : SCACHE;
  p.total_q = B * SQ;
  p.q = q;
  set_dense_strides(&p.q_st, SQ, H, D);
  p.k = kc;
  p.v = vc;
  set_dense_strides(&p.k_st, paged ? PAGE : SCACHE, HK, D);
  set_dense_strides(&p.v_st, paged ? PAGE : SCACHE, HK, DV);
  p.cache_seqlens = cache_seqlens;
  if (paged) {
    p.block_table = block_table;
    p.bt_stride = 2;
    p.max_blocks = 2;
    p.page_size = PAGE;
    p.num_blocks = NBLK;
  } else {
    p.cache_batch_idx = batch_idx;
    p.num_blocks = BCACHE;
  }
  p.k_new = kn;
  p.v_new = vn;
  set_dense_strides(&p.kn_st, SNEW, HK, D);
  set_dense_strides(&p.vn_st, SNEW, HK, DV);
  p.s_new = SNEW;
  p.rot_cos = cosv;
  p.rot_sin = sinv;
  p.rot_stride = RD / 2;
  p.rot_rows = SMAX;
  p.rotary_dim = RD;
  p.rotary_interleaved = interleaved;
  p.scale = 1.0f / sqrtf((float)D);
  p.window_left = -1;
  p.window_right = 0;
  p.bottom_right = 1;

  double out[B * SQ * H * DV], lse[B * H * SQ];
  ref_fwd(&p, 0, out, lse, NULL);

  /* each sequence as a dense problem of b = 1 over keys gathered by hand */
  int ok = 1;
  for (int64_t b = 0; b < B; ++b) {
    int64_t sk = cache_seqlens[b] + SNEW;
    float *kd = malloc(sizeof(float) * (size_t)(sk * HK * D));
    float *vd = malloc(sizeof(float) * (size_t)(sk * HK * DV));
    float qd[SQ * H * D];
    for (int64_t j = 0; j < sk; ++j)
      for (int64_t hk = 0; hk < HK; ++hk) {
        const float *ks, *vs;
        if (j < cache_seqlens[b]) {
          int64_t row = paged ? block_table[b * 2 + j / PAGE] * PAGE + j % PAGE
                              : batch_idx[b] * SCACHE + j;
          ks = kc + (row * HK + hk) * D;
          vs = vc + (row * HK + hk) * DV;
        } else {
          int64_t t = j - cache_seqlens[b];
          ks = kn + ((b * SNEW + t) * HK + hk) * D;
          vs = vn + ((b * SNEW + t) * HK + hk) * DV;
        }
        memcpy(kd + (j * HK + hk) * D, ks, sizeof(float) * D);
        memcpy(vd + (j * HK + hk) * DV, vs, sizeof(float) * DV);
        if (j >= cache_seqlens[b])
          rotate_here(kd + (j * HK + hk) * D, RD, interleaved, cosv, sinv, RD / 2, j);
      }
    memcpy(qd, q + b * SQ * H * D, sizeof qd);
    for (int64_t i = 0; i < SQ; ++i)
      for (int64_t hh = 0; hh < H; ++hh)
        rotate_here(qd + (i * H + hh) * D, RD, interleaved, cosv, sinv, RD / 2,
                    cache_seqlens[b] + i);
    sdpa_problem dp;
    memset(&dp, 0, sizeof dp);
    dp.dtype = SDPA_DTYPE_F32;
    dp.layout = SDPA_LAYOUT_DENSE;
    dp.b = 1, dp.s_q = SQ, dp.s_k = sk, dp.h = H, dp.h_k = HK, dp.d = D, dp.d_v = DV;
    dp.total_q = SQ, dp.total_k = sk;
    dp.q = qd, dp.k = kd, dp.v = vd;
    set_dense_strides(&dp.q_st, SQ, H, D);
    set_dense_strides(&dp.k_st, sk, HK, D);
    set_dense_strides(&dp.v_st, sk, HK, DV);
    dp.scale = p.scale;
    dp.window_left = -1;
    dp.window_right = 0;
    dp.bottom_right = 1;
    double dout_[SQ * H * DV], dlse[H * SQ];
    ref_fwd(&dp, 0, dout_, dlse, NULL);
    /* rotated values were rounded to f32 here, so agreement is to f32 precision */
    for (int64_t e = 0; e < SQ * H * DV; ++e)
      ok &= close_to(out[b * SQ * H * DV + e], dout_[e], 1e-5);
    for (int64_t e = 0; e < H * SQ; ++e) ok &= close_to(lse[b * H * SQ + e], dlse[e], 1e-5);
    free(kd);
    free(vd);
  }
  TEST_EXPECT(ok, "kv cache (%s, rotary %s): differs from the dense problem built by hand",
              paged ? "paged" : "contiguous", interleaved ? "interleaved" : "half-split");
  free(kc);
  free(vc);
  free(kn);
  free(vn);
  free(q);
}

/* seqused_k caps sequence 0 at 3 keys: the same as a dense problem with s_k = 3
 * (the mask and alibi use the capped length). */
static void test_seqused(void) {
  cfg c = {"seqused", 2, 4, 7, 2, 1, 3, 2, 1, 0, -1, -1, 0, 0, 0, 1, 0, 0};
  fixture f;
  fixture_init(&f, &c);
  sdpa_problem p = f.p;
  const int32_t used[2] = {3, 7};
  p.seqused_k = used;
  double out[2 * 4 * 2 * 2], lse[2 * 2 * 4];
  ref_fwd(&p, 0, out, lse, NULL);
  sdpa_problem one = f.p; /* batch 0 only, 3 keys, same strides */
  one.b = 1;
  one.s_k = 3;
  double out1[4 * 2 * 2], lse1[2 * 4];
  ref_fwd(&one, 0, out1, lse1, NULL);
  sdpa_problem two = f.p; /* batch 1, untouched */
  two.b = 1;
  two.q = f.q + 4 * 2 * 3;
  two.k = f.k + 7 * 1 * 3;
  two.v = f.v + 7 * 1 * 2;
  double out2[4 * 2 * 2], lse2[2 * 4];
  ref_fwd(&two, 0, out2, lse2, NULL);
  int ok = memcmp(out, out1, sizeof out1) == 0 && memcmp(lse, lse1, sizeof lse1) == 0 &&
           memcmp(out + 16, out2, sizeof out2) == 0 && memcmp(lse + 8, lse2, sizeof lse2) == 0;
  TEST_EXPECT(ok, "seqused_k: differs from the dense problem with the capped length");
  fixture_free(&f);
}

int main(void) {
  test_rng_init(&rng, test_seed());
  test_philox_kat();
  test_backward();
  test_single_key();
  test_masked_rows();
  test_uniform();
  test_dropout_mask();
  test_keep16();
  test_lowp();
  test_cache(1, 1);
  test_cache(1, 0);
  test_cache(0, 1);
  test_cache(0, 0);
  test_seqused();
  return test_summary();
}
