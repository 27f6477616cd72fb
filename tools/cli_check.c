/*
 * cli_check.c - the check of `sdpa run`: the outputs the library wrote are
 * compared with the double-precision oracle (tests/ref) on the same inputs,
 * under the tolerance rule of docs/design.md §7 (tests/common/harness.h):
 *     max |o - r| <= 2 * max |l - r| + atol(dtype) * max(1, max |r|)
 * with r the exact oracle and l the oracle with storage-dtype math (lowp = 1);
 * NaN never passes. (The atol term is scaled by the tensor's magnitude here so
 * that gradients summed over long sequences are judged like outputs.)
 *
 * The oracle is plain double loops, so a large problem is checked on a random
 * subset of (batch, kv-head group) slices, every row of each, sized to a few
 * seconds on all cores. A slice is the same problem seen through offset
 * pointers with b = 1 and the group's heads. Dropout's mask depends on the
 * (batch, head) index, so with dropout the slices are batch 0 and the leading
 * heads, or the whole problem when it fits. When one slice alone is too big,
 * the forward of a dense problem is checked on its last query rows: a suffix
 * of rows with s_q shortened keeps every mask and alibi distance (both measure
 * from the bottom-right corner), which a prefix would not.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "common/dtype.h"
#include "cpu/parallel.h"
#include "ref/ref.h"

/* Oracle work (multiply-adds, both oracle runs) per core that the check aims
 * for, and the oracle's speed (about 3e8 multiply-adds a second a core). */
#define CHECK_BUDGET_PER_CORE 6e8
#define ORACLE_RATE 3e8

double cli_atol(sdpa_dtype dtype) {
  switch (dtype) {
  case SDPA_DTYPE_F16: return 1e-4;
  case SDPA_DTYPE_BF16: return 1e-3;
  default: return 2e-5;
  }
}

#define LSE_ATOL 1e-3 /* lse is fp32 math for every dtype: only its rounding differs */

enum { T_OUT, T_LSE, T_DQ, T_DK, T_DV, T_DBIAS, T_COUNT };
static const char *const tensor_names[T_COUNT] = {"out", "lse", "dq", "dk", "dv", "dbias"};

typedef struct err_acc {
  double err, lowp, mag; /* max |o - r|, max |l - r|, max |r| */
  int64_t nan, n;
  int64_t where[4];      /* batch, row, head, element of the largest error */
} err_acc;

typedef struct unit {
  int whole;             /* the full problem, unsliced */
  int64_t bi, g0, ng;    /* batch, first kv head, kv heads */
  int64_t r0;            /* first query row checked (dense forward; 0 = all) */
  double cost;
  err_acc acc[T_COUNT];
  int failed_alloc;
} unit;

typedef struct check_ctx {
  const sdpa_problem *p; /* the full problem over the host buffers */
  unit *units;
  int bwd;
} check_ctx;

static const void *adv(const void *base, sdpa_dtype dt, int64_t off) {
  return base ? (const char *)base + off * (int64_t)sdpa_dtype_size(dt) : NULL;
}

/* p seen through offset pointers: batch bi, kv heads [g0, g0 + ng). cu holds
 * the slice's varlen prefix sums. */
static void slice(const sdpa_problem *p, const unit *u, sdpa_problem *s, int32_t cu[4]) {
  *s = *p;
  if (u->whole) return;
  const int64_t bi = u->bi, grp = p->h / p->h_k, h0 = u->g0 * grp, g0 = u->g0;
  const sdpa_dtype dt = p->dtype;
  s->b = 1;
  s->h = u->ng * grp;
  s->h_k = u->ng;
  s->q = adv(p->q, dt, sdpa_q_offset(p, p->q_st, bi, 0, h0));
  s->out = (void *)adv(p->out, dt, sdpa_q_offset(p, p->o_st, bi, 0, h0));
  if (p->lse) s->lse = (float *)adv(p->lse, SDPA_DTYPE_F32, sdpa_lse_offset(p, bi, 0, h0));
  if (p->layout == SDPA_LAYOUT_VARLEN) {
    cu[0] = 0;
    cu[1] = p->cu_q[bi + 1] - p->cu_q[bi];
    cu[2] = 0;
    cu[3] = p->cu_k[bi + 1] - p->cu_k[bi];
    s->cu_q = cu;
    s->cu_k = cu + 2;
    s->total_q = cu[1];
    s->total_k = cu[3];
    s->k = adv(p->k, dt, (int64_t)p->cu_k[bi] * p->k_st.ss + g0 * p->k_st.sh);
    s->v = adv(p->v, dt, (int64_t)p->cu_k[bi] * p->v_st.ss + g0 * p->v_st.sh);
    if (p->seqused_k) s->seqused_k = p->seqused_k + bi;
  } else if (p->layout == SDPA_LAYOUT_CACHE) {
    s->total_q = p->s_q;
    s->cache_seqlens = p->cache_seqlens + bi;
    int64_t row = 0; /* the cache keeps its row / block indexing */
    if (p->page_size > 0)
      s->block_table = p->block_table + bi * p->bt_stride;
    else if (p->cache_batch_idx)
      s->cache_batch_idx = p->cache_batch_idx + bi;
    else
      row = bi;
    s->k = adv(p->k, dt, row * p->k_st.sb + g0 * p->k_st.sh);
    s->v = adv(p->v, dt, row * p->v_st.sb + g0 * p->v_st.sh);
    s->k_new = adv(p->k_new, dt, bi * p->kn_st.sb + g0 * p->kn_st.sh);
    s->v_new = adv(p->v_new, dt, bi * p->vn_st.sb + g0 * p->vn_st.sh);
  } else {
    const int64_t r0 = u->r0; /* a suffix of the rows: see the file comment */
    s->q = adv(s->q, dt, r0 * p->q_st.ss);
    s->out = (void *)adv(s->out, dt, r0 * p->o_st.ss);
    if (s->lse) s->lse += r0 * p->lse_ss;
    s->s_q = p->s_q - r0;
    s->total_q = s->s_q;
    s->total_k = p->s_k;
    s->k = adv(p->k, dt, bi * p->k_st.sb + g0 * p->k_st.sh);
    s->v = adv(p->v, dt, bi * p->v_st.sb + g0 * p->v_st.sh);
  }
  if (p->alibi) s->alibi = p->alibi + bi * p->alibi_sb + h0 * p->alibi_sh;
  if (p->bias) s->bias = adv(p->bias, dt, bi * p->bias_sb + h0 * p->bias_sh + u->r0 * p->bias_sq);
  s->probs = NULL;
  if (p->is_bwd) {
    s->dout = adv(p->dout, dt, sdpa_q_offset(p, p->do_st, bi, 0, h0));
    s->dq = (void *)adv(p->dq, dt, sdpa_q_offset(p, p->dq_st, bi, 0, h0));
    s->dk = (void *)adv(p->dk, dt, sdpa_kv_offset(p, p->dk_st, bi, 0, g0));
    s->dv = (void *)adv(p->dv, dt, sdpa_kv_offset(p, p->dv_st, bi, 0, g0));
    if (p->dbias) {
      s->dbias = (void *)adv(p->dbias, dt, bi * p->dbias_sb + h0 * p->dbias_sh);
      s->dbias_nb = 1;
      if (p->dbias_nh > 1) s->dbias_nh = s->h;
    }
  }
}

static void acc_add(err_acc *a, double o, double r, double l, int64_t bb, int64_t i, int64_t hh,
                    int64_t e) {
  ++a->n;
  double err;
  if (isnan(o)) {
    ++a->nan;
    err = INFINITY;
  } else if (isinf(r) || isinf(o)) {
    err = o == r ? 0.0 : INFINITY;
  } else {
    err = fabs(o - r);
    if (fabs(r) > a->mag) a->mag = fabs(r);
    if (isfinite(l) && fabs(l - r) > a->lowp) a->lowp = fabs(l - r);
  }
  if (err > a->err || (a->n == 1 && err == 0.0)) {
    a->err = err;
    a->where[0] = bb, a->where[1] = i, a->where[2] = hh, a->where[3] = e;
  }
}

/* The oracle's output arrays of one slice (ref.h layouts). */
typedef struct ref_out {
  double *out, *lse, *dq, *dk, *dv, *dbias;
} ref_out;

static void ref_free(ref_out *r) {
  free(r->out), free(r->lse), free(r->dq), free(r->dk), free(r->dv), free(r->dbias);
  memset(r, 0, sizeof *r);
}

static int64_t rows_q(const sdpa_problem *s) {
  return s->layout == SDPA_LAYOUT_VARLEN ? s->total_q : s->b * s->s_q;
}
static int64_t rows_k(const sdpa_problem *s) {
  return s->layout == SDPA_LAYOUT_VARLEN ? s->total_k : s->b * s->s_k;
}

static int ref_run(const sdpa_problem *s, int lowp, const double *dout, ref_out *r) {
  const int64_t nq = rows_q(s) * s->h, nk = rows_k(s) * s->h_k;
  if (!s->is_bwd) {
    r->out = malloc(sizeof(double) * (size_t)(nq * s->d_v));
    r->lse = malloc(sizeof(double) * (size_t)nq);
    if (!r->out || !r->lse) return -1;
    return ref_fwd(s, lowp, r->out, r->lse, NULL);
  }
  r->dq = malloc(sizeof(double) * (size_t)(nq * s->d));
  r->dk = malloc(sizeof(double) * (size_t)(nk * s->d));
  r->dv = malloc(sizeof(double) * (size_t)(nk * s->d_v));
  if (s->dbias) r->dbias = malloc(sizeof(double) * (size_t)(s->b * s->h * s->s_q * s->s_k));
  if (!r->dq || !r->dk || !r->dv || (s->dbias && !r->dbias)) return -1;
  return ref_bwd(s, lowp, dout, r->dq, r->dk, r->dv, r->dbias);
}

static void run_unit(void *vctx, int64_t ui, int tid) {
  (void)tid;
  const check_ctx *c = (const check_ctx *)vctx;
  const sdpa_problem *p = c->p;
  unit *u = &c->units[ui];
  sdpa_problem s;
  int32_t cu[4];
  slice(p, u, &s, cu);
  const sdpa_dtype dt = p->dtype;
  const int64_t b0 = u->whole ? 0 : u->bi, h0 = u->whole ? 0 : u->g0 * (p->h / p->h_k);
  const int64_t g0 = u->whole ? 0 : u->g0, r0 = u->r0;
  const int64_t n = s.h, nq = rows_q(&s);
  double *dout = NULL;
  ref_out r = {0}, l = {0};
  if (s.is_bwd) { /* the oracle takes dout as a dense double array */
    dout = malloc(sizeof(double) * (size_t)(nq * n * s.d_v));
    if (!dout) goto oom;
    for (int64_t bl = 0; bl < s.b; ++bl)
      for (int64_t i = 0; i < sdpa_seq_len_q(&s, bl); ++i)
        for (int64_t hh = 0; hh < n; ++hh)
          for (int64_t e = 0; e < s.d_v; ++e)
            dout[((sdpa_seq_q_start(&s, bl) + i) * n + hh) * s.d_v + e] =
                sdpa_load(p->dout, dt, sdpa_q_offset(p, p->do_st, b0 + bl, i, h0 + hh) + e);
  }
  if (ref_run(&s, 0, dout, &r) || ref_run(&s, 1, dout, &l)) goto oom;

  for (int64_t bl = 0; bl < s.b; ++bl) {
    const int64_t bb = b0 + bl, lq = sdpa_seq_len_q(&s, bl), row0 = sdpa_seq_q_start(&s, bl);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t hh = 0; hh < n; ++hh) {
        const int64_t ri = (row0 + i) * n + hh;
        if (!s.is_bwd) {
          for (int64_t e = 0; e < s.d_v; ++e)
            acc_add(&u->acc[T_OUT], sdpa_load(p->out, dt, sdpa_q_offset(p, p->o_st, bb, r0 + i, h0 + hh) + e),
                    r.out[ri * s.d_v + e], l.out[ri * s.d_v + e], bb, r0 + i, h0 + hh, e);
          if (p->lse) {
            int64_t li = s.layout == SDPA_LAYOUT_VARLEN ? hh * s.total_q + row0 + i
                                                         : (bl * n + hh) * s.s_q + i;
            acc_add(&u->acc[T_LSE], p->lse[sdpa_lse_offset(p, bb, r0 + i, h0 + hh)], r.lse[li], l.lse[li],
                    bb, r0 + i, h0 + hh, 0);
          }
        } else {
          for (int64_t e = 0; e < s.d; ++e)
            acc_add(&u->acc[T_DQ], sdpa_load(p->dq, dt, sdpa_q_offset(p, p->dq_st, bb, i, h0 + hh) + e),
                    r.dq[ri * s.d + e], l.dq[ri * s.d + e], bb, i, h0 + hh, e);
          if (r.dbias)
            for (int64_t j = 0; j < s.s_k; ++j) {
              int64_t ri2 = ((bl * n + hh) * s.s_q + i) * s.s_k + j;
              int64_t off = bb * p->dbias_sb + (h0 + hh) * p->dbias_sh + i * p->dbias_sq + j * p->dbias_sk;
              acc_add(&u->acc[T_DBIAS], sdpa_load(p->dbias, dt, off), r.dbias[ri2], l.dbias[ri2], bb, i,
                      h0 + hh, j);
            }
        }
      }
    if (s.is_bwd) {
      const int64_t lk = s.layout == SDPA_LAYOUT_VARLEN ? s.cu_k[bl + 1] - s.cu_k[bl] : s.s_k;
      const int64_t k0 = s.layout == SDPA_LAYOUT_VARLEN ? s.cu_k[bl] : bl * s.s_k;
      for (int64_t j = 0; j < lk; ++j)
        for (int64_t gg = 0; gg < s.h_k; ++gg) {
          const int64_t ri = (k0 + j) * s.h_k + gg;
          for (int64_t e = 0; e < s.d; ++e)
            acc_add(&u->acc[T_DK], sdpa_load(p->dk, dt, sdpa_kv_offset(p, p->dk_st, bb, j, g0 + gg) + e),
                    r.dk[ri * s.d + e], l.dk[ri * s.d + e], bb, j, g0 + gg, e);
          for (int64_t e = 0; e < s.d_v; ++e)
            acc_add(&u->acc[T_DV], sdpa_load(p->dv, dt, sdpa_kv_offset(p, p->dv_st, bb, j, g0 + gg) + e),
                    r.dv[ri * s.d_v + e], l.dv[ri * s.d_v + e], bb, j, g0 + gg, e);
        }
    }
  }
  goto done;
oom:
  u->failed_alloc = 1;
done:
  ref_free(&r);
  ref_free(&l);
  free(dout);
}

/* Multiply-adds of the two oracle runs over batch bb, ng kv heads, rows r0..
 * (the oracle visits every (row, key) pair, masked or not). */
static double unit_cost(const sdpa_problem *p, int64_t bb, int64_t ng, int64_t r0, int bwd) {
  const double pairs = (double)(sdpa_seq_len_q(p, bb) - r0) * (double)sdpa_seq_len_k(p, bb);
  return 2.0 * (bwd ? 3.0 : 1.0) * pairs * (double)(ng * (p->h / p->h_k)) * (double)(p->d + p->d_v);
}

int cli_check(cli_problem *P, int bwd) {
  sdpa_fwd_desc fd;
  sdpa_bwd_desc bd;
  cli_problem_desc(P, 0, &fd, &bd);
  sdpa_problem p;
  sdpa_status st = bwd ? sdpa_validate_bwd(&bd, &p) : sdpa_validate_fwd(&fd, &p);
  if (st != SDPA_OK) return cli_library_error("run", "validating the host copy for the oracle", st);

  const int nthreads = sdpa_cpu_resolve_threads(0);
  const double budget = CHECK_BUDGET_PER_CORE * nthreads;
  const int64_t groups = p.b * p.h_k;
  unit *units = calloc((size_t)(groups > 0 ? groups : 1), sizeof *units);
  if (!units) return CLI_FAIL;
  int64_t nunits = 0;
  double total = 0;
  for (int64_t bb = 0; bb < p.b; ++bb) total += unit_cost(&p, bb, p.h_k, 0, bwd);
  char what[256];
  double chosen = 0;
  if (p.dropout_p > 0) {
    /* the mask depends on (batch, head): only batch 0's leading heads slice exactly */
    if (total <= 2 * CHECK_BUDGET_PER_CORE) { /* one oracle call on one core */
      units[0].whole = 1;
      chosen = total;
      snprintf(what, sizeof what, "the whole problem");
    } else {
      int64_t ng = p.h_k;
      while (ng > 1 && unit_cost(&p, 0, ng, 0, bwd) > 2 * CHECK_BUDGET_PER_CORE) --ng;
      units[0].bi = 0, units[0].g0 = 0, units[0].ng = ng;
      chosen = unit_cost(&p, 0, ng, 0, bwd);
      snprintf(what, sizeof what, "batch 0 of %lld, kv heads 0..%lld of %lld (dropout: leading slices only)",
               (long long)p.b, (long long)ng - 1, (long long)p.h_k);
    }
    nunits = 1;
  } else {
    /* every (batch, kv head) unit in a random order (seeded), until the budget */
    for (int64_t bb = 0, k = 0; bb < p.b; ++bb)
      for (int64_t g = 0; g < p.h_k; ++g, ++k) units[k].bi = bb, units[k].g0 = g, units[k].ng = 1;
    uint64_t x = P->o.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    for (int64_t i = groups - 1; i > 0; --i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      int64_t j = (int64_t)(x % (uint64_t)(i + 1));
      unit t = units[i];
      units[i] = units[j];
      units[j] = t;
    }
    /* a slice bigger than one core's share: check its last rows (dense forward) */
    int64_t r0 = 0;
    if (!bwd && p.layout == SDPA_LAYOUT_DENSE && (p.bottom_right || p.s_q == p.s_k))
      while (r0 < p.s_q - 1 && unit_cost(&p, 0, 1, r0, 0) > 2 * CHECK_BUDGET_PER_CORE)
        r0 += (p.s_q - r0 + 7) / 8;
    if (r0 >= p.s_q) r0 = p.s_q - 1;
    while (nunits < groups && (nunits == 0 || chosen < budget)) {
      units[nunits].r0 = r0;
      units[nunits].cost = unit_cost(&p, units[nunits].bi, 1, r0, bwd);
      chosen += units[nunits++].cost;
    }
    char rows[96];
    if (r0)
      snprintf(rows, sizeof rows, "query rows %lld..%lld", (long long)r0, (long long)p.s_q - 1);
    else
      snprintf(rows, sizeof rows, "every row");
    if (nunits == groups && !r0)
      snprintf(what, sizeof what, "the whole problem");
    else
      snprintf(what, sizeof what, "%lld of %lld (batch, kv head) slices (random, seeded), %s",
               (long long)nunits, (long long)groups, rows);
  }
  /* the oracle runs at roughly 1e9 multiply-adds per second per core */
  if (chosen > ORACLE_RATE * (double)(nthreads < nunits ? nthreads : nunits))
    fprintf(stderr, "checking %s against the fp64 oracle...\n", what);

  check_ctx ctx = {&p, units, bwd};
  double t0 = cli_now();
  sdpa_cpu_parallel_for(nthreads, nunits, run_unit, &ctx);
  double secs = cli_now() - t0;

  err_acc acc[T_COUNT];
  memset(acc, 0, sizeof acc);
  int oom = 0;
  for (int64_t u = 0; u < nunits; ++u) {
    oom |= units[u].failed_alloc;
    for (int t = 0; t < T_COUNT; ++t) {
      const err_acc *a = &units[u].acc[t];
      if (!a->n) continue;
      if (a->err > acc[t].err || !acc[t].n) memcpy(acc[t].where, a->where, sizeof a->where);
      acc[t].err = fmax(acc[t].err, a->err);
      acc[t].lowp = fmax(acc[t].lowp, a->lowp);
      acc[t].mag = fmax(acc[t].mag, a->mag);
      acc[t].nan += a->nan;
      acc[t].n += a->n;
    }
  }
  free(units);
  if (oom) {
    fprintf(stderr, "sdpa run: out of host memory for the oracle; try --no-check or a smaller problem\n");
    return CLI_FAIL;
  }

  int pass = 1;
  printf("check:    %s vs the fp64 oracle (%s, %.1f s)\n", bwd ? "backward" : "forward", what, secs);
  for (int t = 0; t < T_COUNT; ++t) {
    const err_acc *a = &acc[t];
    if (!a->n) continue;
    const double atol = (t == T_LSE ? LSE_ATOL : cli_atol(p.dtype)) * fmax(1.0, a->mag);
    const double bound = 2.0 * a->lowp + atol;
    const int ok = a->nan == 0 && a->err <= bound;
    pass &= ok;
    printf("  %-6s max|err| %.3e  bound %.3e = 2 x %.3e (%s math) + %.1e   %s", tensor_names[t],
           a->err, bound, a->lowp, sdpa_dtype_string(p.dtype), atol, ok ? "ok" : "FAIL");
    if (a->nan) printf("  (%lld NaN)", (long long)a->nan);
    if (!ok)
      printf("  worst at [batch %lld, %s %lld, head %lld, %s %lld]", (long long)a->where[0],
             t == T_DK || t == T_DV ? "key" : "row", (long long)a->where[1], (long long)a->where[2],
             t == T_DBIAS ? "key" : "elem", (long long)a->where[3]);
    printf("\n");
  }
  return pass ? CLI_OK : CLI_FAIL;
}
