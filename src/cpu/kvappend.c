/*
 * kvappend.c - the KV-cache side of the CPU forward: rotary embedding
 * (interleaved GPT-J pairs (2i, 2i+1) or half-split GPT-NeoX pairs
 * (i, i + rd/2)) and the in-call append of k_new / v_new into a contiguous or
 * paged cache, in place, before the attention reads it.
 */
#include "fwd_parts.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "../common/dtype.h"
#include "../error.h"
#include "parallel.h"

void sdpa_cpu_rotary_row(const sdpa_problem *p, float *x, int64_t pos) {
  const int64_t half = p->rotary_dim / 2;
  const float *c = p->rot_cos + pos * p->rot_stride;
  const float *s = p->rot_sin + pos * p->rot_stride;
  if (p->rotary_interleaved) {
    for (int64_t k = 0; k < half; ++k) {
      float x0 = x[2 * k], x1 = x[2 * k + 1];
      x[2 * k] = x0 * c[k] - x1 * s[k];
      x[2 * k + 1] = x0 * s[k] + x1 * c[k];
    }
  } else {
    for (int64_t k = 0; k < half; ++k) {
      float x0 = x[k], x1 = x[k + half];
      x[k] = x0 * c[k] - x1 * s[k];
      x[k + half] = x0 * s[k] + x1 * c[k];
    }
  }
  for (int64_t k = 0; k < p->rotary_dim; ++k) x[k] = sdpa_round(p->dtype, x[k]);
}

void sdpa_cpu_load_row(const void *src, sdpa_dtype t, int64_t n, float *dst) {
  if (t == SDPA_DTYPE_F32) {
    const float *s = (const float *)src;
    for (int64_t e = 0; e < n; ++e) dst[e] = s[e];
  } else if (t == SDPA_DTYPE_BF16) {
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t e = 0; e < n; ++e) dst[e] = sdpa_bf16_to_f32(s[e]);
  } else {
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t e = 0; e < n; ++e) dst[e] = sdpa_f16_to_f32(s[e]);
  }
}

void sdpa_cpu_store_row(void *dst, sdpa_dtype t, int64_t n, const float *src) {
  if (t == SDPA_DTYPE_F32) {
    float *d = (float *)dst;
    for (int64_t e = 0; e < n; ++e) d[e] = src[e];
  } else if (t == SDPA_DTYPE_BF16) {
    uint16_t *d = (uint16_t *)dst;
    for (int64_t e = 0; e < n; ++e) d[e] = sdpa_f32_to_bf16(src[e]);
  } else {
    uint16_t *d = (uint16_t *)dst;
    for (int64_t e = 0; e < n; ++e) d[e] = sdpa_f32_to_f16(src[e]);
  }
}

typedef struct append_ctx {
  const sdpa_problem *p;
  float **rows; /* per thread: max(d, d_v) floats */
  atomic_int failed;
} append_ctx;

/* item = b * s_new + i: all kv heads of one new token */
static void append_task(void *vctx, int64_t item, int tid) {
  append_ctx *ctx = (append_ctx *)vctx;
  const sdpa_problem *p = ctx->p;
  const size_t es = sdpa_dtype_size(p->dtype);
  if (!ctx->rows[tid]) {
    int64_t n = p->d > p->d_v ? p->d : p->d_v;
    ctx->rows[tid] = (float *)malloc(sizeof(float) * (size_t)n);
    if (!ctx->rows[tid]) {
      atomic_store(&ctx->failed, 1);
      return;
    }
  }
  float *row = ctx->rows[tid];
  const int64_t b = item / p->s_new, i = item % p->s_new;
  const int64_t j = (int64_t)p->cache_seqlens[b] + i;
  const sdpa_kv_pos pos = sdpa_kv_locate(p, b, j); /* one block_table read: all heads, k and v */
  for (int64_t hk = 0; hk < p->h_k; ++hk) {
    const char *kn = (const char *)p->k_new + (size_t)(b * p->kn_st.sb + i * p->kn_st.ss + hk * p->kn_st.sh) * es;
    char *kc = (char *)p->k + (size_t)sdpa_kv_at(p->k_st, pos, hk) * es;
    sdpa_cpu_load_row(kn, p->dtype, p->d, row);
    if (p->rotary_dim > 0) sdpa_cpu_rotary_row(p, row, j);
    sdpa_cpu_store_row(kc, p->dtype, p->d, row);
    const char *vn = (const char *)p->v_new + (size_t)(b * p->vn_st.sb + i * p->vn_st.ss + hk * p->vn_st.sh) * es;
    char *vc = (char *)p->v + (size_t)sdpa_kv_at(p->v_st, pos, hk) * es;
    sdpa_cpu_load_row(vn, p->dtype, p->d_v, row);
    sdpa_cpu_store_row(vc, p->dtype, p->d_v, row);
  }
}

sdpa_status sdpa_cpu_kv_append(const sdpa_problem *p) {
  if (p->s_new <= 0 || p->b <= 0) return SDPA_OK;
  append_ctx ctx;
  ctx.p = p;
  atomic_init(&ctx.failed, 0);
  ctx.rows = (float **)calloc((size_t)p->num_threads, sizeof(float *));
  SDPA_CHECK(ctx.rows, SDPA_ERR_OUT_OF_MEMORY, "cpu forward: out of host memory (kv append)");
  sdpa_cpu_parallel_for(p->num_threads, p->b * p->s_new, append_task, &ctx);
  for (int t = 0; t < p->num_threads; ++t) free(ctx.rows[t]);
  free(ctx.rows);
  SDPA_CHECK(!atomic_load(&ctx.failed), SDPA_ERR_OUT_OF_MEMORY, "cpu forward: out of host memory (kv append)");
  return SDPA_OK;
}
