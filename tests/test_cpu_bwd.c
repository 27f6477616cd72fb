/*
 * test_cpu_bwd.c - the CPU backward (sdpa_bwd on SDPA_DEVICE_CPU) against the
 * double-precision oracle (ref_bwd, exact and lowp) under the harness
 * tolerance, over a matrix of layouts, GQA ratios, lengths, head dims, dtypes,
 * masks, score modifiers, dbias broadcast reductions and dropout; plus bitwise
 * run-to-run determinism for several thread counts.
 *
 * out and lse come from the library's forward (sdpa_fwd) on the same inputs,
 * as a training step would use them. Every gradient output is poisoned (NaN)
 * before each call, so an element the backward forgets to write fails.
 *
 * Tolerance: the harness rule with atol scaled by max(1, max |ref|) of the
 * tensor: gradients are not O(1) (dK / dV sum over query rows and heads), and
 * atol(dtype) is meant for an O(1) output.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"
#include "ref/ref.h"
#include "sdpa.h"

enum { BC_B = 1, BC_H = 2, BC_Q = 4 }; /* bias broadcast dims */

typedef struct tcase {
  const char *name;
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d, dv;
  int causal, top_left;
  int64_t wl, wr; /* window; both 0 and !wset = none */
  int wset;
  int alibi; /* 0 none, 1 [h], 2 [b, h] */
  float softcap, scale;
  int bias;      /* 0 none, else 1 | BC_* flags of broadcast dims (bit 0 = on) */
  int bias_ninf; /* sprinkle -inf into the bias */
  int dbias;
  int dlse;      /* lse's gradient given (lse feeds the loss) */
  float dropout;
  int64_t pad;                   /* padded strides on every tensor */
  const int32_t *lq, *lk, *used; /* varlen when lq != NULL (b entries each) */
  const int *threads;            /* determinism: thread counts of extra runs (0-terminated) */
} tcase;

static sdpa_tensor alloc_t(const tcase *c, sdpa_dtype dt, int rank, const int64_t *shape) {
  return c->pad ? test_alloc_padded(dt, rank, shape, c->pad) : test_alloc(dt, rank, shape);
}

static sdpa_tensor copy_tensor(const sdpa_tensor *t) {
  sdpa_tensor c = test_alloc(t->dtype, t->rank, t->shape);
  for (int64_t e = 0; e < test_numel(t); ++e)
    test_set(&c, e, test_get(t, e));
  return c;
}

static void run_case(const tcase *c, test_rng *rng) {
  const int varlen = c->lq != NULL;
  const sdpa_dtype dt = c->dt;
  int64_t tq = 0, tk = 0, sq = c->sq, sk = c->sk;
  int32_t cuq[17], cuk[17];
  if (varlen) {
    cuq[0] = cuk[0] = 0;
    sq = sk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      cuq[b + 1] = cuq[b] + c->lq[b];
      cuk[b + 1] = cuk[b] + c->lk[b];
      if (c->lq[b] > sq)
        sq = c->lq[b];
      if (c->lk[b] > sk)
        sk = c->lk[b];
    }
    tq = cuq[c->b];
    tk = cuk[c->b];
  }
  sdpa_tensor q, k, v, out, lse, dout, dq, dk, dv;
  if (varlen) {
    int64_t qs[3] = {tq, c->h, c->d}, ks[3] = {tk, c->hk, c->d}, vs[3] = {tk, c->hk, c->dv};
    int64_t os[3] = {tq, c->h, c->dv}, ls[2] = {c->h, tq};
    q = alloc_t(c, dt, 3, qs), k = alloc_t(c, dt, 3, ks), v = alloc_t(c, dt, 3, vs);
    out = alloc_t(c, dt, 3, os), dout = alloc_t(c, dt, 3, os);
    dq = alloc_t(c, dt, 3, qs), dk = alloc_t(c, dt, 3, ks), dv = alloc_t(c, dt, 3, vs);
    lse = alloc_t(c, SDPA_DTYPE_F32, 2, ls);
  } else {
    int64_t qs[4] = {c->b, sq, c->h, c->d}, ks[4] = {c->b, sk, c->hk, c->d};
    int64_t vs[4] = {c->b, sk, c->hk, c->dv}, os[4] = {c->b, sq, c->h, c->dv};
    int64_t ls[3] = {c->b, c->h, sq};
    q = alloc_t(c, dt, 4, qs), k = alloc_t(c, dt, 4, ks), v = alloc_t(c, dt, 4, vs);
    out = alloc_t(c, dt, 4, os), dout = alloc_t(c, dt, 4, os);
    dq = alloc_t(c, dt, 4, qs), dk = alloc_t(c, dt, 4, ks), dv = alloc_t(c, dt, 4, vs);
    lse = alloc_t(c, SDPA_DTYPE_F32, 3, ls);
  }
  test_fill_normal(&q, rng, 1.0);
  test_fill_normal(&k, rng, 1.0);
  test_fill_normal(&v, rng, 1.0);
  test_fill_normal(&dout, rng, 1.0);

  sdpa_tensor cu_q, cu_k, used, alibi, bias, dbias, dlse;
  memset(&cu_q, 0, sizeof cu_q);
  cu_k = used = alibi = bias = dbias = dlse = cu_q;
  if (c->dlse) {
    dlse = test_alloc(SDPA_DTYPE_F32, lse.rank, lse.shape);
    test_fill_normal(&dlse, rng, 1.0);
  }
  if (varlen) {
    int64_t n1 = c->b + 1;
    cu_q = test_alloc(SDPA_DTYPE_I32, 1, &n1);
    cu_k = test_alloc(SDPA_DTYPE_I32, 1, &n1);
    memcpy(cu_q.data, cuq, sizeof(int32_t) * (size_t)n1);
    memcpy(cu_k.data, cuk, sizeof(int32_t) * (size_t)n1);
    if (c->used) {
      used = test_alloc(SDPA_DTYPE_I32, 1, &c->b);
      memcpy(used.data, c->used, sizeof(int32_t) * (size_t)c->b);
    }
  }
  if (c->alibi) {
    int64_t as[2] = {c->b, c->h};
    alibi =
        c->alibi == 1 ? test_alloc(SDPA_DTYPE_F32, 1, &as[1]) : test_alloc(SDPA_DTYPE_F32, 2, as);
    test_fill_uniform(&alibi, rng, 0.05, 0.6);
  }
  int64_t bshape[4] = {c->bias & BC_B ? 1 : c->b, c->bias & BC_H ? 1 : c->h,
                       c->bias & BC_Q ? 1 : sq, sk};
  if (c->bias) {
    bias = alloc_t(c, dt, 4, bshape);
    test_fill_normal(&bias, rng, 1.0);
    if (c->bias_ninf)
      for (int64_t e = 0; e < test_numel(&bias); ++e)
        if (test_rng_uniform(rng) < 0.1)
          test_set(&bias, e, -INFINITY);
    if (c->dbias)
      dbias = alloc_t(c, dt, 4, bshape);
  }

  sdpa_attn a;
  {
    sdpa_fwd_desc tmp;
    sdpa_fwd_init(&tmp);
    a = tmp.attn;
  }
  a.device = SDPA_DEVICE_CPU;
  a.num_threads = 2;
  a.q = q, a.k = k, a.v = v;
  if (varlen) {
    a.cu_seqlens_q = cu_q, a.cu_seqlens_k = cu_k, a.seqused_k = used;
    a.max_seqlen_q = sq, a.max_seqlen_k = sk;
  }
  a.scale = c->scale;
  a.softcap = c->softcap;
  a.alibi_slopes = alibi;
  a.bias = bias;
  a.causal = c->causal;
  a.align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (c->wset)
    a.window_left = c->wl, a.window_right = c->wr;
  a.dropout_p = c->dropout;
  a.dropout_seed = 0x1234abcd5678ull ^ test_rng_u64(rng);
  a.dropout_offset = (uint64_t)(test_rng_u64(rng) & 0xffffu);

  /* forward: out and lse */
  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  fd.attn = a;
  fd.out = out;
  fd.lse = lse;
  sdpa_status st = sdpa_fwd(&fd);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd: %s: %s", c->name, sdpa_status_string(st),
                   sdpa_last_error()))
    goto done;

  sdpa_bwd_desc bd;
  sdpa_bwd_init(&bd);
  bd.attn = a;
  bd.out = out, bd.lse = lse, bd.dout = dout;
  bd.dq = dq, bd.dk = dk, bd.dv = dv, bd.dbias = dbias, bd.dlse = dlse;
  bd.deterministic = 1;

  /* the oracle */
  sdpa_problem p;
  st = sdpa_validate_bwd(&bd, &p);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: sdpa_validate_bwd: %s", c->name, sdpa_last_error()))
    goto done;
  const int64_t nq = varlen ? tq : c->b * sq, nk = varlen ? tk : c->b * sk;
  const int64_t ndq = nq * c->h * c->d, ndk = nk * c->hk * c->d, ndv = nk * c->hk * c->dv;
  const int64_t nfull = c->b * c->h * sq * sk;
  double *r[2][4];
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)(ndq ? ndq : 1));
    r[l][1] = malloc(sizeof(double) * (size_t)(ndk ? ndk : 1));
    r[l][2] = malloc(sizeof(double) * (size_t)(ndv ? ndv : 1));
    r[l][3] = c->dbias ? malloc(sizeof(double) * (size_t)(nfull ? nfull : 1)) : NULL;
    if (ref_bwd(&p, l, NULL, r[l][0], r[l][1], r[l][2], r[l][3])) {
      fprintf(stderr, "ref_bwd: out of memory\n");
      abort();
    }
  }
  /* reduce the oracle's full dbias over the broadcast dims */
  double *rdb[2] = {NULL, NULL};
  int64_t ndb = 0;
  if (c->dbias) {
    ndb = bshape[0] * bshape[1] * bshape[2] * bshape[3];
    for (int l = 0; l < 2; ++l) {
      rdb[l] = calloc((size_t)(ndb ? ndb : 1), sizeof(double));
      for (int64_t b = 0; b < c->b; ++b)
        for (int64_t hh = 0; hh < c->h; ++hh)
          for (int64_t i = 0; i < sq; ++i)
            for (int64_t j = 0; j < sk; ++j) {
              int64_t bo = bshape[0] == 1 ? 0 : b, ho = bshape[1] == 1 ? 0 : hh;
              int64_t io = bshape[2] == 1 ? 0 : i;
              rdb[l][((bo * bshape[1] + ho) * bshape[2] + io) * sk + j] +=
                  r[l][3][((b * c->h + hh) * sq + i) * sk + j];
            }
    }
  }

  test_poison(&dq), test_poison(&dk), test_poison(&dv);
  if (c->dbias)
    test_poison(&dbias);
  st = sdpa_bwd(&bd);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd: %s: %s", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    test_check_grad(c->name, "dq", &dq, r[0][0], r[1][0]);
    test_check_grad(c->name, "dk", &dk, r[0][1], r[1][1]);
    test_check_grad(c->name, "dv", &dv, r[0][2], r[1][2]);
    if (c->dbias)
      test_check_grad(c->name, "dbias", &dbias, rdb[0], rdb[1]);
  }

  /* determinism: more runs, other thread counts, bitwise equal to the first */
  if (c->threads) {
    sdpa_tensor g0[4] = {copy_tensor(&dq), copy_tensor(&dk), copy_tensor(&dv)};
    if (c->dbias)
      g0[3] = copy_tensor(&dbias);
    for (const int *t = c->threads; *t; ++t) {
      char label[160];
      bd.attn.num_threads = *t;
      test_poison(&dq), test_poison(&dk), test_poison(&dv);
      if (c->dbias)
        test_poison(&dbias);
      st = sdpa_bwd(&bd);
      TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd (threads %d): %s", c->name, *t, sdpa_last_error());
      snprintf(label, sizeof label, "%s threads=%d dq", c->name, *t);
      test_check_equal(label, &dq, &g0[0]);
      snprintf(label, sizeof label, "%s threads=%d dk", c->name, *t);
      test_check_equal(label, &dk, &g0[1]);
      snprintf(label, sizeof label, "%s threads=%d dv", c->name, *t);
      test_check_equal(label, &dv, &g0[2]);
      if (c->dbias) {
        snprintf(label, sizeof label, "%s threads=%d dbias", c->name, *t);
        test_check_equal(label, &dbias, &g0[3]);
      }
    }
    for (int e = 0; e < 4; ++e)
      test_free(&g0[e]);
  }

  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e)
      free(r[l][e]);
    free(rdb[l]);
  }
done:
  test_free(&q), test_free(&k), test_free(&v), test_free(&out), test_free(&lse);
  test_free(&dout), test_free(&dq), test_free(&dk), test_free(&dv);
  test_free(&cu_q), test_free(&cu_k), test_free(&used), test_free(&alibi);
  test_free(&bias), test_free(&dbias), test_free(&dlse);
}

#define F32 SDPA_DTYPE_F32
#define F16 SDPA_DTYPE_F16
#define BF16 SDPA_DTYPE_BF16

int main(void) {
  test_rng rng;
  test_rng_init(&rng, test_seed());

  static const int32_t lq1[4] = {5, 0, 70, 1}, lk1[4] = {7, 0, 90, 3}, us1[4] = {7, 0, 61, 2};
  static const int32_t lq2[3] = {66, 1, 20}, lk2[3] = {40, 9, 0}, us2[3] = {33, 4, 0};
  static const int32_t lq3[2] = {0, 30}, lk3[2] = {12, 75};
  static const int thr_a[] = {1, 2, 3, 7, 2, 0};
  static const int thr_b[] = {4, 1, 2, 5, 0};

  /* every field not named is 0 / NULL: no mask, no modifier, dense, unpadded */
  /* clang-format off */
  const tcase cases[] = {
    {.name = "basic_f32", .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70, .d = 64,
     .dv = 64},
    {.name = "basic_f16", .dt = F16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70, .d = 64,
     .dv = 64},
    {.name = "basic_bf16", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 70, .d = 64,
     .dv = 64},
    {.name = "gqa2_d3_dv5_f16", .dt = F16, .b = 2, .h = 4, .hk = 2, .sq = 33, .sk = 100, .d = 3,
     .dv = 5},
    {.name = "gqa8_causal_br_bf16", .dt = BF16, .b = 1, .h = 8, .hk = 1, .sq = 17, .sk = 130,
     .d = 128, .dv = 64, .causal = 1},
    {.name = "gqa8_causal_tl_f32", .dt = F32, .b = 1, .h = 8, .hk = 1, .sq = 130, .sk = 17, .d = 64,
     .dv = 32, .causal = 1, .top_left = 1},
    {.name = "len1_f32", .dt = F32, .b = 1, .h = 1, .hk = 1, .sq = 1, .sk = 1, .d = 1, .dv = 1},
    {.name = "sq1_f32", .dt = F32, .b = 2, .h = 2, .hk = 1, .sq = 1, .sk = 77, .d = 16, .dv = 8,
     .causal = 1},
    {.name = "sk1_causal_br_f32", .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 77, .sk = 1, .d = 8,
     .dv = 16, .causal = 1},
    {.name = "sq_gt_sk_causal_br_f16", .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 100, .sk = 37,
     .d = 32, .dv = 32, .causal = 1},
    {.name = "sq_gt_sk_causal_tl_bf16", .dt = BF16, .b = 2, .h = 2, .hk = 1, .sq = 100, .sk = 37,
     .d = 32, .dv = 32, .causal = 1, .top_left = 1},
    {.name = "d256_window_br_bf16", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 70, .sk = 90,
     .d = 256, .dv = 256, .wl = 8, .wr = 3, .wset = 1},
    {.name = "d320_causal_tl_f16", .dt = F16, .b = 1, .h = 2, .hk = 2, .sq = 70, .sk = 50, .d = 320,
     .dv = 128, .causal = 1, .top_left = 1},
    {.name = "d128_window_tl_f32", .dt = F32, .b = 1, .h = 2, .hk = 2, .sq = 80, .sk = 80, .d = 128,
     .dv = 128, .top_left = 1, .wl = 20, .wset = 1},
    {.name = "window_left_only_f32", .dt = F32, .b = 1, .h = 1, .hk = 1, .sq = 70, .sk = 70,
     .d = 16, .dv = 16, .wl = 5, .wr = -1, .wset = 1},
    {.name = "alibi_h_causal_f32", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 50, .sk = 60, .d = 32,
     .dv = 32, .causal = 1, .alibi = 1},
    {.name = "alibi_bh_bf16", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 40, .sk = 30, .d = 32,
     .dv = 48, .alibi = 2},
    {.name = "softcap_f32", .dt = F32, .b = 2, .h = 2, .hk = 1, .sq = 45, .sk = 66, .d = 32,
     .dv = 32, .softcap = 5.0f, .scale = 0.3f},
    {.name = "softcap_causal_bf16", .dt = BF16, .b = 1, .h = 4, .hk = 2, .sq = 66, .sk = 66,
     .d = 64, .dv = 64, .causal = 1, .softcap = 2.0f},
    {.name = "bias_full_dbias_f32", .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 33, .sk = 70, .d = 16,
     .dv = 16, .bias = 1, .dbias = 1},
    {.name = "bias_bcast_h_q_ninf_f32", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 40,
     .d = 16, .dv = 16, .bias = 1 | BC_H | BC_Q, .bias_ninf = 1, .dbias = 1},
    {.name = "bias_bcast_b_h_f16", .dt = F16, .b = 3, .h = 4, .hk = 2, .sq = 30, .sk = 75, .d = 32,
     .dv = 32, .causal = 1, .bias = 1 | BC_B | BC_H, .bias_ninf = 1, .dbias = 1},
    {.name = "bias_bcast_b_q_bf16", .dt = BF16, .b = 2, .h = 2, .hk = 1, .sq = 70, .sk = 70,
     .d = 32, .dv = 32, .bias = 1 | BC_B | BC_Q, .dbias = 1},
    {.name = "bias_bcast_all_softcap_f32", .dt = F32, .b = 2, .h = 2, .hk = 2, .sq = 65, .sk = 65,
     .d = 8, .dv = 8, .softcap = 4.0f, .bias = 1 | BC_B | BC_H | BC_Q, .bias_ninf = 1, .dbias = 1},
    {.name = "bias_no_dbias_bf16", .dt = BF16, .b = 1, .h = 2, .hk = 2, .sq = 20, .sk = 20, .d = 16,
     .dv = 16, .bias = 1, .bias_ninf = 1},
    {.name = "dropout_f32", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 75, .d = 32,
     .dv = 32, .dropout = 0.17f},
    {.name = "dropout_causal_bf16", .dt = BF16, .b = 1, .h = 2, .hk = 1, .sq = 66, .sk = 80,
     .d = 64, .dv = 32, .causal = 1, .dropout = 0.17f},
    {.name = "varlen_seqused_causal_f16", .dt = F16, .b = 4, .h = 4, .hk = 2, .sq = 0, .sk = 0,
     .d = 32, .dv = 32, .causal = 1, .lq = lq1, .lk = lk1, .used = us1},
    {.name = "varlen_seqused_tl_f32", .dt = F32, .b = 3, .h = 2, .hk = 1, .sq = 0, .sk = 0, .d = 16,
     .dv = 24, .causal = 1, .top_left = 1, .lq = lq2, .lk = lk2, .used = us2},
    {.name = "varlen_all_mods_bf16", .dt = BF16, .b = 2, .h = 4, .hk = 1, .sq = 0, .sk = 0, .d = 64,
     .dv = 64, .wl = 7, .wr = 9, .wset = 1, .alibi = 1, .softcap = 3.0f, .dropout = 0.17f,
     .lq = lq3, .lk = lk3},
    {.name = "padded_gqa2_f32", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 40, .sk = 50, .d = 32,
     .dv = 16, .causal = 1, .bias = 1, .dbias = 1, .pad = 3},
    {.name = "padded_varlen_bf16", .dt = BF16, .b = 4, .h = 2, .hk = 2, .sq = 0, .sk = 0, .d = 24,
     .dv = 24, .alibi = 1, .dropout = 0.17f, .pad = 5, .lq = lq1, .lk = lk1, .used = us1},
    {.name = "everything_bf16", .dt = BF16, .b = 2, .h = 4, .hk = 2, .sq = 70, .sk = 80, .d = 48,
     .dv = 40, .wl = 30, .wr = 5, .wset = 1, .alibi = 1, .softcap = 6.0f, .bias = 1 | BC_H,
     .bias_ninf = 1, .dbias = 1, .dropout = 0.17f, .pad = 2},
    {.name = "multi_block_f16", .dt = F16, .b = 1, .h = 4, .hk = 2, .sq = 260, .sk = 300, .d = 64,
     .dv = 64, .causal = 1, .alibi = 1, .bias = 1 | BC_B | BC_Q, .dbias = 1, .dropout = 0.17f},
    /* lse feeds the loss (dlse): dense with a window and dbias, varlen with dropout */
    {.name = "dlse_window_dbias_f32", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 40, .sk = 70,
     .d = 32, .dv = 16, .wl = 9, .wr = 4, .wset = 1, .bias = 1 | BC_H, .dbias = 1, .dlse = 1},
    {.name = "dlse_varlen_dropout_bf16", .dt = BF16, .b = 4, .h = 2, .hk = 1, .sq = 0, .sk = 0,
     .d = 32, .dv = 32, .causal = 1, .dropout = 0.17f, .lq = lq1, .lk = lk1, .used = us1,
     .dlse = 1},
    /* empty problems: the gradients of the non-empty side are zeros (poisoned first) */
    {.name = "empty_queries_dbias_f16", .dt = F16, .b = 2, .h = 2, .hk = 1, .sq = 0, .sk = 70,
     .d = 32, .dv = 32, .bias = 1 | BC_Q, .dbias = 1},
    {.name = "empty_keys_causal_bf16", .dt = BF16, .b = 2, .h = 2, .hk = 2, .sq = 50, .sk = 0,
     .d = 64, .dv = 64, .causal = 1},
    {.name = "empty_batch_f32", .dt = F32, .b = 0, .h = 2, .hk = 2, .sq = 9, .sk = 9, .d = 16,
     .dv = 16},
    {.name = "determinism_dense", .dt = F32, .b = 2, .h = 4, .hk = 2, .sq = 130, .sk = 140, .d = 64,
     .dv = 64, .causal = 1, .alibi = 1, .softcap = 3.0f, .bias = 1 | BC_B | BC_H, .bias_ninf = 1,
     .dbias = 1, .dropout = 0.17f, .threads = thr_a},
    {.name = "determinism_varlen", .dt = BF16, .b = 4, .h = 4, .hk = 1, .sq = 0, .sk = 0, .d = 32,
     .dv = 32, .causal = 1, .dropout = 0.17f, .lq = lq1, .lk = lk1, .used = us1, .threads = thr_b},
  };
  /* clang-format on */
  for (size_t n = 0; n < sizeof cases / sizeof cases[0]; ++n)
    run_case(&cases[n], &rng);
  return test_summary();
}
