/*
 * ptx_mma.cuh - the warp-level matrix multiply-accumulate of the sm80 path,
 * mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}, and the fp32 -> 16-bit
 * pair conversions that make its operands. Minimum arch: sm_80 (bf16 mma and
 * cvt.rn.{f16,bf16}x2.f32 need it).
 *
 * Contract (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane = 4*g + t,
 * g = lane / 4 in 0..7, t = lane % 4 in 0..3. Each 32-bit register holds two
 * 16-bit elements, the lower column in the low half.
 *   A (16x16, row-major) a[4]: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1],
 *                               a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]
 *   B (16x8, "col": k-major per column) b[2]: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
 *   C/D (16x8 fp32) c[4]: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * So the accumulator of S = Q K^T over keys 16k..16k+15 (n-tiles 2k, 2k+1)
 * is exactly the A operand of P @ V over the same keys once packed:
 *   a0 = pack(c[2k][0..1]), a1 = pack(c[2k][2..3]), a2 = pack(c[2k+1][0..1]), a3 = pack(c[2k+1][2..3]).
 * All 32 lanes must execute the instruction (.aligned).
 * The mma asm is not volatile (a pure function of its registers), so the
 * compiler may interleave it with the ldmatrix of the next k step; the
 * shared-memory loads stay volatile so they never cross a barrier.
 */
#ifndef SDPA_PTX_MMA_CUH
#define SDPA_PTX_MMA_CUH

#include <stdint.h>

/* d += a * b, bf16 (a literal) or fp16 operands, fp32 accumulators (in place). */
__device__ __forceinline__ void mma_m16n8k16(float *d, const uint32_t *a, const uint32_t *b,
                                             const int bf16) {
  if (bf16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* d[0] += a * b[0..1] and d[1] += a * b[2..3]: the two n8 tiles that one
 * ldmatrix_x4 of B feeds, the step every sm80 product takes. */
__device__ __forceinline__ void mma_m16n16k16(float (*d)[4], const uint32_t *a, const uint32_t *b,
                                              const int bf16) {
  mma_m16n8k16(d[0], a, b, bf16);
  mma_m16n8k16(d[1], a, b + 2, bf16);
}

/* Two fp32 -> one register of two fp16 (round to nearest even); lo in the low half. */
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* Two fp32 -> one register of two bf16 (round to nearest even); lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* The m16n8k16 A fragment made of two m16n8 accumulator tiles x[0], x[1]
 * (their columns are k 0..7 and 8..15), in bf16 (a literal) or fp16: a
 * score accumulator becomes the A operand of the next product (P V in the
 * forwards, dV / dK in the backwards) without leaving registers. */
__device__ __forceinline__ void pack_a_frag(uint32_t *a, const float (*x)[4], const int bf16) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float lo = x[e >> 1][2 * (e & 1)], hi = x[e >> 1][2 * (e & 1) + 1];
    a[e] = bf16 ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi);
  }
}

/* *dst = x as bf16 or fp16 (round to nearest even): a single 16-bit store. */
__device__ __forceinline__ void store_cvt_16(uint16_t *dst, float x, const int bf16) {
  uint16_t r;
  if (bf16)
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  *dst = r;
}

#endif /* SDPA_PTX_MMA_CUH */
