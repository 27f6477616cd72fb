/*
 * cpu_ops.c - the ring's elementwise work on host memory, in plain loops:
 * the CPU device exists for the schedule's tests (docs/design.md §9), where
 * these loops are never the cost.
 */
#include <stdlib.h>

#include "common/dtype.h"
#include "error.h"
#include "ring/ring.h"

static sdpa_status cpu_alloc(const sdpa_ring_ops *o, size_t bytes, void **p) {
  (void)o;
  *p = malloc(bytes > 0 ? bytes : 1);
  if (!*p)
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring: out of host memory (%zu bytes of workspace)",
                     bytes);
  return SDPA_OK;
}

static sdpa_status cpu_release(const sdpa_ring_ops *o, void *p) {
  (void)o;
  free(p);
  return SDPA_OK;
}

static sdpa_status cpu_fill(const sdpa_ring_ops *o, float *x, int64_t n, float value) {
  (void)o;
  for (int64_t i = 0; i < n; ++i) x[i] = value;
  return SDPA_OK;
}

static sdpa_status cpu_add(const sdpa_ring_ops *o, float *acc, int64_t acc_stride,
                           const void *part, sdpa_dtype dt, int64_t part_stride, int64_t rows,
                           int64_t cols) {
  (void)o;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      acc[r * acc_stride + c] += sdpa_load(part, dt, r * part_stride + c);
  return SDPA_OK;
}

static sdpa_status cpu_store(const sdpa_ring_ops *o, const float *src, const sdpa_tensor *dst) {
  (void)o;
  const int64_t B = dst->shape[0], S = dst->shape[1], H = dst->shape[2], X = dst->shape[3];
  int64_t i = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t x = 0; x < X; ++x, ++i)
          sdpa_store(dst->data, dst->dtype,
                     b * dst->stride[0] + s * dst->stride[1] + h * dst->stride[2] + x, src[i]);
  return SDPA_OK;
}

void sdpa_ring_cpu_ops(sdpa_ring_ops *o) {
  static const sdpa_ring_ops cpu = {.device = SDPA_DEVICE_CPU, .stream = NULL,
                                    .alloc = cpu_alloc,        .release = cpu_release,
                                    .fill = cpu_fill,          .add = cpu_add,
                                    .store = cpu_store};
  *o = cpu;
}
