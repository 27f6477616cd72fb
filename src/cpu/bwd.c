/*
 * bwd.c - sdpa_cpu_bwd: the CPU backward (dense and varlen, seqused_k, every
 * score modifier, dropout, GQA, d != d_v, f32/f16/bf16 storage, fp32 compute).
 *
 * Math (per (batch, query head), rows i, keys j; P from the given lse):
 *   P = exp(S - lse)               (lse = +inf: P = 0, so the row's grads are 0)
 *   D_i = sum_e dO_ie * O_ie
 *   dV += Pdrop^T dO,  Pdrop = P * keep / (1 - p)
 *   dPdrop = dO V^T,   dP = dPdrop * keep / (1 - p)
 *   dS = P * (dP - D)              -> dbias (gradient of the post-softcap score)
 *   dS_raw = dS * (1 - t^2), t = tanh(s_raw / c)   (softcap; else dS_raw = dS)
 *   dQ += scale * dS_raw K,  dK += scale * dS_raw^T Q
 *
 * Structure (FlashAttention-2 style, separate passes so no output element is
 * ever written by two tasks):
 *   pass 1  (batch, kv head, key block): owns dK / dV rows of its key block,
 *           loops over the query heads of the GQA group and the query blocks
 *           that see the key block, accumulating in fp32.
 *   pass 2  (batch, query head, query block): owns dQ rows, loops over the key
 *           blocks its rows see, recomputing P and dS.
 *   pass 3  (only with dbias) (dbias batch, dbias head, [query block,] key
 *           block): owns a dbias tile and sums dS over the broadcast batch /
 *           head / query dims in a fixed order, recomputing dS.
 * D_i is recomputed per loaded query tile (O(m * d_v), small next to the
 * tile products), so memory is O(tile) per thread besides the outputs.
 *
 * Determinism: every output element is produced by exactly one task, with a
 * summation order fixed by the problem alone (never by thread count or
 * scheduling), and every thread's scratch has the same alignment. So results
 * are bitwise identical run to run for any num_threads, and p->deterministic
 * is trivially honored (there is no faster non-deterministic mode).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../common/dtype.h"
#include "../error.h"
#include "gemm.h"
#include "parallel.h"
#include "scores.h"

#define BWD_BM 64 /* query rows per tile */
#define BWD_BN 64 /* keys per tile */

/* per-thread scratch (fp32 unless noted), each region 64-byte aligned */
typedef struct bwd_ws {
  float *qt, *dot, *kt, *vt; /* loaded tiles: [BM][d], [BM][dv], [BN][d], [BN][dv] */
  float *s, *t, *dp;         /* [BM][BN]: scores -> P -> Pdrop; tanh; dP -> dS */
  float *lse, *dd;           /* [BM]: lse and D of the loaded query rows */
  float *acc_a, *acc_b;      /* accumulators: dK [BN][d] / dV [BN][dv]; dQ [BM][d];
                                dbias [BM][BN] */
  uint8_t *drop;             /* [BM][BN] */
} bwd_ws;

typedef struct bwd_ctx {
  const sdpa_problem *p;
  int64_t group;          /* h / h_k */
  int64_t max_q, max_k;   /* longest sequence (full key length, before seqused_k) */
  int64_t nqb, nkb;       /* blocks over max_q / max_k */
  int64_t db_nqi;         /* dbias pass: query items (1 if dbias_nq == 1, else nqb) */
  float *ws_base;
  size_t ws_floats;       /* per thread */
} bwd_ctx;

static size_t round16(size_t n) { return (n + 15u) & ~(size_t)15u; }

static bwd_ws ws_get(const bwd_ctx *c, int tid) {
  const sdpa_problem *p = c->p;
  float *w = c->ws_base + (size_t)tid * c->ws_floats;
  bwd_ws ws;
  const size_t d = (size_t)p->d, dv = (size_t)p->d_v, tile = (size_t)BWD_BM * BWD_BN;
  const size_t big = round16(BWD_BN * (d > dv ? d : dv));
  ws.qt = w; w += round16(BWD_BM * d);
  ws.dot = w; w += round16(BWD_BM * dv);
  ws.kt = w; w += round16(BWD_BN * d);
  ws.vt = w; w += round16(BWD_BN * dv);
  ws.s = w; w += tile;
  ws.t = w; w += tile;
  ws.dp = w; w += tile;
  ws.lse = w; w += BWD_BM;
  ws.dd = w; w += BWD_BM;
  ws.acc_a = w; w += big > tile ? big : tile;
  ws.acc_b = w; w += big;
  ws.drop = (uint8_t *)w; /* tile bytes = tile / 4 floats */
  return ws;
}

static size_t ws_size(const sdpa_problem *p) {
  const size_t d = (size_t)p->d, dv = (size_t)p->d_v, tile = (size_t)BWD_BM * BWD_BN;
  const size_t big = round16(BWD_BN * (d > dv ? d : dv));
  return round16(BWD_BM * d) + round16(BWD_BM * dv) + round16(BWD_BN * d) +
         round16(BWD_BN * dv) + 3 * tile + 2 * BWD_BM + (big > tile ? big : tile) + big +
         round16(tile / 4);
}

/* rows [0, rows) x cols of a dtype tensor (row r at off + r * rs) -> fp32 [rows][ld] */
static void load_rows(const void *base, sdpa_dtype t, int64_t off, int64_t rs, int64_t rows,
                      int64_t cols, float *dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = off + r * rs;
    float *out = dst + r * ld;
    if (t == SDPA_DTYPE_F32) {
      memcpy(out, (const float *)base + o, (size_t)cols * sizeof(float));
    } else if (t == SDPA_DTYPE_F16) {
      const uint16_t *in = (const uint16_t *)base + o;
      for (int64_t e = 0; e < cols; ++e) out[e] = sdpa_f16_to_f32(in[e]);
    } else {
      const uint16_t *in = (const uint16_t *)base + o;
      for (int64_t e = 0; e < cols; ++e) out[e] = sdpa_bf16_to_f32(in[e]);
    }
  }
}

/* fp32 [rows][ld] (NULL = zeros) -> rows of a dtype tensor */
static void store_rows(void *base, sdpa_dtype t, int64_t off, int64_t rs, int64_t rows,
                       int64_t cols, const float *src, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = off + r * rs;
    const float *in = src ? src + r * ld : NULL;
    if (t == SDPA_DTYPE_F32) {
      if (in)
        memcpy((float *)base + o, in, (size_t)cols * sizeof(float));
      else
        memset((float *)base + o, 0, (size_t)cols * sizeof(float));
    } else {
      uint16_t *out = (uint16_t *)base + o;
      for (int64_t e = 0; e < cols; ++e) {
        const float x = in ? in[e] : 0.0f;
        out[e] = t == SDPA_DTYPE_F16 ? sdpa_f32_to_f16(x) : sdpa_f32_to_bf16(x);
      }
    }
  }
}

/* Query rows [ia, ib) of a sequence (lengths sq, sk) with a visible key in
 * [j0, j1); ia == ib if none. Rows inside that see none of them are harmless
 * (their P is 0). */
static void rows_seeing(const sdpa_problem *p, int64_t sq, int64_t sk, int64_t j0, int64_t j1,
                        int64_t *ia, int64_t *ib) {
  int64_t a = -1, z = -1;
  for (int64_t i = 0; i < sq; ++i) {
    int64_t lo, hi;
    sdpa_key_range(p, i, sq, sk, &lo, &hi);
    if (hi > sk) hi = sk;
    if (lo < hi && lo < j1 && hi > j0) {
      if (a < 0) a = i;
      z = i;
    }
  }
  *ia = a < 0 ? 0 : a;
  *ib = a < 0 ? 0 : z + 1;
}

/* Keys [ja, jb) seen by some row of [i0, i0 + m); ja == jb if none. */
static void keys_seen(const sdpa_problem *p, int64_t sq, int64_t sk, int64_t i0, int64_t m,
                      int64_t *ja, int64_t *jb) {
  int64_t a = INT64_MAX, z = 0;
  for (int64_t i = i0; i < i0 + m; ++i) {
    int64_t lo, hi;
    sdpa_key_range(p, i, sq, sk, &lo, &hi);
    if (hi > sk) hi = sk;
    if (lo < hi) {
      if (lo < a) a = lo;
      if (hi > z) z = hi;
    }
  }
  *ja = a == INT64_MAX ? 0 : a;
  *jb = a == INT64_MAX ? 0 : z;
}

/* Loads q (if want_q), dO, lse and D = rowsum(dO * O) - dlse of rows [i0, i0 + m)
 * of (sequence b, query head hh) into ws. */
static void load_query_side(const sdpa_problem *p, const bwd_ws *ws, int64_t b, int64_t hh,
                            int64_t i0, int64_t m, int want_q) {
  if (want_q)
    load_rows(p->q, p->dtype, sdpa_q_offset(p, p->q_st, b, i0, hh), p->q_st.ss, m, p->d, ws->qt,
              p->d);
  load_rows(p->dout, p->dtype, sdpa_q_offset(p, p->do_st, b, i0, hh), p->do_st.ss, m, p->d_v,
            ws->dot, p->d_v);
  const int64_t o_off = sdpa_q_offset(p, p->o_st, b, i0, hh);
  for (int64_t r = 0; r < m; ++r) {
    const float *dor = ws->dot + r * p->d_v;
    const int64_t orow = o_off + r * p->o_st.ss;
    double acc = 0.0;
    if (p->dtype == SDPA_DTYPE_F32) {
      const float *o = (const float *)p->out + orow;
      for (int64_t e = 0; e < p->d_v; ++e) acc += (double)dor[e] * (double)o[e];
    } else {
      for (int64_t e = 0; e < p->d_v; ++e)
        acc += (double)dor[e] * (double)sdpa_load(p->out, p->dtype, orow + e);
    }
    ws->dd[r] = (float)(acc - (double)sdpa_dlse_row(p, sdpa_seq_q_start(p, b) + i0 + r, hh));
    ws->lse[r] = p->lse[sdpa_lse_offset(p, b, i0 + r, hh)];
  }
}

/*
 * One (query tile, key tile) of (sequence b, query head hh) with ws->qt, dot,
 * lse, dd (rows i0..i0+m) and kt, vt (keys j0..j0+n) loaded:
 *   ws->s  <- Pdrop = P * keep / (1 - p)     [m][BN]
 *   ws->dp <- dS_raw (want_raw) or dS         [m][BN]
 */
static void tile_grad(const sdpa_problem *p, const bwd_ws *ws, int64_t b, int64_t hh, int64_t sq,
                      int64_t sk, int64_t i0, int64_t m, int64_t j0, int64_t n, int want_raw) {
  const int im = (int)m, in = (int)n, id = (int)p->d, idv = (int)p->d_v;
  float *s = ws->s, *dp = ws->dp, *t = ws->t;
  const int softcap = p->softcap > 0.0f;
  sdpa_cpu_gemm(0, 1, im, in, id, p->scale, ws->qt, id, ws->kt, id, 0.0f, s, BWD_BN);
  if (sdpa_cpu_tile_needs_scores(p, sq, sk, i0, m, j0, n))
    sdpa_cpu_score_tile(p, b, hh, sq, sk, i0, m, j0, n, s, BWD_BN, softcap ? t : NULL);
  else if (softcap) /* cannot happen (softcap forces the score pipeline); keep t defined */
    memset(t, 0, sizeof(float) * BWD_BM * BWD_BN);
  for (int64_t r = 0; r < m; ++r) {
    float *row = s + r * BWD_BN;
    const float l = ws->lse[r];
    if (isfinite(l))
      sdpa_cpu_exp_sum(row, l, row, n);
    else /* +inf: no visible key, P = 0 */
      for (int64_t c = 0; c < n; ++c) row[c] = 0.0f;
  }
  sdpa_cpu_gemm(0, 1, im, in, idv, 1.0f, ws->dot, idv, ws->vt, idv, 0.0f, dp, BWD_BN);
  const int dropout = p->dropout_p > 0.0f;
  if (dropout) sdpa_cpu_dropout_tile(p, b, hh, i0, m, j0, n, ws->drop, BWD_BN);
  const float dscale = p->drop_scale;
  for (int64_t r = 0; r < m; ++r) {
    float *srow = s + r * BWD_BN, *dprow = dp + r * BWD_BN;
    const float *trow = t + r * BWD_BN;
    const uint8_t *drow = ws->drop + r * BWD_BN;
    const float di = ws->dd[r];
    for (int64_t c = 0; c < n; ++c) {
      const float pv = srow[c];
      const float kp = dropout ? (drow[c] ? 0.0f : dscale) : 1.0f;
      float ds = pv * (dprow[c] * kp - di);
      if (want_raw && softcap) ds *= 1.0f - trow[c] * trow[c];
      dprow[c] = ds;
      srow[c] = pv * kp;
    }
  }
}

/* Keys j0..j0+n of kv head hk of sequence b into ws->kt, ws->vt (fp32). */
static void load_key_side(const sdpa_problem *p, const bwd_ws *ws, int64_t b, int64_t hk,
                          int64_t j0, int64_t n) {
  load_rows(p->k, p->dtype, sdpa_kv_offset_seq(p, p->k_st, b, j0, hk), p->k_st.ss, n, p->d,
            ws->kt, p->d);
  load_rows(p->v, p->dtype, sdpa_kv_offset_seq(p, p->v_st, b, j0, hk), p->v_st.ss, n, p->d_v,
            ws->vt, p->d_v);
}

/* A pass's work item: item = (b * heads + head) * blocks + block. */
static void item_split(int64_t item, int64_t blocks, int64_t heads, int64_t *block, int64_t *head,
                       int64_t *b) {
  *block = item % blocks;
  *head = (item / blocks) % heads;
  *b = item / (blocks * heads);
}

/* ---- pass 1: dK, dV --------------------------------------------------------- */
static void pass_dkdv(void *vctx, int64_t item, int tid) {
  const bwd_ctx *c = (const bwd_ctx *)vctx;
  const sdpa_problem *p = c->p;
  int64_t kb, hk, b;
  item_split(item, c->nkb, p->h_k, &kb, &hk, &b);
  const int64_t j0 = kb * BWD_BN;
  const int64_t jn = sdpa_bwd_tile_rows(p, b, j0, BWD_BN);
  if (jn <= 0) return;
  const int64_t sk = sdpa_seq_len_k(p, b), sq = sdpa_seq_len_q(p, b);
  int64_t n = sk - j0;
  if (n < 0) n = 0;
  if (n > jn) n = jn;
  bwd_ws ws = ws_get(c, tid);
  float *dk = ws.acc_a, *dv = ws.acc_b;
  memset(dk, 0, sizeof(float) * (size_t)(jn * p->d));
  memset(dv, 0, sizeof(float) * (size_t)(jn * p->d_v));
  int64_t ia = 0, ib = 0;
  if (n > 0) rows_seeing(p, sq, sk, j0, j0 + n, &ia, &ib);
  if (ib > ia) {
    load_key_side(p, &ws, b, hk, j0, n);
    for (int64_t g = 0; g < c->group; ++g) {
      const int64_t hh = hk * c->group + g;
      for (int64_t i0 = ia; i0 < ib; i0 += BWD_BM) {
        const int64_t m = ib - i0 < BWD_BM ? ib - i0 : BWD_BM;
        load_query_side(p, &ws, b, hh, i0, m, 1);
        tile_grad(p, &ws, b, hh, sq, sk, i0, m, j0, n, 1);
        sdpa_cpu_gemm(1, 0, (int)n, (int)p->d_v, (int)m, 1.0f, ws.s, BWD_BN, ws.dot, (int)p->d_v,
                      1.0f, dv, (int)p->d_v);
        sdpa_cpu_gemm(1, 0, (int)n, (int)p->d, (int)m, p->scale, ws.dp, BWD_BN, ws.qt, (int)p->d,
                      1.0f, dk, (int)p->d);
      }
    }
  }
  store_rows(p->dk, p->dtype, sdpa_kv_offset_seq(p, p->dk_st, b, j0, hk), p->dk_st.ss, jn, p->d,
             dk, p->d);
  store_rows(p->dv, p->dtype, sdpa_kv_offset_seq(p, p->dv_st, b, j0, hk), p->dv_st.ss, jn,
             p->d_v, dv, p->d_v);
}

/* ---- pass 2: dQ ----------------------------------------------------------------- */
static void pass_dq(void *vctx, int64_t item, int tid) {
  const bwd_ctx *c = (const bwd_ctx *)vctx;
  const sdpa_problem *p = c->p;
  int64_t qb, hh, b;
  item_split(item, c->nqb, p->h, &qb, &hh, &b);
  const int64_t sq = sdpa_seq_len_q(p, b);
  const int64_t i0 = qb * BWD_BM;
  if (i0 >= sq) return;
  const int64_t m = sq - i0 < BWD_BM ? sq - i0 : BWD_BM;
  const int64_t sk = sdpa_seq_len_k(p, b);
  const int64_t hk = hh / c->group;
  bwd_ws ws = ws_get(c, tid);
  float *dq = ws.acc_a;
  memset(dq, 0, sizeof(float) * (size_t)(m * p->d));
  int64_t ja, jb;
  keys_seen(p, sq, sk, i0, m, &ja, &jb);
  if (jb > ja) {
    load_query_side(p, &ws, b, hh, i0, m, 1);
    for (int64_t j0 = ja; j0 < jb; j0 += BWD_BN) {
      const int64_t n = jb - j0 < BWD_BN ? jb - j0 : BWD_BN;
      load_key_side(p, &ws, b, hk, j0, n);
      tile_grad(p, &ws, b, hh, sq, sk, i0, m, j0, n, 1);
      sdpa_cpu_gemm(0, 0, (int)m, (int)p->d, (int)n, p->scale, ws.dp, BWD_BN, ws.kt, (int)p->d,
                    1.0f, dq, (int)p->d);
    }
  }
  store_rows(p->dq, p->dtype, sdpa_q_offset(p, p->dq_st, b, i0, hh), p->dq_st.ss, m, p->d, dq,
             p->d);
}

/* ---- pass 3: dbias (dense layout only) ------------------------------------------- */
static void pass_dbias(void *vctx, int64_t item, int tid) {
  const bwd_ctx *c = (const bwd_ctx *)vctx;
  const sdpa_problem *p = c->p;
  const int64_t kb = item % c->nkb;
  int64_t rest = item / c->nkb;
  const int64_t qi = rest % c->db_nqi;
  rest /= c->db_nqi;
  const int64_t hb = rest % p->dbias_nh;
  const int64_t bb = rest / p->dbias_nh;
  const int64_t j0 = kb * BWD_BN;
  if (j0 >= p->s_k) return;
  const int64_t jn = p->s_k - j0 < BWD_BN ? p->s_k - j0 : BWD_BN;
  const int sum_q = p->dbias_nq == 1 && p->s_q != 1;
  int64_t qa = 0, qz = p->s_q; /* source query rows; output rows [qa, qz) or row 0 */
  if (!sum_q) {
    qa = qi * BWD_BM;
    if (qa >= p->s_q) return;
    qz = p->s_q - qa < BWD_BM ? p->s_q : qa + BWD_BM;
  }
  const int64_t mo = sum_q ? 1 : qz - qa;
  bwd_ws ws = ws_get(c, tid);
  float *acc = ws.acc_a;
  memset(acc, 0, sizeof(float) * BWD_BM * BWD_BN);
  const int64_t b_lo = p->dbias_nb == 1 ? 0 : bb, b_hi = p->dbias_nb == 1 ? p->b : bb + 1;
  const int64_t h_lo = p->dbias_nh == 1 ? 0 : hb, h_hi = p->dbias_nh == 1 ? p->h : hb + 1;
  for (int64_t b = b_lo; b < b_hi; ++b) {
    const int64_t sq = sdpa_seq_len_q(p, b), sk = sdpa_seq_len_k(p, b);
    int64_t n = sk - j0;
    if (n < 0) n = 0;
    if (n > jn) n = jn;
    if (n == 0) continue;
    int64_t ia, ib;
    rows_seeing(p, sq, sk, j0, j0 + n, &ia, &ib);
    if (ia < qa) ia = qa;
    if (ib > qz) ib = qz;
    if (ib <= ia) continue;
    int64_t loaded_hk = -1;
    for (int64_t hh = h_lo; hh < h_hi; ++hh) {
      const int64_t hk = hh / c->group;
      if (hk != loaded_hk) {
        load_key_side(p, &ws, b, hk, j0, n);
        loaded_hk = hk;
      }
      for (int64_t i0 = ia; i0 < ib; i0 += BWD_BM) {
        const int64_t m = ib - i0 < BWD_BM ? ib - i0 : BWD_BM;
        load_query_side(p, &ws, b, hh, i0, m, 1);
        tile_grad(p, &ws, b, hh, sq, sk, i0, m, j0, n, 0);
        for (int64_t r = 0; r < m; ++r) {
          float *arow = sum_q ? acc : acc + (i0 + r - qa) * BWD_BN;
          const float *ds = ws.dp + r * BWD_BN;
          for (int64_t cc = 0; cc < n; ++cc) arow[cc] += ds[cc];
        }
      }
    }
  }
  const int64_t off = bb * p->dbias_sb + hb * p->dbias_sh + (sum_q ? 0 : qa) * p->dbias_sq;
  for (int64_t r = 0; r < mo; ++r)
    for (int64_t cc = 0; cc < jn; ++cc)
      sdpa_store(p->dbias, p->dtype, off + r * p->dbias_sq + (j0 + cc) * p->dbias_sk,
                 acc[r * BWD_BN + cc]);
}

sdpa_status sdpa_cpu_bwd(const sdpa_problem *p) {
  bwd_ctx c;
  memset(&c, 0, sizeof c);
  c.p = p;
  c.group = p->h / p->h_k;
  if (p->layout == SDPA_LAYOUT_VARLEN) {
    for (int64_t b = 0; b < p->b; ++b) {
      const int64_t lq = sdpa_seq_len_q(p, b), lk = sdpa_seq_full_len_k(p, b);
      if (lq > c.max_q) c.max_q = lq;
      if (lk > c.max_k) c.max_k = lk;
    }
  } else {
    c.max_q = p->s_q;
    c.max_k = p->s_k;
  }
  c.nqb = (c.max_q + BWD_BM - 1) / BWD_BM;
  c.nkb = (c.max_k + BWD_BN - 1) / BWD_BN;
  const int sum_q = p->dbias && p->dbias_nq == 1 && p->s_q != 1;
  c.db_nqi = sum_q ? 1 : c.nqb;
  const int64_t n1 = p->b * p->h_k * c.nkb, n2 = p->b * p->h * c.nqb;
  const int64_t n3 = p->dbias ? p->dbias_nb * p->dbias_nh * c.db_nqi * c.nkb : 0;
  int64_t most = n1 > n2 ? n1 : n2;
  if (n3 > most) most = n3;
  if (most == 0) return SDPA_OK;
  int nthreads = p->num_threads > 0 ? p->num_threads : 1;
  if (nthreads > most) nthreads = (int)most;
  c.ws_floats = ws_size(p);
  const size_t bytes = c.ws_floats * sizeof(float) * (size_t)nthreads;
  c.ws_base = (float *)aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!c.ws_base)
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY,
                     "sdpa_bwd: could not allocate %zu bytes of CPU backward scratch", bytes);
  sdpa_status st = SDPA_OK;
  if (n1 > 0) st = sdpa_cpu_parallel_for(nthreads, n1, pass_dkdv, &c);
  if (st == SDPA_OK && n2 > 0) st = sdpa_cpu_parallel_for(nthreads, n2, pass_dq, &c);
  if (st == SDPA_OK && n3 > 0) st = sdpa_cpu_parallel_for(nthreads, n3, pass_dbias, &c);
  free(c.ws_base);
  return st;
}
