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

/* cp_async_16 marking its lines evict-first in L2: for data read once (a
 * decoding step's KV cache), so the stream does not push out what is read
 * again. The policy is made inside each copy's asm block: passed in as an
 * operand, ptxas moves it into uniform registers before every copy. The
 * _full form copies 16 bytes that are all there (no bounds arithmetic). */
__device__ __forceinline__ void cp_async_16_evict_first(uint32_t dst, const void *src,
                                                        int src_bytes) {
  asm volatile(
      "{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
      " cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, pol;\n}\n" ::"r"(dst),
      "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_16_full_evict_first(uint32_t dst, const void *src) {
  asm volatile(
      "{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
      " cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, pol;\n}\n" ::"r"(dst),
      "l"(src));
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
