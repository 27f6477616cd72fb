/*
 * simt_common.cuh - the pieces shared by the SIMT kernels (simt_fwd.cu,
 * simt_bwd.cu): the "never refuse" family that runs on every arch the toolkit
 * targets (sm_75 and later: plain fp32 FMA on CUDA cores, no mma, no cp.async,
 * scalar loads of any alignment and any stride) and covers every head dim.
 *
 * Geometry, one block of SIMT_THREADS = 4 warps:
 *   a score tile is SIMT_BM = 16 query rows x SIMT_BN = 32 keys; warp w owns
 *   rows 4w .. 4w+3 and lane l owns key l, so a thread holds 4 scores (one per
 *   row) and the softmax row reductions are warp shuffles;
 *   q.k (and dO.v) are summed over the head dim in chunks of SIMT_DC = 32
 *   staged in shared memory, so d is unbounded;
 *   outputs with a head-dim axis are computed SIMT_CW = 128 columns per block
 *   (more column blocks for wider heads, each recomputing its scores), so the
 *   fp32 accumulators stay in registers for every d.
 * The score pipeline (simt_score) follows the contract in sdpa.h in the CPU
 * backend's order: scale * q.k, softcap, + bias, - alibi, mask; dropout comes
 * from philox.h, bit for bit the CPU's and every other kernel's.
 */
#ifndef SDPA_SIMT_COMMON_CUH
#define SDPA_SIMT_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "common/philox.h"
#include "problem.h"

enum {
  SIMT_THREADS = 128,
  SIMT_WARPS = 4,
  SIMT_BM = 16,  /* query rows per tile */
  SIMT_RPW = 4,  /* rows per warp */
  SIMT_BN = 32,  /* keys per tile (one per lane) */
  SIMT_DC = 32,  /* head-dim chunk of the q.k / dO.v reductions */
  SIMT_CW = 128, /* output columns per block */
  SIMT_NC = 4    /* SIMT_CW / 32: output columns per lane */
};

#define SIMT_FULL_MASK 0xffffffffu

/* ---- storage <-> fp32 (no cuda_fp16.h / cuda_bf16.h: they are C++) ------------- */

__device__ __forceinline__ float simt_ld(const void *base, sdpa_dtype t, int64_t idx) {
  if (t == SDPA_DTYPE_F32) return ((const float *)base)[idx];
  unsigned short h = ((const unsigned short *)base)[idx];
  if (t == SDPA_DTYPE_BF16) return __uint_as_float((uint32_t)h << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

/* Round to nearest even; bf16 by hand because cvt.rn.bf16.f32 needs sm_80. */
__device__ __forceinline__ void simt_st(void *base, sdpa_dtype t, int64_t idx, float x) {
  if (t == SDPA_DTYPE_F32) {
    ((float *)base)[idx] = x;
    return;
  }
  unsigned short h;
  if (t == SDPA_DTYPE_F16) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  } else {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      h = (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
    else
      h = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  ((unsigned short *)base)[idx] = h;
}

/* ---- warp reductions (butterfly: every lane gets the result, fixed order) ------ */

__device__ __forceinline__ float simt_warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(SIMT_FULL_MASK, x, o));
  return x;
}

__device__ __forceinline__ float simt_warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(SIMT_FULL_MASK, x, o);
  return x;
}

/* ---- tiles ------------------------------------------------------------------------ */

/* Shared staging of one reduction chunk: A rows (queries) and B rows (keys),
 * padded by one column so that lane l reading row l is conflict-free. */
typedef struct simt_stage {
  float a[SIMT_BM][SIMT_DC + 1];
  float b[SIMT_BN][SIMT_DC + 1];
} simt_stage;

/*
 * acc[r] += sum_{k < n} A[4w + r][k] * B[l][k] for the calling thread (warp w,
 * lane l). Row r of A starts at element offa[r] of a (offa[r] < 0: a zero
 * row), likewise B; both of storage dtype t. Must be called by the whole
 * block; starts with a barrier (so offa / offb written just before are
 * visible) and leaves st in use: barrier before writing st again.
 */
__device__ __forceinline__ void simt_dot_tile(const void *a, const void *bm, sdpa_dtype t,
                                              int64_t n, const int64_t *offa,
                                              const int64_t *offb, simt_stage *st,
                                              float acc[SIMT_RPW]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t k0 = 0; k0 < n; k0 += SIMT_DC) {
    const int64_t k = k0 + lane;
    const int kin = k < n;
    __syncthreads();
    for (int r = warp; r < SIMT_BM; r += SIMT_WARPS) {
      const int64_t o = offa[r];
      st->a[r][lane] = o >= 0 && kin ? simt_ld(a, t, o + k) : 0.0f;
    }
    for (int c = warp; c < SIMT_BN; c += SIMT_WARPS) {
      const int64_t o = offb[c];
      st->b[c][lane] = o >= 0 && kin ? simt_ld(bm, t, o + k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < SIMT_DC; ++kk) {
      const float bv = st->b[lane][kk];
#pragma unroll
      for (int r = 0; r < SIMT_RPW; ++r) acc[r] = fmaf(st->a[warp * SIMT_RPW + r][kk], bv, acc[r]);
    }
  }
}

/*
 * The final score of query row i, key j of (sequence b, query head hh) from
 * dot = q_i . k_j: scale, softcap, + bias, - alibi (slope of (b, hh)); -inf
 * outside the mask or the sequence. *t gets tanh(x / c) of the softcap (the
 * backward's derivative is 1 - t^2), 0 when off or masked.
 */
__device__ __forceinline__ float simt_score(const sdpa_problem *p, int64_t b, int64_t hh,
                                            int64_t sq, int64_t sk, int64_t i, int64_t j,
                                            float dot, float slope, float *t) {
  *t = 0.0f;
  if (i >= sq || j >= sk) return -INFINITY;
  int64_t lo, hi;
  sdpa_key_range(p, i, sq, sk, &lo, &hi);
  if (j < lo || j >= hi) return -INFINITY;
  float s = p->scale * dot;
  if (p->softcap > 0.0f) {
    const float th = tanhf(s * (1.0f / p->softcap));
    s = p->softcap * th;
    *t = th;
  }
  if (p->bias)
    s += simt_ld(p->bias, p->dtype,
                 b * p->bias_sb + hh * p->bias_sh + i * p->bias_sq + j * p->bias_sk);
  if (p->alibi) {
    int64_t dist = i + sk - sq - j;
    if (dist < 0) dist = -dist;
    s -= slope * (float)dist;
  }
  return s;
}

__device__ __forceinline__ float simt_slope(const sdpa_problem *p, int64_t b, int64_t hh) {
  return p->alibi ? p->alibi[b * p->alibi_sb + hh * p->alibi_sh] : 0.0f;
}

/* 1 / (1 - p) for kept elements, 0 for dropped ones, 1 without dropout. */
__device__ __forceinline__ float simt_keep(const sdpa_problem *p, int64_t b, int64_t hh, int64_t i,
                                           int64_t j) {
  if (p->dropout_p <= 0.0f) return 1.0f;
  return sdpa_dropped(p->seed, p->offset, p->drop_threshold, (uint32_t)(b * p->h + hh),
                      (uint32_t)i, (uint32_t)j)
             ? 0.0f
             : p->drop_scale;
}

/* acc[r][c] += sum over keys jj of x[r] (lane jj's) * X[jj][c0 + lane + 32 c],
 * X the [SIMT_BN, SIMT_CW] tile of base's columns c0.. (< ncols) at rows
 * off[jj] (-1: zeros), staged in t: O += P V in the forward, dQ += dS K in
 * the backward. Whole block; off published and t free on entry. */
__device__ __forceinline__ void simt_tile_product(const void *base, sdpa_dtype dt, int64_t ncols,
                                                  int64_t c0, const int64_t *off,
                                                  float (*t)[SIMT_CW], const float x[SIMT_RPW],
                                                  float acc[SIMT_RPW][SIMT_NC]) {
  const int tid = threadIdx.x, lane = tid & 31;
  for (int e = tid; e < SIMT_BN * SIMT_CW; e += SIMT_THREADS) {
    const int jr = e / SIMT_CW, col = e % SIMT_CW;
    const int64_t o = off[jr];
    t[jr][col] = o >= 0 && c0 + col < ncols ? simt_ld(base, dt, o + c0 + col) : 0.0f;
  }
  __syncthreads();
  for (int jj = 0; jj < SIMT_BN; ++jj) {
    float xv[SIMT_NC];
    for (int c = 0; c < SIMT_NC; ++c) xv[c] = t[jj][lane + 32 * c];
    for (int r = 0; r < SIMT_RPW; ++r) {
      const float w = __shfl_sync(SIMT_FULL_MASK, x[r], jj);
      for (int c = 0; c < SIMT_NC; ++c) acc[r][c] = fmaf(w, xv[c], acc[r][c]);
    }
  }
}

/* A block-stride work item's coordinates, innermost first: item = ((b * nh +
 * head) * nt + tile) * nc + inner, the order every SIMT launch counts in. */
typedef struct simt_item {
  int64_t inner, tile, head, b;
} simt_item;

__device__ __forceinline__ simt_item simt_item_split(int64_t item, int64_t nc, int64_t nt,
                                                     int64_t nh) {
  simt_item r;
  r.inner = item % nc;
  r.tile = (item / nc) % nt;
  r.head = (item / (nc * nt)) % nh;
  r.b = item / (nc * nt * nh);
  return r;
}

/* Grid size for `items` work items walked with a block-stride loop. */
static inline unsigned simt_grid(int64_t items) {
  return (unsigned)(items < 0x7fffffffLL ? (items > 0 ? items : 1) : 0x7fffffffLL);
}

#endif /* SDPA_SIMT_COMMON_CUH */
