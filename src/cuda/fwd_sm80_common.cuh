/*
 * fwd_sm80_common.cuh - what every instance of the sm80 forward shares: the
 * kernel's parameter struct (the validated problem by value plus the
 * constants the host folds for it) and the small warp-level helpers of the
 * online softmax. Included once per instance translation unit.
 */
#ifndef SDPA_FWD_SM80_COMMON_CUH
#define SDPA_FWD_SM80_COMMON_CUH

#include <stdint.h>

#include "../problem.h"

/* Passed by value (__grid_constant__) to every sm80 forward kernel. */
typedef struct sdpa_fwd_sm80_params {
  sdpa_problem p;
  float score_mul;    /* scale * log2(e): scores go to the exp2 domain in one multiply;
                         with softcap: 2 * log2(e) * scale / softcap (see fast_tanh_pre) */
  float exp_mul;      /* multiplier the softmax applies (score_mul when fold, else 1) */
  int fold;           /* 1: scores stay unscaled until the softmax's FFMA */
  float softcap_post; /* softcap * log2(e) */
  float out_scale;    /* 1 / (1 - dropout_p), or 1 */
  int h_per_hk;       /* h / h_k: query heads per kv head */
  int has_softcap, has_alibi, has_dropout;
  int has_bias;       /* additive bias (p.bias; fold off): added in finish_scores */
} sdpa_fwd_sm80_params;

#define SDPA_LOG2E 1.4426950408889634f
#define SDPA_LN2 0.6931471805599453f

/* 2^x by the SFU (ex2.approx.ftz): 2^-inf = +0, ~2 ulp; the accuracy FA2 uses. */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* tanh(y) given x = 2 * log2(e) * y, as 1 - 2 / (1 + 2^x): a few registers
 * (tanhf's polynomial spilled the d = 128 tile), absolute error ~1e-7, and
 * exact limits +-1 for large |y| (2^x overflows to inf or underflows to 0). */
__device__ __forceinline__ float fast_tanh_pre(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(1.f + fast_exp2(x)));
  return 1.f - 2.f * r;
}

/* The two 16-bit halves of a bias word (lo = the lower address) to fp32.
 * bf16: the top half of an fp32; f16: cvt (cuda_fp16.h is C++-only API). */
__device__ __forceinline__ float fwd_bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float fwd_bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float fwd_f16_lo(uint32_t w) {
  float f;
  asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.f32.f16 %0, l;\n}\n" : "=f"(f) : "r"(w));
  return f;
}
__device__ __forceinline__ float fwd_f16_hi(uint32_t w) {
  float f;
  asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.f32.f16 %0, h;\n}\n" : "=f"(f) : "r"(w));
  return f;
}

/* max / sum over the 4 lanes of a quad (the lanes that share an mma row). */
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

#endif /* SDPA_FWD_SM80_COMMON_CUH */
