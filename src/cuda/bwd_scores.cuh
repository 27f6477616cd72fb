/*
 * bwd_scores.cuh - the elementwise middle of the backward, shared by the
 * 16-bit (bwd_sm80_body.cuh) and the fp32 tensor-core (bwd_tf32_body.cuh)
 * kernels: from a warp's S^T and dP^T accumulators (16 keys x 8 nqn
 * queries, fp32, m16n8 C layout) to P (the dV operand) and dS (the dK / dQ
 * operand), with the forward's score modifiers (softcap, alibi, causal /
 * window in both alignments, sequence ends) and dropout. Included once per
 * instance translation unit, after sdpa_bwd_sm80_params and the fast
 * exp2 / tanh helpers (bwd_sm80_common.cuh, fwd_sm80_common.cuh).
 */
#ifndef SDPA_BWD_SCORES_CUH
#define SDPA_BWD_SCORES_CUH

#include <math.h>
#include <stdint.h>

#include "bwd_sm80_common.cuh"
#include "fwd_sm80_common.cuh"

/* P and dS of one sub-step, in place: ss (S^T, this warp's 16 keys x 8 nqn
 * queries) becomes P times keep / (1 - p) (the dV operand) and sp (dP^T)
 * becomes dS = P (dP keep / (1 - p) - D) (times 1 - tanh^2 under softcap).
 * Lane (g, t); key of element (nq, e): j_lo + g + 8 (e >> 1); query:
 * q0 + 8 nq + 2 t + (e & 1) (the m16n8 accumulator layout of both the
 * 16-bit and the tf32 mma); keep_bits from bwd_keep_bits when drop. nqn,
 * softcap, alibi, drop and mask are literals at each call site, so each call
 * compiles to its own code: the plain unmasked form is one FFMA, one MUFU,
 * one FADD and two FMULs an element (the run-time tests it replaces cost
 * about 20 instructions an element; bench/NOTES.md). */
__device__ __forceinline__ void bwd_p_ds(float (*ss)[4], float (*sp)[4], const int nqn,
                                         const sdpa_bwd_sm80_params *prm, const float *lse_t,
                                         const float *dd_t, int b, int hh, int j_lo, int q0,
                                         int lane, int sq, int sk, int off, uint32_t keep_bits,
                                         const int softcap, const int alibi, const int drop,
                                         const int mask) {
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
      if (!softcap && !alibi) {
        pr = fast_exp2(fmaf(ss[nq][e], prm->score_mul, -l));
      } else {
        float x = ss[nq][e] * prm->score_mul;
        if (softcap) {
          const float th = fast_tanh_pre(x);
          deriv = 1.f - th * th;
          x = th * prm->softcap_post;
        }
        if (alibi) x -= slope2 * fabsf((float)(dj + off - (sk - sq)));
        pr = fast_exp2(x - l);
      }
      if (mask && (dj < -prm->wl || dj > prm->wr || j >= sk || i >= sq)) pr = 0.f;
      float dpv = sp[nq][e], pk = pr;
      if (drop) {
        const float keep = (kb[e & 1] >> (g + 8 * (e >> 1))) & 1u ? prm->drop_scale : 0.f;
        dpv *= keep;
        pk *= keep;
      }
      const float dsv = pr * (dpv - ((e & 1) ? d2.y : d2.x));
      sp[nq][e] = softcap ? dsv * deriv : dsv;
      ss[nq][e] = pk;
    }
  }
}

#endif /* SDPA_BWD_SCORES_CUH */
