/*
 * tile_load.cuh - the cp.async copy of a [rows, d] tile of q, k or v into
 * XOR-swizzled shared memory, shared by the mma.sync forwards
 * (fwd_sm80_body.cuh: 16-bit elements; fwd_tf32_body.cuh: fp32). A shared
 * row is CPR 16-byte chunks and logical chunk c of row r lands at physical
 * chunk swz(r, c). A body includes it after its geometry and its swizzle,
 * which define: NTHREADS (or LOAD_THREADS, where only some of the block's
 * threads copy: a producer warpgroup); CPR; EPC (elements per 16-byte chunk); CPRP (CPR
 * rounded up to a power of two: threads per row in the lane scheme, at
 * most 32, or whole warps dividing LOAD_THREADS) and LOAD_RPP = LOAD_THREADS / CPRP;
 * LOAD_PLAIN (1: the plain loop where CPR does not divide the block);
 * optionally LOAD_ZFILL (1: where d ends inside the row, a whole tile's
 * copies take the predicate-free loop all the same, the chunks past d
 * zero-filling, so no warp splits over two loops; in the lane scheme every
 * whole tile, whose idle lanes copy nothing anyway; default 0); the
 * element type tile_elem; and int swz(int r, int c), or (a body whose
 * swizzle depends on the tile's row count: the Hopper backward's 128-byte
 * blocks of [rows][64]) TILE_SWZ(r, c, rows).
 */
#ifndef SDPA_TILE_LOAD_CUH
#define SDPA_TILE_LOAD_CUH

#include <stdint.h>

#include "cuda/ptx/ptx_cp_async.cuh"

#ifndef TILE_SWZ
#define TILE_SWZ(r, c, rows) swz(r, c)
#endif
#ifndef LOAD_THREADS
#define LOAD_THREADS NTHREADS
#endif
/* LOAD_UNROLL n: the whole-row loops unrolled n times, not fully (a body whose
 * copying threads are few and short of registers: each thread's copies
 * would otherwise all get their addresses at once) */
#ifdef LOAD_UNROLL
#define LOAD_PRAGMA_(x) _Pragma(#x)
#define LOAD_PRAGMA(n) LOAD_PRAGMA_(unroll n)
#define LOAD_UNROLL_ROWS LOAD_PRAGMA(LOAD_UNROLL)
#else
#define LOAD_UNROLL_ROWS _Pragma("unroll")
#endif
#ifndef LOAD_ZFILL
#define LOAD_ZFILL 0
#endif

static_assert((CPRP >= CPR && (CPRP <= 32 || LOAD_THREADS % CPRP == 0)) ||
                  (LOAD_THREADS % CPR == 0 && CPR <= 16) || LOAD_PLAIN,
              "load_tile: a row's chunks must fit the lanes of one warp, or whole warps");

/* Copy rows [0, rows) of a [rows, d] tile (row stride in elements) into shared
 * memory at sbase; rows >= rows_valid and columns >= d are zero-filled and
 * read nothing (their source operand is `safe`, the tensor's base).
 * Each thread keeps one chunk column and steps by whole rows: no division,
 * one 64-bit add per copy (a division per chunk costs the copy loop dearly).
 * Buckets whose CPR divides the block
 * (16-bit d = 32, 64, 128) unroll fully; the others give a row CPRP lanes (CPR
 * rounded up to a power of two, the extra lanes idle; fp32 d = 256: 64, two
 * warps a row) and unroll by 2
 * (LOAD_PLAIN, the sm80 _full variants: a plain loop):
 * fuller unrolling hoists offsets into registers the accumulators need
 * (ptxas: spills at d = 128 and 256 otherwise). */
__device__ __forceinline__ void load_tile(uint32_t sbase, const tile_elem *g, int64_t stride,
                                          int rows, int rows_valid, int d, int tid,
                                          const void *safe) {
  if (LOAD_THREADS % CPR == 0 && CPR <= 16) {
    const int zfill = LOAD_ZFILL && d < CPR * EPC; /* the same for every thread */
    const int c = tid % CPR, r0 = tid / CPR;
    const int rem = d - c * EPC;
    const int bytes = rem >= EPC ? 16 : rem > 0 ? rem * (16 / EPC) : 0;
    const tile_elem *g0 = g + (int64_t)r0 * stride + c * EPC;
    const int64_t step = (int64_t)(LOAD_THREADS / CPR) * stride;
    if (rows_valid >= rows && bytes == 16 && !zfill) { /* whole tile, whole chunk: no predicates */
LOAD_UNROLL_ROWS
      for (int it = 0; it < rows * CPR / LOAD_THREADS; ++it) {
        const int r = r0 + it * (LOAD_THREADS / CPR);
        cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16), g0 + it * step, 16);
      }
      return;
    }
    if (zfill && rows_valid >= rows) { /* whole tile, d inside the row: every thread here */
      const tile_elem *src = bytes > 0 ? g0 : (const tile_elem *)safe;
      const int64_t sstep = bytes > 0 ? step : 0;
LOAD_UNROLL_ROWS
      for (int it = 0; it < rows * CPR / LOAD_THREADS; ++it) {
        const int r = r0 + it * (LOAD_THREADS / CPR);
        cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16), src + it * sstep,
                    bytes);
      }
      return;
    }
LOAD_UNROLL_ROWS
    for (int it = 0; it < rows * CPR / LOAD_THREADS; ++it) {
      const int r = r0 + it * (LOAD_THREADS / CPR);
      const int ok = r < rows_valid && bytes > 0;
      cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16),
                  ok ? (const void *)(g0 + it * step) : safe, ok ? bytes : 0);
    }
  } else if (LOAD_PLAIN) { /* sm80 _full kernels: the lane scheme spilled 4 bytes at d = 192 */
#pragma unroll 1
    for (int i = tid; i < rows * CPR; i += LOAD_THREADS) {
      const int r = i / CPR, c = i % CPR;
      const int rem = d - c * EPC;
      const int bytes = (r < rows_valid && rem > 0) ? (rem >= EPC ? 16 : rem * (16 / EPC)) : 0;
      cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16),
                  bytes ? (const void *)(g + (int64_t)r * stride + c * EPC) : safe, bytes);
    }
  } else {
    const int lane = tid & 31;
    const int c = CPRP > 32 ? tid % CPRP : lane % CPRP;
    const int r0 = CPRP > 32 ? tid / CPRP : (tid >> 5) * (32 / CPRP) + lane / CPRP;
    if (CPRP != CPR && c >= CPR) return; /* idle lanes of a padded row */
    const int rem = d - c * EPC;
    const int bytes = rem >= EPC ? 16 : rem > 0 ? rem * (16 / EPC) : 0;
    const tile_elem *g0 = g + (int64_t)r0 * stride + c * EPC;
    const int64_t step = (int64_t)LOAD_RPP * stride;
    if (LOAD_ZFILL && rows_valid >= rows) { /* whole tile: no row predicates */
      const tile_elem *src = bytes > 0 ? g0 : (const tile_elem *)safe;
      const int64_t sstep = bytes > 0 ? step : 0;
#pragma unroll 2
      for (int it = 0; it < rows / LOAD_RPP; ++it) {
        const int r = r0 + it * LOAD_RPP;
        cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16), src + it * sstep,
                    bytes);
      }
      return;
    }
    if (rows_valid >= rows && bytes == 16) { /* whole tile, whole chunk: no predicates */
#pragma unroll 2
      for (int it = 0; it < rows / LOAD_RPP; ++it) {
        const int r = r0 + it * LOAD_RPP;
        cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16), g0 + it * step, 16);
      }
      return;
    }
#pragma unroll 2
    for (int it = 0; it < rows / LOAD_RPP; ++it) {
      const int r = r0 + it * LOAD_RPP;
      const int ok = r < rows_valid && bytes > 0;
      cp_async_16(sbase + (uint32_t)((r * CPR + TILE_SWZ(r, c, rows)) * 16),
                  ok ? (const void *)(g0 + it * step) : safe, ok ? bytes : 0);
    }
  }
}

#endif /* SDPA_TILE_LOAD_CUH */
