/*
 * ptx_wgmma.cuh - Hopper's warpgroup matrix multiply (wgmma.mma_async,
 * sm_90a only) for the sm90 forward: shared-memory matrix descriptors in the
 * 128-byte swizzle, the m64nNk16 products with fp32 accumulators (A from
 * shared memory or from registers, B from shared memory), and the fence /
 * commit / wait that order them.
 *
 * Contract (PTX ISA 9.7.15): the four warps of a warpgroup (warps 4w..4w+3)
 * issue each instruction together. The accumulator of m64nN is, per warp
 * (rows 16 * (warp % 4) ..), the mma.sync m16n8 layout repeated over N / 8
 * column tiles: d[j][0..1] = row g, columns 8j + 2t, +1; d[j][2..3] = row
 * g + 8 (g = lane / 4, t = lane % 4). A in registers is the mma.sync
 * m16n8k16 A fragment of the warp's 16 rows, so a score accumulator packed to
 * 16 bits pairwise is the A operand of the next product (as with mma.sync).
 * Shared operands: tiles of 64-element (128-byte) rows, the 16-byte chunk c
 * of row r stored at chunk c ^ (r % 8), tile bases 1024-byte aligned (what
 * the tensor-memory copy writes with CU_TENSOR_MAP_SWIZZLE_128B). K-major
 * (rows along M / N, the reduction dim contiguous): SBO = 1024 (8 rows), LBO
 * unused; a k16 step inside a row advances the start address by 32 bytes.
 * MN-major (imm-trans-b = 1; rows along K, N contiguous): SBO = 1024 (8 K
 * rows), LBO = the distance between 64-column blocks.
 * The asm carries the accumulators as "+f" operands, and wg_wait0 is
 * followed by wg_fence_acc on them so that no read of an accumulator moves
 * above the wait.
 */
#ifndef SDPA_PTX_WGMMA_CUH
#define SDPA_PTX_WGMMA_CUH

#include <stdint.h>

/* A shared-memory matrix descriptor, 128-byte swizzle (mode 1, bits 62-63). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

/* The descriptor of the address `bytes` (a literal multiple of 16) past d's:
 * the start address field holds address / 16 and shared addresses stay below
 * 2^18, so the field never carries. One add, not a descriptor rebuilt. */
__device__ __forceinline__ uint64_t wg_desc_at(uint64_t d, const uint32_t bytes) {
  return d + (bytes >> 4);
}

__device__ __forceinline__ void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0(void) {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* All but the most recent committed group complete (the older ones, in
 * commit order). */
__device__ __forceinline__ void wg_wait1(void) {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
/* All but the two most recent committed groups complete. */
__device__ __forceinline__ void wg_wait2(void) {
  asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
}

/* Pins n8 column tiles [0, n) of an accumulator in place (no code): reads of
 * them cannot move above, nor writes below, this point. */
__device__ __forceinline__ void wg_fence_acc(float (*d)[4], int n) {
#pragma unroll
  for (int j = 0; j < n; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

/* "%0, ..., %9" style operand lists: WG_S10(x) = %x0 .. %x9. */
#define WG_S10(x) "%" #x "0, %" #x "1, %" #x "2, %" #x "3, %" #x "4, %" #x "5, %" #x "6, %" #x "7, %" #x "8, %" #x "9"
#define WG_ACC_16 "{" WG_S10() ", %10, %11, %12, %13, %14, %15}"
#define WG_ACC_32 "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", %30, %31}"
#define WG_ACC_40 "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", " WG_S10(3) "}"
#define WG_ACC_48 "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", " WG_S10(3) ", %40, %41, %42, %43, %44, %45, %46, %47}"
#define WG_ACC_64                                                                           \
  "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", " WG_S10(3) ", " WG_S10(4) ", " WG_S10(5) \
  ", %60, %61, %62, %63}"
#define WG_ACC_96                                                                           \
  "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", " WG_S10(3) ", " WG_S10(4) ", " WG_S10(5) \
  ", " WG_S10(6) ", " WG_S10(7) ", " WG_S10(8) ", %90, %91, %92, %93, %94, %95}"
#define WG_ACC_128                                                                          \
  "{" WG_S10() ", " WG_S10(1) ", " WG_S10(2) ", " WG_S10(3) ", " WG_S10(4) ", " WG_S10(5) \
  ", " WG_S10(6) ", " WG_S10(7) ", " WG_S10(8) ", " WG_S10(9) ", " WG_S10(10) ", "        \
  WG_S10(11) ", %120, %121, %122, %123, %124, %125, %126, %127}"
#define WG_F4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define WG_F16(d, j) WG_F4(d, (j)), WG_F4(d, (j) + 1), WG_F4(d, (j) + 2), WG_F4(d, (j) + 3)
#define WG_OPS_16(d) WG_F16(d, 0)
#define WG_OPS_32(d) WG_F16(d, 0), WG_F16(d, 4)
#define WG_OPS_40(d) WG_OPS_32(d), WG_F4(d, 8), WG_F4(d, 9)
#define WG_OPS_48(d) WG_OPS_32(d), WG_F16(d, 8)
#define WG_OPS_64(d) WG_OPS_32(d), WG_F16(d, 8), WG_F16(d, 12)
#define WG_OPS_96(d) WG_OPS_64(d), WG_F16(d, 16), WG_F16(d, 20)
#define WG_OPS_128(d) WG_OPS_64(d), WG_F16(d, 16), WG_F16(d, 20), WG_F16(d, 24), WG_F16(d, 28)

/* d (+)= A B, A and B from shared memory; scale_d = 0 overwrites d.
 * wgmma_ss_m64n<N>_<ty>(d, desc_a, desc_b, scale_d): both K-major;
 * wgmma_sst_m64n<N>_<ty>: A K-major, B MN-major (imm-trans-b = 1: B stored
 * with N contiguous; the backward's dV = P^T dO from a P^T tile);
 * wgmma_sstt_m64n<N>_<ty>: both MN-major (imm-trans-a = 1 too: A stored with
 * M contiguous; the backward's dQ = dS K from dS^T and K tiles). */
#define WG_DEFINE_SS(NAME, N, TY, NACC, A0, A1, A2, TA, TB)                                    \
  __device__ __forceinline__ void wgmma_##NAME##_m64n##N##_##TY(float (*d)[4], uint64_t da,   \
                                                                uint64_t db, int scale_d) {    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " A2 ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "            \
                 WG_ACC_##NACC ", " A0 ", " A1 ", p, 1, 1, " TA ", " TB ";\n}\n"               \
                 : WG_OPS_##NACC(d)                                                            \
                 : "l"(da), "l"(db), "r"(scale_d));                                           \
  }

/* d (+)= A B, A (the packed 16-bit fragment a[4]) from registers, B from
 * shared memory N-major (imm-trans-b = 1); scale_d = 0 overwrites d.
 * wgmma_rs_m64n<N>_<ty>(d, a, desc_b, scale_d). */
#define WG_DEFINE_RS(N, TY, NACC, A0, A1, A2, A3, B, SD)                                       \
  __device__ __forceinline__ void wgmma_rs_m64n##N##_##TY(float (*d)[4], const uint32_t *a,   \
                                                          uint64_t db, int scale_d) {          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SD ", 0;\n"                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "            \
                 WG_ACC_##NACC ", {" A0 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, 1;\n}\n"  \
                 : WG_OPS_##NACC(d)                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));        \
  }

#define WG_DEFINE_TY(TY)                                                                       \
  WG_DEFINE_SS(ss, 32, TY, 16, "%16", "%17", "%18", "0", "0")                                  \
  WG_DEFINE_SS(ss, 64, TY, 32, "%32", "%33", "%34", "0", "0")                                  \
  WG_DEFINE_SS(ss, 80, TY, 40, "%40", "%41", "%42", "0", "0")                                  \
  WG_DEFINE_SS(ss, 96, TY, 48, "%48", "%49", "%50", "0", "0")                                  \
  WG_DEFINE_SS(ss, 128, TY, 64, "%64", "%65", "%66", "0", "0")                                 \
  WG_DEFINE_SS(sst, 64, TY, 32, "%32", "%33", "%34", "0", "1")                                 \
  WG_DEFINE_SS(sst, 128, TY, 64, "%64", "%65", "%66", "0", "1")                                \
  WG_DEFINE_SS(sstt, 64, TY, 32, "%32", "%33", "%34", "1", "1")                                \
  WG_DEFINE_SS(sstt, 128, TY, 64, "%64", "%65", "%66", "1", "1")                               \
  WG_DEFINE_RS(64, TY, 32, "%32", "%33", "%34", "%35", "%36", "%37")                          \
  WG_DEFINE_RS(128, TY, 64, "%64", "%65", "%66", "%67", "%68", "%69")                         \
  WG_DEFINE_RS(192, TY, 96, "%96", "%97", "%98", "%99", "%100", "%101")                      \
  WG_DEFINE_RS(256, TY, 128, "%128", "%129", "%130", "%131", "%132", "%133")

WG_DEFINE_TY(bf16)
WG_DEFINE_TY(f16)

#undef WG_DEFINE_TY
#undef WG_DEFINE_RS
#undef WG_DEFINE_SS
#undef WG_OPS_128
#undef WG_OPS_96
#undef WG_OPS_64
#undef WG_OPS_48
#undef WG_OPS_40
#undef WG_OPS_32
#undef WG_OPS_16
#undef WG_F16
#undef WG_F4
#undef WG_ACC_128
#undef WG_ACC_96
#undef WG_ACC_64
#undef WG_ACC_48
#undef WG_ACC_40
#undef WG_ACC_32
#undef WG_ACC_16
#undef WG_S10

#endif /* SDPA_PTX_WGMMA_CUH */
