/*
 * bwd_scores.cuh - the elementwise middle of the backward, shared by the
 * 16-bit (bwd_sm80_body.cuh) and the fp32 tensor-core (bwd_tf32_body.cuh)
 * kernels: from a warp's S^T and dP^T accumulators (16 keys x 8 nqn
 * queries, fp32, m16n8 C layout) to P (the dV operand) and dS (the dK / dQ
 * operand), with the forward's score modifiers (softcap, alibi, causal /
 * window in both alignments, sequence ends), dropout and (16-bit kernels)
 * the bias with dbias. Included once per instance translation unit.
 */
#ifndef SDPA_BWD_SCORES_CUH
#define SDPA_BWD_SCORES_CUH

#include <math.h>
#include <stdint.h>

#include "common/philox.h"
#include "cuda/bwd/bwd_common.cuh"
#include "cuda/fwd/fwd_common.cuh"
#include "cuda/ptx/ptx_mma.cuh" /* pack_bf16x2, pack_f16x2 */

/* Where bwd_p_ds puts the dbias of element (nq, e) (16-bit kernels' bias
 * forms): shared address lane + (8 nq + (e & 1)) row + col[e & 1][e >> 1],
 * lane 0 = no dbias. The body fills it from its dbias tile's layout. */
typedef struct bwd_dbias_dst {
  uint32_t lane, row, col[2][2];
} bwd_dbias_dst;

/* A 16-bit value (the low half of h) to fp32 and back; bf16 is a literal. */
__device__ __forceinline__ float bwd_h_to_f32(uint32_t h, const int bf16) {
  return bf16 ? bwd_bf16_to_f32(h) : bwd_f16_to_f32(h);
}

__device__ __forceinline__ unsigned short bwd_f32_to_h(float x, const int bf16) {
  return (unsigned short)(bf16 ? pack_bf16x2(x, 0.f) : pack_f16x2(x, 0.f));
}

/* The fp32 bias of (query i, key j) of head hh (bias kind 3): indices
 * clamped into the sequence, so a masked element reads a valid address. */
__device__ __forceinline__ float bwd_bias_f32_at(const sdpa_problem *p, int b, int hh, int i,
                                                 int j, int sq, int sk) {
  const float *r = (const float *)p->bias + b * p->bias_sb + hh * p->bias_sh;
  return __ldg(r + (int64_t)min(i, sq - 1) * p->bias_sq + (int64_t)min(j, sk - 1) * p->bias_sk);
}

/* dbias of (query i, key j) of head hh in fp32 (kind 3), inside the sequence
 * only: in the S^T layout a warp's store is four whole 32-byte sectors. */
__device__ __forceinline__ void bwd_dbias_f32_put(const sdpa_problem *p, int b, int hh, int i,
                                                  int j, int sq, int sk, float v) {
  if (i < sq && j < sk)
    ((float *)p->dbias)[b * p->dbias_sb + hh * p->dbias_sh + (int64_t)i * p->dbias_sq +
                        (int64_t)j * p->dbias_sk] = v;
}

/* P and dS of one sub-step, in place: ss (S^T, this warp's 16 keys x 8 nqn
 * queries) becomes P times keep / (1 - p) (the dV operand) and sp (dP^T)
 * becomes dS = P (dP keep / (1 - p) - D) (times 1 - tanh^2 under softcap).
 * Lane (g, t); key of element (nq, e): j_lo + g + 8 (e >> 1); query:
 * q0 + 8 nq + 2 t + (e & 1) (the m16n8 accumulator layout of both the
 * 16-bit and the tf32 mma); keep_bits from bwd_keep_bits when drop. bias
 * (0 none, 1 fp16, 2 bf16): bv[nq][e >> 1] holds the element's bias in its
 * low / high 16 bits for e & 1 = 0 / 1, added after softcap, before alibi;
 * with db->lane, dS before the softcap derivative (the gradient of the
 * post-softcap score, i.e. dbias) goes to shared memory at db. bias 3 (fp32,
 * the tf32 kernels): the bias is read from global memory and, with
 * db->lane, dbias written there (bwd_bias_f32_at, bwd_dbias_f32_put). nqn and
 * bias are always literals; the plain kernels pass literal zeros for the
 * other flags too (bwd_p_ds_forms), so their forms compile to straight-line
 * code: the plain unmasked form is one FFMA, one MUFU, one FADD and two
 * FMULs an element, where run-time tests would cost several times that;
 * the score-feature kernels pass the problem's flags. */
__device__ __forceinline__ void bwd_p_ds(float (*ss)[4], float (*sp)[4], const int nqn,
                                         const sdpa_bwd_params *prm, const float *lse_t,
                                         const float *dd_t, int b, int hh, int j_lo, int q0,
                                         int lane, int sq, int sk, int off, uint32_t keep_bits,
                                         const uint32_t (*bv)[2], const bwd_dbias_dst *db,
                                         const int softcap, const int alibi, const int drop,
                                         const int mask, const int bias) {
  const sdpa_problem *p = &prm->p;
  const int g = lane >> 2, t = lane & 3;
  const float slope2 = alibi ? p->alibi[b * p->alibi_sb + hh * p->alibi_sh] * SDPA_LOG2E : 0.f;
  const int dj0 = j_lo + g - q0 - 2 * t - off; /* j - i - off at nq = 0, e = 0 */
#pragma unroll
  for (int nq = 0; nq < nqn; ++nq) {
    const float2 l2 = *(const float2 *)(lse_t + nq * 8 + 2 * t);
    const float2 d2 = *(const float2 *)(dd_t + nq * 8 + 2 * t);
    uint32_t kb[2] = {0u, 0u};
    if (drop) {
      kb[0] = __shfl_sync(0xffffffffu, keep_bits, nq * 8 + 2 * t);
      kb[1] = __shfl_sync(0xffffffffu, keep_bits, nq * 8 + 2 * t + 1);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int dj = dj0 - nq * 8 - (e & 1) + (e >> 1) * 8;
      const int j = j_lo + g + (e >> 1) * 8, i = q0 + nq * 8 + 2 * t + (e & 1);
      const float l = (e & 1) ? l2.y : l2.x;
      float pr, deriv = 1.f;
      const float bf = bias == 3   ? bwd_bias_f32_at(p, b, hh, i, j, sq, sk)
                       : bias      ? bwd_h_to_f32(bv[nq][e >> 1] >> (16 * (e & 1)), bias == 2)
                                   : 0.f;
      if (!softcap && !alibi) {
        pr = fast_exp2(fmaf(ss[nq][e], prm->score_mul, bias ? fmaf(bf, SDPA_LOG2E, -l) : -l));
      } else {
        float x = ss[nq][e] * prm->score_mul;
        if (softcap) {
          const float th = fast_tanh_pre(x);
          deriv = 1.f - th * th;
          x = th * prm->softcap_post;
        }
        if (bias) x = fmaf(bf, SDPA_LOG2E, x);
        if (alibi) x -= slope2 * fabsf((float)(dj + off - (sk - sq)));
        pr = fast_exp2(x - l);
      }
      if (mask && (dj < -prm->wl || dj > prm->wr || j >= sk || i >= sq)) pr = 0.f;
      float dpv = sp[nq][e], pk = pr;
      if (drop) {
        const float keep =
            (kb[e & 1] >> sdpa_keep16_pos((uint32_t)(g + 8 * (e >> 1)))) & 1u ? prm->drop_scale
                                                                                : 0.f;
        dpv *= keep;
        pk *= keep;
      }
      const float dsv = pr * (dpv - ((e & 1) ? d2.y : d2.x));
      if (bias == 3 && db->lane) {
        bwd_dbias_f32_put(p, b, hh, i, j, sq, sk, dsv);
      } else if (bias && db->lane) {
        const uint32_t a = db->lane + (uint32_t)(nq * 8 + (e & 1)) * db->row + db->col[e & 1][e >> 1];
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(a), "h"(bwd_f32_to_h(dsv, bias == 2)));
      }
      sp[nq][e] = softcap ? dsv * deriv : dsv;
      ss[nq][e] = pk;
    }
  }
}

/* Dropout keep bits of one sub-step, one Philox call per (query, 16-key
 * block) for the whole warp: lane L evaluates query q0 + L against keys
 * j_lo .. j_lo + 15 (j_lo a multiple of 16) and returns
 * sdpa_dropout_keep16's word: key j_lo + r is kept iff bit
 * sdpa_keep16_pos(r) is set. Element (query q0 + c, key row r) then reads
 * that bit of lane c's word by a shuffle: one call a lane instead of one an
 * element (each call gives sixteen fields). Made before the sub-step's S / dP
 * products: its temporaries are dead by the time the scores take their
 * registers. */
__device__ __forceinline__ uint32_t bwd_keep_bits(const sdpa_problem *p, uint32_t bh, int q0,
                                                  int j_lo, int lane) {
  return sdpa_dropout_keep16(
      sdpa_dropout_bits(p->seed, p->offset, bh, (uint32_t)(q0 + lane), (uint32_t)(j_lo >> 4)),
      p->drop_threshold);
}

/* bwd_p_ds for the plain (feat 0) and score-feature (feat 1) kernels, feat
 * a literal: the unmasked tiles of the plain kernel, by far the most common,
 * get their own straight-line form, the masked ones the masked form, the
 * feature kernel the general one (dropout only where the body can run it:
 * drop_ok, a literal). */
__device__ __forceinline__ void bwd_p_ds_forms(float (*ss)[4], float (*sp)[4], const int nqn,
                                               const sdpa_bwd_params *prm, const float *lse_t,
                                               const float *dd_t, int b, int hh, int j_lo, int q0,
                                               int lane, int sq, int sk, int off,
                                               uint32_t keep_bits, const int feat, int full,
                                               const int drop_ok) {
  if (!feat && full)
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, 0u, NULL, NULL, 0,
             0, 0, 0, 0);
  else if (!feat)
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, 0u, NULL, NULL, 0,
             0, 0, 1, 0);
  else
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, keep_bits, NULL,
             NULL, prm->has_softcap, prm->has_alibi, drop_ok && prm->has_dropout, !full, 0);
}

/* bwd_p_ds for the bias kernels: the problem's score features (and dropout
 * where the body can run it: drop_ok, a literal) when it has any, else the
 * bias-only forms, unmasked (full) or masked. */
__device__ __forceinline__ void bwd_p_ds_bias_forms(float (*ss)[4], float (*sp)[4], const int nqn,
                                                    const sdpa_bwd_params *prm,
                                                    const float *lse_t, const float *dd_t, int b,
                                                    int hh, int j_lo, int q0, int lane, int sq,
                                                    int sk, int off, uint32_t keep_bits,
                                                    const uint32_t (*bv)[2],
                                                    const bwd_dbias_dst *db, int full,
                                                    const int bias_kind, const int drop_ok) {
  if (prm->has_softcap || prm->has_alibi || (drop_ok && prm->has_dropout))
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, keep_bits, bv, db,
             prm->has_softcap, prm->has_alibi, drop_ok && prm->has_dropout, !full, bias_kind);
  else if (full)
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, 0u, bv, db, 0, 0,
             0, 0, bias_kind);
  else
    bwd_p_ds(ss, sp, nqn, prm, lse_t, dd_t, b, hh, j_lo, q0, lane, sq, sk, off, 0u, bv, db, 0, 0,
             0, 1, bias_kind);
}

#endif /* SDPA_BWD_SCORES_CUH */
