/*
 * rows.c - rows.h: element by element through the harness' typed access
 * (test sizes; clarity over speed).
 */
#include "rows.h"

#include <math.h>
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

sdpa_tensor rows_t4(void *p, sdpa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t s[4] = {a, b, c, d};
  return p ? sdpa_tensor_contiguous(p, dt, 4, s) : test_alloc(dt, 4, s);
}

sdpa_tensor rows_t3(void *p, sdpa_dtype dt, int64_t a, int64_t b, int64_t c) {
  const int64_t s[3] = {a, b, c};
  return p ? sdpa_tensor_contiguous(p, dt, 3, s) : test_alloc(dt, 3, s);
}

double rows_max_diff(const sdpa_tensor *a, const sdpa_tensor *b) {
  double m = 0.0;
  for (int64_t e = 0; e < test_numel(a); ++e) {
    const double x = test_get(a, e), y = test_get(b, e);
    if (isinf(x) && x == y) continue;
    const double d = fabs(x - y);
    if (!(d <= m)) m = d; /* NaN wins */
  }
  return m;
}

void rows_attn(sdpa_attn *a, sdpa_device dev, sdpa_tensor q, sdpa_tensor k, sdpa_tensor v,
               int causal, float scale, float softcap) {
  a->device = dev;
  a->q = q, a->k = k, a->v = v;
  a->causal = causal;
  a->scale = scale;
  a->softcap = softcap;
}

void rows_ring(sdpa_ring *r, int rank, int world, sdpa_ring_layout layout, int64_t seqlen,
               int check_peers) {
  r->rank = rank;
  r->world_size = world;
  r->layout = layout;
  r->seqlen = seqlen;
  r->check_peers = check_peers;
}
