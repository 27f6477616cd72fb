/*
 * views.h - tensor views the ring's schedule hands to sdpa_fwd / sdpa_bwd /
 * sdpa_merge_states (row ranges of the caller's tensors, contiguous blocks of
 * its buffers), and the carving of one workspace into those buffers.
 */
#ifndef SDPA_RING_VIEWS_H
#define SDPA_RING_VIEWS_H

#include <string.h>

#include "common/dtype.h"
#include "sdpa.h"

/* Rows [r0, r0 + n) of a [b, s, h, x] tensor (dimension 1). */
static inline sdpa_tensor ring_rows(const sdpa_tensor *t, int64_t r0, int64_t n) {
  sdpa_tensor v = *t;
  if (t->data) v.data = (char *)t->data + (size_t)(r0 * t->stride[1]) * sdpa_dtype_size(t->dtype);
  v.shape[1] = n;
  return v;
}

/* Rows [r0, r0 + n) of an lse-shaped [b, h, s] tensor (dimension 2). */
static inline sdpa_tensor ring_lse_rows(const sdpa_tensor *t, int64_t r0, int64_t n) {
  sdpa_tensor v = *t;
  if (t->data) v.data = (char *)t->data + (size_t)(r0 * t->stride[2]) * sizeof(float);
  v.shape[2] = n;
  return v;
}

/* A contiguous [b, s, h, x] tensor at p. */
static inline sdpa_tensor ring_block(void *p, sdpa_dtype dt, int64_t b, int64_t s, int64_t h,
                                     int64_t x) {
  const int64_t shape[4] = {b, s, h, x};
  return sdpa_tensor_contiguous(p, dt, 4, shape);
}

/* Rows [r0, r0 + n) of a contiguous [b, rows, h, x] buffer at p, as a view. */
static inline sdpa_tensor ring_block_rows(void *p, sdpa_dtype dt, int64_t b, int64_t rows,
                                          int64_t r0, int64_t n, int64_t h, int64_t x) {
  sdpa_tensor v = ring_block(p, dt, b, rows, h, x);
  return ring_rows(&v, r0, n);
}

static inline sdpa_tensor ring_absent(void) {
  sdpa_tensor t;
  memset(&t, 0, sizeof t);
  return t;
}

/* Buffers carved from one workspace, each 256-byte aligned; with base NULL
 * only the size is counted (the same code sizes and places them). */
typedef struct ring_carve {
  char *base;
  size_t off;
  int overflow;
} ring_carve;

static inline void *ring_take(ring_carve *c, size_t bytes) {
  const size_t at = (c->off + 255) & ~(size_t)255;
  if (at < c->off || at + bytes < at) {
    c->overflow = 1;
    return NULL;
  }
  c->off = at + bytes;
  return c->base ? c->base + at : NULL;
}

/* n elements of es bytes times the product of dims, or 0 on overflow (then *bad). */
static inline size_t ring_bytes(int *bad, size_t es, int64_t a, int64_t b, int64_t c, int64_t d) {
  size_t r = es;
  const int64_t f[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i)
    if (__builtin_mul_overflow(r, (size_t)f[i], &r)) {
      *bad = 1;
      return 0;
    }
  return r;
}

#endif /* SDPA_RING_VIEWS_H */
