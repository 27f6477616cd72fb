/*
 * rows.c - rows.h: element by element through the harness' typed access
 * (test sizes; clarity over speed).
 */
#include "rows.h"

#include <string.h>

#include "common/dtype.h"
#include "common/harness.h"

int64_t rows_global(const sdpa_ring_shard_t *s, int64_t i) {
  return i < s->part[0].len ? s->part[0].start + i : s->part[1].start + (i - s->part[0].len);
}

void rows_copy(const sdpa_tensor *src, sdpa_tensor *dst, const sdpa_ring_shard_t *s, int dim,
               int to_global) {
  const sdpa_tensor *g = to_global ? dst : src, *l = to_global ? src : dst;
  int64_t inner = 1, outer = 1;
  for (int i = dim + 1; i < l->rank; ++i) inner *= l->shape[i];
  for (int i = 0; i < dim; ++i) outer *= l->shape[i];
  const int64_t lrows = l->shape[dim], grows = g->shape[dim];
  const size_t es = sdpa_dtype_size(l->dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < lrows; ++i) {
      const int64_t lf = (o * lrows + i) * inner, gf = (o * grows + rows_global(s, i)) * inner;
      /* whole rows of a contiguous tensor: one copy */
      const char *from = (const char *)src->data + (size_t)(to_global ? lf : gf) * es;
      char *to = (char *)dst->data + (size_t)(to_global ? gf : lf) * es;
      memcpy(to, from, (size_t)inner * es);
    }
}
