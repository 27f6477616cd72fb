/*
 * test_gpu_tf32.c - the fp32 forward on tensor cores (fwd_tf32_* rows,
 * src/cuda/fwd/fwd_tf32_body.cuh: 3xTF32 mma.sync) through the public API on
 * cudaMalloc'd buffers, against the fp64 oracle: fp32-class accuracy, i.e.
 * max |out - ref| / max |ref| <= 1e-5 (and the same for lse) on
 * well-conditioned inputs (q, k, v ~ N(0, 1), default scale: scores O(1)),
 * every element checked, outputs poisoned first. Each case also asks
 * sdpa_explain_fwd which row it gets: the tf32 row of the head-dim bucket
 * (the first fwd_tf32_ row whose max_head_dim covers d, from the registry
 * listing), or, for what those rows refuse (dropout, d_v != d, rows not
 * 16-byte aligned, d above the largest bucket), fwd_simt with the refusal
 * reason on the tf32 row's line, and fwd_simt's result is checked the same way.
 *
 * Matrix: d in {4, 8, 32, 40, 64, 80, 100, 128, 160, 256}, causal or not, both
 * alignments, s_q > s_k (rows with no visible key: out 0, lse +inf exactly),
 * lengths off the tile grid, GQA 4:1 and MQA, varlen with an empty sequence,
 * a sequence with no keys and seqused_k, windows, alibi [h] and [b, h],
 * softcap, an explicit scale, padded strides, 8192 keys (long accumulation),
 * and above d = 128 (the row whose warp pairs split the head dim of Q K^T and
 * trade the partial scores) masks in both alignments, windows, GQA / MQA,
 * varlen, alibi, softcap, padded strides and long key ranges; an additive
 * bias, full and broadcast over b, h or the query rows, with the masks,
 * softcap, alibi and both warp geometries.
 *
 *   test_gpu_tf32 [NAME]     the whole matrix (or the cases whose name contains NAME)
 *   test_gpu_tf32 --small    one small problem per tf32 row (compute-sanitizer)
 *   test_gpu_tf32 --bench [D...]  fp32 b4 h16 s4096, d 64 / 128 (or D...), causal 0 / 1:
 *                            TFLOP/s (4 b h s^2 d, halved causal) of the
 *                            dispatched tf32 row and of fwd_simt (forced)
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

#define REL_TOL 1e-5

/* ---- cases ---------------------------------------------------------------------- */

typedef struct tcase {
  const char *name;
  int64_t b, h, h_k, s_q, s_k, d, d_v;
  int causal, top_left;
  int64_t wl, wr;       /* window when not causal; -1 = unbounded */
  float softcap, scale;
  int alibi;            /* 0 off, 1 [h], 2 [b, h] */
  int varlen;           /* sequence 1 empty, sequence 2 without keys, seqused_k on the last */
  int64_t pad;          /* extra elements (multiple of 8) on every stride */
  int contiguous;       /* q / k / v / out rows of exactly d elements (unaligned if d % 4) */
  int bias;             /* an additive bias: 1 [b, h, s_q, s_k], 2 [1, h, s_q, s_k],
                           3 [b, 1, 1, s_k] */
  float dropout;        /* (refused by the tf32 rows) */
  int empty_rows;       /* rows with no visible key are expected */
  const char *refuse;   /* NULL: a tf32 row runs it; else the tf32 row declines with this */
  int staged;           /* ... and the staged row runs the tf32 row on aligned copies */
} tcase;

static tcase mk(const char *name, int64_t b, int64_t h, int64_t h_k, int64_t s_q, int64_t s_k,
                int64_t d) {
  tcase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.b = b, c.h = h, c.h_k = h_k, c.s_q = s_q, c.s_k = s_k, c.d = c.d_v = d;
  c.wl = c.wr = -1;
  return c;
}

typedef struct tbufs {
  dual q, k, v, out, lse, alibi, cu_q, cu_k, used, bias;
  sdpa_fwd_desc host, dev; /* the same problem: host pointers (oracle) / device pointers */
} tbufs;

static dual alloc(sdpa_dtype dt, int rank, const int64_t *shape, const tcase *c) {
  const int rows16 = dt == SDPA_DTYPE_F32 && !c->contiguous;
  return dual_alloc(dt, rank, shape, rows16, rows16 ? c->pad : 0);
}

static dual alloc_plain(sdpa_dtype dt, int rank, const int64_t *shape) {
  return dual_alloc(dt, rank, shape, 0, 0);
}

static void build(const tcase *c, tbufs *f) {
  const sdpa_dtype F32 = SDPA_DTYPE_F32;
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->host);
  sdpa_attn *a = &f->host.attn;
  a->device = SDPA_DEVICE_CPU;
  if (c->varlen) {
    const int64_t s1[1] = {c->b + 1}, sb[1] = {c->b};
    f->cu_q = alloc_plain(SDPA_DTYPE_I32, 1, s1);
    f->cu_k = alloc_plain(SDPA_DTYPE_I32, 1, s1);
    f->used = alloc_plain(SDPA_DTYPE_I32, 1, sb);
    int32_t *cq = (int32_t *)f->cu_q.h.data, *ck = (int32_t *)f->cu_k.h.data;
    int32_t *us = (int32_t *)f->used.h.data;
    cq[0] = ck[0] = 0;
    int64_t mq = 0, mk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      const int64_t lq = b == 1 ? 0 : test_rng_int(&rng, 1, c->s_q);
      const int64_t lk = b == 1 || b == 2 ? 0 : test_rng_int(&rng, 1, c->s_k);
      cq[b + 1] = (int32_t)(cq[b] + lq);
      ck[b + 1] = (int32_t)(ck[b] + lk);
      us[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > mq) mq = lq;
      if (lk > mk) mk = lk;
    }
    const int64_t tq = cq[c->b], tk = ck[c->b];
    const int64_t sq[3] = {tq, c->h, c->d}, sk[3] = {tk, c->h_k, c->d};
    const int64_t sv[3] = {tk, c->h_k, c->d_v}, so[3] = {tq, c->h, c->d_v}, sl[2] = {c->h, tq};
    f->q = alloc(F32, 3, sq, c), f->k = alloc(F32, 3, sk, c), f->v = alloc(F32, 3, sv, c);
    f->out = alloc(F32, 3, so, c), f->lse = alloc_plain(F32, 2, sl);
    a->cu_seqlens_q = f->cu_q.h, a->cu_seqlens_k = f->cu_k.h, a->seqused_k = f->used.h;
    a->max_seqlen_q = mq, a->max_seqlen_k = mk;
  } else {
    const int64_t sq[4] = {c->b, c->s_q, c->h, c->d}, sk[4] = {c->b, c->s_k, c->h_k, c->d};
    const int64_t sv[4] = {c->b, c->s_k, c->h_k, c->d_v}, so[4] = {c->b, c->s_q, c->h, c->d_v};
    const int64_t sl[3] = {c->b, c->h, c->s_q};
    f->q = alloc(F32, 4, sq, c), f->k = alloc(F32, 4, sk, c), f->v = alloc(F32, 4, sv, c);
    f->out = alloc(F32, 4, so, c), f->lse = alloc_plain(F32, 3, sl);
  }
  test_fill_normal(&f->q.h, &rng, 1.0);
  test_fill_normal(&f->k.h, &rng, 1.0);
  test_fill_normal(&f->v.h, &rng, 1.0);
  a->q = f->q.h, a->k = f->k.h, a->v = f->v.h;
  f->host.out = f->out.h, f->host.lse = f->lse.h;
  a->scale = c->scale, a->softcap = c->softcap, a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (!c->causal) a->window_left = c->wl, a->window_right = c->wr;
  if (c->alibi) {
    const int64_t s1[1] = {c->h}, s2[2] = {c->b, c->h};
    f->alibi = c->alibi == 1 ? alloc_plain(F32, 1, s1) : alloc_plain(F32, 2, s2);
    test_fill_uniform(&f->alibi.h, &rng, 0.0, 0.5);
    a->alibi_slopes = f->alibi.h;
  }
  if (c->bias) {
    const int64_t sb[4] = {c->bias == 2 ? 1 : c->b, c->bias == 3 ? 1 : c->h,
                           c->bias == 3 ? 1 : c->s_q, c->s_k};
    f->bias = alloc_plain(F32, 4, sb);
    test_fill_normal(&f->bias.h, &rng, 1.0);
    a->bias = f->bias.h;
  }
  a->dropout_p = c->dropout;
  a->dropout_seed = test_rng_u64(&rng);
  a->dropout_offset = (uint32_t)test_rng_u64(&rng);

  dual *all[10] = {&f->q, &f->k, &f->v, &f->out, &f->lse, &f->alibi, &f->cu_q, &f->cu_k,
                   &f->used, &f->bias};
  for (int k = 0; k < 10; ++k) dual_upload(all[k]); /* outputs go up poisoned */
  f->dev = f->host;
  sdpa_attn *g = &f->dev.attn;
  g->device = SDPA_DEVICE_CUDA;
  g->q = f->q.d, g->k = f->k.d, g->v = f->v.d;
  f->dev.out = f->out.d, f->dev.lse = f->lse.d;
  if (c->alibi) g->alibi_slopes = f->alibi.d;
  if (c->bias) g->bias = f->bias.d;
  if (c->varlen) g->cu_seqlens_q = f->cu_q.d, g->cu_seqlens_k = f->cu_k.d, g->seqused_k = f->used.d;
}

static void release(tbufs *f) {
  dual *all[10] = {&f->q, &f->k, &f->v, &f->out, &f->lse, &f->alibi, &f->cu_q, &f->cu_k,
                   &f->used, &f->bias};
  for (int k = 0; k < 10; ++k) dual_free(all[k]);
}

/* ---- checks --------------------------------------------------------------------- */

static void check_rel(const tcase *c, const char *what, const sdpa_tensor *got, const double *ref) {
  const double rel = gpu_rel_error(got, ref);
  if (TEST_EXPECT(rel <= REL_TOL, "%s %s: relative error %.3g > %g", c->name, what, rel, REL_TOL))
    printf("ok   %s %s: relative error %.3g\n", c->name, what, rel);
}

/* Rows with no visible key: lse exactly +inf and out exactly 0 (the oracle's
 * out is exactly 0 there and nowhere else on random inputs). */
static void check_empty_rows(const tcase *c, const tbufs *f, const double *ro, const double *rl) {
  int64_t rows = 0, bad = 0;
  for (int64_t e = 0; e < test_numel(&f->lse.h); ++e)
    if (rl[e] == INFINITY) {
      ++rows;
      bad += test_get(&f->lse.h, e) != INFINITY;
    }
  for (int64_t e = 0; e < test_numel(&f->out.h); ++e)
    if (ro[e] == 0.0) bad += test_get(&f->out.h, e) != 0.0;
  TEST_EXPECT(bad == 0, "%s: %lld elements of rows with no visible key are not out = 0 / lse = +inf",
              c->name, (long long)bad);
  if (c->empty_rows)
    TEST_EXPECT(rows > 0, "%s: the case should have rows with no visible key", c->name);
}

/* The tf32 row of d's bucket: the first fwd_tf32_ row (registry order) whose
 * max_head_dim covers d; NULL if none. */
static const char *tf32_row(int64_t d) {
  for (int i = 0; i < sdpa_kernel_count(); ++i) {
    sdpa_kernel_info info;
    if (sdpa_kernel_get(i, &info) != SDPA_OK) continue;
    if (strncmp(info.name, "fwd_tf32_", 9) == 0 && info.max_head_dim >= d) return info.name;
  }
  return NULL;
}

/* The last tf32 row (the largest bucket). */
static const char *tf32_last_row(void) {
  const char *last = NULL;
  for (int i = 0; i < sdpa_kernel_count(); ++i) {
    sdpa_kernel_info info;
    if (sdpa_kernel_get(i, &info) == SDPA_OK && strncmp(info.name, "fwd_tf32_", 9) == 0)
      last = info.name;
  }
  return last;
}

/* The selection in sdpa_explain_fwd: the row the case must get, and for a
 * refusal the tf32 row's line declining with c->refuse. */
static void check_dispatch(const tcase *c, const tbufs *f) {
  char buf[8192];
  const int64_t dmax = c->d > c->d_v ? c->d : c->d_v;
  sdpa_status st = sdpa_explain_fwd(&f->dev, buf, sizeof buf);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: explain: %s", c->name, sdpa_last_error())) return;
  if (!c->refuse) {
    const char *want = tf32_row(dmax);
    char sel[128];
    snprintf(sel, sizeof sel, "selected: %s\n", want ? want : "(no tf32 row)");
    TEST_EXPECT(want && strncmp(buf, sel, strlen(sel)) == 0, "%s: expected %s:\n%s", c->name, sel,
                buf);
    return;
  }
  const char *row = tf32_row(dmax);
  if (!row) row = tf32_last_row();
  char key[160];
  snprintf(key, sizeof key, "  %s", row ? row : "fwd_tf32_");
  gpu_expect_declined(c->name, buf, key, c->refuse, c->staged ? "fwd_staged" : "fwd_simt",
                      c->staged ? (row ? row : "fwd_tf32_") : NULL);
}

static const char *only; /* run only the cases whose name contains this (argv[1]) */

static void run_case(const tcase *c) {
  if (only && !strstr(c->name, only)) return;
  printf("-- %s: b%lld h%lld/%lld s%lld/%lld d%lld/%lld%s%s%s\n", c->name, (long long)c->b,
         (long long)c->h, (long long)c->h_k, (long long)c->s_q, (long long)c->s_k, (long long)c->d,
         (long long)c->d_v, c->causal ? (c->top_left ? " causal-tl" : " causal-br") : "",
         c->varlen ? " varlen" : "", c->refuse ? " (refused)" : "");
  tbufs f;
  build(c, &f);
  check_dispatch(c, &f);
  sdpa_status st = gpu_fwd(&f.dev);
  cudaError_t ce = cudaDeviceSynchronize();
  if (TEST_EXPECT(st == SDPA_OK && ce == cudaSuccess, "%s: sdpa_fwd: %s (%s), sync: %s", c->name,
                  sdpa_status_string(st), sdpa_last_error(), cudaGetErrorString(ce))) {
    dual_download(&f.out);
    dual_download(&f.lse);
    sdpa_problem p;
    if (TEST_EXPECT(sdpa_validate_fwd(&f.host, &p) == SDPA_OK, "%s: validate: %s", c->name,
                    sdpa_last_error())) {
      const int64_t no = test_numel(&f.out.h), nl = test_numel(&f.lse.h);
      double *ro = malloc(sizeof(double) * (size_t)(no > 0 ? no : 1));
      double *rl = malloc(sizeof(double) * (size_t)(nl > 0 ? nl : 1));
      if (!ro || !rl || ref_fwd(&p, 0, ro, rl, NULL)) {
        printf("FATAL: out of host memory\n");
        exit(1);
      }
      check_rel(c, "out", &f.out.h, ro);
      check_rel(c, "lse", &f.lse.h, rl);
      check_empty_rows(c, &f, ro, rl);
      free(ro);
      free(rl);
    }
  }
  release(&f);
}

/* ---- the matrix -------------------------------------------------------------------- */

static void small(void) {
  tcase c;
  c = mk("small_hd32_causal", 2, 2, 1, 70, 45, 32), c.causal = 1, c.empty_rows = 1;
  run_case(&c);
  c = mk("small_hd64_varlen", 4, 2, 2, 40, 70, 40), c.varlen = 1, c.causal = 1, c.top_left = 1;
  run_case(&c);
  c = mk("small_hd96_gqa", 2, 4, 2, 33, 65, 80), c.alibi = 2, run_case(&c);
  c = mk("small_hd128_window", 1, 2, 1, 50, 150, 128), c.wl = 30, c.wr = 7, c.alibi = 1;
  c.softcap = 5.f, run_case(&c);
  c = mk("small_hd256_causal", 2, 2, 1, 70, 90, 200), c.causal = 1, c.alibi = 1, run_case(&c);
  c = mk("small_hd64_bias", 2, 2, 1, 70, 45, 64), c.bias = 1, c.causal = 1, run_case(&c);
  c = mk("small_hd256_bias", 1, 2, 2, 40, 70, 256), c.bias = 2, c.softcap = 4.f, run_case(&c);
}

static void full(void) {
  tcase c;
  /* the head-dim sweep: every bucket, off-bucket widths, causal or not */
  static const int64_t dims[10] = {4, 8, 32, 40, 64, 80, 100, 128, 160, 256};
  for (int k = 0; k < 10; ++k)
    for (int causal = 0; causal < 2; ++causal) {
      c = mk(causal ? "dsweep_causal" : "dsweep", 2, 4, 2, 77, 131, dims[k]);
      c.causal = causal;
      run_case(&c);
    }
  /* masks: both alignments, s_q > s_k (rows without keys) and s_q < s_k */
  c = mk("causal_br_sq_gt_sk", 2, 4, 4, 150, 61, 64), c.causal = 1, c.empty_rows = 1;
  run_case(&c);
  c = mk("causal_tl_sq_gt_sk", 2, 4, 4, 150, 61, 64), c.causal = 1, c.top_left = 1;
  run_case(&c);
  c = mk("causal_br_sq_lt_sk", 1, 2, 2, 33, 300, 128), c.causal = 1, run_case(&c);
  c = mk("causal_tl_sq_lt_sk", 1, 2, 2, 33, 300, 32), c.causal = 1, c.top_left = 1;
  run_case(&c);
  c = mk("window_br", 2, 2, 1, 200, 180, 64), c.wl = 40, c.wr = 3, run_case(&c);
  c = mk("window_tl_left_only", 1, 3, 1, 130, 130, 80), c.wl = 17, c.top_left = 1;
  run_case(&c);
  c = mk("window_empty_rows", 1, 2, 2, 100, 20, 32), c.wl = 0, c.wr = 0, c.empty_rows = 1;
  run_case(&c);
  /* score modifiers */
  c = mk("alibi_h", 2, 4, 2, 90, 110, 64), c.alibi = 1, c.causal = 1, run_case(&c);
  c = mk("alibi_bh", 2, 4, 4, 65, 65, 128), c.alibi = 2, run_case(&c);
  c = mk("softcap", 2, 2, 2, 70, 129, 128), c.softcap = 3.f, run_case(&c);
  c = mk("softcap_alibi_causal", 1, 4, 1, 100, 100, 40), c.softcap = 8.f, c.alibi = 1;
  c.causal = 1, run_case(&c);
  c = mk("scale", 2, 2, 2, 64, 64, 32), c.scale = 0.05f, run_case(&c);
  c = mk("scale_negative", 1, 2, 2, 40, 72, 64), c.scale = -0.09f, run_case(&c);
  /* GQA / MQA */
  c = mk("gqa_4to1", 2, 8, 2, 70, 90, 128), c.causal = 1, run_case(&c);
  c = mk("mqa", 1, 6, 1, 129, 64, 64), run_case(&c);
  /* varlen (an empty sequence, one without keys, seqused_k) */
  c = mk("varlen", 5, 4, 2, 90, 130, 64), c.varlen = 1, c.empty_rows = 1, run_case(&c);
  c = mk("varlen_causal_alibi", 4, 2, 1, 150, 100, 128), c.varlen = 1, c.causal = 1;
  c.alibi = 2, run_case(&c);
  c = mk("varlen_window_softcap", 4, 4, 4, 70, 70, 8), c.varlen = 1, c.wl = 9, c.wr = 2;
  c.softcap = 2.f, c.top_left = 1, run_case(&c);
  /* padded strides, single rows, long key ranges (accumulation over 8192 keys) */
  c = mk("padded", 2, 2, 1, 50, 60, 40), c.pad = 16, run_case(&c);
  c = mk("len1", 1, 2, 2, 1, 1, 64), run_case(&c);
  c = mk("long_keys_d128", 1, 2, 1, 64, 8192, 128), run_case(&c);
  c = mk("long_keys_d64_causal", 1, 2, 2, 70, 8192, 64), c.causal = 1, run_case(&c);
  c = mk("long_keys_32k_d128", 1, 1, 1, 32, 32768, 128), run_case(&c);
  /* d = 256: two warps a row group, each half of O */
  c = mk("hd256_varlen_window", 4, 4, 2, 90, 120, 256), c.varlen = 1, c.wl = 20, c.wr = 5;
  c.empty_rows = 1, run_case(&c);
  c = mk("hd256_softcap_gqa", 2, 4, 1, 100, 200, 224), c.softcap = 4.f, c.causal = 1;
  c.top_left = 1, run_case(&c);
  c = mk("long_keys_d256", 1, 2, 1, 64, 8192, 256), run_case(&c);
  c = mk("hd256_causal_br_sq_gt_sk", 2, 4, 4, 150, 61, 256), c.causal = 1, c.empty_rows = 1;
  run_case(&c);
  c = mk("hd256_alibi_mqa", 2, 6, 1, 90, 130, 256), c.alibi = 2, run_case(&c);
  c = mk("hd256_window_tl", 1, 3, 1, 130, 200, 192), c.wl = 17, c.wr = 4, c.top_left = 1;
  c.alibi = 1, run_case(&c);
  c = mk("hd256_padded_scale", 2, 2, 2, 70, 90, 136), c.pad = 16, c.scale = -0.05f;
  run_case(&c);
  c = mk("hd256_varlen_causal_softcap", 5, 4, 2, 90, 150, 256), c.varlen = 1, c.causal = 1;
  c.softcap = 6.f, c.empty_rows = 1, run_case(&c);
  /* an additive bias, full and broadcast */
  c = mk("bias_full_causal", 2, 4, 2, 150, 130, 64), c.bias = 1, c.causal = 1, run_case(&c);
  c = mk("bias_h_bcast_window", 2, 4, 4, 90, 200, 128), c.bias = 2, c.wl = 30, c.wr = 5;
  run_case(&c);
  c = mk("bias_q_bcast_softcap_alibi", 2, 4, 1, 70, 129, 40), c.bias = 3, c.softcap = 5.f;
  c.alibi = 2, run_case(&c);
  c = mk("bias_scale_empty_rows", 1, 2, 2, 130, 61, 96), c.bias = 1, c.scale = -0.07f;
  c.causal = 1, c.empty_rows = 1, run_case(&c);
  c = mk("bias_hd256_causal_gqa", 2, 4, 2, 100, 170, 256), c.bias = 1, c.causal = 1;
  run_case(&c);
  c = mk("bias_hd160_bcast_long", 1, 2, 1, 64, 2100, 160), c.bias = 2, run_case(&c);
  /* what the tf32 rows refuse: fwd_simt runs it, the explain line says why
   * (unaligned rows: the staged row, through the tf32 row) */
  c = mk("refuse_dropout", 1, 2, 2, 40, 50, 32), c.dropout = 0.2f, c.refuse = "dropout";
  run_case(&c);
  c = mk("refuse_dv_ne_d", 1, 2, 2, 40, 50, 64), c.d_v = 32, c.refuse = "d_v!=d", run_case(&c);
  c = mk("refuse_unaligned", 1, 2, 2, 40, 50, 6), c.contiguous = 1, c.refuse = "unaligned";
  c.staged = 1;
  run_case(&c);
  c = mk("refuse_large_d", 1, 2, 2, 20, 30, 300), c.refuse = "head dim", run_case(&c);
}

/* ---- timing ------------------------------------------------------------------------ */

static void bench(int nd, const int64_t *ds) {
  const int64_t b = 4, h = 16, s = 4096;
  int64_t dmax = 0;
  for (int di = 0; di < nd; ++di) dmax = ds[di] > dmax ? ds[di] : dmax;
  const size_t n = (size_t)(b * s * h * dmax); /* elements of q, k, v, out: 128 MiB at d = 128 */
  float *host = malloc(n * sizeof(float));
  for (size_t e = 0; e < n; ++e) host[e] = (float)test_rng_normal(&rng);
  void *dev[4]; /* q, k, v, out */
  gpu_bench_alloc(host, n, 4, dev);
  free(host);
  printf("%-3s %-3s %-5s %-4s %-6s %-16s %-10s %s\n", "b", "h", "s", "d", "causal", "kernel", "ms",
         "TFLOP/s");
  for (int di = 0; di < nd; ++di)
    for (int forced = 0; forced < 2; ++forced)
      for (int causal = 0; causal < 2; ++causal) {
        const int64_t d = ds[di], shape[4] = {b, s, h, d};
        sdpa_fwd_desc desc = gpu_bench_desc(dev, SDPA_DTYPE_F32, shape);
        desc.attn.causal = causal;
        desc.attn.kernel = forced ? "fwd_simt" : NULL;
        char buf[4096], name[64] = "?";
        if (sdpa_explain_fwd(&desc, buf, sizeof buf) == SDPA_OK)
          sscanf(buf, "selected: %63s", name);
        const double ms = gpu_median_ms(&desc, NULL, 1, forced ? 3 : 15);
        if (ms < 0) {
          printf("FAIL bench d%lld %s: %s\n", (long long)d, name, sdpa_last_error());
          continue;
        }
        const double flops = 4.0 * (double)(b * h) * (double)s * (double)s * (double)d *
                             (causal ? 0.5 : 1.0);
        printf("%-3lld %-3lld %-5lld %-4lld %-6d %-16s %-10.3f %.1f\n", (long long)b,
               (long long)h, (long long)s, (long long)d, causal, name, ms,
               flops / (ms * 1e-3) / 1e12);
      }
  CUDA_OK(cudaGetLastError());
  gpu_bench_free(dev);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  test_rng_init(&rng, test_seed());
  if (!sdpa_cuda_available()) {
    printf("no usable CUDA device: skipped\n");
    return test_summary();
  }
  if (strcmp(mode, "--bench") == 0) {
    int64_t ds[8] = {64, 128};
    int nd = 0;
    for (int k = 2; k < argc && nd < 8; ++k) ds[nd++] = atoll(argv[k]);
    bench(nd ? nd : 2, ds);
    return 0;
  }
  if (strcmp(mode, "--small") == 0) {
    small();
  } else {
    only = argc > 1 ? argv[1] : NULL;
    full();
  }
  return test_summary();
}
