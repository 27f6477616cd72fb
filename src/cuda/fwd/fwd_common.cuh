/*
 * fwd_common.cuh - what the forward bodies share (fwd_sm80_body.cuh: fp16 /
 * bf16 on mma.sync; fwd_tf32_body.cuh: fp32 in 3xTF32; fwd_sm90_body.cuh): the
 * kernel's parameter struct (the validated problem by value plus the
 * constants the host folds for it) and the host function that folds them
 * (fwd_launch.cu), a block's view of its problem (fwd_block: batch, head,
 * lengths, the key tiles it visits, its rows' mask geometry), and the small
 * warp-level helpers of the online softmax. The tile math that depends on an
 * instance's geometry is in fwd_softmax.cuh. Included once per instance
 * translation unit.
 */
#ifndef SDPA_FWD_COMMON_CUH
#define SDPA_FWD_COMMON_CUH

#include <stdint.h>

#include "problem.h"
#include "registry.h"

/* Passed by value (__grid_constant__) to every mma.sync forward kernel (16-bit and tf32). */
typedef struct sdpa_fwd_params {
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
} sdpa_fwd_params;

/* Host side (fwd_launch.cu). The parameters of p for the kernel, and its
 * grid (query blocks of bm rows, heads, batch); SDPA_ERR_NOT_SUPPORTED
 * naming `name` when the grid exceeds CUDA's limits. p is validated and has
 * work (b, h, s_q > 0). */
extern "C" sdpa_status sdpa_fwd_params_init(const sdpa_problem *p, int bm, const char *name,
                                            sdpa_fwd_params *prm, dim3 *grid);

/* Launches kernel(*params), a kernel of one by-value parameter, on `stream`
 * with `smem` bytes of dynamic shared memory (the limit raised as below). */
extern "C" sdpa_status sdpa_kernel_launch1(const void *kernel, const void *params, void *stream,
                                           dim3 grid, int threads, int smem,
                                           unsigned char *smem_set, const char *name);

/* The sm80 forward rows' own rule (their fast kernels): no bias with
 * dropout, and a bias whose rows cp.async copies in whole 16-byte chunks;
 * the _full rows take the rest. */
extern "C" const char *sdpa_fwd_sm80_refuse(const sdpa_problem *p, const sdpa_kernel_row *row,
                                            char *why, size_t n);


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

/* The low or high (hi) 16-bit half of a bias word (low = the lower address)
 * to fp32, bf16 or f16 (both literals). bf16: the top half of an fp32; f16:
 * cvt (cuda_fp16.h is C++-only API). One half at a time, each next to its
 * use: converting both first lengthens live ranges in the register-bound
 * bias kernels. */
__device__ __forceinline__ float fwd_half_to_f32(uint32_t w, const int hi, const int bf16) {
  if (bf16) return __uint_as_float(hi ? w & 0xffff0000u : w << 16);
  float f;
  if (hi)
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.f32.f16 %0, h;\n}\n" : "=f"(f) : "r"(w));
  else
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.f32.f16 %0, l;\n}\n" : "=f"(f) : "r"(w));
  return f;
}

/* A 16-byte chunk of 16-bit output elements to global memory: whole when
 * rem >= 8, else its first rem elements (the head dim ends inside it).
 * The output epilogue of the 16-bit forwards (sm80 and sm90). */
__device__ __forceinline__ void store_chunk16(uint16_t *dst, uint4 v, int rem) {
  if (rem >= 8) {
    *(uint4 *)dst = v;
    return;
  }
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 7; ++k)
    if (k < rem) dst[k] = (uint16_t)(w[k >> 1] >> (16 * (k & 1)));
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

/* Per-thread view of its rows: row (mt, half) is i0 + mt*16 + half*8 inside
 * the sequence. Key j is visible from row i iff -wl <= j - (i + off) <= wr
 * and j < sk (sdpa_key_range; wl, wr = 2^30 when unbounded): written in
 * j - i so that one per-tile base and compile-time constants give every
 * element's test, keeping registers for the accumulators. */
typedef struct fwd_rows {
  int i0;
  int off, wl, wr, sk;
} fwd_rows;

__device__ __forceinline__ int row_i(const fwd_rows *rw, int mt, int hf) {
  return rw->i0 + mt * 16 + hf * 8;
}

/* What one block (or one work item of a Hopper block) computes: the
 * mma.sync forwards' blockIdx.(x, y, z) = (query block counted from the
 * last, so heavier causal blocks start first; head; batch). Filled by
 * fwd_block_init(_at), then fwd_block_rows. */
typedef struct fwd_block {
  int b, hh, hk;      /* batch, query head, its kv head */
  int sq, sk, d;      /* this batch's sequence lengths, the head dim */
  int m0;             /* first query row of the block */
  int n_begin, n_end; /* key tiles [n_begin, n_end): those some row of the block sees */
  int64_t lo1, hi0;   /* keys [lo1, hi0) every row of the block sees (no mask there) */
  int alibi_off;      /* s_k - s_q: alibi's distance is |i + alibi_off - j| */
  float slope2;       /* alibi slope * log2(e) (0 without alibi) */
  fwd_rows rw;        /* this thread's rows */
} fwd_block;

/* Who query block m_block of head hh, batch b is: lengths, first query row
 * (bm rows a block); 0 when it has no query row (varlen: past this batch's
 * s_q), so the kernel returns (or skips the item) before any address math. */
__device__ __forceinline__ int fwd_block_init_at(fwd_block *kb, const sdpa_fwd_params *prm,
                                                 int bm, int m_block, int hh, int b) {
  const sdpa_problem *p = &prm->p;
  kb->hh = hh;
  kb->b = b;
  kb->sq = (int)sdpa_seq_len_q(p, kb->b);
  kb->m0 = m_block * bm;
  if (kb->m0 >= kb->sq) return 0;
  kb->sk = (int)sdpa_seq_len_k(p, kb->b);
  kb->hk = kb->hh / prm->h_per_hk;
  kb->d = (int)p->d;
  return 1;
}

/* fwd_block_init_at for this block of the grid (query blocks counted from
 * the last, heads, batch). */
__device__ __forceinline__ int fwd_block_init(fwd_block *kb, const sdpa_fwd_params *prm,
                                              int bm) {
  return fwd_block_init_at(kb, prm, bm, (int)gridDim.x - 1 - (int)blockIdx.x, (int)blockIdx.y,
                           (int)blockIdx.z);
}

/* What the block visits: key tiles of bn keys, the rows of this thread
 * (rows mw a warp; g = lane / 4) and their mask and alibi geometry. Kept
 * apart from fwd_block_init and called after the kernel's address math:
 * the 16-bit kernels sit at 255 registers, and computing these earlier
 * makes ptxas spill. */
__device__ __forceinline__ void fwd_block_rows(fwd_block *kb, const sdpa_fwd_params *prm,
                                              int bm, int bn, int mw, int warp, int g) {
  const sdpa_problem *p = &prm->p;
  const int sq = kb->sq, sk = kb->sk;
  /* keys [lo1, hi0) every row sees: the last row's lo, the first row's hi
   * (the rows sdpa_key_tiles reads too; ranges first, then the tiles: the
   * other order spilled 12 bytes in the d = 128 bias kernels, sm_90a) */
  int64_t lo0, hi1;
  sdpa_key_range(p, kb->m0, sq, sk, &lo0, &kb->hi0);
  sdpa_key_range(p, min(kb->m0 + bm, sq) - 1, sq, sk, &kb->lo1, &hi1);
  sdpa_key_tiles(p, kb->m0, bm, bn, sq, sk, &kb->n_begin, &kb->n_end);
  kb->rw.i0 = kb->m0 + warp * mw + g;
  kb->rw.off = p->bottom_right ? sk - sq : 0;
  kb->rw.wl = sdpa_window_clamp(p->window_left);
  kb->rw.wr = sdpa_window_clamp(p->window_right);
  kb->rw.sk = sk;
  kb->alibi_off = sk - sq;
  kb->slope2 =
      prm->has_alibi ? p->alibi[kb->b * p->alibi_sb + kb->hh * p->alibi_sh] * SDPA_LOG2E : 0.f;
}

#endif /* SDPA_FWD_COMMON_CUH */
