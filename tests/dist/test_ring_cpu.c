/*
 * test_ring_cpu.c - the ring's schedule on the CPU device (docs/design.md §9),
 * run in CI: n simulated ranks (threads over the loopback transport, in both
 * its early and late modes) run the very schedule sdpa_ring_fwd / _bwd run
 * over NCCL. The gathered out, lse, dq, dk and dv are held to the oracle on
 * the gathered sequence under the harness tolerance (the rule single-process
 * sdpa is held to), and their distance to single-process sdpa is printed.
 * Every output, and a caller's workspace, starts poisoned.
 *
 * Also: the split and every step's plan against the mask pair by pair (and
 * the zigzag's balance), the agreement's refusals on every rank, and the
 * public calls' argument checks.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"
#include "loopback.h"
#include "ref/ref.h"
#include "ring/ring.h"
#include "rows.h"

static test_rng rng;

/* ---- the split and the plan ------------------------------------------------------ */

/* Every visible (query, key) pair of the global problem is computed exactly
 * once over the ring's steps, every hidden one never; zigzag balances. */
static void plan_case(int world, sdpa_ring_layout layout, int causal, int64_t seqlen) {
  int ok = 1;
  char *seen = calloc((size_t)(seqlen > 0 ? seqlen : 1), 1);
  int64_t work[16] = {0};
  for (int r = 0; r < world && ok; ++r) {
    sdpa_ring_shard_t q;
    sdpa_ring_shard_of(seqlen, world, layout, r, &q);
    int64_t prev = -1;
    for (int64_t i = 0; i < q.len; ++i) { /* local order is global order */
      const int64_t g = rows_global(&q, i);
      if (g <= prev || g >= seqlen || seen[g]) ok = 0;
      seen[g] = 1;
      prev = g;
    }
    for (int t = 0; t < world && ok; ++t) {
      const int src = (r - t + world) % world;
      sdpa_ring_shard_t k;
      sdpa_ring_shard_of(seqlen, world, layout, src, &k);
      sdpa_ring_item it[SDPA_RING_MAX_ITEMS];
      const int n = sdpa_ring_plan(&q, &k, t == 0, causal, it);
      unsigned char *cover = calloc((size_t)(q.len * k.len + 1), 1);
      for (int a = 0; a < n; ++a) {
        if (a > 0 && it[a].q0 < it[a - 1].q0 + it[a - 1].q_len) ok = 0; /* disjoint rows */
        for (int64_t i = it[a].q0; i < it[a].q0 + it[a].q_len; ++i)
          for (int64_t j = it[a].k0; j < it[a].k0 + it[a].k_len; ++j)
            if (!it[a].causal || j - it[a].k0 <= i - it[a].q0) {
              cover[i * k.len + j]++;
              work[r]++;
            }
      }
      for (int64_t i = 0; i < q.len; ++i)
        for (int64_t j = 0; j < k.len; ++j) {
          const int visible = !causal || rows_global(&k, j) <= rows_global(&q, i);
          if (cover[i * k.len + j] != visible) ok = 0;
        }
      free(cover);
    }
  }
  for (int64_t g = 0; g < seqlen; ++g)
    if (!seen[g]) ok = 0;
  if (ok && causal && layout == SDPA_RING_ZIGZAG && seqlen % (2 * world) == 0)
    for (int r = 1; r < world; ++r)
      if (work[r] != work[0]) ok = 0;
  TEST_EXPECT(ok,
              "plan: world %d %s %s seqlen %lld: the steps do not cover the mask exactly"
              " once (or zigzag is unbalanced)",
              world, layout == SDPA_RING_ZIGZAG ? "zigzag" : "contiguous",
              causal ? "causal" : "full", (long long)seqlen);
  free(seen);
}

static void plan_checks(void) {
  static const int64_t lens[] = {0, 1, 2, 5, 16, 17, 37, 64, 96};
  int64_t count = 0;
  for (int world = 1; world <= 8; ++world)
    for (int layout = 0; layout < 2; ++layout)
      for (int causal = 0; causal < 2; ++causal)
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; ++i, ++count)
          plan_case(world, (sdpa_ring_layout)layout, causal, lens[i]);
  printf("-- plan: %lld splits checked pair by pair\n", (long long)count);
}

/* ---- ring cases ---------------------------------------------------------------------- */

typedef struct rcase {
  const char *name;
  int world;
  sdpa_ring_layout layout;
  int causal;
  int64_t b, s, h, hk, d, dv;
  sdpa_dtype dt;
  float scale, softcap;
  int dlse, late, check_peers, give_ws;
} rcase;

typedef struct rank_job {
  const rcase *c;
  int rank;
  sdpa_ring_transport *tp;
  sdpa_tensor q, k, v, dout, dlse, out, lse, dq, dk, dv;
  sdpa_status st_f, st_b;
  char msg[1100];
} rank_job;

/* A caller's workspace of the size asked for, poisoned. */
static void *poisoned_ws(size_t bytes, void **raw) {
  *raw = malloc(bytes + 256);
  char *p = (char *)(((uintptr_t)*raw + 255) & ~(uintptr_t)255);
  memset(p, 0xff, bytes);
  return p;
}

/* With give_ws: the descriptor's workspace fields (ws, ws_size) set to a
 * poisoned one of the size the query answered (st, *bytes); st passes on. */
static sdpa_status give_ws(sdpa_status st, const size_t *bytes, void **ws, size_t *ws_size,
                           void **raw) {
  if (st == SDPA_OK) *ws = poisoned_ws(*bytes, raw), *ws_size = *bytes;
  return st;
}

/* One pass of the rank over its transport: the backward where b is given. */
static sdpa_status rank_pass(const rank_job *j, const sdpa_ring_fwd_desc *f,
                             const sdpa_ring_bwd_desc *b) {
  sdpa_ring_ops ops;
  sdpa_ring_cpu_ops(&ops);
  const sdpa_ring_pass p = b ? sdpa_ring_bwd_pass(b) : sdpa_ring_fwd_pass(f);
  return sdpa_ring_run(&p, j->tp, &ops, SDPA_OK);
}

static void *rank_main(void *arg) {
  rank_job *j = (rank_job *)arg;
  const rcase *c = j->c;
  sdpa_ring_fwd_desc f;
  sdpa_ring_fwd_init(&f);
  rows_attn(&f.attn, SDPA_DEVICE_CPU, j->q, j->k, j->v, c->causal, c->scale, c->softcap);
  f.attn.num_threads = 1;
  rows_ring(&f.ring, j->rank, c->world, c->layout, c->s, c->check_peers);
  f.out = j->out;
  f.lse = j->lse;
  void *raw_f = NULL, *raw_b = NULL;
  size_t bytes = 0;
  j->st_f = SDPA_OK;
  if (c->give_ws)
    j->st_f = give_ws(sdpa_ring_fwd_workspace_size(&f, &bytes), &bytes, &f.workspace,
                      &f.workspace_size, &raw_f);
  if (j->st_f == SDPA_OK) j->st_f = rank_pass(j, &f, NULL);
  if (j->st_f != SDPA_OK) goto fail_f;

  sdpa_ring_bwd_desc b;
  sdpa_ring_bwd_init(&b);
  b.attn = f.attn;
  b.ring = f.ring;
  ROWS_BWD_TENSORS(b, j->out, j->lse, j->dout, j->dlse, j->dq, j->dk, j->dv);
  b.deterministic = 1;
  j->st_b = SDPA_OK;
  if (c->give_ws)
    j->st_b = give_ws(sdpa_ring_bwd_workspace_size(&b, &bytes), &bytes, &b.workspace,
                      &b.workspace_size, &raw_b);
  if (j->st_b == SDPA_OK) j->st_b = rank_pass(j, NULL, &b);
  if (j->st_b != SDPA_OK) goto fail_b;
  free(raw_f);
  free(raw_b);
  return NULL;
fail_f:
  j->st_b = j->st_f;
fail_b:
  snprintf(j->msg, sizeof j->msg, "%s", sdpa_last_error());
  free(raw_f);
  free(raw_b);
  return NULL;
}

static void ring_case(const rcase *c) {
  printf("-- ring %s: world %d %s %s b%lld s%lld h%lld/%lld d%lld/%lld %s%s%s%s\n", c->name,
         c->world, c->layout == SDPA_RING_ZIGZAG ? "zigzag" : "contiguous",
         c->causal ? "causal" : "full", (long long)c->b, (long long)c->s, (long long)c->h,
         (long long)c->hk, (long long)c->d, (long long)c->dv, sdpa_dtype_string(c->dt),
         c->late ? " late-sends" : "", c->dlse ? " dlse" : "", c->give_ws ? " caller-ws" : "");
  const sdpa_dtype dt = c->dt;
  sdpa_tensor q = rows_t4(NULL, dt, c->b, c->s, c->h, c->d),
              k = rows_t4(NULL, dt, c->b, c->s, c->hk, c->d);
  sdpa_tensor v = rows_t4(NULL, dt, c->b, c->s, c->hk, c->dv),
              dout = rows_t4(NULL, dt, c->b, c->s, c->h, c->dv);
  sdpa_tensor out = rows_t4(NULL, dt, c->b, c->s, c->h, c->dv),
              lse = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, c->s);
  sdpa_tensor dq = rows_t4(NULL, dt, c->b, c->s, c->h, c->d),
              dk = rows_t4(NULL, dt, c->b, c->s, c->hk, c->d);
  sdpa_tensor dv = rows_t4(NULL, dt, c->b, c->s, c->hk, c->dv);
  sdpa_tensor dlse = c->dlse ? rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, c->s) : (sdpa_tensor){0};
  test_fill_normal(&q, &rng, 1.0);
  test_fill_normal(&k, &rng, 1.0);
  test_fill_normal(&v, &rng, 1.0);
  test_fill_normal(&dout, &rng, 1.0);
  if (c->dlse) test_fill_normal(&dlse, &rng, 1.0);

  /* single-process sdpa on the whole sequence: the forward, then the backward */
  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  rows_attn(&fd.attn, SDPA_DEVICE_CPU, q, k, v, c->causal, c->scale, c->softcap);
  fd.attn.num_threads = 2;
  fd.out = out, fd.lse = lse;
  sdpa_status st = sdpa_fwd(&fd);
  TEST_EXPECT(st == SDPA_OK, "%s: single-process sdpa_fwd: %s", c->name, sdpa_last_error());
  sdpa_bwd_desc bd;
  sdpa_bwd_init(&bd);
  bd.attn = fd.attn;
  ROWS_BWD_TENSORS(bd, out, lse, dout, dlse, dq, dk, dv);
  st = sdpa_bwd(&bd);
  TEST_EXPECT(st == SDPA_OK, "%s: single-process sdpa_bwd: %s", c->name, sdpa_last_error());

  /* the oracle, exact and in the storage dtype */
  sdpa_problem pf, pb;
  sdpa_validate_fwd(&fd, &pf);
  sdpa_validate_bwd(&bd, &pb);
  const int64_t no = c->b * c->s * c->h * c->dv, nl = c->b * c->h * c->s;
  const int64_t nq = c->b * c->s * c->h * c->d, nk = c->b * c->s * c->hk * c->d,
                nv = c->b * c->s * c->hk * c->dv;
  double *r[2][5];
  for (int l = 0; l < 2; ++l) {
    r[l][0] = malloc(sizeof(double) * (size_t)(no + 1));
    r[l][1] = malloc(sizeof(double) * (size_t)(nl + 1));
    r[l][2] = malloc(sizeof(double) * (size_t)(nq + 1));
    r[l][3] = malloc(sizeof(double) * (size_t)(nk + 1));
    r[l][4] = malloc(sizeof(double) * (size_t)(nv + 1));
    if (ref_fwd(&pf, l, r[l][0], r[l][1], NULL) ||
        ref_bwd(&pb, l, NULL, r[l][2], r[l][3], r[l][4], NULL)) {
      fprintf(stderr, "oracle: out of memory\n");
      abort();
    }
  }

  /* the ring: each rank its rows, outputs poisoned */
  loop_world *w = loop_world_new(c->world, c->late);
  rank_job *jobs = calloc((size_t)c->world, sizeof *jobs);
  pthread_t *th = calloc((size_t)c->world, sizeof *th);
  sdpa_ring_shard_t *sh = calloc((size_t)c->world, sizeof *sh);
  for (int rk = 0; rk < c->world; ++rk) {
    rank_job *j = &jobs[rk];
    sdpa_ring_shard_of(c->s, c->world, c->layout, rk, &sh[rk]);
    const int64_t s = sh[rk].len;
    j->c = c;
    j->rank = rk;
    j->tp = loop_transport(w, rk);
    j->q = rows_t4(NULL, dt, c->b, s, c->h, c->d), j->k = rows_t4(NULL, dt, c->b, s, c->hk, c->d);
    j->v = rows_t4(NULL, dt, c->b, s, c->hk, c->dv),
    j->dout = rows_t4(NULL, dt, c->b, s, c->h, c->dv);
    j->out = rows_t4(NULL, dt, c->b, s, c->h, c->dv),
    j->lse = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, s);
    j->dq = rows_t4(NULL, dt, c->b, s, c->h, c->d), j->dk = rows_t4(NULL, dt, c->b, s, c->hk, c->d);
    j->dv = rows_t4(NULL, dt, c->b, s, c->hk, c->dv);
    rows_copy(&q, &j->q, &sh[rk], 1, 0);
    rows_copy(&k, &j->k, &sh[rk], 1, 0);
    rows_copy(&v, &j->v, &sh[rk], 1, 0);
    rows_copy(&dout, &j->dout, &sh[rk], 1, 0);
    if (c->dlse) {
      j->dlse = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, s);
      rows_copy(&dlse, &j->dlse, &sh[rk], 2, 0);
    }
  }
  for (int rk = 0; rk < c->world; ++rk) pthread_create(&th[rk], NULL, rank_main, &jobs[rk]);
  for (int rk = 0; rk < c->world; ++rk) pthread_join(th[rk], NULL);
  int ran = 1;
  for (int rk = 0; rk < c->world; ++rk)
    ran &= TEST_EXPECT(
        jobs[rk].st_f == SDPA_OK && jobs[rk].st_b == SDPA_OK, "%s: rank %d: %s: %s", c->name, rk,
        sdpa_status_string(jobs[rk].st_f != SDPA_OK ? jobs[rk].st_f : jobs[rk].st_b), jobs[rk].msg);
  if (ran) {
    /* gathered: every global row from the rank that holds it */
    sdpa_tensor go = rows_t4(NULL, dt, c->b, c->s, c->h, c->dv),
                gl = rows_t3(NULL, SDPA_DTYPE_F32, c->b, c->h, c->s);
    sdpa_tensor gq = rows_t4(NULL, dt, c->b, c->s, c->h, c->d),
                gk = rows_t4(NULL, dt, c->b, c->s, c->hk, c->d);
    sdpa_tensor gv = rows_t4(NULL, dt, c->b, c->s, c->hk, c->dv);
    for (int rk = 0; rk < c->world; ++rk) {
      rows_copy(&jobs[rk].out, &go, &sh[rk], 1, 1);
      rows_copy(&jobs[rk].lse, &gl, &sh[rk], 2, 1);
      rows_copy(&jobs[rk].dq, &gq, &sh[rk], 1, 1);
      rows_copy(&jobs[rk].dk, &gk, &sh[rk], 1, 1);
      rows_copy(&jobs[rk].dv, &gv, &sh[rk], 1, 1);
    }
    char what[160];
    snprintf(what, sizeof what, "%s out", c->name);
    test_check(what, &go, r[0][0], r[1][0], test_atol(dt));
    snprintf(what, sizeof what, "%s lse", c->name);
    test_check(what, &gl, r[0][1], r[1][1], test_lse_atol(r[0][1], nl));
    test_check_grad(c->name, "dq", &gq, r[0][2], r[1][2]);
    test_check_grad(c->name, "dk", &gk, r[0][3], r[1][3]);
    test_check_grad(c->name, "dv", &gv, r[0][4], r[1][4]);
    printf("   max |ring - single-process sdpa|: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n",
           rows_max_diff(&go, &out), rows_max_diff(&gl, &lse), rows_max_diff(&gq, &dq),
           rows_max_diff(&gk, &dk), rows_max_diff(&gv, &dv));
    test_free(&go), test_free(&gl), test_free(&gq), test_free(&gk), test_free(&gv);
  }
  for (int rk = 0; rk < c->world; ++rk) {
    rank_job *j = &jobs[rk];
    test_free(&j->q), test_free(&j->k), test_free(&j->v), test_free(&j->dout);
    test_free(&j->out), test_free(&j->lse), test_free(&j->dq), test_free(&j->dk);
    test_free(&j->dv);
    if (c->dlse) test_free(&j->dlse);
  }
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < 5; ++i) free(r[l][i]);
  free(jobs), free(th), free(sh);
  loop_world_free(w);
  test_free(&q), test_free(&k), test_free(&v), test_free(&dout), test_free(&out);
  test_free(&lse), test_free(&dq), test_free(&dk), test_free(&dv);
  if (c->dlse) test_free(&dlse);
}

/* ---- refusals: every rank fails, with the same sentence where it is shared ---------- */

typedef struct err_job {
  int rank;
  sdpa_ring_transport *tp;
  sdpa_ring_fwd_desc f;
  sdpa_ring_bwd_desc b;
  int bwd;
  sdpa_status st;
  char msg[1100];
} err_job;

static void *err_main(void *arg) {
  err_job *j = (err_job *)arg;
  sdpa_ring_ops ops;
  sdpa_ring_cpu_ops(&ops);
  const sdpa_ring_pass p = j->bwd ? sdpa_ring_bwd_pass(&j->b) : sdpa_ring_fwd_pass(&j->f);
  j->st = sdpa_ring_run(&p, j->tp, &ops, SDPA_OK);
  snprintf(j->msg, sizeof j->msg, "%s", sdpa_last_error());
  return NULL;
}

/* world 2, zigzag causal, seqlen 16, f32 h 2 / 2, d 8: ready-to-run descriptors */
typedef struct err_setup {
  sdpa_tensor q[2], k[2], v[2], out[2], lse[2], dq[2], dk[2], dv[2], k1, v1, kpad, qlong;
  sdpa_tensor dlse_wrong;
} err_setup;

static void err_alloc(err_setup *s) {
  for (int r = 0; r < 2; ++r) {
    s->q[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->k[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->v[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->out[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->lse[r] = rows_t3(NULL, SDPA_DTYPE_F32, 1, 2, 8);
    s->dq[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->dk[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    s->dv[r] = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 2, 8);
    test_fill_normal(&s->q[r], &rng, 1.0);
    test_fill_normal(&s->k[r], &rng, 1.0);
    test_fill_normal(&s->v[r], &rng, 1.0);
    test_fill_normal(&s->out[r], &rng, 1.0);
    test_fill_uniform(&s->lse[r], &rng, 1.0, 2.0);
  }
  s->k1 = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 1, 8);
  s->v1 = rows_t4(NULL, SDPA_DTYPE_F32, 1, 8, 1, 8);
  test_fill_normal(&s->k1, &rng, 1.0);
  test_fill_normal(&s->v1, &rng, 1.0);
  const int64_t ks[4] = {1, 8, 2, 8};
  s->kpad = test_alloc_padded(SDPA_DTYPE_F32, 4, ks, 3);
  test_fill_normal(&s->kpad, &rng, 1.0);
  s->qlong = rows_t4(NULL, SDPA_DTYPE_F32, 1, 9, 2, 8);
  test_fill_normal(&s->qlong, &rng, 1.0);
}

static void err_free(err_setup *s) {
  for (int r = 0; r < 2; ++r) {
    test_free(&s->q[r]), test_free(&s->k[r]), test_free(&s->v[r]), test_free(&s->out[r]);
    test_free(&s->lse[r]), test_free(&s->dq[r]), test_free(&s->dk[r]), test_free(&s->dv[r]);
  }
  test_free(&s->k1), test_free(&s->v1), test_free(&s->kpad), test_free(&s->qlong);
}

typedef void (*err_edit)(err_job *j, err_setup *s);

static void err_case(const char *name, err_setup *s, int bwd, err_edit edit, sdpa_status want0,
                     const char *needle0, sdpa_status want1, const char *needle1) {
  loop_world *w = loop_world_new(2, 0);
  err_job jobs[2];
  pthread_t th[2];
  memset(jobs, 0, sizeof jobs);
  for (int r = 0; r < 2; ++r) {
    err_job *j = &jobs[r];
    j->rank = r;
    j->tp = loop_transport(w, r);
    j->bwd = bwd;
    sdpa_ring_fwd_init(&j->f);
    rows_attn(&j->f.attn, SDPA_DEVICE_CPU, s->q[r], s->k[r], s->v[r], 1, 0.f, 0.f);
    j->f.attn.num_threads = 1;
    rows_ring(&j->f.ring, r, 2, SDPA_RING_ZIGZAG, 16, 1); /* sdpa_ring_fwd_init's layout, check */
    j->f.out = s->out[r];
    j->f.lse = s->lse[r];
    sdpa_ring_bwd_init(&j->b);
    j->b.attn = j->f.attn;
    j->b.ring = j->f.ring;
    ROWS_BWD_TENSORS(j->b, s->out[r], s->lse[r], s->out[r], (sdpa_tensor){0}, s->dq[r],
                     s->dk[r], s->dv[r]);
    edit(j, s);
  }
  for (int r = 0; r < 2; ++r) pthread_create(&th[r], NULL, err_main, &jobs[r]);
  for (int r = 0; r < 2; ++r) pthread_join(th[r], NULL);
  const sdpa_status want[2] = {want0, want1};
  const char *needle[2] = {needle0, needle1};
  for (int r = 0; r < 2; ++r)
    TEST_EXPECT(jobs[r].st == want[r] && strstr(jobs[r].msg, needle[r]) != NULL,
                "refusal %s, rank %d: got %s \"%s\", expected %s containing \"%s\"", name, r,
                sdpa_status_string(jobs[r].st), jobs[r].msg, sdpa_status_string(want[r]),
                needle[r]);
  printf("   refusal %s: rank 0 \"%s\"\n", name, jobs[0].msg);
  loop_world_free(w);
}

/* err_case where both ranks must return the same status and message. */
static void err_same(const char *name, err_setup *s, int bwd, err_edit edit, sdpa_status want,
                     const char *needle) {
  err_case(name, s, bwd, edit, want, needle, want, needle);
}

static void e_none(err_job *j, err_setup *s) { (void)j, (void)s; }
static void e_hk(err_job *j, err_setup *s) {
  if (j->rank == 1) j->f.attn.k = s->k1, j->f.attn.v = s->v1;
}
static void e_rows(err_job *j, err_setup *s) {
  if (j->rank == 1) j->f.attn.q = s->qlong;
}
static void e_seqlen(err_job *j, err_setup *s) {
  (void)s; /* contiguous: 8 + 8 rows of 16, or 9 + 8 of 17: rank 1 holds 8 either way */
  j->f.ring.layout = SDPA_RING_CONTIGUOUS;
  if (j->rank == 1) j->f.ring.seqlen = 17;
}
static void e_dropout(err_job *j, err_setup *s) {
  (void)s;
  if (j->rank == 0) j->f.attn.dropout_p = 0.1f;
}
static void e_stride(err_job *j, err_setup *s) { j->f.attn.k = s->kpad; }
static void e_rank(err_job *j, err_setup *s) {
  (void)s;
  if (j->rank == 1) j->f.ring.rank = 0;
}
static void e_causal(err_job *j, err_setup *s) {
  (void)s;
  if (j->rank == 1) j->f.attn.causal = 0;
}
static void e_ws(err_job *j, err_setup *s) {
  (void)s;
  if (j->rank == 0) j->f.workspace = (void *)(uintptr_t)4096, j->f.workspace_size = 16;
}
static void e_window(err_job *j, err_setup *s) {
  (void)s;
  j->f.attn.window_left = 4;
}
static void e_nolse(err_job *j, err_setup *s) {
  (void)s;
  if (j->rank == 1) memset(&j->b.lse, 0, sizeof j->b.lse);
}

static void refusals(void) {
  err_setup s;
  err_alloc(&s);
  printf("-- refusals (world 2)\n");
  err_same("none", &s, 0, e_none, SDPA_OK, "");
  err_same("h_k differs", &s, 0, e_hk, SDPA_ERR_INVALID_ARGUMENT,
           "attn.k.shape[2] (h_k) = 2 on rank 0 but 1 on rank 1");
  err_case("rows", &s, 0, e_rows, SDPA_ERR_INVALID_ARGUMENT, "rank 1 of 2 refused",
           SDPA_ERR_INVALID_ARGUMENT, "attn.q.shape[1] = 9: expected 8, the rows rank 1 holds");
  err_same("seqlen differs", &s, 0, e_seqlen, SDPA_ERR_INVALID_ARGUMENT,
           "ring.seqlen = 16 on rank 0 but 17 on rank 1");
  err_case("dropout", &s, 0, e_dropout, SDPA_ERR_NOT_SUPPORTED, "attn.dropout_p = 0.1: expected 0",
           SDPA_ERR_INVALID_ARGUMENT, "rank 0 of 2 refused");
  err_case("k strided", &s, 0, e_stride, SDPA_ERR_INVALID_ARGUMENT, "attn.k.stride[",
           SDPA_ERR_INVALID_ARGUMENT, "travels the ring as bytes");
  err_case("ring.rank", &s, 0, e_rank, SDPA_ERR_INVALID_ARGUMENT, "rank 1 of 2 refused",
           SDPA_ERR_INVALID_ARGUMENT, "ring.rank = 0: expected 1");
  err_same("causal differs", &s, 0, e_causal, SDPA_ERR_INVALID_ARGUMENT,
           "attn.causal = 1 on rank 0 but 0 on rank 1");
  err_case("workspace", &s, 0, e_ws, SDPA_ERR_INVALID_ARGUMENT,
           "workspace_size = 16: expected at least", SDPA_ERR_INVALID_ARGUMENT,
           "rank 0 of 2 refused");
  err_same("window", &s, 0, e_window, SDPA_ERR_NOT_SUPPORTED, "attn.window_left = 4: expected -1");
  err_case("bwd without lse", &s, 1, e_nolse, SDPA_ERR_INVALID_ARGUMENT, "rank 1 of 2 refused",
           SDPA_ERR_INVALID_ARGUMENT, "lse.data = NULL");
  err_free(&s);
}

/* ---- the public calls' own checks ------------------------------------------------------- */

static void public_calls(void) {
  printf("-- public calls\n");
  sdpa_ring_fwd_desc f;
  sdpa_ring_fwd_init(&f);
  TEST_EXPECT(f.struct_size == sizeof f && f.ring.layout == SDPA_RING_ZIGZAG &&
                  f.ring.check_peers == 1 && f.ring.world_size == 1 &&
                  f.attn.device == SDPA_DEVICE_CUDA && f.attn.window_left == -1,
              "sdpa_ring_fwd_init: unexpected defaults");
  TEST_EXPECT_ERROR(sdpa_ring_fwd(NULL), SDPA_ERR_INVALID_ARGUMENT, "desc = NULL");
  f.struct_size = 0;
  TEST_EXPECT_ERROR(sdpa_ring_fwd(&f), SDPA_ERR_INVALID_ARGUMENT, "desc->struct_size = 0");
  sdpa_ring_bwd_desc b;
  sdpa_ring_bwd_init(&b);
  b.struct_size = 8;
  TEST_EXPECT_ERROR(sdpa_ring_bwd(&b), SDPA_ERR_INVALID_ARGUMENT, "desc->struct_size = 8");

  int64_t start[2], len[2];
  int parts = 0;
  TEST_EXPECT_ERROR(sdpa_ring_shard(10, 0, SDPA_RING_ZIGZAG, 0, start, len, &parts),
                    SDPA_ERR_INVALID_ARGUMENT, "world_size = 0: expected >= 1");
  TEST_EXPECT_ERROR(sdpa_ring_shard(10, 2, SDPA_RING_ZIGZAG, 3, start, len, &parts),
                    SDPA_ERR_INVALID_ARGUMENT, "rank = 3: expected 0 <= rank < world_size = 2");
  TEST_EXPECT_ERROR(sdpa_ring_shard(10, 2, (sdpa_ring_layout)7, 0, start, len, &parts),
                    SDPA_ERR_INVALID_ARGUMENT, "layout = 7");
  TEST_EXPECT_ERROR(sdpa_ring_shard(-1, 2, SDPA_RING_ZIGZAG, 0, start, len, &parts),
                    SDPA_ERR_INVALID_ARGUMENT, "seqlen = -1");
  /* 10 rows in 4 chunks: 3, 3, 2, 2 */
  sdpa_status st = sdpa_ring_shard(10, 2, SDPA_RING_ZIGZAG, 0, start, len, &parts);
  TEST_EXPECT(
      st == SDPA_OK && parts == 2 && start[0] == 0 && len[0] == 3 && start[1] == 8 && len[1] == 2,
      "sdpa_ring_shard(10, 2, zigzag, 0): %d parts (%lld, %lld) (%lld, %lld)", parts,
      (long long)start[0], (long long)len[0], (long long)start[1], (long long)len[1]);
  st = sdpa_ring_shard(10, 2, SDPA_RING_ZIGZAG, 1, start, len, &parts);
  TEST_EXPECT(
      st == SDPA_OK && parts == 2 && start[0] == 3 && len[0] == 3 && start[1] == 6 && len[1] == 2,
      "sdpa_ring_shard(10, 2, zigzag, 1)");
  st = sdpa_ring_shard(10, 3, SDPA_RING_CONTIGUOUS, 2, start, len, &parts);
  TEST_EXPECT(st == SDPA_OK && parts == 1 && start[0] == 7 && len[0] == 3,
              "sdpa_ring_shard(10, 3, contiguous, 2)");

  /* the workspace query needs no communicator */
  sdpa_tensor q = rows_t4(NULL, SDPA_DTYPE_BF16, 1, 8, 4, 16),
              k = rows_t4(NULL, SDPA_DTYPE_BF16, 1, 8, 2, 16);
  sdpa_tensor out = rows_t4(NULL, SDPA_DTYPE_BF16, 1, 8, 4, 16);
  sdpa_ring_fwd_init(&f);
  f.attn.device = SDPA_DEVICE_CPU;
  f.attn.q = q, f.attn.k = k, f.attn.v = k;
  f.ring.world_size = 4;
  f.ring.rank = 3;
  f.ring.seqlen = 32;
  f.out = out;
  size_t bytes = 0;
  st = sdpa_ring_fwd_workspace_size(&f, &bytes);
  /* at least the 4 partial outputs and the received blocks */
  TEST_EXPECT(st == SDPA_OK && bytes >= 4 * 8 * 4 * 16 * 2 + 2 * 2 * 8 * 2 * 16 * 2,
              "sdpa_ring_fwd_workspace_size: %s, %zu bytes", sdpa_last_error(), bytes);
  f.ring.seqlen = 33; /* 8 chunks of 5, 4, ..., 4: rank 0 holds 5 + 4 rows */
  f.ring.rank = 0;
  TEST_EXPECT_ERROR(sdpa_ring_fwd_workspace_size(&f, &bytes), SDPA_ERR_INVALID_ARGUMENT,
                    "attn.q.shape[1] = 8: expected 9, the rows rank 0 holds of ring.seqlen = 33");
  f.ring.seqlen = 32;
  f.attn.device = SDPA_DEVICE_CUDA;
#ifdef SDPA_TEST_HAVE_RING
  TEST_EXPECT_ERROR(sdpa_ring_fwd(&f), SDPA_ERR_INVALID_ARGUMENT,
                    "ring.nccl_comm = NULL: expected an ncclComm_t");
#else
  TEST_EXPECT_ERROR(sdpa_ring_fwd(&f), SDPA_ERR_NOT_SUPPORTED, "built without the ring");
  TEST_EXPECT(!sdpa_ring_available(), "sdpa_ring_available() in a build without the ring");
#endif
  f.attn.device = SDPA_DEVICE_CPU;
  f.attn.alibi_slopes = q;
  TEST_EXPECT_ERROR(sdpa_ring_fwd_workspace_size(&f, &bytes), SDPA_ERR_NOT_SUPPORTED,
                    "attn.alibi_slopes given");
  test_free(&q), test_free(&k), test_free(&out);
}

int main(void) {
  test_rng_init(&rng, test_seed());
  plan_checks();
  /* clang-format off */
  static const rcase cases[] = {
      /* name, world, layout, causal, b, s, h, hk, d, dv, dtype, scale, softcap, dlse, late,
         check_peers, give_ws */
      {"w2-zig-causal", 2, SDPA_RING_ZIGZAG, 1, 1, 48, 2, 2, 16, 16, SDPA_DTYPE_F32, 0, 0, 0, 0, 1, 0},
      {"w4-zig-causal-gqa", 4, SDPA_RING_ZIGZAG, 1, 1, 64, 4, 2, 32, 32, SDPA_DTYPE_BF16, 0, 0, 0, 1, 1, 0},
      {"w4-zig-causal-uneven", 4, SDPA_RING_ZIGZAG, 1, 1, 61, 3, 1, 16, 16, SDPA_DTYPE_F32, 0, 0, 0, 1, 1, 1},
      {"w3-contig-causal-uneven", 3, SDPA_RING_CONTIGUOUS, 1, 1, 50, 2, 1, 24, 16, SDPA_DTYPE_F16, 0, 0, 0, 0, 1, 1},
      {"w4-contig-full", 4, SDPA_RING_CONTIGUOUS, 0, 2, 40, 4, 4, 16, 16, SDPA_DTYPE_BF16, 0, 0, 0, 1, 1, 0},
      {"w2-zig-full-softcap-dlse", 2, SDPA_RING_ZIGZAG, 0, 1, 30, 2, 1, 16, 8, SDPA_DTYPE_F32, 0.3f, 5.0f, 1, 1, 1, 0},
      {"w4-zig-causal-tiny", 4, SDPA_RING_ZIGZAG, 1, 1, 5, 2, 1, 8, 8, SDPA_DTYPE_F32, 0, 0, 0, 0, 1, 1},
      {"w1-zig-causal", 1, SDPA_RING_ZIGZAG, 1, 1, 33, 4, 2, 16, 16, SDPA_DTYPE_BF16, 0, 0, 1, 0, 1, 1},
      {"w3-zig-causal-nocheck", 3, SDPA_RING_ZIGZAG, 1, 2, 45, 2, 2, 16, 16, SDPA_DTYPE_F32, 0, 0, 0, 1, 0, 0},
      {"w2-contig-causal-f16", 2, SDPA_RING_CONTIGUOUS, 1, 1, 37, 4, 1, 32, 32, SDPA_DTYPE_F16, 0, 0, 1, 1, 1, 0},
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) ring_case(&cases[i]);
  refusals();
  public_calls();
  return test_summary();
}
