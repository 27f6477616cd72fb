/*
 * fwd_softmax.cuh - the per-tile score and softmax math of the mma.sync
 * forwards (fwd_sm80_body.cuh, fwd_tf32_body.cuh), written once for the
 * accumulator layout both mma shapes share (m16n8: c0, c1 = row g, keys
 * 2t, 2t + 1; c2, c3 = row g + 8): the score modifiers (scale, softcap,
 * alibi, mask), one online-softmax step (row max, rescale factor, P, row
 * sum, O rescale), the final row statistics, and a warp pair's sum of its
 * partial S tiles. A body includes it after its
 * geometry enum, which must define MT (m16 tiles per warp), NT (n8 tiles of
 * a key tile) and DT (n8 column tiles of O, o[MT][DT][4]). Loops over every
 * element of a tile are one flat loop over k (mt-major, then nt, then e);
 * fully unrolled, k and the indices it gives are constants.
 */
#ifndef SDPA_FWD_SOFTMAX_CUH
#define SDPA_FWD_SOFTMAX_CUH

#include <math.h>

#include "cuda/fwd/fwd_common.cuh"
#include "cuda/ptx/ptx_bar.cuh"

enum { S_ELEMS = MT * NT * 4, O_ELEMS = MT * DT * 4 };

/* Element k of a score tile s[MT][NT][4]: row half (k % 4) / 2 of m16 tile
 * k / (4 NT), key 2t + k % 2 of n8 tile k / 4 % NT. */
__device__ __forceinline__ float *s_at(float (*s)[NT][4], int k) {
  return &s[k / (4 * NT)][k / 4 % NT][k % 4];
}

/* Element k of O, o[MT][DT][4]: row half (k % 4) / 2 of m16 tile k / (4 DT). */
__device__ __forceinline__ float *o_at(float (*o)[DT][4], int k) {
  return &o[k / (4 * DT)][k / 4 % DT][k % 4];
}

/* O, the row maxima and row sums before the first key tile. */
__device__ __forceinline__ void softmax_init(float (*o)[DT][4], float (*row_max)[2],
                                             float (*row_sum)[2]) {
#pragma unroll
  for (int k = 0; k < O_ELEMS; ++k) *o_at(o, k) = 0.f;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
}

/* The part of a score tile's finish before any bias: times score_mul (when
 * scale: the softmax's FFMA applies it otherwise, exp_mul), then softcap. */
__device__ __forceinline__ void scores_pre(float (*s)[NT][4], const sdpa_fwd_params *prm,
                                           int scale) {
  if (scale) {
#pragma unroll
    for (int k = 0; k < S_ELEMS; ++k) *s_at(s, k) *= prm->score_mul;
  }
  if (prm->has_softcap) {
#pragma unroll
    for (int k = 0; k < S_ELEMS; ++k) *s_at(s, k) = fast_tanh_pre(*s_at(s, k)) * prm->softcap_post;
  }
}

/* The part after the bias: alibi, and (when mask) -inf outside each row's
 * visible range, for the key tile at n0 (this lane's keys n0 + 8 nt + 2t + e % 2). */
__device__ __forceinline__ void scores_post(float (*s)[NT][4], const sdpa_fwd_params *prm,
                                            const fwd_block *kb, int n0, int t, int mask) {
  const fwd_rows *rw = &kb->rw;
  if (prm->has_alibi) {
    const int db = n0 + 2 * t - rw->i0 - kb->alibi_off;
#pragma unroll
    for (int k = 0; k < S_ELEMS; ++k) {
      const int mt = k / (4 * NT), nt = k / 4 % NT, e = k % 4;
      const int dj = db + nt * 8 + (e & 1) - mt * 16 - (e >> 1) * 8;
      *s_at(s, k) -= kb->slope2 * fabsf((float)dj);
    }
  }
  if (mask) {
    const int jb = n0 + 2 * t;
    const int db = jb - rw->i0 - rw->off;
#pragma unroll
    for (int k = 0; k < S_ELEMS; ++k) {
      const int mt = k / (4 * NT), nt = k / 4 % NT, e = k % 4;
      const int j = jb + nt * 8 + (e & 1);
      const int dj = db + nt * 8 + (e & 1) - mt * 16 - (e >> 1) * 8;
      if (dj < -rw->wl || dj > rw->wr || j >= rw->sk) *s_at(s, k) = -INFINITY;
    }
  }
}

/* One online-softmax step over a score tile s (exp2 domain, times xm =
 * exp_mul still to apply): s becomes p = 2^(s * xm - max * xm), one FFMA + ex2
 * an element; the row sums take the tile; corr gets O's rescale factors.
 * Returns whether some row max of the warp moved (softmax_rescale applies
 * corr to O then only: apart, so that the Hopper forward can finish the
 * previous tile's P V before it touches O). */
__device__ __forceinline__ int softmax_probs(float (*s)[NT][4], float (*row_max)[2],
                                             float (*row_sum)[2], float xm, float (*corr)[2]) {
  int moved = 0;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = row_max[mt][hf];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
      mx = quad_max(mx);
      /* corr = 2^(old mm - new mm) from the same rounded products the
       * exponents use: exactly 1 while the max stays (a fused
       * max * xm - mm there is 2^(rounding residual), ~1e-7, and l takes it
       * every tile while O does not: fp32 rows drift at long keys). It costs
       * the sm_90a d = 64 bias kernels a small spill; the alternatives move
       * one to other kernels. */
      const float mm = __fmul_rn(mx == -INFINITY ? 0.f : mx, xm);
      corr[mt][hf] = fast_exp2(__fmul_rn(row_max[mt][hf], xm) - mm);
      moved |= mx != row_max[mt][hf];
      row_max[mt][hf] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float p0 = fast_exp2(fmaf(s[mt][nt][2 * hf], xm, -mm));
        const float p1 = fast_exp2(fmaf(s[mt][nt][2 * hf + 1], xm, -mm));
        s[mt][nt][2 * hf] = p0;
        s[mt][nt][2 * hf + 1] = p1;
        sum += p0 + p1;
      }
      row_sum[mt][hf] = row_sum[mt][hf] * corr[mt][hf] + sum;
    }
  return __any_sync(0xffffffffu, moved);
}

/* O times softmax_probs' factors, when it said a row max moved. */
__device__ __forceinline__ void softmax_rescale(float (*o)[DT][4], const float (*corr)[2],
                                                int moved) {
  if (moved) {
#pragma unroll
    for (int k = 0; k < O_ELEMS; ++k) *o_at(o, k) *= corr[k / (4 * DT)][k % 4 / 2];
  }
}

/* Both parts at once: the mma.sync forwards' step. */
__device__ __forceinline__ void softmax_step(float (*s)[NT][4], float (*o)[DT][4],
                                             float (*row_max)[2], float (*row_sum)[2], float xm) {
  float corr[MT][2];
  const int moved = softmax_probs(s, row_max, row_sum, xm, corr);
  softmax_rescale(o, corr, moved);
}

/* After the last key tile: row sums over the quad (row_sum becomes l) and
 * lse in the exp2 domain, +inf for rows with no visible key (l = 0). */
__device__ __forceinline__ void softmax_final(float (*row_sum)[2], float (*lse2)[2],
                                              const float (*row_max)[2], float xm) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float l = quad_sum(row_sum[mt][hf]);
      row_sum[mt][hf] = l;
      lse2[mt][hf] = l > 0.f ? row_max[mt][hf] * xm + log2f(l) : INFINITY;
    }
}

/* A warp pair splitting the head dim of S (DSPLIT = 2 in both forwards):
 * this warp's partial S to its slot of the exchange area, and its partner's
 * (warp ^ 1, the other half of the head dim) added in, after the pair's
 * named barrier (id bar). Both warps then hold the same bits (an
 * fp32 sum of two terms does not depend on their order), so they agree on
 * every row max, P and row sum. Slot layout [warp][MT NT][32 lanes] float4:
 * every store and load phase is 512 contiguous bytes. The slot is rewritten
 * a tile later, after two __syncthreads, when the partner has long read it. */
__device__ __forceinline__ void s_exchange(float (*s)[NT][4], float4 *x_mine,
                                           const float4 *x_other, int bar) {
#pragma unroll
  for (int i = 0; i < S_ELEMS / 4; ++i)
    x_mine[i * 32] = make_float4(*s_at(s, 4 * i), *s_at(s, 4 * i + 1), *s_at(s, 4 * i + 2),
                                 *s_at(s, 4 * i + 3));
  bar_sync_named(bar, 64);
#pragma unroll
  for (int i = 0; i < S_ELEMS / 4; ++i) {
    const float4 v = x_other[i * 32];
    *s_at(s, 4 * i) += v.x;
    *s_at(s, 4 * i + 1) += v.y;
    *s_at(s, 4 * i + 2) += v.z;
    *s_at(s, 4 * i + 3) += v.w;
  }
}

#endif /* SDPA_FWD_SOFTMAX_CUH */
