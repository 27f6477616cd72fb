/*
 * scores.h - the CPU backend's per-tile score pipeline, shared by the forward
 * (fwd.c) and the backward (bwd.c): everything between the q.k product and
 * the softmax (softcap, bias, alibi, the window / causal mask), the dropout
 * decision for a tile, and a vectorizable exp. All tiles are row-major fp32
 * with a row stride; (i, j) are indices inside the sequence (0-based), b the
 * batch entry (sequence), hh the query head.
 */
#ifndef SDPA_CPU_SCORES_H
#define SDPA_CPU_SCORES_H

#include <stdint.h>

#include "../problem.h"

/* 1 if the tile rows [i0, i0+mi) x keys [j0, j0+nj) need sdpa_cpu_score_tile
 * at all: some modifier is on (softcap, bias, alibi) or some element of the
 * tile lies outside its row's visible key range. 0 means the tile is exactly
 * scale * q.k and fully visible. */
int sdpa_cpu_tile_needs_scores(const sdpa_problem *p, int64_t sq, int64_t sk, int64_t i0,
                               int64_t mi, int64_t j0, int64_t nj);

/*
 * Applies the contract's score modifiers to one tile, in place:
 *   s   [mi][lds]  in:  scale * q_i . k_j   (the gemm's alpha carries the scale)
 *                  out: the final score s_ij: softcap, then + bias, - alibi,
 *                       and -inf outside the mask (window / causal) or j >= sk.
 *   tanh_out [mi][lds], optional (NULL = not wanted): t = tanh(x / c) of the
 *       softcap (0 where masked, and untouched when softcap is off), for the
 *       backward: d(c * tanh(x / c)) / dx = 1 - t^2.
 * (sq, sk) are the sequence's lengths (sdpa_seq_len_q / sdpa_seq_len_k).
 */
void sdpa_cpu_score_tile(const sdpa_problem *p, int64_t b, int64_t hh, int64_t sq, int64_t sk,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, float *s, int64_t lds,
                         float *tanh_out);

/* Dropout decisions of a tile: drop[r * ldd + c] = 1 if element
 * (b, hh, i0 + r, j0 + c) is dropped (sdpa_dropped with bh = b * h + hh),
 * else 0. Requires p->dropout_p > 0. */
void sdpa_cpu_dropout_tile(const sdpa_problem *p, int64_t b, int64_t hh, int64_t i0, int64_t mi,
                           int64_t j0, int64_t nj, uint8_t *drop, int64_t ldd);

/* y[k] = exp(x[k] - m) for k < n (exp(-inf) = 0; m must be finite), returns
 * the sum of the y[k]. Polynomial exp, max relative error ~2 ulp, vectorized. */
float sdpa_cpu_exp_sum(const float *x, float m, float *y, int64_t n);

/* max of x[0..n), -inf if n == 0 */
float sdpa_cpu_max(const float *x, int64_t n);

#endif /* SDPA_CPU_SCORES_H */
