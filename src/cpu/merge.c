/*
 * merge.c - exact merge of partial attention results over disjoint key sets:
 *   lse = log(sum_n exp(lse_n)),  out = sum_n exp(lse_n - lse) * out_n,
 * with lse_n = +inf marking an empty part. One row merge shared by the
 * split-KV combine of the CPU forward and sdpa_cpu_merge (merge_states).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "../backend.h"
#include "../common/dtype.h"
#include "../error.h"
#include "fwd_parts.h"
#include "parallel.h"

float sdpa_cpu_merge_row(int64_t n, const float *lse, int64_t lse_stride, const float *parts,
                         int64_t part_stride, int64_t d, float *out) {
  float mx = -INFINITY;
  for (int64_t k = 0; k < n; ++k) {
    float l = lse[k * lse_stride];
    if (l != INFINITY && l > mx) mx = l;
  }
  for (int64_t e = 0; e < d; ++e) out[e] = 0.0f;
  if (mx == -INFINITY) return INFINITY; /* every part empty (or of zero mass) */
  float sum = 0.0f;
  for (int64_t k = 0; k < n; ++k) {
    float l = lse[k * lse_stride];
    if (l != INFINITY) sum += expf(l - mx);
  }
  const float total = mx + logf(sum);
  for (int64_t k = 0; k < n; ++k) {
    float l = lse[k * lse_stride];
    if (l == INFINITY || l == -INFINITY) continue;
    const float w = expf(l - total);
    const float *o = parts + k * part_stride;
    for (int64_t e = 0; e < d; ++e) out[e] += w * o[e];
  }
  return total;
}

/* ---- merge_states ------------------------------------------------------------ */

typedef struct merge_ctx {
  const sdpa_merge_problem *m;
  float **scratch; /* per thread: n * d (parts in fp32) + n (lse) + d (out) */
  atomic_int failed;
} merge_ctx;

/* item = t * h + hh: one output row */
static void merge_task(void *vctx, int64_t item, int tid) {
  merge_ctx *ctx = (merge_ctx *)vctx;
  const sdpa_merge_problem *m = ctx->m;
  if (!ctx->scratch[tid]) {
    ctx->scratch[tid] = (float *)malloc(sizeof(float) * (size_t)(m->n * m->d + m->n + m->d));
    if (!ctx->scratch[tid]) {
      atomic_store(&ctx->failed, 1);
      return;
    }
  }
  float *parts = ctx->scratch[tid];
  float *lse = parts + m->n * m->d;
  float *out = lse + m->n;
  const int64_t t = item / m->h, hh = item % m->h;
  const size_t pes = sdpa_dtype_size(m->parts_dtype);
  for (int64_t k = 0; k < m->n; ++k) {
    lse[k] = m->lse_parts[k * m->lp_sn + t * m->lp_st + hh * m->lp_sh];
    if (lse[k] == INFINITY) continue; /* empty: its out is never read */
    const char *src = (const char *)m->out_parts + (size_t)(k * m->op_sn + t * m->op_st + hh * m->op_sh) * pes;
    sdpa_cpu_load_row(src, m->parts_dtype, m->d, parts + k * m->d);
  }
  float l = sdpa_cpu_merge_row(m->n, lse, 1, parts, m->d, m->d, out);
  char *dst = (char *)m->out + (size_t)(t * m->o_st + hh * m->o_sh) * sdpa_dtype_size(m->out_dtype);
  sdpa_cpu_store_row(dst, m->out_dtype, m->d, out);
  if (m->lse) m->lse[t * m->l_st + hh * m->l_sh] = l;
}

sdpa_status sdpa_cpu_merge(const sdpa_merge_problem *m) {
  const int64_t rows = m->t * m->h;
  if (rows <= 0) return SDPA_OK;
  /* threads only pay off on large merges (about 64 K elements per thread) */
  int nthreads = sdpa_cpu_resolve_threads(0);
  int64_t want = (rows * m->n * m->d) / 65536 + 1;
  if (want < nthreads) nthreads = (int)want;
  merge_ctx ctx;
  ctx.m = m;
  atomic_init(&ctx.failed, 0);
  ctx.scratch = (float **)calloc((size_t)nthreads, sizeof(float *));
  SDPA_CHECK(ctx.scratch, SDPA_ERR_OUT_OF_MEMORY, "merge_states: out of host memory");
  sdpa_cpu_parallel_for(nthreads, rows, merge_task, &ctx);
  for (int k = 0; k < nthreads; ++k) free(ctx.scratch[k]);
  free(ctx.scratch);
  SDPA_CHECK(!atomic_load(&ctx.failed), SDPA_ERR_OUT_OF_MEMORY,
             "merge_states: out of host memory (%lld-part rows of %lld)", (long long)m->n,
             (long long)m->d);
  return SDPA_OK;
}
