/*
 * ptx_sem.cuh - a counter in global memory that orders the copy engine's
 * writes of one block before another block's (the warp-specialized
 * backward's deterministic mode: each dQ tile's bulk reductions in key-block
 * order). The waiter acquires the count and fences before its own bulk
 * operation; the writer waits for its bulk writes, fences them out of the
 * async proxy and releases the next count. Minimum arch: sm_90 (bulk copies).
 */
#ifndef SDPA_PTX_SEM_CUH
#define SDPA_PTX_SEM_CUH

#include <stdint.h>

/* Spins until *sem == want (acquire, gpu scope), then orders what follows
 * through the async proxy after it. */
__device__ __forceinline__ void sem_wait_eq(const int *sem, int want) {
  int v;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
    if (v == want) break;
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* *sem += 1 once this thread's bulk operations have completed their writes
 * (cp.async.bulk.wait_group 0 first) and are fenced out of the async proxy. */
__device__ __forceinline__ void sem_release_inc(int *sem) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem) : "memory");
}

#endif /* SDPA_PTX_SEM_CUH */
