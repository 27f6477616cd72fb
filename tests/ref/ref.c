/*
 * ref.c - the double-precision oracle declared in ref.h: forward (dense,
 * varlen, KV cache contiguous or paged, with in-call append, rotary and
 * cache_batch_idx) and backward (dense, varlen), with every score modifier of
 * the contract (scale, softcap, bias, alibi, causal / window in both
 * alignments, GQA, dropout, seqused_k) and d != d_v.
 *
 * probs is written for dense and cache problems ([b, h, s_q, s_k] with the
 * problem's s_q / s_k; keys past a sequence's length stay 0), not for varlen.
 * ref_bwd's dout is a dense double array laid out like out, or NULL to read the
 * problem's dout tensor.
 *
 * Written for clarity, not speed, and from the contract in include/sdpa.h and
 * docs/design.md §2 alone: it reads nothing of src/ but the fields of
 * sdpa_problem (no shared geometry, mask or Philox helpers), so a mistake in
 * those helpers cannot hide in both places. Per (sequence, kv head) the keys and
 * values are first gathered into dense double arrays ("where does key j live"
 * is answered in one place, gather_kv); everything after that is layout-free.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage dtypes (own decoding and rounding, not src/common/dtype.h) ---- */

static double half_bits_to_double(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double mag;
  if (exp == 0)
    mag = ldexp((double)man, -24); /* subnormal */
  else if (exp == 31)
    mag = man ? NAN : INFINITY;
  else
    mag = ldexp((double)(1024 + man), exp - 25);
  return sign ? -mag : mag;
}

static double bf16_bits_to_double(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of an f32 */
  float f;
  memcpy(&f, &u, 4);
  return (double)f;
}

static double load_elem(const void *base, sdpa_dtype t, int64_t idx) {
  switch (t) {
  case SDPA_DTYPE_F16: return half_bits_to_double(((const uint16_t *)base)[idx]);
  case SDPA_DTYPE_BF16: return bf16_bits_to_double(((const uint16_t *)base)[idx]);
  case SDPA_DTYPE_I32: return (double)((const int32_t *)base)[idx];
  default: return (double)((const float *)base)[idx];
  }
}

/* Round-to-nearest-even of x to a binary format with `mbits` stored mantissa
 * bits, smallest normal exponent emin and largest finite value maxv. */
static double round_format(double x, int mbits, int emin, double maxv) {
  if (x == 0.0 || !isfinite(x)) return x;
  int e = ilogb(x);
  if (e < emin) e = emin; /* subnormals share the spacing of the smallest binade */
  double r = ldexp(nearbyint(ldexp(x, mbits - e)), e - mbits);
  if (fabs(r) > maxv) return x > 0 ? INFINITY : -INFINITY;
  return r;
}

/* x rounded to the storage dtype (identity for f32 storage, as the brief of
 * lowp says: f32 math is what the exact oracle models). */
static double round_to(sdpa_dtype t, double x) {
  switch (t) {
  case SDPA_DTYPE_F16: return round_format(x, 10, -14, 65504.0);
  case SDPA_DTYPE_BF16: return round_format(x, 7, -126, 0x1.fep127);
  default: return x;
  }
}

/* ---- Philox4x32-10 and the dropout mask ------------------------------------ */

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u; /* multipliers */
  const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u; /* key schedule (Weyl) */
  uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 1; round <= 10; ++round) {
    if (round > 1) {
      k0 += W0;
      k1 += W1;
    }
    uint64_t p0 = (uint64_t)M0 * x0; /* hi/lo of the two products */
    uint64_t p1 = (uint64_t)M1 * x2;
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
    uint32_t y3 = (uint32_t)p0;
    x0 = y0;
    x1 = y1;
    x2 = y2;
    x3 = y3;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
}

int ref_dropped(const sdpa_problem *p, int64_t batch, int64_t head, int64_t i, int64_t j) {
  if (!(p->dropout_p > 0.0f)) return 0;
  /* dropped iff the 8-bit uniform < round(p * 256) */
  uint32_t threshold = (uint32_t)llround((double)p->dropout_p * 256.0);
  uint32_t key[2] = {(uint32_t)(p->seed & 0xffffffffu), (uint32_t)(p->seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)(j / 16), (uint32_t)i, (uint32_t)(batch * p->h + head), p->offset};
  uint32_t x[4];
  ref_philox4x32_10(ctr, key, x);
  int field = (int)(j % 16);
  uint32_t u8 = (x[field / 4] >> (8 * (field % 4))) & 0xffu;
  return u8 < threshold;
}

/* ---- per-sequence geometry ---------------------------------------------------- */

/* Query rows of sequence b. */
static int64_t seq_q_len(const sdpa_problem *p, int64_t b) {
  if (p->layout == SDPA_LAYOUT_VARLEN) return (int64_t)p->cu_q[b + 1] - p->cu_q[b];
  return p->s_q;
}

/* The first cache row sequence b attends to (cache_leftpad). */
static int64_t cache_first(const sdpa_problem *p, int64_t b) {
  return p->cache_leftpad ? (int64_t)p->cache_leftpad[b] : 0;
}

/* Keys sequence b attends to: the cache holds cache_seqlens[b] and gets s_new
 * appended, from its first row on; seqused_k, when given, caps the count. */
static int64_t seq_k_len(const sdpa_problem *p, int64_t b) {
  int64_t n;
  if (p->layout == SDPA_LAYOUT_VARLEN)
    n = (int64_t)p->cu_k[b + 1] - p->cu_k[b];
  else if (p->layout == SDPA_LAYOUT_CACHE)
    n = (int64_t)p->cache_seqlens[b] + p->s_new - cache_first(p, b);
  else
    n = p->s_k;
  if (p->seqused_k && p->seqused_k[b] < n) n = p->seqused_k[b];
  return n;
}

/* Global row (of q, out, dout, dq, and of varlen lse) of query 0 of sequence b. */
static int64_t seq_q_row0(const sdpa_problem *p, int64_t b) {
  return p->layout == SDPA_LAYOUT_VARLEN ? (int64_t)p->cu_q[b] : b * p->s_q;
}

/* Global row of key 0 of sequence b in dk / dv (dense and varlen only). */
static int64_t seq_k_row0(const sdpa_problem *p, int64_t b) {
  return p->layout == SDPA_LAYOUT_VARLEN ? (int64_t)p->cu_k[b] : b * p->s_k;
}

/* Element offset of query-like row i, head hh of sequence b in a tensor with
 * strides st (q, dout: varlen rows are global, st.sb unused). */
static int64_t q_like_offset(const sdpa_problem *p, sdpa_bshd st, int64_t b, int64_t i,
                             int64_t hh) {
  if (p->layout == SDPA_LAYOUT_VARLEN) return ((int64_t)p->cu_q[b] + i) * st.ss + hh * st.sh;
  return b * st.sb + i * st.ss + hh * st.sh;
}

/* Total rows of the query-like outputs (out, dq). */
static int64_t rows_q(const sdpa_problem *p) {
  return p->layout == SDPA_LAYOUT_VARLEN ? p->total_q : p->b * p->s_q;
}

static int64_t rows_k(const sdpa_problem *p) {
  return p->layout == SDPA_LAYOUT_VARLEN ? p->total_k : p->b * p->s_k;
}

static int64_t lse_index(const sdpa_problem *p, int64_t b, int64_t hh, int64_t i) {
  if (p->layout == SDPA_LAYOUT_VARLEN) return hh * p->total_q + (int64_t)p->cu_q[b] + i;
  return (b * p->h + hh) * p->s_q + i;
}

/* ---- rotary embedding ---------------------------------------------------------- */

/* Rotates the first rotary_dim entries of x as at position pos: pairs (2t, 2t+1)
 * when interleaved (GPT-J), (t, t + rd/2) otherwise (GPT-NeoX), each by the
 * angle whose cos/sin are row pos, column t of the tables. */
static void apply_rotary(const sdpa_problem *p, double *x, int64_t pos) {
  int64_t half = p->rotary_dim / 2;
  for (int64_t t = 0; t < half; ++t) {
    double c = p->rot_cos[pos * p->rot_stride + t];
    double s = p->rot_sin[pos * p->rot_stride + t];
    int64_t a = p->rotary_interleaved ? 2 * t : t;
    int64_t bb = p->rotary_interleaved ? 2 * t + 1 : t + half;
    double x0 = x[a], x1 = x[bb];
    x[a] = x0 * c - x1 * s;
    x[bb] = x0 * s + x1 * c;
  }
}

/* ---- gathering one sequence's rows into dense arrays ---------------------------- */

/* Q [sq, d] of query head hh, sequence b. Cache problems rotate q at positions
 * cache_seqlens[b] + i when causal or windowed, else all at cache_seqlens[b];
 * lowp rounds the rotated values (they are stored). */
static void gather_q(const sdpa_problem *p, int lowp, int64_t b, int64_t hh, int64_t sq,
                     double *Q) {
  for (int64_t i = 0; i < sq; ++i) {
    double *row = Q + i * p->d;
    int64_t off = q_like_offset(p, p->q_st, b, i, hh);
    for (int64_t e = 0; e < p->d; ++e) row[e] = load_elem(p->q, p->dtype, off + e);
    if (p->layout == SDPA_LAYOUT_CACHE && p->rotary_dim > 0) {
      int masked = p->window_left >= 0 || p->window_right >= 0;
      apply_rotary(p, row, (int64_t)p->cache_seqlens[b] + (masked ? i : 0));
      if (lowp)
        for (int64_t e = 0; e < p->rotary_dim; ++e) row[e] = round_to(p->dtype, row[e]);
    }
  }
}

/* Offset of cache row j (head hk) of sequence b, before the append. */
static int64_t cache_offset(const sdpa_problem *p, sdpa_bshd st, int64_t b, int64_t j,
                            int64_t hk) {
  if (p->page_size > 0) {
    int64_t block = p->block_table[b * p->bt_stride + j / p->page_size];
    return block * st.sb + (j % p->page_size) * st.ss + hk * st.sh;
  }
  int64_t row = p->cache_batch_idx ? (int64_t)p->cache_batch_idx[b] : b;
  return row * st.sb + j * st.ss + hk * st.sh;
}

/* K [sk, d] and V [sk, d_v] of kv head hk, sequence b. */
static void gather_kv(const sdpa_problem *p, int lowp, int64_t b, int64_t hk, int64_t sk,
                      double *K, double *V) {
  for (int64_t jj = 0; jj < sk; ++jj) {
    double *krow = K + jj * p->d, *vrow = V + jj * p->d_v;
    const void *kbase = p->k, *vbase = p->v;
    const int64_t j = jj + (p->layout == SDPA_LAYOUT_CACHE ? cache_first(p, b) : 0);
    int64_t koff, voff, rotate = 0;
    if (p->layout == SDPA_LAYOUT_DENSE) {
      koff = b * p->k_st.sb + j * p->k_st.ss + hk * p->k_st.sh;
      voff = b * p->v_st.sb + j * p->v_st.ss + hk * p->v_st.sh;
    } else if (p->layout == SDPA_LAYOUT_VARLEN && p->page_size > 0) { /* paged varlen */
      koff = cache_offset(p, p->k_st, b, j, hk);
      voff = cache_offset(p, p->v_st, b, j, hk);
    } else if (p->layout == SDPA_LAYOUT_VARLEN) {
      koff = ((int64_t)p->cu_k[b] + j) * p->k_st.ss + hk * p->k_st.sh;
      voff = ((int64_t)p->cu_k[b] + j) * p->v_st.ss + hk * p->v_st.sh;
    } else if (j < (int64_t)p->cache_seqlens[b]) {
      koff = cache_offset(p, p->k_st, b, j, hk);
      voff = cache_offset(p, p->v_st, b, j, hk);
    } else { /* appended row t of k_new / v_new, at cache position j */
      int64_t t = j - (int64_t)p->cache_seqlens[b];
      kbase = p->k_new;
      vbase = p->v_new;
      koff = b * p->kn_st.sb + t * p->kn_st.ss + hk * p->kn_st.sh;
      voff = b * p->vn_st.sb + t * p->vn_st.ss + hk * p->vn_st.sh;
      rotate = p->rotary_dim > 0;
    }
    for (int64_t e = 0; e < p->d; ++e) krow[e] = load_elem(kbase, p->dtype, koff + e);
    for (int64_t e = 0; e < p->d_v; ++e) vrow[e] = load_elem(vbase, p->dtype, voff + e);
    if (rotate) {
      apply_rotary(p, krow, j);
      if (lowp)
        for (int64_t e = 0; e < p->rotary_dim; ++e) krow[e] = round_to(p->dtype, krow[e]);
    }
  }
}

/* ---- one query row: scores, probabilities, dropout ------------------------------ */

/* Everything about row i of (sequence b, head hh) that both passes need. */
typedef struct ref_row {
  double *s;     /* [sk] final score, -inf where masked */
  double *dcap;  /* [sk] d(softcapped)/d(raw) = 1 - tanh^2, 1 without softcap */
  double *P;     /* [sk] softmax probability (0 where masked) */
  double *Pd;    /* [sk] after dropout: P / (1-p) kept, 0 dropped (rounded if lowp) */
  int *dropped;  /* [sk] */
  double lse;    /* +inf for a row with no visible key */
} ref_row;

static int mask_keeps(const sdpa_problem *p, int64_t i, int64_t j, int64_t sq, int64_t sk) {
  int64_t off = p->bottom_right ? sk - sq : 0;
  if (p->window_left >= 0 && j < i + off - p->window_left) return 0;
  if (p->window_right >= 0 && j > i + off + p->window_right) return 0;
  return 1;
}

static void compute_row(const sdpa_problem *p, int lowp, int64_t b, int64_t hh, int64_t i,
                        int64_t sq, int64_t sk, const double *qi, const double *K, ref_row *r) {
  double m = -INFINITY;
  for (int64_t j = 0; j < sk; ++j) {
    r->dcap[j] = 1.0;
    if (!mask_keeps(p, i, j, sq, sk)) {
      r->s[j] = -INFINITY;
      continue;
    }
    double dot = 0.0;
    for (int64_t e = 0; e < p->d; ++e) dot += qi[e] * K[j * p->d + e];
    double s = (double)p->scale * dot;
    if (p->softcap > 0.0f) {
      double c = p->softcap, th = tanh(s / c);
      s = c * th;
      r->dcap[j] = 1.0 - th * th;
    }
    if (p->bias)
      s += load_elem(p->bias, p->dtype,
                     b * p->bias_sb + hh * p->bias_sh + i * p->bias_sq + j * p->bias_sk);
    if (p->alibi) {
      double slope = p->alibi[b * p->alibi_sb + hh * p->alibi_sh];
      s -= slope * fabs((double)(i + sk - sq - j));
    }
    r->s[j] = s;
    if (s > m) m = s;
  }
  if (m == -INFINITY) { /* no visible key (masked, or every bias -inf) */
    r->lse = INFINITY;
    for (int64_t j = 0; j < sk; ++j) {
      r->P[j] = 0.0;
      r->Pd[j] = 0.0;
      r->dropped[j] = ref_dropped(p, b, hh, i, j);
    }
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < sk; ++j) sum += exp(r->s[j] - m);
  r->lse = m + log(sum);
  double keep_scale = p->dropout_p > 0.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;
  for (int64_t j = 0; j < sk; ++j) {
    double P = exp(r->s[j] - r->lse);
    r->P[j] = P;
    r->dropped[j] = ref_dropped(p, b, hh, i, j);
    if (lowp) P = round_to(p->dtype, P);
    r->Pd[j] = r->dropped[j] ? 0.0 : P * keep_scale;
    if (lowp) r->Pd[j] = round_to(p->dtype, r->Pd[j]);
  }
}

/* ---- scratch ---------------------------------------------------------------------- */

typedef struct ref_scratch {
  double *Q, *K, *V, *dK, *dV, *o, *dO, *dq, *s, *dcap, *P, *Pd;
  int *dropped;
} ref_scratch;

static void scratch_free(ref_scratch *w) {
  free(w->Q);
  free(w->K);
  free(w->V);
  free(w->dK);
  free(w->dV);
  free(w->o);
  free(w->dO);
  free(w->dq);
  free(w->s);
  free(w->dcap);
  free(w->P);
  free(w->Pd);
  free(w->dropped);
}

/* Sized for the longest sequence of the problem. */
static int scratch_alloc(const sdpa_problem *p, ref_scratch *w) {
  memset(w, 0, sizeof *w);
  int64_t sq = 1, sk = 1;
  for (int64_t b = 0; b < p->b; ++b) {
    if (seq_q_len(p, b) > sq) sq = seq_q_len(p, b);
    if (seq_k_len(p, b) > sk) sk = seq_k_len(p, b);
  }
  size_t d = (size_t)p->d + 1, dv = (size_t)p->d_v + 1;
  w->Q = malloc(sizeof(double) * (size_t)sq * d);
  w->K = malloc(sizeof(double) * (size_t)sk * d);
  w->V = malloc(sizeof(double) * (size_t)sk * dv);
  w->dK = malloc(sizeof(double) * (size_t)sk * d);
  w->dV = malloc(sizeof(double) * (size_t)sk * dv);
  w->o = malloc(sizeof(double) * dv);
  w->dO = malloc(sizeof(double) * dv);
  w->dq = malloc(sizeof(double) * d);
  w->s = malloc(sizeof(double) * (size_t)sk);
  w->dcap = malloc(sizeof(double) * (size_t)sk);
  w->P = malloc(sizeof(double) * (size_t)sk);
  w->Pd = malloc(sizeof(double) * (size_t)sk);
  w->dropped = malloc(sizeof(int) * (size_t)sk);
  if (!w->Q || !w->K || !w->V || !w->dK || !w->dV || !w->o || !w->dO || !w->dq || !w->s || !w->dcap ||
      !w->P || !w->Pd || !w->dropped) {
    scratch_free(w);
    return -1;
  }
  return 0;
}

static ref_row row_view(ref_scratch *w) {
  ref_row r = {w->s, w->dcap, w->P, w->Pd, w->dropped, 0.0};
  return r;
}

/* out_i = sum_j Pd_ij V_j, rounded to the storage dtype when lowp. */
static void row_output(const sdpa_problem *p, int lowp, int64_t sk, const ref_row *r,
                       const double *V, double *o) {
  for (int64_t e = 0; e < p->d_v; ++e) o[e] = 0.0;
  for (int64_t j = 0; j < sk; ++j)
    if (r->Pd[j] != 0.0)
      for (int64_t e = 0; e < p->d_v; ++e) o[e] += r->Pd[j] * V[j * p->d_v + e];
  if (lowp)
    for (int64_t e = 0; e < p->d_v; ++e) o[e] = round_to(p->dtype, o[e]);
}

/* ---- forward ------------------------------------------------------------------------ */

int ref_fwd(const sdpa_problem *p, int lowp, double *out, double *lse, double *probs) {
  ref_scratch w;
  if (scratch_alloc(p, &w)) return -1;
  int64_t nrows = rows_q(p), group = p->h / p->h_k;
  if (out)
    for (int64_t e = 0; e < nrows * p->h * p->d_v; ++e) out[e] = 0.0;
  if (lse)
    for (int64_t e = 0; e < nrows * p->h; ++e) lse[e] = INFINITY;
  if (probs)
    for (int64_t e = 0; e < p->b * p->h * p->s_q * p->s_k; ++e) probs[e] = 0.0;

  for (int64_t b = 0; b < p->b; ++b) {
    int64_t sq = seq_q_len(p, b), sk = seq_k_len(p, b);
    for (int64_t hk = 0; hk < p->h_k; ++hk) {
      gather_kv(p, lowp, b, hk, sk, w.K, w.V);
      for (int64_t hh = hk * group; hh < (hk + 1) * group; ++hh) {
        gather_q(p, lowp, b, hh, sq, w.Q);
        for (int64_t i = 0; i < sq; ++i) {
          ref_row r = row_view(&w);
          compute_row(p, lowp, b, hh, i, sq, sk, w.Q + i * p->d, w.K, &r);
          row_output(p, lowp, sk, &r, w.V, w.o);
          int64_t row = seq_q_row0(p, b) + i;
          if (out)
            for (int64_t e = 0; e < p->d_v; ++e) out[(row * p->h + hh) * p->d_v + e] = w.o[e];
          if (lse) lse[lse_index(p, b, hh, i)] = lowp ? (double)(float)r.lse : r.lse;
          if (probs && p->layout != SDPA_LAYOUT_VARLEN)
            for (int64_t j = 0; j < sk && j < p->s_k; ++j) {
              double P = lowp ? round_to(p->dtype, r.P[j]) : r.P[j];
              /* masked (P = 0) stays +0 even where the mask would drop it */
              probs[((b * p->h + hh) * p->s_q + i) * p->s_k + j] = r.dropped[j] && P != 0.0 ? -P : P;
            }
        }
      }
    }
  }
  scratch_free(&w);
  return 0;
}

/* ---- backward ----------------------------------------------------------------------- */

/* dO of row i, head hh, sequence b: from the caller's dense double array laid
 * out like out ([b, s_q, h, d_v], varlen [total_q, h, d_v]), or, when that is
 * NULL, from the problem's dout tensor in the storage dtype. */
static void load_dout(const sdpa_problem *p, const double *dout, int64_t b, int64_t hh,
                      int64_t i, double *dO) {
  if (dout) {
    int64_t row = seq_q_row0(p, b) + i;
    for (int64_t e = 0; e < p->d_v; ++e) dO[e] = dout[(row * p->h + hh) * p->d_v + e];
    return;
  }
  int64_t off = q_like_offset(p, p->do_st, b, i, hh);
  for (int64_t e = 0; e < p->d_v; ++e) dO[e] = load_elem(p->dout, p->dtype, off + e);
}

int ref_bwd(const sdpa_problem *p, int lowp, const double *dout, double *dq, double *dk,
            double *dv, double *dbias) {
  ref_scratch w;
  if (scratch_alloc(p, &w)) return -1;
  int64_t nq = rows_q(p), nk = rows_k(p), group = p->h / p->h_k;
  if (dq)
    for (int64_t e = 0; e < nq * p->h * p->d; ++e) dq[e] = 0.0;
  if (dk)
    for (int64_t e = 0; e < nk * p->h_k * p->d; ++e) dk[e] = 0.0;
  if (dv)
    for (int64_t e = 0; e < nk * p->h_k * p->d_v; ++e) dv[e] = 0.0;
  if (dbias)
    for (int64_t e = 0; e < p->b * p->h * p->s_q * p->s_k; ++e) dbias[e] = 0.0;
  double keep_scale = p->dropout_p > 0.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;

  for (int64_t b = 0; b < p->b; ++b) {
    int64_t sq = seq_q_len(p, b), sk = seq_k_len(p, b);
    for (int64_t hk = 0; hk < p->h_k; ++hk) {
      gather_kv(p, lowp, b, hk, sk, w.K, w.V);
      for (int64_t e = 0; e < sk * p->d; ++e) w.dK[e] = 0.0;
      for (int64_t e = 0; e < sk * p->d_v; ++e) w.dV[e] = 0.0;
      for (int64_t hh = hk * group; hh < (hk + 1) * group; ++hh) {
        gather_q(p, lowp, b, hh, sq, w.Q);
        for (int64_t i = 0; i < sq; ++i) {
          const double *qi = w.Q + i * p->d;
          ref_row r = row_view(&w);
          compute_row(p, lowp, b, hh, i, sq, sk, qi, w.K, &r);
          if (r.lse == INFINITY) continue; /* empty row: no gradient flows */
          row_output(p, lowp, sk, &r, w.V, w.o);
          load_dout(p, dout, b, hh, i, w.dO);
          double D = 0.0; /* D_i = dO_i . O_i, with O from this oracle */
          for (int64_t e = 0; e < p->d_v; ++e) D += w.dO[e] * w.o[e];
          if (p->dlse) { /* lse feeds the loss too: d lse_i / d s_ij = P_ij */
            int64_t at = p->layout == SDPA_LAYOUT_VARLEN
                             ? hh * p->dlse_sh + ((int64_t)p->cu_q[b] + i) * p->dlse_ss
                             : b * p->dlse_sb + hh * p->dlse_sh + i * p->dlse_ss;
            D -= (double)p->dlse[at];
          }
          for (int64_t e = 0; e < p->d; ++e) w.dq[e] = 0.0;
          for (int64_t j = 0; j < sk; ++j) {
            if (r.s[j] == -INFINITY) continue; /* masked: P = 0, no gradient */
            double dPd = 0.0; /* dO_i . V_j: gradient w.r.t. the dropped-out prob */
            for (int64_t e = 0; e < p->d_v; ++e) dPd += w.dO[e] * w.V[j * p->d_v + e];
            double dP = r.dropped[j] ? 0.0 : dPd * keep_scale;
            double dS = r.P[j] * (dP - D); /* softmax backward */
            if (lowp) dS = round_to(p->dtype, dS);
            if (dbias) dbias[((b * p->h + hh) * p->s_q + i) * p->s_k + j] = dS;
            double dSraw = dS * r.dcap[j]; /* through softcap */
            if (lowp) dSraw = round_to(p->dtype, dSraw);
            for (int64_t e = 0; e < p->d; ++e) {
              w.dq[e] += (double)p->scale * dSraw * w.K[j * p->d + e];
              w.dK[j * p->d + e] += (double)p->scale * dSraw * qi[e];
            }
            for (int64_t e = 0; e < p->d_v; ++e)
              w.dV[j * p->d_v + e] += r.Pd[j] * w.dO[e];
          }
          if (dq) {
            int64_t row = seq_q_row0(p, b) + i;
            for (int64_t e = 0; e < p->d; ++e)
              dq[(row * p->h + hh) * p->d + e] = lowp ? round_to(p->dtype, w.dq[e]) : w.dq[e];
          }
        }
      }
      int64_t row0 = seq_k_row0(p, b);
      for (int64_t j = 0; j < sk; ++j) {
        if (dk)
          for (int64_t e = 0; e < p->d; ++e)
            dk[((row0 + j) * p->h_k + hk) * p->d + e] =
                lowp ? round_to(p->dtype, w.dK[j * p->d + e]) : w.dK[j * p->d + e];
        if (dv)
          for (int64_t e = 0; e < p->d_v; ++e)
            dv[((row0 + j) * p->h_k + hk) * p->d_v + e] =
                lowp ? round_to(p->dtype, w.dV[j * p->d_v + e]) : w.dV[j * p->d_v + e];
      }
    }
  }
  scratch_free(&w);
  return 0;
}
