/*
 * ptx_tma.cuh - Hopper's tensor-memory copies and the barriers around them
 * (sm_90): shared-memory mbarriers (init, arrive, arrive with an expected
 * byte count, wait on a phase parity), cp.async.bulk.tensor loads that
 * complete on an mbarrier, bulk reductions from shared into global memory,
 * the proxy fence
 * that makes ordinary shared stores visible to the copy engine and the
 * tensor cores, the zeroing of a copied tile's rows past a sequence's end,
 * and setmaxnreg (named barriers: ptx_bar.cuh).
 *
 * Contract: a tensor map (CUtensorMap, 64-byte aligned) lives in a
 * __grid_constant__ kernel parameter and is passed by its address. A phase of
 * an mbarrier completes when its pending arrivals reach zero and its expected
 * bytes have landed; waiting on parity ph returns once the phase with that
 * parity has completed (a fresh barrier is in phase 0, so waiting on parity
 * 1 returns at once: the producer's first pass over empty slots).
 */
#ifndef SDPA_PTX_TMA_CUH
#define SDPA_PTX_TMA_CUH

#include <stdint.h>

#include <cuda.h>

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* After the inits, before the barrier that publishes them: visible to the
 * copy engine too. */
__device__ __forceinline__ void mbar_init_fence(void) {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* One arrival that also expects `bytes` more bytes of copies this phase. */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

/* Expects `bytes` more bytes of copies this phase, without arriving (the
 * issuing thread arrives later, with the others). */
__device__ __forceinline__ void mbar_expect_tx_only(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/* Box of the 4-d map at coordinates (c0 innermost .. c3) into shared dst,
 * completing `bar`'s expected bytes. Elements outside the tensor read as 0. */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            int c2, int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

/* bytes (a multiple of 16, both addresses 16-byte aligned) of fp32 at shared
 * src added to global dst by the copy engine, in this thread's open bulk
 * group: bulk_commit closes the group, bulk_wait_read0 waits until src may be
 * written again, bulk_wait0 until the additions have landed. */
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit(void) {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read0(void) {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait0(void) {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* Ordinary shared stores of this thread become visible to the async proxy
 * (the copy engine, wgmma) once a barrier follows. */
__device__ __forceinline__ void fence_proxy_async(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Key rows [valid, rows) of a copied tile (blocks 64-column blocks of rows
 * 128-byte rows each) zeroed by thread tid of nthreads, where the copy read
 * rows past a sequence's end (0 * NaN is NaN), and made visible to the
 * tensor cores; the caller's barrier then orders them before any product. */
__device__ __forceinline__ void tile_zero_rows(uint32_t st, int blocks, int rows, int valid,
                                               int tid, int nthreads) {
  for (int idx = tid; idx < blocks * rows * 8; idx += nthreads) {
    const int r = idx / 8 % rows;
    if (r >= valid)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(st + idx * 16), "r"(0)
                   : "memory");
  }
  fence_proxy_async();
}

/* The warpgroup's per-thread register budget (a multiple of 8 in [24, 256]);
 * effective only when the kernel has a register cap at entry. */
#define SDPA_SETMAXNREG_DEC(n) SDPA_SETMAXNREG_(dec, n) /* n: a literal, or a macro of one */
#define SDPA_SETMAXNREG_INC(n) SDPA_SETMAXNREG_(inc, n)
#define SDPA_SETMAXNREG_(op, n) \
  asm volatile("setmaxnreg." #op ".sync.aligned.u32 " #n ";\n" ::: "memory")

#endif /* SDPA_PTX_TMA_CUH */
