/*
 * scores.c - the CPU backend's score pipeline between q.k and the softmax:
 * softcap, bias, alibi and the mask on one tile (sdpa_cpu_score_tile), the
 * dropout bits of a tile, and a polynomial exp / row max written so the
 * compiler vectorizes them. The hot loops are compiled for x86-64-v4, -v3 and
 * the baseline and picked at load time (GCC target_clones) where available.
 */
#include "scores.h"

#include <math.h>
#include <string.h>

#include "../common/dtype.h"
#include "../common/philox.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SDPA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SDPA_CPU_CLONES
#endif

int sdpa_cpu_tile_needs_scores(const sdpa_problem *p, int64_t sq, int64_t sk, int64_t i0,
                               int64_t mi, int64_t j0, int64_t nj) {
  if (p->softcap > 0.0f || p->bias || p->alibi) return 1;
  if (j0 + nj > sk) return 1;
  /* lo(i) and hi(i) are nondecreasing in i: check the first and last rows */
  int64_t lo, hi;
  sdpa_key_range(p, i0 + mi - 1, sq, sk, &lo, &hi);
  if (lo > j0) return 1;
  sdpa_key_range(p, i0, sq, sk, &lo, &hi);
  if (hi < j0 + nj) return 1;
  return 0;
}

void sdpa_cpu_score_tile(const sdpa_problem *p, int64_t b, int64_t hh, int64_t sq, int64_t sk,
                         int64_t i0, int64_t mi, int64_t j0, int64_t nj, float *s, int64_t lds,
                         float *tanh_out) {
  const float cap = p->softcap;
  const float inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
  const float slope = p->alibi ? p->alibi[b * p->alibi_sb + hh * p->alibi_sh] : 0.0f;
  for (int64_t r = 0; r < mi; ++r) {
    const int64_t i = i0 + r;
    float *row = s + r * lds;
    int64_t lo, hi;
    sdpa_key_range(p, i, sq, sk, &lo, &hi);
    if (hi > sk) hi = sk;
    /* visible columns of this row inside the tile: [c0, c1) */
    int64_t c0 = lo - j0, c1 = hi - j0;
    if (c0 < 0) c0 = 0;
    if (c1 > nj) c1 = nj;
    if (c1 < c0) c1 = c0;
    if (cap > 0.0f) {
      float *trow = tanh_out ? tanh_out + r * lds : NULL;
      for (int64_t c = c0; c < c1; ++c) {
        float t = tanhf(row[c] * inv_cap);
        row[c] = cap * t;
        if (trow) trow[c] = t;
      }
      if (trow) {
        for (int64_t c = 0; c < c0; ++c) trow[c] = 0.0f;
        for (int64_t c = c1; c < nj; ++c) trow[c] = 0.0f;
      }
    }
    if (p->bias) {
      const int64_t base = b * p->bias_sb + hh * p->bias_sh + i * p->bias_sq + j0 * p->bias_sk;
      const int64_t st = p->bias_sk;
      if (p->dtype == SDPA_DTYPE_F32) {
        const float *bp = (const float *)p->bias + base;
        for (int64_t c = c0; c < c1; ++c) row[c] += bp[c * st];
      } else {
        for (int64_t c = c0; c < c1; ++c) row[c] += sdpa_load(p->bias, p->dtype, base + c * st);
      }
    }
    if (p->alibi) {
      /* s -= slope * |i + sk - sq - j| (always bottom-right anchored) */
      const int64_t diag = i + sk - sq - j0;
      for (int64_t c = c0; c < c1; ++c) {
        int64_t dist = diag - c;
        if (dist < 0) dist = -dist;
        row[c] -= slope * (float)dist;
      }
    }
    for (int64_t c = 0; c < c0; ++c) row[c] = -INFINITY;
    for (int64_t c = c1; c < nj; ++c) row[c] = -INFINITY;
  }
}

void sdpa_cpu_dropout_tile(const sdpa_problem *p, int64_t b, int64_t hh, int64_t i0, int64_t mi,
                           int64_t j0, int64_t nj, uint8_t *drop, int64_t ldd) {
  const uint32_t bh = (uint32_t)(b * p->h + hh);
  const uint32_t thr = p->drop_threshold;
  for (int64_t r = 0; r < mi; ++r) {
    const uint32_t i = (uint32_t)(i0 + r);
    uint8_t *d = drop + r * ldd;
    int64_t c = 0;
    while (c < nj) {
      const uint32_t j = (uint32_t)(j0 + c);
      sdpa_u32x4 bits = sdpa_dropout_bits(p->seed, p->offset, bh, i, j >> 4);
      /* fields j % 16 .. 15 of this block */
      for (uint32_t f = j & 15u; f < 16u && c < nj; ++f, ++c)
        d[c] = (uint8_t)(sdpa_dropout_field(bits, f) < thr);
    }
  }
}

/* ---- vectorizable exp / max ------------------------------------------------ */

/* exp(x) for x <= 0 (and -inf): 2^n * P(r), r = x - n ln2 in [-ln2/2, ln2/2],
 * degree-6 Taylor/minimax polynomial; results below 2^-126 flush to 0. */
SDPA_CPU_CLONES
float sdpa_cpu_exp_sum(const float *x, float m, float *y, int64_t n) {
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  const float magic = 12582912.0f; /* 1.5 * 2^23: round to nearest integer */
  for (int64_t k = 0; k < n; ++k) {
    float v = x[k] - m;
    float vc = v > -87.0f ? v : -87.0f; /* also maps -inf to -87 */
    float t = vc * log2e + magic;
    float nf = t - magic;
    float r = vc - nf * ln2_hi;
    r = r - nf * ln2_lo;
    float poly = 1.9875691500e-4f;
    poly = poly * r + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r * r + r + 1.0f;
    /* t's low mantissa bits hold n (+ 0x400000): 2^n = (n + 127) << 23 */
    union {
      float f;
      uint32_t u;
    } tb, sc;
    tb.f = t;
    sc.u = (tb.u - 0x4B400000u + 127u) << 23;
    const float scale = sc.f;
    /* flush what would underflow past 2^-126 (v < -87) to 0 */
    float keep = (float)(v >= -87.0f);
    y[k] = poly * scale * keep;
  }
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = 0.0f;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    for (int l = 0; l < 16; ++l) acc[l] += y[k + l];
  float sum = 0.0f;
  for (; k < n; ++k) sum += y[k];
  for (int l = 0; l < 16; ++l) sum += acc[l];
  return sum;
}

SDPA_CPU_CLONES
float sdpa_cpu_max(const float *x, int64_t n) {
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = -INFINITY;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    for (int l = 0; l < 16; ++l) acc[l] = x[k + l] > acc[l] ? x[k + l] : acc[l];
  float mx = -INFINITY;
  for (; k < n; ++k) mx = x[k] > mx ? x[k] : mx;
  for (int l = 0; l < 16; ++l) mx = acc[l] > mx ? acc[l] : mx;
  return mx;
}
