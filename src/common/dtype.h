/*
 * dtype.h - fp16 / bf16 <-> fp32 conversions in plain C (host side), with
 * round-to-nearest-even on the way down, and typed element load/store used by
 * the CPU backend, the oracle glue and the tools. CUDA code uses the hardware
 * conversions instead.
 */
#ifndef SDPA_DTYPE_H
#define SDPA_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sdpa.h"

/* The bits of an fp32 and back (memcpy: the strict-aliasing-safe bit cast). */
static inline uint32_t sdpa_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float sdpa_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float sdpa_bf16_to_f32(uint16_t h) { return sdpa_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t sdpa_f32_to_bf16(float f) {
  uint32_t u = sdpa_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float sdpa_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400u));
      u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return sdpa_f32_from_bits(u);
}

static inline uint16_t sdpa_f32_to_f16(float f) {
  const uint32_t u = sdpa_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (a < 0x38800000u) {                                     /* subnormal or zero */
    if (a < 0x33000000u) return (uint16_t)sign;
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

static inline size_t sdpa_dtype_size(sdpa_dtype t) {
  return t == SDPA_DTYPE_F32 || t == SDPA_DTYPE_I32 ? 4 : 2;
}

/* element idx (in elements) of a float tensor of dtype t, as fp32 */
static inline float sdpa_load(const void *base, sdpa_dtype t, int64_t idx) {
  switch (t) {
  case SDPA_DTYPE_F16: return sdpa_f16_to_f32(((const uint16_t *)base)[idx]);
  case SDPA_DTYPE_BF16: return sdpa_bf16_to_f32(((const uint16_t *)base)[idx]);
  default: return ((const float *)base)[idx];
  }
}

static inline void sdpa_store(void *base, sdpa_dtype t, int64_t idx, float x) {
  switch (t) {
  case SDPA_DTYPE_F16: ((uint16_t *)base)[idx] = sdpa_f32_to_f16(x); break;
  case SDPA_DTYPE_BF16: ((uint16_t *)base)[idx] = sdpa_f32_to_bf16(x); break;
  default: ((float *)base)[idx] = x; break;
  }
}

/* x rounded to what dtype t stores (x itself for f32) */
static inline float sdpa_round(sdpa_dtype t, float x) {
  switch (t) {
  case SDPA_DTYPE_F16: return sdpa_f16_to_f32(sdpa_f32_to_f16(x));
  case SDPA_DTYPE_BF16: return sdpa_bf16_to_f32(sdpa_f32_to_bf16(x));
  default: return x;
  }
}

#endif /* SDPA_DTYPE_H */
