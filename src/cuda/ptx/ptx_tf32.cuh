/*
 * ptx_tf32.cuh - the fp32 tensor-core primitives of the 3xTF32 kernels:
 * mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (mma_m16n8k8_tf32), the
 * split of an fp32 value into a tf32 "big" part and its exact fp32 remainder
 * (tf32_split), and the three-mma product that recovers fp32-class accuracy
 * from them (mma_3xtf32). Minimum arch: sm_80.
 *
 * Contract (PTX ISA, "Matrix fragments for mma.m16n8k8", .tf32): lane =
 * 4*g + t, g = lane / 4 in 0..7, t = lane % 4 in 0..3; one element per
 * 32-bit register.
 *   A (16x8, row-major) a[4]: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
 *   B (8x8, "col") b[2]: b0 = B[t][g], b1 = B[t+4][g]
 *   C/D (16x8 fp32) c[4]: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * The tensor core reads the top 19 bits of each operand register (the low 13
 * are ignored: truncation), so an unrounded fp32 remainder is a valid operand
 * to ~2^-22 of the value it belongs to. All 32 lanes must execute the
 * instruction (.aligned). The asm is not volatile (a pure function of its
 * registers), as in ptx_mma.cuh.
 */
#ifndef SDPA_PTX_TF32_CUH
#define SDPA_PTX_TF32_CUH

#include <stdint.h>

/* d += a * b, tf32 operands (the top 19 bits of each register), fp32 accumulators. */
__device__ __forceinline__ void mma_m16n8k8_tf32(float *d, const uint32_t *a, const uint32_t *b) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* x = big + small: big = x rounded to tf32 (nearest, ties away from zero; an
 * integer add and mask: cvt.rna.tf32.f32 is four instructions), small = the
 * exact remainder. */
__device__ __forceinline__ void tf32_split(float x, uint32_t *big, uint32_t *small) {
  const uint32_t b = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  *big = b;
  *small = __float_as_uint(x - __uint_as_float(b));
}

/* d += a * b in 3xTF32 (a = ah + al, b = bh + bl): the small products first. */
__device__ __forceinline__ void mma_3xtf32(float *d, const uint32_t *ah, const uint32_t *al,
                                           const uint32_t *bh, const uint32_t *bl) {
  mma_m16n8k8_tf32(d, al, bh);
  mma_m16n8k8_tf32(d, ah, bl);
  mma_m16n8k8_tf32(d, ah, bh);
}

#endif /* SDPA_PTX_TF32_CUH */
