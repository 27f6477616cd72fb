/*
 * ptx_ldmatrix.cuh - ldmatrix.sync.aligned.m8n8.x4.shared.b16 and its .trans
 * form: four 8x8 matrices of 16-bit elements from shared memory into the mma
 * fragment layout of ptx_mma.cuh. Minimum arch: sm_75.
 *
 * Contract: lanes 8i..8i+7 give the shared-memory addresses of rows 0..7 of
 * matrix i (each row 16 contiguous bytes, 16-byte aligned). Register r[i]
 * receives matrix i: without .trans lane 4g+t holds row g, elements 2t..2t+1;
 * with .trans it holds elements (2t, g) and (2t+1, g), i.e. the transpose.
 * Use: A of Q K^T and B of Q K^T (K rows are B columns) without .trans;
 * B of P V with .trans (V is stored key-major). All 32 lanes execute it.
 */
#ifndef SDPA_PTX_LDMATRIX_CUH
#define SDPA_PTX_LDMATRIX_CUH

#include <stdint.h>

/* Shared-state-space address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t smem_u32(const void *ptr) {
  return (uint32_t)__cvta_generic_to_shared(ptr);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

#endif /* SDPA_PTX_LDMATRIX_CUH */
