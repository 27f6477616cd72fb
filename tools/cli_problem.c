/*
 * cli_problem.c - builds the attention problem that `sdpa run` / `sdpa
 * explain` describe: every tensor contiguous on the host (random normal
 * inputs from a counter-based hash of (seed, tensor, element), so the values
 * do not depend on the thread count), index arrays for varlen / KV cache /
 * paged layouts, and on CUDA a device copy of each. Descriptors are made over
 * either copy: the device one for the run, the host one for the oracle.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "common/dtype.h"
#include "cpu/parallel.h"

#ifdef SDPA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- random numbers: a hash of (seed, stream, index) --------------------------- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t h = mix64(mix64(seed ^ (stream * 0x632be59bd9b4e019ull)) + i);
  return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
}

static double normal01(uint64_t seed, uint64_t stream, uint64_t i) {
  double u1 = uniform01(seed, stream, 2 * i), u2 = uniform01(seed, stream, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct fill_job {
  sdpa_tensor *t;
  int64_t n;
  uint64_t seed, stream;
} fill_job;

enum { FILL_CHUNK = 1 << 16 };

static void fill_chunk(void *ctx, int64_t c, int tid) {
  (void)tid;
  const fill_job *j = (const fill_job *)ctx;
  int64_t end = (c + 1) * FILL_CHUNK < j->n ? (c + 1) * FILL_CHUNK : j->n;
  for (int64_t i = c * FILL_CHUNK; i < end; ++i)
    sdpa_store(j->t->data, j->t->dtype, i, (float)normal01(j->seed, j->stream, (uint64_t)i));
}

static int64_t numel(const sdpa_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; ++i) n *= t->shape[i];
  return n;
}

static void fill_normal(cli_tensor *x, uint64_t seed, uint64_t stream, int nthreads) {
  if (!x->t.data) return;
  fill_job j = {&x->t, numel(&x->t), seed, stream};
  sdpa_cpu_parallel_for(nthreads, (j.n + FILL_CHUNK - 1) / FILL_CHUNK, fill_chunk, &j);
}

/* ---- buffers --------------------------------------------------------------------- */

static int alloc(cli_tensor *x, sdpa_dtype dtype, int rank, int64_t s0, int64_t s1, int64_t s2,
                 int64_t s3) {
  int64_t shape[4] = {s0, s1, s2, s3};
  int64_t n = 1, bytes = (int64_t)sdpa_dtype_size(dtype);
  for (int i = 0; i < rank; ++i) {
    /* the library's limits, said as such (not as a failed allocation) */
    if (shape[i] > INT64_C(2147483647) || __builtin_mul_overflow(n, shape[i], &n) ||
        __builtin_mul_overflow(n, (int64_t)sdpa_dtype_size(dtype), &bytes)) {
      fprintf(stderr, "sdpa: a tensor of %lld x %lld x %lld x %lld elements: too large (dimensions"
              " are 32-bit in the kernels, sizes must fit in int64)\n", (long long)s0,
              (long long)s1, (long long)s2, (long long)s3);
      return CLI_USAGE;
    }
  }
  x->bytes = (size_t)bytes;
  void *p = malloc(x->bytes ? x->bytes : 1);
  if (!p) {
    fprintf(stderr, "sdpa: out of host memory (%zu bytes)\n", x->bytes);
    return CLI_FAIL;
  }
  x->t = sdpa_tensor_contiguous(p, dtype, rank, shape);
  return CLI_OK;
}

static cli_tensor *all_tensors(cli_problem *P, int i) {
  cli_tensor *list[] = {&P->q,        &P->k,          &P->v,       &P->out,     &P->lse,
                        &P->cu_q,     &P->cu_k,       &P->cache_seqlens,        &P->block_table,
                        &P->k_new,    &P->v_new,      &P->rot_cos, &P->rot_sin, &P->alibi,
                        &P->bias,     &P->dout,       &P->dq,      &P->dk,      &P->dv,
                        &P->dbias};
  return i < (int)(sizeof list / sizeof list[0]) ? list[i] : NULL;
}

void cli_problem_free(cli_problem *P) {
  for (int i = 0; all_tensors(P, i); ++i) {
    cli_tensor *x = all_tensors(P, i);
    free(x->t.data);
#ifdef SDPA_HAVE_CUDA
    if (x->dev) cudaFree(x->dev);
#endif
    memset(x, 0, sizeof *x);
  }
}

static int cuda_error(const char *what) {
#ifdef SDPA_HAVE_CUDA
  cudaError_t e = cudaGetLastError();
  fprintf(stderr, "sdpa: %s failed: %s\n", what, cudaGetErrorString(e));
#else
  fprintf(stderr, "sdpa: %s: this build has no CUDA backend\n", what);
#endif
  return CLI_FAIL;
}

static int upload(cli_problem *P) {
#ifdef SDPA_HAVE_CUDA
  for (int i = 0; all_tensors(P, i); ++i) {
    cli_tensor *x = all_tensors(P, i);
    if (!x->t.data) continue;
    if (cudaMalloc(&x->dev, x->bytes ? x->bytes : 1) != cudaSuccess) return cuda_error("cudaMalloc");
    if (cudaMemcpy(x->dev, x->t.data, x->bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      return cuda_error("cudaMemcpy to the device");
  }
  return CLI_OK;
#else
  (void)P;
  return cuda_error("--device cuda");
#endif
}

/* ---- building --------------------------------------------------------------------- */

int cli_problem_build(cli_problem *P, const cli_opts *o, sdpa_device device, int fill) {
  memset(P, 0, sizeof *P);
  P->o = *o;
  P->device = device;
  const sdpa_dtype dt = o->dtype, f32 = SDPA_DTYPE_F32, i32 = SDPA_DTYPE_I32;
  const int64_t b = o->b, h = o->h, hk = o->h_k, d = o->d, dv = o->d_v;
  const int cache = o->cache >= 0, varlen = o->varlen && !cache;
  const int nthreads = sdpa_cpu_resolve_threads(0);
  const uint64_t seed = o->seed;
  int rc = CLI_OK;
#define TRY(x)                   \
  do {                           \
    if ((rc = (x)) != CLI_OK) goto fail; \
  } while (0)

  P->max_len_q = o->s_q;
  P->max_len_k = o->s_k;
  int64_t rows_q = b * o->s_q; /* dense and cache */
  if (varlen) {
    /* lengths uniform in [1, s]; self-attention (s_q == s_k) keeps them equal */
    TRY(alloc(&P->cu_q, i32, 1, b + 1, 0, 0, 0));
    TRY(alloc(&P->cu_k, i32, 1, b + 1, 0, 0, 0));
    int32_t *cq = (int32_t *)P->cu_q.t.data, *ck = (int32_t *)P->cu_k.t.data;
    cq[0] = ck[0] = 0;
    P->max_len_q = P->max_len_k = 0;
    for (int64_t i = 0; i < b; ++i) {
      int64_t lq = 1 + (int64_t)(uniform01(seed, 100, (uint64_t)i) * (double)o->s_q);
      int64_t lk = o->s_q == o->s_k ? lq : 1 + (int64_t)(uniform01(seed, 101, (uint64_t)i) * (double)o->s_k);
      if (lq > o->s_q) lq = o->s_q;
      if (lk > o->s_k) lk = o->s_k;
      cq[i + 1] = cq[i] + (int32_t)lq;
      ck[i + 1] = ck[i] + (int32_t)lk;
      if (lq > P->max_len_q) P->max_len_q = lq;
      if (lk > P->max_len_k) P->max_len_k = lk;
    }
    rows_q = cq[b];
    TRY(alloc(&P->q, dt, 3, rows_q, h, d, 0));
    TRY(alloc(&P->k, dt, 3, ck[b], hk, d, 0));
    TRY(alloc(&P->v, dt, 3, ck[b], hk, dv, 0));
    TRY(alloc(&P->out, dt, 3, rows_q, h, dv, 0));
    TRY(alloc(&P->lse, f32, 2, h, rows_q, 0, 0));
  } else {
    TRY(alloc(&P->q, dt, 4, b, o->s_q, h, d));
    TRY(alloc(&P->out, dt, 4, b, o->s_q, h, dv));
    TRY(alloc(&P->lse, f32, 3, b, h, o->s_q, 0));
    if (!cache) {
      TRY(alloc(&P->k, dt, 4, b, o->s_k, hk, d));
      TRY(alloc(&P->v, dt, 4, b, o->s_k, hk, dv));
    }
  }

  if (cache) {
    const int64_t s_cache = o->cache + o->new_kv; /* room for the append */
    TRY(alloc(&P->cache_seqlens, i32, 1, b, 0, 0, 0));
    int32_t *cs = (int32_t *)P->cache_seqlens.t.data;
    for (int64_t i = 0; i < b; ++i) /* --varlen: a random fill in [0, N] per sequence */
      cs[i] = (int32_t)(o->varlen ? (int64_t)(uniform01(seed, 102, (uint64_t)i) * (double)(o->cache + 1))
                                  : o->cache);
    if (o->page) {
      const int64_t per_seq = (s_cache + o->page - 1) / o->page, nblocks = b * per_seq;
      TRY(alloc(&P->block_table, i32, 2, b, per_seq, 0, 0));
      TRY(alloc(&P->k, dt, 4, nblocks, o->page, hk, d));
      TRY(alloc(&P->v, dt, 4, nblocks, o->page, hk, dv));
      int32_t *bt = (int32_t *)P->block_table.t.data; /* a random permutation of the blocks */
      for (int64_t i = 0; i < nblocks; ++i) bt[i] = (int32_t)i;
      for (int64_t i = nblocks - 1; i > 0; --i) {
        int64_t j = (int64_t)(uniform01(seed, 103, (uint64_t)i) * (double)(i + 1));
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
      }
    } else {
      TRY(alloc(&P->k, dt, 4, b, s_cache, hk, d));
      TRY(alloc(&P->v, dt, 4, b, s_cache, hk, dv));
    }
    if (o->new_kv) {
      TRY(alloc(&P->k_new, dt, 4, b, o->new_kv, hk, d));
      TRY(alloc(&P->v_new, dt, 4, b, o->new_kv, hk, dv));
    }
    if (o->rotary) { /* rotary_dim = d, base 10000, positions up to cache + new rows */
      const int64_t half = d / 2, rows = o->cache + (o->s_q > o->new_kv ? o->s_q : o->new_kv);
      TRY(alloc(&P->rot_cos, f32, 2, rows, half, 0, 0));
      TRY(alloc(&P->rot_sin, f32, 2, rows, half, 0, 0));
      float *c = (float *)P->rot_cos.t.data, *s = (float *)P->rot_sin.t.data;
      for (int64_t pos = 0; pos < rows; ++pos)
        for (int64_t i = 0; i < half; ++i) {
          double theta = (double)pos * pow(10000.0, -2.0 * (double)i / (double)d);
          c[pos * half + i] = (float)cos(theta);
          s[pos * half + i] = (float)sin(theta);
        }
    }
  }

  if (o->alibi) {
    TRY(alloc(&P->alibi, f32, 1, h, 0, 0, 0));
    for (int64_t i = 0; i < h; ++i)
      ((float *)P->alibi.t.data)[i] = (float)pow(2.0, -8.0 * (double)(i + 1) / (double)h);
  }
  if (o->bias) /* dense shape; the library rejects it for other layouts */
    TRY(alloc(&P->bias, dt, 4, b, h, P->max_len_q, P->max_len_k));

  if (o->bwd) {
    TRY(alloc(&P->dout, dt, P->out.t.rank, P->out.t.shape[0], P->out.t.shape[1], P->out.t.shape[2],
              P->out.t.shape[3]));
    TRY(alloc(&P->dq, dt, P->q.t.rank, P->q.t.shape[0], P->q.t.shape[1], P->q.t.shape[2],
              P->q.t.shape[3]));
    TRY(alloc(&P->dk, dt, P->k.t.rank, P->k.t.shape[0], P->k.t.shape[1], P->k.t.shape[2],
              P->k.t.shape[3]));
    TRY(alloc(&P->dv, dt, P->v.t.rank, P->v.t.shape[0], P->v.t.shape[1], P->v.t.shape[2],
              P->v.t.shape[3]));
    if (o->bias) TRY(alloc(&P->dbias, dt, 4, b, h, P->max_len_q, P->max_len_k));
  }

  if (fill) {
    fill_normal(&P->q, seed, 1, nthreads);
    fill_normal(&P->k, seed, 2, nthreads);
    fill_normal(&P->v, seed, 3, nthreads);
    fill_normal(&P->k_new, seed, 4, nthreads);
    fill_normal(&P->v_new, seed, 5, nthreads);
    fill_normal(&P->bias, seed, 6, nthreads);
    fill_normal(&P->dout, seed, 7, nthreads);
  }
  if (device == SDPA_DEVICE_CUDA) TRY(upload(P));
  return CLI_OK;
fail:
  cli_problem_free(P);
  return rc;
#undef TRY
}

/* ---- descriptors -------------------------------------------------------------------- */

static sdpa_tensor view(const cli_tensor *x, int dev) {
  sdpa_tensor t = x->t;
  if (dev) t.data = x->dev;
  return t;
}

void cli_problem_desc(const cli_problem *P, int dev, sdpa_fwd_desc *fwd, sdpa_bwd_desc *bwd) {
  const cli_opts *o = &P->o;
  dev = dev && P->device == SDPA_DEVICE_CUDA;
  sdpa_fwd_init(fwd);
  sdpa_attn *a = &fwd->attn;
  a->device = dev ? SDPA_DEVICE_CUDA : SDPA_DEVICE_CPU;
  a->num_threads = o->threads;
  a->q = view(&P->q, dev);
  a->k = view(&P->k, dev);
  a->v = view(&P->v, dev);
  a->cu_seqlens_q = view(&P->cu_q, dev);
  a->cu_seqlens_k = view(&P->cu_k, dev);
  if (P->cu_q.t.data) {
    a->max_seqlen_q = P->max_len_q;
    a->max_seqlen_k = P->max_len_k;
  }
  a->softcap = o->softcap;
  a->alibi_slopes = view(&P->alibi, dev);
  a->bias = view(&P->bias, dev);
  a->causal = o->causal;
  a->align = o->align;
  a->window_left = o->window ? o->window_left : -1;
  a->window_right = o->window ? o->window_right : -1;
  a->dropout_p = o->dropout;
  a->dropout_seed = o->seed;
  a->kernel = o->kernel;
  fwd->out = view(&P->out, dev);
  fwd->lse = view(&P->lse, dev);
  fwd->cache_seqlens = view(&P->cache_seqlens, dev);
  fwd->block_table = view(&P->block_table, dev);
  fwd->k_new = view(&P->k_new, dev);
  fwd->v_new = view(&P->v_new, dev);
  fwd->rotary_cos = view(&P->rot_cos, dev);
  fwd->rotary_sin = view(&P->rot_sin, dev);
  fwd->rotary_interleaved = o->rotary == CLI_ROTARY_INTERLEAVED;
  fwd->num_splits = o->splits;
  if (!bwd) return;
  sdpa_bwd_init(bwd);
  bwd->attn = fwd->attn;
  bwd->out = fwd->out;
  bwd->lse = fwd->lse;
  bwd->dout = view(&P->dout, dev);
  bwd->dq = view(&P->dq, dev);
  bwd->dk = view(&P->dk, dev);
  bwd->dv = view(&P->dv, dev);
  bwd->dbias = view(&P->dbias, dev);
}

/* ---- outputs ------------------------------------------------------------------------- */

static cli_tensor *output(cli_problem *P, int bwd, int i) {
  cli_tensor *fwd_out[] = {&P->out, &P->lse};
  cli_tensor *bwd_out[] = {&P->dq, &P->dk, &P->dv, &P->dbias};
  if (!bwd) return i < 2 ? fwd_out[i] : NULL;
  return i < 4 ? bwd_out[i] : NULL;
}

int cli_problem_poison(cli_problem *P, int bwd) {
  for (int i = 0; output(P, bwd, i); ++i) {
    cli_tensor *x = output(P, bwd, i);
    if (!x->t.data) continue;
    memset(x->t.data, 0xff, x->bytes); /* NaN in f32, f16 and bf16 */
#ifdef SDPA_HAVE_CUDA
    if (x->dev && cudaMemset(x->dev, 0xff, x->bytes) != cudaSuccess) return cuda_error("cudaMemset");
#endif
  }
  return CLI_OK;
}

int cli_problem_download(cli_problem *P, int bwd) {
  if (P->device != SDPA_DEVICE_CUDA) return CLI_OK;
#ifdef SDPA_HAVE_CUDA
  if (cudaDeviceSynchronize() != cudaSuccess) return cuda_error("the run on the device");
  for (int i = 0; output(P, bwd, i); ++i) {
    cli_tensor *x = output(P, bwd, i);
    if (x->dev && cudaMemcpy(x->t.data, x->dev, x->bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      return cuda_error("cudaMemcpy to the host");
  }
  return CLI_OK;
#else
  (void)bwd;
  return cuda_error("--device cuda");
#endif
}

/* 2 (d + d_v) FLOPs per (query, key) pair the mask keeps, times h: the
 * lengths and the mask are the library's own (sdpa_seq_len_q / _k,
 * sdpa_key_range) on the problem the host buffers describe. */
double cli_problem_flops(const cli_problem *P) {
  sdpa_fwd_desc fd;
  sdpa_bwd_desc bd;
  sdpa_problem p;
  cli_problem_desc(P, 0, &fd, &bd);
  if (sdpa_validate_fwd(&fd, &p) != SDPA_OK) return 0;
  double pairs = 0;
  for (int64_t b = 0; b < p.b; ++b) {
    const int64_t sq = sdpa_seq_len_q(&p, b), sk = sdpa_seq_len_k(&p, b);
    for (int64_t i = 0; i < sq; ++i) {
      int64_t lo, hi;
      sdpa_key_range(&p, i, sq, sk, &lo, &hi);
      pairs += (double)(hi - lo);
    }
  }
  return 2.0 * pairs * (double)p.h * (double)(p.d + p.d_v);
}
