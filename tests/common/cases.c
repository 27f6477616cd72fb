/*
 * cases.c - the case tables' shared pieces (cases.h): host buffers of any
 * strides, the descriptors' tensor fields, and how a binary picks its cases.
 */
#include "common/cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"

sdpa_tensor case_alloc(case_bufs *b, sdpa_dtype dt, int rank, const int64_t *shape, int rows16,
                       int64_t pad, int is_out) {
  if (b->n >= CASE_MAX_BUFS || rank < 1 || rank > SDPA_MAX_RANK) {
    printf("FATAL case_alloc: %d buffers, rank %d\n", b->n, rank);
    exit(1);
  }
  sdpa_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  int64_t stride = 1, last = 0, empty = 0;
  for (int k = rank - 1; k >= 0; --k) {
    t.shape[k] = shape[k];
    t.stride[k] = stride;
    if (shape[k] == 0) empty = 1;
    last += (shape[k] - 1) * stride;
    if (k == rank - 1)
      stride = (rows16 ? (shape[k] + 7) / 8 * 8 : shape[k]) + pad;
    else
      stride = stride * shape[k] + pad;
  }
  /* to the end of the last row's pitch (rank 1: the elements) */
  int64_t span = empty ? 0 : rank > 1 ? last - (shape[rank - 1] - 1) + t.stride[rank - 2] : last + 1;
  if (rank > 1 && !empty && span < last + 1) span = last + 1;
  const size_t bytes = (size_t)span * sdpa_dtype_size(dt);
  t.data = malloc(bytes ? bytes : 16);
  if (!t.data) {
    printf("FATAL case_alloc: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  /* poison every allocated element, the last row's padding too */
  sdpa_tensor flat = t;
  flat.rank = 1;
  flat.shape[0] = span;
  flat.stride[0] = 1;
  test_poison(&flat);
  b->t[b->n] = t;
  b->bytes[b->n] = bytes;
  b->out[b->n] = is_out;
  ++b->n;
  return t;
}

int case_find(const case_bufs *b, const void *p) {
  for (int k = 0; k < b->n; ++k) {
    const char *base = (const char *)b->t[k].data;
    if ((const char *)p >= base && (const char *)p < base + (b->bytes[k] ? b->bytes[k] : 1))
      return k;
  }
  return -1;
}

void case_poison_outputs(case_bufs *b) {
  for (int k = 0; k < b->n; ++k) {
    if (!b->out[k]) continue;
    sdpa_tensor flat = b->t[k];
    flat.rank = 1;
    flat.shape[0] = (int64_t)(b->bytes[k] / sdpa_dtype_size(flat.dtype));
    flat.stride[0] = 1;
    test_poison(&flat);
  }
}

void case_bufs_free(case_bufs *b) {
  for (int k = 0; k < b->n; ++k) free(b->t[k].data);
  memset(b, 0, sizeof *b);
}

/* The tensor fields of the attention both descriptors hold (the rest follow). */
static int attn_fields(sdpa_attn *a, sdpa_tensor **f) {
  sdpa_tensor *all[] = {&a->q,            &a->k,         &a->v,            &a->cu_seqlens_q,
                        &a->cu_seqlens_k, &a->seqused_k, &a->alibi_slopes, &a->bias};
  const int n = (int)(sizeof all / sizeof all[0]);
  for (int k = 0; k < n; ++k) f[k] = all[k];
  return n;
}

int case_fwd_fields(sdpa_fwd_desc *d, sdpa_tensor **f) {
  int n = attn_fields(&d->attn, f);
  sdpa_tensor *rest[] = {&d->out,           &d->lse,          &d->probs,
                         &d->cache_seqlens, &d->block_table,  &d->cache_batch_idx,
                         &d->k_new,         &d->v_new,        &d->rotary_cos,
                         &d->rotary_sin,    &d->cache_leftpad};
  for (size_t k = 0; k < sizeof rest / sizeof rest[0]; ++k) f[n++] = rest[k];
  return n;
}

int case_bwd_fields(sdpa_bwd_desc *d, sdpa_tensor **f) {
  int n = attn_fields(&d->attn, f);
  sdpa_tensor *rest[] = {&d->out, &d->lse, &d->dout, &d->dq, &d->dk, &d->dv, &d->dbias, &d->dlse};
  for (size_t k = 0; k < sizeof rest / sizeof rest[0]; ++k) f[n++] = rest[k];
  return n;
}

double *case_reduce_dbias(const double *full, int64_t b, int64_t h, int64_t sq, int64_t sk,
                          const int64_t *bs) {
  const int64_t n = bs[0] * bs[1] * bs[2] * bs[3];
  double *red = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!red) {
    printf("FATAL case_reduce_dbias: out of memory\n");
    exit(1);
  }
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t j = 0; j < sk; ++j) {
          const int64_t bo = bs[0] == 1 ? 0 : bb, ho = bs[1] == 1 ? 0 : hh;
          const int64_t io = bs[2] == 1 ? 0 : i;
          red[((bo * bs[1] + ho) * bs[2] + io) * sk + j] += full[((bb * h + hh) * sq + i) * sk + j];
        }
  return red;
}

double *case_doubles(const sdpa_tensor *t) {
  const int64_t n = test_numel(t);
  double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!x) {
    printf("FATAL case_doubles: out of memory\n");
    exit(1);
  }
  for (int64_t e = 0; e < n; ++e) x[e] = test_get(t, e);
  return x;
}

double case_max_diff(const double *a, const double *b, int64_t n) {
  double m = 0.0;
  for (int64_t e = 0; e < n; ++e)
    if (fabs(a[e] - b[e]) > m) m = fabs(a[e] - b[e]);
  return m;
}

sdpa_tensor case_copy(const sdpa_tensor *t) {
  sdpa_tensor c = test_alloc(t->dtype, t->rank, t->shape);
  for (int64_t e = 0; e < test_numel(t); ++e) test_set(&c, e, test_get(t, e));
  return c;
}

const char *case_label(char *buf, size_t n, const char *name, int backend, int both,
                       const char *what) {
  if (both)
    snprintf(buf, n, "%s [%s] %s", name, backend == ON_CUDA ? "cuda" : "cpu", what);
  else
    snprintf(buf, n, "%s %s", name, what);
  return buf;
}

case_env case_env_init(int argc, char **argv, unsigned primary, unsigned backends,
                       test_rng *rng) {
  case_env env;
  memset(&env, 0, sizeof env);
  env.primary = primary;
  env.backends = backends;
  env.cpu_fwd = sdpa_fwd;
  env.cpu_bwd = sdpa_bwd;
  env.rng = rng;
  for (int k = 1; k < argc; ++k) {
    if (strcmp(argv[k], "--small") == 0) env.small = 1;
    if (strcmp(argv[k], "--list") == 0) env.list = 1;
    if (strcmp(argv[k], "--only") == 0 && k + 1 < argc) env.only = argv[++k];
  }
  return env;
}

int case_selected(const case_env *env, const char *name, unsigned on, int small) {
  return (on & env->primary) && !small == !env->small && (!env->only || strstr(name, env->only));
}
