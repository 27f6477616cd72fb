/*
 * ptx_bar.cuh - named barriers (bar.sync with an id and a thread count): a
 * barrier for a subset of a block's warps, such as the two warps of the
 * tf32 kernels that split one tile's head dim and trade partial products
 * through shared memory. Minimum arch: sm_70 (any arch sdpa builds for).
 *
 * Contract: id in 1..15 (0 is __syncthreads' barrier), nthreads a multiple
 * of 32, the same at every warp that uses the id, and exactly nthreads
 * threads (whole warps, every lane) arrive before any leaves. Shared-memory
 * writes before the barrier are visible to the participating threads after
 * it (bar.sync orders memory like __syncthreads for its participants). The
 * "memory" clobber keeps the compiler from moving shared accesses across it.
 */
#ifndef SDPA_PTX_BAR_CUH
#define SDPA_PTX_BAR_CUH

__device__ __forceinline__ void bar_sync_named(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

/* Arrives at barrier id without waiting (bar.arrive): the producer half of a
 * barrier whose other warps bar.sync on it; nthreads counts both halves. */
__device__ __forceinline__ void bar_arrive_named(int id, int nthreads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

#endif /* SDPA_PTX_BAR_CUH */
