/*
 * bwd_common.cuh - what the backward bodies (16-bit bwd_sm80_body.cuh and
 * bwd_sm90_body.cuh, fp32 bwd_tf32_body.cuh) share: the
 * kernels' parameter struct (the validated problem by value, the workspace
 * regions and the constants the host folds), the workspace layout (one
 * function answers both "how many bytes" and "where is each region"), the
 * tile-pair rule that says which (key block, query block) pairs do any work,
 * and small conversions. Included once per instance translation unit.
 *
 * Workspace (fp32, each region 256-byte aligned):
 *   dq_acc [nsplit][total_q][h][hdim]  dQ accumulated over key blocks, padded to the
 *                                      bucket; nsplit slices in deterministic mode
 *                                      (none where a dQ kernel makes dQ: bwd_launch.cuh);
 *                                      or tiled (bwd_dq_tiled_at, rows bwd_dq_tiled_rows)
 *   dsum   [h][total_q]         D_i = sum_e dO_ie * O_ie
 *   lse2   [h][total_q]         lse * log2(e) (the kernels work in the exp2 domain)
 *   sem    [row tiles][h][hdim / 64] int32: a tiled accumulator's counters in
 *                               deterministic mode (bwd_dq_sem), else absent
 */
#ifndef SDPA_BWD_COMMON_CUH
#define SDPA_BWD_COMMON_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "problem.h"

#if defined(SDPA_BWD_QDO_TMA) && SDPA_BWD_QDO_TMA
#include <cuda.h> /* CUtensorMap */
#endif

typedef struct sdpa_bwd_params {
  sdpa_problem p;
  float *dq_acc, *dsum, *lse2;
  int *dq_sem;         /* the tiled accumulator's tile counters (bwd_dq_sem), or NULL */
  int64_t slice;       /* floats between dQ slices (0 unless deterministic) */
  int nsplit;          /* dQ slices: 1, or bwd_det_splits in deterministic mode (0
                          where a dQ kernel makes dQ: SDPA_BWD_DQ_KERNEL) */
  int64_t total_q;     /* rows of dq_acc / dsum / lse2 */
  float score_mul;     /* scale * log2(e); with softcap 2 * log2(e) * scale / softcap */
  float softcap_post;  /* softcap * log2(e) */
  float dk_scale;      /* scale (dK = scale * dS^T Q) */
  float drop_scale;    /* 1 / (1 - p) */
  int h_per_hk;        /* query heads per kv head */
  int wl, wr;          /* window, 2^30 when unbounded */
  int has_softcap, has_alibi, has_dropout, has_dbias; /* (a bias selects the bias kernels) */
  int bias_aligned;    /* bias base and strides 16-byte aligned: tiles by cp.async */
  int dbias_aligned;   /* the same for dbias: rows out by 16-byte stores */
#if defined(SDPA_BWD_QDO_TMA) && SDPA_BWD_QDO_TMA
  /* (a body that copies Q and dO by the copy engine, defining SDPA_BWD_QDO_TMA
     before this file) qdo_tma 1: a dense problem whose q and dout map, else
     cp.async. Only there: the maps' alignment changes the struct, and ptxas
     then allocated the older d = 192 rows worse */
  int qdo_tma;
  CUtensorMap tq, tdo;
#endif
  /* deterministic counters with rotated walks (bwd_rot_place). Last: moving the
     other fields' offsets made ptxas allocate an older row worse */
  int det_rot;
} sdpa_bwd_params;

typedef struct bwd_ws_layout {
  size_t dq_acc, dsum, lse2, sem; /* byte offsets */
  size_t bytes;                   /* total */
} bwd_ws_layout;


SDPA_HD size_t bwd_align256(size_t n) { return (n + 255u) & ~(size_t)255u; }

SDPA_HD int64_t bwd_total_q(const sdpa_problem *p) {
  return p->layout == SDPA_LAYOUT_VARLEN ? p->total_q : p->b * p->s_q;
}

/*
 * Deterministic mode: the number of dQ slices, which is also the number of
 * blocks per (kv head, batch). Block x owns slice x alone and walks key blocks
 * x, x + n, x + 2n, ... in order, so each dQ element is a sum in a fixed order
 * (no atomics race, no block waits for another), and post adds the slices in
 * slice order. More slices give more parallelism and cost one fp32 copy of dQ
 * each: n minimizes the time estimate waves(n b h_k blocks, one per SM) x key
 * blocks per block, the smallest such n, at most 16 and at most 1 GiB of
 * slices (beyond one).
 */
SDPA_HD int bwd_det_splits(const sdpa_problem *p, int hdim, int block_n, int sms) {
  const int64_t nkb = (p->s_k + block_n - 1) / block_n, bh = p->b * p->h_k;
  const int64_t slice_bytes = bwd_total_q(p) * p->h * hdim * 4;
  if (!p->deterministic || nkb <= 1 || bh <= 0 || sms <= 0) return 1;
  int best = 1;
  int64_t best_t = -1;
  for (int n = 1; n <= 16 && n <= nkb; ++n) {
    if (n > 1 && n * slice_bytes > ((int64_t)1 << 30)) break;
    const int64_t t = (n * bh + sms - 1) / sms * ((nkb + n - 1) / n);
    if (best_t < 0 || t < best_t) best = n, best_t = t;
  }
  return best;
}

/* The tiled accumulator's first row of sequence b (q_start: its first row
 * over all sequences): q_start + 64 b rounded down to a multiple of 64, past
 * the previous sequence's last tile (bwd_dq_tiled_at). */
SDPA_HD int64_t bwd_dq_tile_row0(int64_t q_start, int64_t b) {
  return (q_start + 64 * b) & ~(int64_t)63; /* (never negative) */
}

/* The tiled accumulator's rows: where a sequence after the last would start. */
SDPA_HD int64_t bwd_dq_tiled_rows(const sdpa_problem *p) {
  return bwd_dq_tile_row0(bwd_total_q(p), p->b);
}

/* tiled: the accumulator is bwd_dq_tiled_at's (one slice); sems (tiled
 * only): a counter a tile */
SDPA_HD bwd_ws_layout bwd_workspace_layout(const sdpa_problem *p, int hdim, int nsplit,
                                           int tiled, int sems) {
  bwd_ws_layout w;
  const size_t rows = (size_t)bwd_total_q(p), h = (size_t)p->h;
  const size_t acc_rows = tiled ? (size_t)bwd_dq_tiled_rows(p) : (size_t)nsplit * rows;
  w.dq_acc = 0;
  w.dsum = bwd_align256(acc_rows * h * (size_t)hdim * 4u);
  w.lse2 = w.dsum + bwd_align256(rows * h * 4u);
  w.sem = w.lse2 + bwd_align256(rows * h * 4u);
  w.bytes = w.sem + (sems ? bwd_align256((size_t)bwd_dq_tiled_rows(p) / 64 * h *
                                                  (size_t)(hdim / 64) * 4u)
                                   : 0);
  if (w.bytes == 0) w.bytes = 256; /* never a zero-byte request */
  return w;
}

/*
 * Which tiles do work. Query rows [ia, ib) and keys [ja, jb) (clamped to the
 * sequence) hold a visible pair iff the range of j - i over the rectangle,
 * [ja - ib + 1, jb - 1 - ia], meets the window band [off - wl, off + wr]
 * (sdpa_key_range written in j - i). Both directions below come from that
 * one rule, so a key block visits exactly the query blocks that count it, and
 * none is visited for nothing.
 */
/* Query blocks [*m_lo, *m_hi] that key block n0 (BN keys) visits; 0 if none. */
SDPA_HD int bwd_query_blocks(int64_t sq, int64_t sk, int64_t off, int64_t wl, int64_t wr,
                             int64_t n0, int bn, int bm, int *m_lo, int *m_hi) {
  if (n0 >= sk || sq <= 0) return 0;
  const int64_t jb = n0 + bn < sk ? n0 + bn : sk;
  const int64_t x = n0 - off - wr + 1; /* need ib >= x */
  const int64_t y = jb - 1 - off + wl; /* need ia <= y */
  if (x > sq || y < 0) return 0;
  const int64_t lo = x <= 1 ? 0 : (x - 1) / bm;
  int64_t hi = y / bm;
  const int64_t last = (sq + bm - 1) / bm - 1;
  if (hi > last) hi = last;
  if (lo > hi) return 0;
  *m_lo = (int)lo;
  *m_hi = (int)hi;
  return 1;
}

/* The last key block (bn keys each) that visits query block mb (bm rows),
 * bwd_query_blocks read the other way: the band's last key for the block's
 * last row, inside the keys; -1 when it is before them. The visitors are a
 * contiguous run ending there, so a key block's place among mb's visitors,
 * counted from the highest, is this minus its index. */
SDPA_HD int64_t bwd_key_block_hi(int64_t sq, int64_t sk, int64_t off, int64_t wr, int64_t mb,
                                 int bm, int bn) {
  const int64_t row = mb * bm + bm - 1 < sq - 1 ? mb * bm + bm - 1 : sq - 1;
  const int64_t j = row + off + wr, last = (sk - 1) / bn;
  return j < 0 ? -1 : j / bn < last ? j / bn : last;
}

/* Rotated walks (unmasked problems): nkb <= n key blocks each visit every
 * position of an n-step walk, key block j starting at position j and going
 * round. Key block j's place among the additions at the position it reaches
 * at step t: the key blocks that reach it in fewer steps (positions j + 1 ..
 * j + t, mod n, that are key blocks) go first, so in step nobody waits. */
SDPA_HD int64_t bwd_rot_place(int64_t t, int64_t j, int64_t nkb, int64_t n) {
  const int64_t a = (j + t < nkb - 1 ? j + t : nkb - 1) - j; /* j + 1 .. j + t below n */
  return (a > 0 ? a : 0) + (j + t >= n ? j + t - n + 1 : 0); /* and 0 .. j + t - n */
}

#ifdef __CUDACC__
/* A key block's frame, for both 16-bit bodies: keys n0 .. n0 + bn - 1 of
 * sequence b, its lengths and causal alignment, the query blocks [m_lo,
 * m_hi] (nm of them, bm rows each) that see those keys, and n_it = the
 * (query head of the GQA group, query block) steps the block walks. */
typedef struct bwd_kframe {
  int n0, sq, sk, off, m_lo, m_hi, nm, n_it;
  int64_t q_start;
} bwd_kframe;

__device__ __forceinline__ bwd_kframe bwd_kframe_make(const sdpa_bwd_params *prm, int b,
                                                      int nblk, int bn, int bm) {
  const sdpa_problem *p = &prm->p;
  bwd_kframe f;
  f.n0 = nblk * bn;
  f.sq = (int)sdpa_seq_len_q(p, b);
  f.sk = (int)sdpa_seq_len_k(p, b);
  f.off = p->bottom_right ? f.sk - f.sq : 0;
  f.q_start = sdpa_seq_q_start(p, b);
  f.m_lo = 0;
  f.m_hi = -1;
  const int any = bwd_query_blocks(f.sq, f.sk, f.off, prm->wl, prm->wr, f.n0, bn, bm, &f.m_lo, &f.m_hi);
  f.nm = any ? f.m_hi - f.m_lo + 1 : 0;
  f.n_it = prm->h_per_hk * f.nm;
  return f;
}

/* The 16-bit backwards' ldmatrix swizzle (bwd_sm80_body.cuh's tiles, the
 * bias and dbias tiles of bwd_bias.cuh): physical chunk of logical chunk c
 * in a shared row r of cpr chunks (XOR swizzle in groups of 8, the remainder
 * in a group of 4): every ldmatrix phase (eight rows at one logical chunk)
 * hits eight distinct bank groups. cpr and cpr8 are compile-time constants:
 * when cpr is a multiple of 8 the remainder case cannot happen and the
 * select folds away even for a run-time c. */
__device__ __forceinline__ int bswz(int r, int c, int cpr, int cpr8) {
  return (cpr == cpr8 || c < cpr8) ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
}

/* Swizzled chunk for a lane whose ldmatrix row is lane % 8 modulo 8. */
__device__ __forceinline__ int bswz_lane(int c, int cpr, int cpr8, int x7, int x3) {
  return (cpr == cpr8 || c < cpr8) ? (c ^ x7) : (c ^ x3);
}

/* Zeroes n (a literal) m16n8 accumulator tiles. */
__device__ __forceinline__ void bwd_zero_acc(float (*x)[4], const int n) {
#pragma unroll
  for (int j = 0; j < n; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[j][e] = 0.f;
}

/* Where query row `row` (counted over all sequences) of head hh starts in dQ
 * slice sl of the accumulator (the layout above; hdim the body's bucket). */
__device__ __forceinline__ float *bwd_dq_acc_row(const sdpa_bwd_params *prm, int64_t sl,
                                                 int64_t row, int hh, int hdim) {
  return prm->dq_acc + sl * prm->slice + (row * prm->p.h + hh) * hdim;
}

/* The tiled accumulator (the warp-specialized rows): 64 x 64 fp32 tiles
 * [row tile][h][hdim / 64][64 rows][64 columns], so a block's share of a
 * step's dQ is one contiguous bulk reduction. Sequence b (its first row
 * q_start over all sequences) starts at row (q_start + 64 b) rounded down to
 * a multiple of 64, past the previous sequence's last tile: a tile never
 * holds two sequences, and its rows past a sequence's end are padding that
 * nothing reads. Inside a tile, row r's 8-column group c8 sits at group
 * c8 ^ (r % 8), so the staging stores of a warp's 8 rows hit distinct banks.
 * bwd_dq_tile_index: the tile of query row i of sequence b, head hh, column
 * block cb, which indexes both the tiles and their counters. */
__device__ __forceinline__ int64_t bwd_dq_tile_index(const sdpa_bwd_params *prm, int64_t q_start,
                                                     int b, int64_t i, int hh, int cb, int hdim) {
  const int64_t tr = (bwd_dq_tile_row0(q_start, b) + i) >> 6;
  return (tr * prm->p.h + hh) * (hdim / 64) + cb;
}

__device__ __forceinline__ float *bwd_dq_tile(const sdpa_bwd_params *prm, int64_t tile) {
  return prm->dq_acc + tile * 4096;
}

/* The tile's counter (deterministic mode): how many key blocks have added
 * into it. */
__device__ __forceinline__ int *bwd_dq_sem(const sdpa_bwd_params *prm, int64_t tile) {
  return prm->dq_sem + tile;
}

/* Columns c .. c + 7 (c a multiple of 8) of query row i in the tiled layout. */
__device__ __forceinline__ float *bwd_dq_tiled_at(const sdpa_bwd_params *prm, int64_t q_start,
                                                  int b, int64_t i, int hh, int c, int hdim) {
  const int r = (int)(i & 63);
  return bwd_dq_tile(prm, bwd_dq_tile_index(prm, q_start, b, i, hh, c >> 6, hdim)) + r * 64 +
         ((((c & 63) >> 3) ^ (r & 7)) << 3);
}

/* lse2 and D of query row i of head hh (INFINITY and 0 past sq: the row's
 * scores are masked). */
__device__ __forceinline__ void bwd_row_stats(const sdpa_bwd_params *prm, int64_t q_start,
                                              int hh, int i, int sq, float *l, float *dd) {
  const int64_t r = q_start + hh * prm->total_q + i;
  *l = i < sq ? prm->lse2[r] : INFINITY;
  *dd = i < sq ? prm->dsum[r] : 0.f;
}
#endif

/* ---- device conversions (no cuda_fp16.h: it is C++) ---------------------------- */
#ifdef __CUDACC__
__device__ __forceinline__ float bwd_f16_to_f32(uint32_t h) {
  float f;
  unsigned short hs = (unsigned short)h;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(hs));
  return f;
}

__device__ __forceinline__ float bwd_bf16_to_f32(uint32_t h) {
  return __uint_as_float((h & 0xffffu) << 16);
}
#endif

#endif /* SDPA_BWD_COMMON_CUH */
