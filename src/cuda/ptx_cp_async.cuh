/*
 * ptx_cp_async.cuh - asynchronous global -> shared copies (cp.async.cg, 16
 * bytes, L2 only, optionally with an L2 eviction policy; cp.async.ca, 4
 * bytes) and their group fences. Minimum
 * arch: sm_80.
 *
 * Contract: dst (shared) and src (global) are 16-byte aligned. With src_bytes
 * < 16 only src_bytes bytes are read and the rest of the 16 destination bytes
 * are zero-filled; src_bytes = 0 reads nothing (src must still be a valid
 * pointer value, e.g. the tensor's base). A copy is visible to the issuing
 * thread after cp_async_wait<n> leaves at most n of its groups pending, and to
 * the other threads of the block after a __syncthreads() that follows the wait.
 */
#ifndef SDPA_PTX_CP_ASYNC_CUH
#define SDPA_PTX_CP_ASYNC_CUH

#include <stdint.h>

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

/* An L2 policy that marks lines evict-first: for data read once (a decoding
 * step's KV cache), so the stream does not push out what is read again. */
__device__ __forceinline__ uint64_t l2_policy_evict_first(void) {
  uint64_t pol;
  /* not volatile: pure, so the compiler may hoist it out of a loop */
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}

/* cp_async_16 with an L2 policy (l2_policy_evict_first); the _full form
 * copies 16 bytes that are all there (no source size: no bounds arithmetic
 * at the call). */
__device__ __forceinline__ void cp_async_16_l2(uint32_t dst, const void *src, int src_bytes,
                                               uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes), "l"(pol));
}

__device__ __forceinline__ void cp_async_16_full_l2(uint32_t dst, const void *src, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "l"(pol));
}

/* The 4-byte form (cp.async.ca: .cg copies 16 bytes only); dst and src 4-byte
 * aligned, src_bytes 0 (zero-fill) or 4. */
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::);
}

/* Wait until at most 0 / 1 / 2 of this thread's committed groups are pending. */
__device__ __forceinline__ void cp_async_wait_all(void) {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

__device__ __forceinline__ void cp_async_wait_1(void) {
  asm volatile("cp.async.wait_group 1;\n" ::);
}

__device__ __forceinline__ void cp_async_wait_2(void) {
  asm volatile("cp.async.wait_group 2;\n" ::);
}

#endif /* SDPA_PTX_CP_ASYNC_CUH */
