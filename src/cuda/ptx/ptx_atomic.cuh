/*
 * ptx_atomic.cuh - fire-and-forget fp32 reductions into global memory
 * (red.global.add.f32, and its two- and four-element vector forms on sm_90+),
 * used to accumulate dQ across the key blocks of the backward. Minimum arch:
 * sm_80 (scalar), sm_90 (.v2, .v4). Contract: the address is a global fp32
 * location (8-byte aligned for the pair, 16-byte for the four); no value is
 * returned, so the compiler never waits on the result. Concurrent reductions
 * to one address are atomic; their order, and so the rounding of the sum, is
 * unspecified unless the caller orders them (the deterministic modes of
 * bwd_sm80_body.cuh and bwd_tf32_body.cuh do).
 */
#ifndef SDPA_PTX_ATOMIC_CUH
#define SDPA_PTX_ATOMIC_CUH

__device__ __forceinline__ void red_add_f32(float *addr, float x) {
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(x) : "memory");
}

/* addr[0] += x, addr[1] += y (one instruction on sm_90+, two below). */
__device__ __forceinline__ void red_add_f32x2(float *addr, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(x), "f"(y) : "memory");
#else
  red_add_f32(addr, x);
  red_add_f32(addr + 1, y);
#endif
}

/* addr[0..3] += x, y, z, w (one instruction on sm_90+, four below). */
__device__ __forceinline__ void red_add_f32x4(float *addr, float x, float y, float z, float w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(addr), "f"(x), "f"(y), "f"(z),
               "f"(w)
               : "memory");
#else
  red_add_f32x2(addr, x, y);
  red_add_f32x2(addr + 2, z, w);
#endif
}

#endif /* SDPA_PTX_ATOMIC_CUH */
