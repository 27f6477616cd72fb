/*
 * fastdiv.cuh - division by a launch constant: n / d for 0 <= n < 2^31,
 * 1 <= d < 2^31, as a multiply-high, an add and a shift with m and l worked
 * out on the host (Granlund and Montgomery, "Division by invariant integers
 * using multiplication", 1994: l = ceil(log2 d), m = floor(2^32 (2^l - d) /
 * d) + 1; n < 2^31 keeps the add in 32 bits). A decode block divides its
 * index by the split count, the query blocks and h_k, and its query rows by
 * the group; the staging copy its rows by the heads and the rows: plain
 * divisions are long dependent chains.
 */
#ifndef SDPA_CUDA_FASTDIV_CUH
#define SDPA_CUDA_FASTDIV_CUH

#include <stdint.h>

typedef struct sdpa_fastdiv {
  uint32_t d, mul, shift;
} sdpa_fastdiv;

static inline __host__ sdpa_fastdiv sdpa_fastdiv_make(uint32_t d) {
  sdpa_fastdiv f;
  f.d = d > 0 ? d : 1;
  f.shift = 0;
  while ((1ull << f.shift) < f.d) ++f.shift;
  f.mul = (uint32_t)(((1ull << 32) * ((1ull << f.shift) - f.d)) / f.d + 1);
  return f;
}

/* n / f.d; *rem = n % f.d */
__device__ __forceinline__ int sdpa_divmod(int n, sdpa_fastdiv f, int *rem) {
  const uint32_t q = (__umulhi((uint32_t)n, f.mul) + (uint32_t)n) >> f.shift;
  *rem = n - (int)(q * f.d);
  return (int)q;
}

#endif /* SDPA_CUDA_FASTDIV_CUH */
