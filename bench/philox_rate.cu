/*
 * philox_rate.cu - how long the dropout mask alone takes on this GPU: every
 * Philox4x32-10 call of the contract's mask (philox.h, 16 elements a call)
 * for the forward problems of `bench.py --dropout` (bf16, b 4, s 4096,
 * h * d = 2048), with the kernels' field test (sdpa_dropout_keep16), and no
 * attention work. It bounds what dropout can cost: the forward with dropout
 * cannot take less than the longer of this and the forward without it, and
 * takes their sum where the integer work does not overlap the tensor work.
 *
 *   nvcc -O3 -arch=sm_90a -Iinclude -Isrc bench/philox_rate.cu -o philox_rate
 *   ./philox_rate
 *
 * Prints, per head dim, the calls, the time (median of 5), and the integer
 * multiplies a clock an SM it implies (20 IMAD.WIDE.U32 a call).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/philox.h"

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* One thread a (batch * head, row): all s / 16 calls of the row. The
 * dropped count is written so that no call is dead code. */
__global__ void mask_rows(unsigned long long seed, unsigned offset, unsigned threshold, int rows,
                          int bh_count, int j16_count, unsigned *dropped) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)rows * bh_count) return;
  const unsigned bh = (unsigned)(idx / rows), i = (unsigned)(idx % rows);
  unsigned n = 0;
  for (int j16 = 0; j16 < j16_count; ++j16) {
    const sdpa_u32x4 r = sdpa_dropout_bits(seed, offset, bh, i, (unsigned)j16);
    n += 16u - (unsigned)__popc(sdpa_dropout_keep16(r, threshold));
  }
  dropped[idx] = n;
}

int main(void) {
  int dev = 0, sms = 0, khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const int b = 4, s = 4096, dims[3] = {64, 128, 256};
  const unsigned threshold = 26; /* round(0.1 * 256) */
  printf("philox_rate: %d SMs, %.0f MHz (boost clock attribute)\n", sms, khz / 1e3);
  printf("%5s %12s %10s %22s %12s\n", "d", "calls", "ms", "IMAD.WIDE/clk/SM", "dropped");
  for (int k = 0; k < 3; ++k) {
    const int h = 2048 / dims[k], bhc = b * h, rows = s;
    const long long threads = (long long)rows * bhc;
    unsigned *dropped;
    CHECK(cudaMalloc(&dropped, threads * sizeof(unsigned)));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    float ms[5];
    for (int rep = -1; rep < 5; ++rep) { /* rep -1: warm-up */
      CHECK(cudaEventRecord(e0));
      mask_rows<<<(unsigned)((threads + 255) / 256), 256>>>(0x123456789abcdefull, 7u, threshold,
                                                             rows, bhc, s / 16, dropped);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaGetLastError());
      if (rep >= 0) CHECK(cudaEventElapsedTime(&ms[rep], e0, e1));
    }
    for (int x = 0; x < 5; ++x) /* sort for the median */
      for (int y = x + 1; y < 5; ++y)
        if (ms[y] < ms[x]) {
          const float tmp = ms[x];
          ms[x] = ms[y];
          ms[y] = tmp;
        }
    /* the dropped fraction, as a check that the mask is the contract's (~0.1) */
    unsigned *host = (unsigned *)malloc(threads * sizeof(unsigned));
    CHECK(cudaMemcpy(host, dropped, threads * sizeof(unsigned), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (long long x = 0; x < threads; ++x) total += host[x];
    const double calls = (double)threads * (s / 16);
    const double rate = calls * 20.0 / (ms[2] * 1e-3) / sms / (khz * 1e3);
    printf("%5d %12.0f %10.3f %22.1f %12.4f\n", dims[k], calls, ms[2], rate, total / (calls * 16));
    free(host);
    CHECK(cudaFree(dropped));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
  }
  return 0;
}
