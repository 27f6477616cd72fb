/*
 * problem.h - the validated, normalized attention problem that every backend
 * and kernel consumes (one flat struct of pointers and int64 element strides,
 * passed by value to CUDA kernels), and the small pure functions of the
 * contract that backends share: per-sequence lengths, where key j of sequence
 * b lives, and which (i, j) the mask keeps.
 *
 * Built by validate.c from the public descriptors; nothing in here touches
 * memory the descriptor did not name. Usable from C and CUDA C (SDPA_HD).
 */
#ifndef SDPA_PROBLEM_H
#define SDPA_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

#ifdef __CUDACC__
#define SDPA_HD __host__ __device__ __forceinline__
#else
#define SDPA_HD static inline
#endif

typedef enum sdpa_layout {
  SDPA_LAYOUT_DENSE = 0,
  SDPA_LAYOUT_VARLEN = 1,
  SDPA_LAYOUT_CACHE = 2 /* KV cache: contiguous, or paged when block_table */
} sdpa_layout;

/* strides (elements) of a [b, s, h, x] tensor; varlen: sb = 0, rows by ss */
typedef struct sdpa_bshd {
  int64_t sb, ss, sh;
} sdpa_bshd;

typedef struct sdpa_problem {
  int is_bwd;
  sdpa_device device;
  void *stream;
  int num_threads;       /* CPU: resolved (>= 1) */
  sdpa_dtype dtype;      /* q/k/v/out (and bias) dtype */
  sdpa_layout layout;

  int64_t b, h, h_k, d, d_v;
  int64_t s_q, s_k;      /* dense: the lengths; varlen: max_seqlen_q/k; cache: s_q and
                            the largest possible key count (s_cache or max_blocks*page) */
  int64_t total_q, total_k; /* varlen: rows of q and k; dense: b*s_q, b*s_k */

  const void *q, *k, *v;
  sdpa_bshd q_st, k_st, v_st;  /* cache: k_st.sb is the cache row (or block) stride */
  void *out;
  sdpa_bshd o_st;
  float *lse;            /* NULL if not asked; dense [b, h, s_q], varlen [h, total_q] */
  int64_t lse_sb, lse_sh, lse_ss; /* varlen: lse_sb = 0, rows indexed by global row */
  const float *dlse;     /* backward: NULL, or lse's gradient (lse's layout) */
  int64_t dlse_sb, dlse_sh, dlse_ss;

  /* varlen */
  const int32_t *cu_q, *cu_k, *seqused_k;

  /* cache */
  const int32_t *cache_seqlens, *block_table, *cache_batch_idx;
  const int32_t *cache_leftpad; /* NULL = 0: the first cache row each sequence attends */
  int64_t bt_stride;     /* block_table row stride */
  int64_t max_blocks;    /* block_table columns */
  int64_t page_size;     /* paged (cache or varlen layout): rows per block; 0 = not paged */
  int64_t num_blocks;    /* paged: k.shape[0]; contiguous: b_cache */
  const void *k_new, *v_new;
  sdpa_bshd kn_st, vn_st;
  int64_t s_new;         /* 0 without append */
  const float *rot_cos, *rot_sin;
  int64_t rot_stride;    /* row stride of cos/sin (same for both) */
  int64_t rot_rows;      /* s_max */
  int64_t rotary_dim;    /* 0 = no rotary */
  int rotary_interleaved;

  /* score modifiers */
  float scale;           /* resolved (never 0 unless the caller's q.k should vanish) */
  float softcap;         /* 0 = off */
  const float *alibi;    /* NULL = off */
  int64_t alibi_sb, alibi_sh; /* alibi_sb = 0 for [h] slopes */
  const void *bias;      /* NULL = off; dense layout only */
  int64_t bias_sb, bias_sh, bias_sq, bias_sk; /* 0 on broadcast dims */
  int64_t window_left, window_right; /* -1 = unbounded; causal folded in (right = 0) */
  int bottom_right;      /* 1: off = s_k - s_q; 0: off = 0 */

  /* dropout */
  float dropout_p;       /* 0 = off */
  uint32_t drop_threshold; /* round(p * 256) in [0, 256]: 8-bit field < threshold drops */
  float drop_scale;      /* 1 / (1 - p) */
  uint64_t seed;
  uint32_t offset;

  void *probs;           /* NULL = off; dense [b, h, s_q, s_k] */
  sdpa_dtype probs_dtype;
  int64_t probs_sb, probs_sh, probs_sq;

  int num_splits;        /* as asked: 0 = auto */
  void *workspace;
  size_t workspace_size;
  const char *kernel;    /* forced kernel name or NULL */

  /* backward */
  const void *dout;
  sdpa_bshd do_st;
  void *dq, *dk, *dv;
  sdpa_bshd dq_st, dk_st, dv_st;
  void *dbias;           /* NULL = off; summed over dims whose stride is 0 here */
  int64_t dbias_sb, dbias_sh, dbias_sq, dbias_sk;
  int64_t dbias_nb, dbias_nh, dbias_nq; /* extents of dbias's first three dims (1 or full) */
  int deterministic;
} sdpa_problem;

/* ---- what the kernels' hosts fold from a problem --------------------------- */

#define SDPA_LOG2E 1.4426950408889634f
#define SDPA_LN2 0.6931471805599453f
/* The widest window side the kernels hold (as an int): validation folds a
 * side of at least the longest length to -1 and refuses wider ones that still
 * restrict, so a side above this is never a real bound; -1 becomes it too. */
#define SDPA_WINDOW_UNBOUNDED 0x40000000

/* The exp2-domain score multipliers every CUDA kernel uses: without softcap
 * s2 = score_mul * q.k; with softcap the kernels form tanh(score_mul q.k / 2)
 * (tanh through exp2) and scale by softcap_post = softcap * log2(e). */
SDPA_HD void sdpa_score_consts(const sdpa_problem *p, float *score_mul, float *softcap_post) {
  const int softcap = p->softcap > 0.f;
  *score_mul = softcap ? 2.f * SDPA_LOG2E * p->scale / p->softcap : p->scale * SDPA_LOG2E;
  *softcap_post = softcap ? p->softcap * SDPA_LOG2E : 0.f;
}

/* A window side (window_left / window_right) as the kernels' int. */
SDPA_HD int sdpa_window_clamp(int64_t w) {
  return (int)(w < 0 || w > SDPA_WINDOW_UNBOUNDED ? SDPA_WINDOW_UNBOUNDED : w);
}

/* Whether dbias is summed over a broadcast dim (extent 1 where the problem's is > 1). */
SDPA_HD int sdpa_dbias_sums(const sdpa_problem *p) {
  return p->dbias && ((p->dbias_nb == 1 && p->b > 1) || (p->dbias_nh == 1 && p->h > 1) ||
                      (p->dbias_nq == 1 && p->s_q > 1));
}

/* ---- per-sequence geometry ---------------------------------------------- */

/* Query rows of sequence b: global row = q_start + i (varlen) or b*s_q + i. */
SDPA_HD int64_t sdpa_seq_q_start(const sdpa_problem *p, int64_t b) {
  return p->layout == SDPA_LAYOUT_VARLEN ? (int64_t)p->cu_q[b] : b * p->s_q;
}

SDPA_HD int64_t sdpa_seq_len_q(const sdpa_problem *p, int64_t b) {
  return p->layout == SDPA_LAYOUT_VARLEN ? (int64_t)(p->cu_q[b + 1] - p->cu_q[b]) : p->s_q;
}

/* Cache row of key 0 of sequence b (cache_leftpad; 0 for the other layouts). */
SDPA_HD int64_t sdpa_cache_start(const sdpa_problem *p, int64_t b) {
  return p->cache_leftpad ? (int64_t)p->cache_leftpad[b] : 0;
}

/* Keys that sequence b attends to (after append, capped by seqused_k). */
SDPA_HD int64_t sdpa_seq_len_k(const sdpa_problem *p, int64_t b) {
  int64_t n;
  if (p->layout == SDPA_LAYOUT_CACHE)
    n = (int64_t)p->cache_seqlens[b] + p->s_new - sdpa_cache_start(p, b);
  else if (p->layout == SDPA_LAYOUT_VARLEN)
    n = (int64_t)(p->cu_k[b + 1] - p->cu_k[b]);
  else
    n = p->s_k;
  if (p->seqused_k && (int64_t)p->seqused_k[b] < n) n = p->seqused_k[b];
  return n;
}

/* Keys of sequence b before seqused_k caps them (dense and varlen): the rows
 * of dk / dv a backward writes, those past the cap getting zero gradients. */
SDPA_HD int64_t sdpa_seq_full_len_k(const sdpa_problem *p, int64_t b) {
  return p->layout == SDPA_LAYOUT_VARLEN ? (int64_t)(p->cu_k[b + 1] - p->cu_k[b]) : p->s_k;
}

/* Rows of dk / dv that a backward's key tile [j0, j0 + bn) of sequence b
 * writes; <= 0 when the tile starts past the sequence's keys. */
SDPA_HD int64_t sdpa_bwd_tile_rows(const sdpa_problem *p, int64_t b, int64_t j0, int64_t bn) {
  const int64_t rows = sdpa_seq_full_len_k(p, b) - j0;
  return rows < bn ? rows : bn;
}

/* Where row j of sequence b lives in every k / v-shaped tensor (k, v, dk,
 * dv): the outer index (batch, cache row or page; 0 for varlen, whose rows
 * are global) and the row inside it. j is the cache position for the cache
 * layout (cache_leftpad not added: sdpa_kv_offset adds it for readers), the
 * key index otherwise. One lookup serves all of them through sdpa_kv_at.
 * Page arithmetic in 32 bits: validation caps every length and capacity at
 * 2^31 - 1. */
typedef struct sdpa_kv_pos {
  int64_t outer, row;
} sdpa_kv_pos;

SDPA_HD sdpa_kv_pos sdpa_kv_locate(const sdpa_problem *p, int64_t b, int64_t j) {
  sdpa_kv_pos r;
  r.outer = b;
  r.row = j;
  if (p->page_size > 0) { /* paged cache or paged varlen */
    const int32_t ps = (int32_t)p->page_size, jj = (int32_t)j, pg = jj / ps;
    r.outer = p->block_table[b * p->bt_stride + pg];
    r.row = jj - pg * ps;
  } else if (p->layout == SDPA_LAYOUT_VARLEN) {
    r.outer = 0;
    r.row = (int64_t)p->cu_k[b] + j;
  } else if (p->layout == SDPA_LAYOUT_CACHE && p->cache_batch_idx) {
    r.outer = p->cache_batch_idx[b];
  }
  return r;
}

/* Element offset of head hk, element 0, of the row at pos in a tensor with strides st. */
SDPA_HD int64_t sdpa_kv_at(sdpa_bshd st, sdpa_kv_pos pos, int64_t hk) {
  return pos.outer * st.sb + pos.row * st.ss + hk * st.sh;
}

/* Element offset of key row j (head hk, element 0) of sequence b, for the
 * dense and varlen layouts only: the kernels whose registry rows refuse KV
 * caches use this one (no cache lookup compiled into them). */
SDPA_HD int64_t sdpa_kv_offset_seq(const sdpa_problem *p, sdpa_bshd st, int64_t b, int64_t j,
                                   int64_t hk) {
  if (p->layout == SDPA_LAYOUT_VARLEN)
    return ((int64_t)p->cu_k[b] + j) * st.ss + hk * st.sh;
  return b * st.sb + j * st.ss + hk * st.sh;
}

/* Element offset of key j (head hk, element 0) of sequence b, any layout. */
SDPA_HD int64_t sdpa_kv_offset(const sdpa_problem *p, sdpa_bshd st, int64_t b, int64_t j,
                               int64_t hk) {
  if (p->layout == SDPA_LAYOUT_CACHE || p->page_size > 0)
    return sdpa_kv_at(st, sdpa_kv_locate(p, b, j + sdpa_cache_start(p, b)), hk);
  return sdpa_kv_offset_seq(p, st, b, j, hk);
}

/* The rotary position of query row i of sequence b (cache layout): its cache
 * position when causal or windowed, else the first new position for every
 * row (flash_attn's rule, sdpa.h). */
SDPA_HD int64_t sdpa_rotary_q_pos(const sdpa_problem *p, int64_t b, int64_t i) {
  const int per_row = p->window_left >= 0 || p->window_right >= 0;
  return (int64_t)p->cache_seqlens[b] + (per_row ? i : 0);
}

/* Element offset of query-like row i of sequence b (q, out, dout, dq). */
SDPA_HD int64_t sdpa_q_offset(const sdpa_problem *p, sdpa_bshd st, int64_t b, int64_t i,
                              int64_t hh) {
  if (p->layout == SDPA_LAYOUT_VARLEN)
    return ((int64_t)p->cu_q[b] + i) * st.ss + hh * st.sh;
  return b * st.sb + i * st.ss + hh * st.sh;
}

SDPA_HD int64_t sdpa_lse_offset(const sdpa_problem *p, int64_t b, int64_t i, int64_t hh) {
  if (p->layout == SDPA_LAYOUT_VARLEN)
    return hh * p->lse_sh + ((int64_t)p->cu_q[b] + i) * p->lse_ss;
  return b * p->lse_sb + hh * p->lse_sh + i * p->lse_ss;
}

/* dlse of query row g (global: b * s_q + i, or the varlen row), head hh; 0
 * without dlse. The backward's D_i = dO_i . O_i less it gives the score
 * gradient p (dP - D + dlse). */
SDPA_HD float sdpa_dlse_row(const sdpa_problem *p, int64_t g, int64_t hh) {
  if (!p->dlse) return 0.0f;
  if (p->layout == SDPA_LAYOUT_VARLEN) return p->dlse[hh * p->dlse_sh + g * p->dlse_ss];
  return p->dlse[(g / p->s_q) * p->dlse_sb + hh * p->dlse_sh + (g % p->s_q) * p->dlse_ss];
}

/* ---- the mask ------------------------------------------------------------- */

/* Visible key range [lo, hi) of query row i in a sequence of lengths (sq, sk). */
SDPA_HD void sdpa_key_range(const sdpa_problem *p, int64_t i, int64_t sq, int64_t sk,
                            int64_t *lo, int64_t *hi) {
  int64_t off = p->bottom_right ? sk - sq : 0;
  int64_t l = 0, r = sk;
  if (p->window_left >= 0 && i + off - p->window_left > l) l = i + off - p->window_left;
  if (p->window_right >= 0 && i + off + p->window_right + 1 < r) r = i + off + p->window_right + 1;
  if (r < l) r = l;
  *lo = l;
  *hi = r;
}

/* The keys of query rows [i0, i1) (i0 < i1 <= sq): some row sees a key of
 * [*lo, *hi) (row i0's lower end to row i1 - 1's upper end capped at sk: both
 * ends are nondecreasing in i; *hi == *lo when no row sees one); *hi0 (if
 * not NULL) gets row i0's upper end. */
SDPA_HD void sdpa_key_span(const sdpa_problem *p, int64_t i0, int64_t i1, int64_t sq, int64_t sk,
                           int64_t *lo, int64_t *hi, int64_t *hi0) {
  int64_t l0, h0, l1, h1;
  sdpa_key_range(p, i0, sq, sk, &l0, &h0);
  sdpa_key_range(p, i1 - 1, sq, sk, &l1, &h1);
  if (h1 > sk) h1 = sk;
  *lo = l0;
  *hi = h1 > l0 ? h1 : l0;
  if (hi0) *hi0 = h0;
}

/* Key tiles [n_begin, n_end) of bn keys that some query row of [m0, m0 + bm)
 * sees (rows past sq ignored; m0 < sq): sdpa_key_span's range in tiles, but
 * when no row sees a key the range is empty or reversed (n_end <= n_begin)
 * or, where that lo is not a tile start, one tile that every row masks
 * (results unchanged). Written out rather than through sdpa_key_span: its
 * test for the empty span costs the sm80 forwards registers and spills. */
SDPA_HD void sdpa_key_tiles(const sdpa_problem *p, int64_t m0, int bm, int bn, int64_t sq,
                            int64_t sk, int *n_begin, int *n_end) {
  int64_t lo0, hi0, lo1, hi1;
  sdpa_key_range(p, m0, sq, sk, &lo0, &hi0);
  sdpa_key_range(p, (m0 + bm < sq ? m0 + bm : sq) - 1, sq, sk, &lo1, &hi1);
  *n_begin = (int)(lo0 / bn);
  *n_end = (int)(((hi1 < sk ? hi1 : sk) + bn - 1) / bn);
}

#endif /* SDPA_PROBLEM_H */
