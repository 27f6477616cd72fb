/*
 * fwd.c - the CPU forward: FlashAttention's algorithm on host threads. Work
 * items are (batch, head, query block, key split), heaviest first; each loads
 * a block of BLOCK_M query rows in fp32, streams the visible keys in blocks of
 * BLOCK_N (S = scale * Q K^T and O += P V through sdpa_cpu_gemm), applies the
 * score modifiers only on tiles that need them (scores.c) and keeps an online
 * softmax (running max and sum); key blocks that cross the causal diagonal run
 * in row groups that skip the masked keys. Memory is O(tile) per thread; the
 * s_q x s_k matrix is only ever written as the optional probs output (a second
 * pass once lse is known). Layouts: dense, varlen, KV cache (contiguous or
 * paged, after the in-place append of kvappend.c). With split-KV each split
 * writes a partial (out, lse) to a workspace and a second pass merges them
 * exactly (merge.c).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../common/dtype.h"
#include "../error.h"
#include "fwd_parts.h"
#include "gemm.h"
#include "parallel.h"
#include "scores.h"

/* Tile sizes: affect speed, never results beyond fp32 rounding.
 * BLOCK_M rows share each K/V block load; BLOCK_N keys per softmax step;
 * TRIM_M rows per group where a key block crosses the causal diagonal (each
 * group stops at the keys its last row sees, so masked work stays small).
 * BLOCK_M 256 halves the repacking of K and V against 128. */
/* Build-time override for tuning runs only (affects speed, never results). */
#ifndef SDPA_CPU_BLOCK_M
#define SDPA_CPU_BLOCK_M 256
#endif
enum { BLOCK_M = SDPA_CPU_BLOCK_M, BLOCK_N = 512, TRIM_M = 64 };

typedef struct fwd_ctx {
  const sdpa_problem *p;
  int64_t n_qblocks; /* per (batch, head): ceil(max s_q / BLOCK_M) */
  int splits;
  float *part_out;   /* splits > 1: [block item][split][BLOCK_M][d_v] */
  float *part_lse;   /* splits > 1: [block item][split][BLOCK_M] */
  float **scratch;   /* per thread */
  size_t scratch_floats;
  atomic_int failed;
} fwd_ctx;

/* per-thread scratch, fp32 tiles */
typedef struct fwd_tiles {
  float *q;    /* [BLOCK_M][d] */
  float *k;    /* [BLOCK_N][d] */
  float *v;    /* [BLOCK_N][d_v] */
  float *s;    /* [BLOCK_M][BLOCK_N] */
  float *o;    /* [BLOCK_M][d_v] */
  float *m;    /* [BLOCK_M] running max */
  float *l;    /* [BLOCK_M] running sum, then lse */
  float *row;  /* [d_v] */
  uint8_t *drop; /* [BLOCK_M][BLOCK_N] */
} fwd_tiles;

static size_t tiles_floats(const sdpa_problem *p) {
  return (size_t)(BLOCK_M * p->d + BLOCK_N * p->d + BLOCK_N * p->d_v + BLOCK_M * BLOCK_N +
                  BLOCK_M * p->d_v + 2 * BLOCK_M + p->d_v) +
         (size_t)(BLOCK_M * BLOCK_N) / sizeof(float) + 16;
}

static int get_tiles(fwd_ctx *ctx, int tid, fwd_tiles *t) {
  const sdpa_problem *p = ctx->p;
  if (!ctx->scratch[tid]) {
    ctx->scratch[tid] = (float *)malloc(sizeof(float) * ctx->scratch_floats);
    if (!ctx->scratch[tid]) {
      atomic_store(&ctx->failed, 1);
      return 0;
    }
  }
  float *f = ctx->scratch[tid];
  t->q = f;
  f += BLOCK_M * p->d;
  t->k = f;
  f += BLOCK_N * p->d;
  t->v = f;
  f += BLOCK_N * p->d_v;
  t->s = f;
  f += BLOCK_M * BLOCK_N;
  t->o = f;
  f += BLOCK_M * p->d_v;
  t->m = f;
  f += BLOCK_M;
  t->l = f;
  f += BLOCK_M;
  t->row = f;
  f += p->d_v;
  t->drop = (uint8_t *)f;
  return 1;
}

/* ---- tile loads ------------------------------------------------------------------ */

static const char *elem_ptr(const void *base, sdpa_dtype t, int64_t off) {
  return (const char *)base + (size_t)off * sdpa_dtype_size(t);
}

/* Q rows [i0, i0+mi) of (b, hh) into q[mi][d] fp32; rotated in the cache layout. */
static void load_q(const sdpa_problem *p, int64_t b, int64_t hh, int64_t i0, int64_t mi,
                   float *q) {
  for (int64_t r = 0; r < mi; ++r) {
    const int64_t i = i0 + r;
    sdpa_cpu_load_row(elem_ptr(p->q, p->dtype, sdpa_q_offset(p, p->q_st, b, i, hh)), p->dtype,
                      p->d, q + r * p->d);
    if (p->layout == SDPA_LAYOUT_CACHE && p->rotary_dim > 0)
      sdpa_cpu_rotary_row(p, q + r * p->d, sdpa_rotary_q_pos(p, b, i));
  }
}

/* Key-like rows [j0, j0+nj) of kv head hk: returns a pointer to fp32 rows and
 * their stride, reading in place where the storage already is fp32 rows of
 * one stride (f32, not paged), else converting into buf[nj][n]. */
static const float *load_kv(const sdpa_problem *p, const void *base, sdpa_bshd st, int64_t n,
                            int64_t b, int64_t hk, int64_t j0, int64_t nj, float *buf,
                            int64_t *ld) {
  if (p->dtype == SDPA_DTYPE_F32 && p->page_size == 0) {
    *ld = st.ss;
    return (const float *)base + sdpa_kv_offset(p, st, b, j0, hk);
  }
  for (int64_t c = 0; c < nj; ++c)
    sdpa_cpu_load_row(elem_ptr(base, p->dtype, sdpa_kv_offset(p, st, b, j0 + c, hk)), p->dtype,
                      n, buf + c * n);
  *ld = n;
  return buf;
}

/* S rows [r0, r0+mi) = the final scores of query rows [i0+r0, i0+r0+mi) x keys
 * [j0, j0+nj); t->q holds the block's Q from row i0. */
static void score_block(const sdpa_problem *p, fwd_tiles *t, int64_t b, int64_t hh, int64_t hk,
                        int64_t sq, int64_t sk, int64_t i0, int64_t r0, int64_t mi, int64_t j0,
                        int64_t nj) {
  int64_t ldk;
  const float *k = load_kv(p, p->k, p->k_st, p->d, b, hk, j0, nj, t->k, &ldk);
  float *s = t->s + r0 * BLOCK_N;
  sdpa_cpu_gemm(0, 1, (int)mi, (int)nj, (int)p->d, p->scale, t->q + r0 * p->d, (int)p->d, k,
                (int)ldk, 0.0f, s, BLOCK_N);
  if (sdpa_cpu_tile_needs_scores(p, sq, sk, i0 + r0, mi, j0, nj))
    sdpa_cpu_score_tile(p, b, hh, sq, sk, i0 + r0, mi, j0, nj, s, BLOCK_N, NULL);
}

/* ---- probs (testing aid, dense only) ------------------------------------------------ */

/* probs rows [i0, i0+mi) of (b, hh) over every key, given the final lse of the
 * rows in lse[mi]; t->q must hold the rows' Q. */
static void write_probs(const sdpa_problem *p, fwd_tiles *t, int64_t b, int64_t hh, int64_t sq,
                        int64_t sk, int64_t i0, int64_t mi, const float *lse) {
  const int64_t hk = hh / (p->h / p->h_k);
  const size_t es = sdpa_dtype_size(p->probs_dtype);
  for (int64_t j0 = 0; j0 < sk; j0 += BLOCK_N) {
    const int64_t nj = sk - j0 < BLOCK_N ? sk - j0 : BLOCK_N;
    score_block(p, t, b, hh, hk, sq, sk, i0, 0, mi, j0, nj);
    if (p->dropout_p > 0.0f) sdpa_cpu_dropout_tile(p, b, hh, i0, mi, j0, nj, t->drop, BLOCK_N);
    for (int64_t r = 0; r < mi; ++r) {
      float *s = t->s + r * BLOCK_N;
      if (lse[r] == INFINITY) {
        for (int64_t c = 0; c < nj; ++c) s[c] = 0.0f;
      } else {
        sdpa_cpu_exp_sum(s, lse[r], s, nj);
      }
      if (p->dropout_p > 0.0f) {
        const uint8_t *dr = t->drop + r * BLOCK_N;
        for (int64_t c = 0; c < nj; ++c)
          if (dr[c]) s[c] = -s[c];
      }
      char *dst = (char *)p->probs +
                  (size_t)(b * p->probs_sb + hh * p->probs_sh + (i0 + r) * p->probs_sq + j0) * es;
      sdpa_cpu_store_row(dst, p->probs_dtype, nj, s);
    }
  }
}

/* ---- one work item ----------------------------------------------------------------- */

/* Writes the final rows (out, lse, probs) of a block from fp32 out o[mi][d_v]
 * and lse[mi]. */
static void write_rows(const sdpa_problem *p, fwd_tiles *t, int64_t b, int64_t hh, int64_t sq,
                       int64_t sk, int64_t i0, int64_t mi, const float *o, const float *lse) {
  const size_t es = sdpa_dtype_size(p->dtype);
  for (int64_t r = 0; r < mi; ++r) {
    char *dst = (char *)p->out + (size_t)sdpa_q_offset(p, p->o_st, b, i0 + r, hh) * es;
    sdpa_cpu_store_row(dst, p->dtype, p->d_v, o + r * p->d_v);
    if (p->lse) p->lse[sdpa_lse_offset(p, b, i0 + r, hh)] = lse[r];
  }
  if (p->probs) write_probs(p, t, b, hh, sq, sk, i0, mi, lse);
}

/* One online-softmax step: rows [r0, r0+mi) of the block (query rows i0 + r0 ..)
 * against keys [j0, j0+nj): S = scores, P = exp(S - m_new), the running O and l
 * rescaled, O += P V. nj == 0 leaves the rows unchanged. */
static void attend_block(const sdpa_problem *p, fwd_tiles *t, int64_t b, int64_t hh, int64_t hk,
                         int64_t sq, int64_t sk, int64_t i0, int64_t r0, int64_t mi, int64_t j0,
                         int64_t nj) {
  if (nj <= 0) return;
  score_block(p, t, b, hh, hk, sq, sk, i0, r0, mi, j0, nj);
  float *sb = t->s + r0 * BLOCK_N;
  float *ob = t->o + r0 * p->d_v;
  for (int64_t r = 0; r < mi; ++r) {
    float *s = sb + r * BLOCK_N;
    float *m = t->m + r0 + r, *l = t->l + r0 + r;
    const float mx = sdpa_cpu_max(s, nj);
    const float m_new = mx > *m ? mx : *m;
    if (m_new == -INFINITY) { /* nothing visible yet: P row = 0 */
      memset(s, 0, sizeof(float) * (size_t)nj);
      continue;
    }
    const float alpha = expf(*m - m_new); /* 0 when m was -inf */
    const float sum = sdpa_cpu_exp_sum(s, m_new, s, nj);
    *l = *l * alpha + sum;
    *m = m_new;
    if (alpha != 1.0f) {
      float *o = ob + r * p->d_v;
      for (int64_t e = 0; e < p->d_v; ++e) o[e] *= alpha;
    }
  }
  if (p->dropout_p > 0.0f) {
    uint8_t *db = t->drop + r0 * BLOCK_N;
    sdpa_cpu_dropout_tile(p, b, hh, i0 + r0, mi, j0, nj, db, BLOCK_N);
    for (int64_t r = 0; r < mi; ++r) {
      float *s = sb + r * BLOCK_N;
      const uint8_t *dr = db + r * BLOCK_N;
      for (int64_t c = 0; c < nj; ++c)
        if (dr[c]) s[c] = 0.0f;
    }
  }
  int64_t ldv;
  const float *v = load_kv(p, p->v, p->v_st, p->d_v, b, hk, j0, nj, t->v, &ldv);
  sdpa_cpu_gemm(0, 0, (int)mi, (int)p->d_v, (int)nj, 1.0f, sb, BLOCK_N, v, (int)ldv, 1.0f, ob,
                (int)p->d_v);
}

/* The query block a task works on: rows i0 .. i0 + mi of the sq rows of
 * sequence b, head hh. */
typedef struct fwd_block {
  int64_t b, hh, sq, i0, mi;
} fwd_block;

/* Block qb of bh = b * h + hh, and the thread's tiles for it; 0 when there
 * is nothing to do (the block starts past the sequence's rows, or no tiles). */
static int block_begin(fwd_ctx *ctx, int tid, int64_t bh, int64_t qb, fwd_block *k,
                       fwd_tiles *t) {
  const sdpa_problem *p = ctx->p;
  k->b = bh / p->h;
  k->hh = bh % p->h;
  k->sq = sdpa_seq_len_q(p, k->b);
  k->i0 = qb * BLOCK_M;
  if (k->i0 >= k->sq) return 0;
  k->mi = k->sq - k->i0 < BLOCK_M ? k->sq - k->i0 : BLOCK_M;
  return get_tiles(ctx, tid, t);
}

/* item = ((n_qblocks - 1 - qb) * (b_total * h) + bh) * splits + split with
 * bh = b * h + hh; the block's split-KV slot is blk = bh * n_qblocks + qb */
static void fwd_task(void *vctx, int64_t item, int tid) {
  fwd_ctx *ctx = (fwd_ctx *)vctx;
  const sdpa_problem *p = ctx->p;
  const int64_t split = item % ctx->splits;
  /* heaviest first: the last query blocks see the most keys under a causal
   * mask, so they go out first and the dynamic schedule ends on small items */
  const int64_t ord = item / ctx->splits;
  const int64_t nbh = p->b * p->h;
  const int64_t qb = ctx->n_qblocks - 1 - ord / nbh;
  const int64_t bh = ord % nbh;
  const int64_t blk = bh * ctx->n_qblocks + qb;
  fwd_block k;
  fwd_tiles t;
  if (!block_begin(ctx, tid, bh, qb, &k, &t)) return;
  const int64_t b = k.b, hh = k.hh, sq = k.sq, i0 = k.i0, mi = k.mi;
  const int64_t hk = hh / (p->h / p->h_k);
  const int64_t sk = sdpa_seq_len_k(p, b);

  /* visible keys of the block: the union of its rows' ranges (monotone in i) */
  int64_t lo, hi, hi0; /* hi0: the end of the block's first row */
  sdpa_key_span(p, i0, i0 + mi, sq, sk, &lo, &hi, &hi0);
  if (ctx->splits > 1) {
    const int64_t nblk = (hi - lo + BLOCK_N - 1) / BLOCK_N;
    const int64_t b0 = nblk * split / ctx->splits, b1 = nblk * (split + 1) / ctx->splits;
    const int64_t nlo = lo + b0 * BLOCK_N, nhi = lo + b1 * BLOCK_N;
    lo = nlo;
    if (nhi < hi) hi = nhi;
    if (hi < lo) hi = lo;
  }

  load_q(p, b, hh, i0, mi, t.q);
  for (int64_t r = 0; r < mi; ++r) {
    t.m[r] = -INFINITY;
    t.l[r] = 0.0f;
  }
  memset(t.o, 0, sizeof(float) * (size_t)(mi * p->d_v));

  for (int64_t j0 = lo; j0 < hi; j0 += BLOCK_N) {
    const int64_t nj = hi - j0 < BLOCK_N ? hi - j0 : BLOCK_N;
    if (hi0 >= j0 + nj || mi <= TRIM_M) {
      attend_block(p, &t, b, hh, hk, sq, sk, i0, 0, mi, j0, nj);
      continue;
    }
    /* the block crosses the right edge of the mask (the causal diagonal): rows
     * in groups of TRIM_M, each over only the keys its last row can see */
    for (int64_t r0 = 0; r0 < mi; r0 += TRIM_M) {
      const int64_t ms = mi - r0 < TRIM_M ? mi - r0 : TRIM_M;
      int64_t rlo, rhi;
      sdpa_key_range(p, i0 + r0 + ms - 1, sq, sk, &rlo, &rhi);
      const int64_t ns = rhi - j0 < nj ? rhi - j0 : nj;
      attend_block(p, &t, b, hh, hk, sq, sk, i0, r0, ms, j0, ns > 0 ? ns : 0);
    }
  }

  /* normalize: out = O * keep_scale / l, lse = m + log l (+inf, 0 if empty) */
  const float keep_scale = p->dropout_p > 0.0f ? p->drop_scale : 1.0f;
  for (int64_t r = 0; r < mi; ++r) {
    float *o = t.o + r * p->d_v;
    if (t.l[r] > 0.0f && t.m[r] > -INFINITY) {
      const float inv = keep_scale / t.l[r];
      for (int64_t e = 0; e < p->d_v; ++e) o[e] *= inv;
      t.l[r] = t.m[r] + logf(t.l[r]);
    } else {
      for (int64_t e = 0; e < p->d_v; ++e) o[e] = 0.0f;
      t.l[r] = INFINITY;
    }
  }
  if (ctx->splits == 1) {
    write_rows(p, &t, b, hh, sq, sk, i0, mi, t.o, t.l);
  } else {
    const int64_t slot = blk * ctx->splits + split;
    memcpy(ctx->part_out + slot * BLOCK_M * p->d_v, t.o, sizeof(float) * (size_t)(mi * p->d_v));
    memcpy(ctx->part_lse + slot * BLOCK_M, t.l, sizeof(float) * (size_t)mi);
  }
}

/* split-KV combine: item = (b * h + hh) * n_qblocks + qb */
static void combine_task(void *vctx, int64_t blk, int tid) {
  fwd_ctx *ctx = (fwd_ctx *)vctx;
  const sdpa_problem *p = ctx->p;
  fwd_block k;
  fwd_tiles t;
  if (!block_begin(ctx, tid, blk / ctx->n_qblocks, blk % ctx->n_qblocks, &k, &t)) return;
  const float *po = ctx->part_out + blk * ctx->splits * BLOCK_M * p->d_v;
  const float *pl = ctx->part_lse + blk * ctx->splits * BLOCK_M;
  for (int64_t r = 0; r < k.mi; ++r)
    t.l[r] = sdpa_cpu_merge_row(ctx->splits, pl + r, BLOCK_M, po + r * p->d_v, BLOCK_M * p->d_v,
                                p->d_v, t.o + r * p->d_v);
  if (p->probs) load_q(p, k.b, k.hh, k.i0, k.mi, t.q);
  write_rows(p, &t, k.b, k.hh, k.sq, sdpa_seq_len_k(p, k.b), k.i0, k.mi, t.o, t.l);
}

/* ---- entry points ------------------------------------------------------------------ */

int sdpa_cpu_num_splits(const sdpa_problem *p) {
  if (p->num_splits > 0) return p->num_splits;
  const int64_t tasks = p->b * p->h * ((p->s_q + BLOCK_M - 1) / BLOCK_M);
  const int64_t kblocks = (p->s_k + BLOCK_N - 1) / BLOCK_N;
  if (tasks >= p->num_threads || kblocks < 2) return 1;
  /* about two items per thread, at least one key block per split */
  int64_t n = (2 * (int64_t)p->num_threads + tasks - 1) / tasks;
  if (n > kblocks) n = kblocks;
  if (n > 128) n = 128;
  return n < 1 ? 1 : (int)n;
}

sdpa_status sdpa_cpu_fwd(const sdpa_problem *p) {
  if (p->layout == SDPA_LAYOUT_CACHE) SDPA_TRY(sdpa_cpu_kv_append(p));
  if (p->b <= 0 || p->h <= 0 || p->s_q <= 0) return SDPA_OK;

  fwd_ctx ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.p = p;
  ctx.n_qblocks = (p->s_q + BLOCK_M - 1) / BLOCK_M;
  ctx.splits = sdpa_cpu_num_splits(p);
  ctx.scratch_floats = tiles_floats(p);
  atomic_init(&ctx.failed, 0);
  const int64_t blocks = p->b * p->h * ctx.n_qblocks;
  ctx.scratch = (float **)calloc((size_t)p->num_threads, sizeof(float *));
  SDPA_CHECK(ctx.scratch, SDPA_ERR_OUT_OF_MEMORY, "cpu forward: out of host memory");
  if (ctx.splits > 1) {
    const size_t slots = (size_t)(blocks * ctx.splits);
    ctx.part_out = (float *)malloc(sizeof(float) * slots * (size_t)(BLOCK_M * p->d_v));
    ctx.part_lse = (float *)malloc(sizeof(float) * slots * BLOCK_M);
    if (!ctx.part_out || !ctx.part_lse) atomic_store(&ctx.failed, 1);
  }
  if (!atomic_load(&ctx.failed)) {
    sdpa_cpu_parallel_for(p->num_threads, blocks * ctx.splits, fwd_task, &ctx);
    if (ctx.splits > 1 && !atomic_load(&ctx.failed))
      sdpa_cpu_parallel_for(p->num_threads, blocks, combine_task, &ctx);
  }
  for (int k = 0; k < p->num_threads; ++k) free(ctx.scratch[k]);
  free(ctx.scratch);
  free(ctx.part_out);
  free(ctx.part_lse);
  SDPA_CHECK(!atomic_load(&ctx.failed), SDPA_ERR_OUT_OF_MEMORY,
             "cpu forward: out of host memory (%d threads x %zu bytes of tiles, %d splits)",
             p->num_threads, ctx.scratch_floats * sizeof(float), ctx.splits);
  return SDPA_OK;
}
