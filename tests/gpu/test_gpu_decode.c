/*
 * test_gpu_decode.c - the CUDA split-KV decoding forward (decode rows) and
 * merge_states on CUDA, through the public API, against the fp64 oracle and
 * the CPU backend on the same inputs: contiguous caches (with
 * cache_batch_idx) and paged ones (page 16 and 256, shuffled block tables,
 * lengths off the page grid, cache_seqlens = 0, the rows past each
 * sequence's end NaN), in-call append of k_new /
 * v_new with rotary (interleaved and half-split) in both layouts, the cache
 * contents afterwards bit for bit equal to the CPU backend's, s_q in
 * {1, 2, 7, 64} (causal chunked prefill), windows, alibi, softcap, GQA / MQA,
 * every head-dim bucket in f16 and bf16, head dims that are not a multiple
 * of 8 in rows padded to one (16-byte aligned: the fast path, with a part
 * chunk at each row's end and NaN in the padding), forced split counts 1..64 equal to
 * the unsplit result, paged == contiguous bit for bit, dense problems with
 * forced splits, CUDA-graph capture with and without a caller workspace, and
 * merge_states with empty parts in f32 / f16 / bf16.
 *
 *   test_gpu_decode           the whole matrix
 *   test_gpu_decode --small   a few small problems (for compute-sanitizer)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "common/dtype.h"
#include "common/harness.h"
#include "gpu/gpu_common.h"
#include "ref/ref.h"

static test_rng rng;


/* ---- host tensors and their device twins (contiguous, same strides) ---------------- */

/* Bytes from the first element to the end of the last row, every row's
 * padding included (the tensors here are test_alloc's: elements 1 apart, rows
 * stride[rank - 2] apart), so an upload carries the host's NaN padding and a
 * download brings back the padding of every row, the last one's too, for
 * check_padding. */
static size_t tensor_bytes(const sdpa_tensor *t) {
  if (test_numel(t) == 0) return 0;
  const int r = t->rank - 1;
  int64_t span = r > 0 ? t->stride[r - 1] : t->shape[0];
  for (int k = 0; k < r; ++k) span += (t->shape[k] - 1) * t->stride[k];
  return (size_t)span * sdpa_dtype_size(t->dtype);
}

/* The device twin, its allocation whole 16-byte chunks, as any buffer a
 * [.., d] view with 16-byte aligned rows is taken from (the kernels copy
 * aligned chunks whole, zero-filling past d: compute-sanitizer counts a
 * chunk's bytes past the allocation as read even though they are dropped).
 * Whole rows of 16-byte aligned rows are whole chunks already; the round-up
 * keeps the rule for every tensor. */
static sdpa_tensor to_device(const sdpa_tensor *h) {
  sdpa_tensor d = *h;
  if (!h->data) return d;
  size_t n = tensor_bytes(h), alloc = (n + 15) & ~(size_t)15;
  CUDA_OK(cudaMalloc(&d.data, alloc ? alloc : 16));
  if (n) CUDA_OK(cudaMemcpy(d.data, h->data, n, cudaMemcpyHostToDevice));
  return d;
}

static void download(sdpa_tensor *h, const sdpa_tensor *d) {
  size_t n = tensor_bytes(h);
  if (h->data && n) CUDA_OK(cudaMemcpy(h->data, d->data, n, cudaMemcpyDeviceToHost));
}

static void dev_free(sdpa_tensor *d) {
  if (d->data) CUDA_OK(cudaFree(d->data));
  d->data = NULL;
}

/* ---- cases ------------------------------------------------------------------------- */

typedef struct dcase {
  const char *name;
  sdpa_dtype dtype;
  int64_t b, h, h_k, s_q, s_new, d, s_cache;
  int64_t page;     /* 0 = contiguous cache */
  int batch_idx;    /* contiguous: cache_batch_idx over b + 2 shuffled rows */
  int rotary;       /* 0 off, 1 interleaved, 2 half-split */
  int64_t rotary_dim;
  int causal;
  int64_t wl, wr;
  float softcap;
  int alibi;        /* 0 off, 1 [h], 2 [b, h] */
  int zero_seqlen;  /* sequence 0 starts with an empty cache */
  int dense;        /* no cache: dense k/v [b, s_cache, h_k, d] (needs splits > 1) */
  int padded;       /* rows of d elements padded to a multiple of 8 (poisoned padding) */
  int splits;       /* num_splits asked */
  int sweep;        /* also every forced split count 1..64 against splits = 1 */
  int leftpad;      /* contiguous: cache_leftpad in [0, cache_seqlens[b]], rows before it NaN */
} dcase;

static dcase dbase(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t h_k,
                   int64_t s_q, int64_t s_new, int64_t d, int64_t s_cache) {
  dcase c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.dtype = dt;
  c.b = b;
  c.h = h;
  c.h_k = h_k;
  c.s_q = s_q;
  c.s_new = s_new;
  c.d = d;
  c.s_cache = s_cache;
  c.wl = c.wr = -1;
  return c;
}

/* A [.., d] tensor of the case: rows of d elements, padded to a multiple of 8
 * elements when c->padded (16-byte aligned rows, d % 8 != 0). */
static sdpa_tensor alloc_rows(const dcase *c, const int64_t *shape) {
  int64_t sh[4] = {shape[0], shape[1], shape[2], c->padded ? (shape[3] + 7) / 8 * 8 : shape[3]};
  sdpa_tensor t = test_alloc(c->dtype, 4, sh);
  t.shape[3] = shape[3];
  return t;
}

/* A padded tensor's padding (elements d .. of every row, NaN before the call)
 * still NaN after it: no kernel wrote a whole 16-byte chunk past the head
 * dim. Nothing to check without padding. */
static void check_padding(const char *what, const dcase *c, const sdpa_tensor *t) {
  const int64_t d = t->shape[3], row = (d + 7) / 8 * 8;
  if (!c->padded || row == d) return;
  sdpa_tensor pad = *t; /* the padding columns as a tensor of their own */
  pad.shape[3] = row - d;
  pad.data = (char *)t->data + d * sdpa_dtype_size(t->dtype);
  const int64_t n = pad.shape[0] * pad.shape[1] * pad.shape[2] * pad.shape[3];
  int64_t written = 0;
  for (int64_t e = 0; e < n; ++e) written += !isnan(test_get(&pad, e));
  TEST_EXPECT(written == 0, "%s: %lld padding elements past d = %lld were written", what,
              (long long)written, (long long)d);
}

enum { T_Q, T_KC, T_VC, T_KN, T_VN, T_OUT, T_LSE, T_SL, T_BT, T_BIDX, T_COS, T_SIN, T_ALIBI, T_LPAD,
       T_N };

typedef struct dbufs {
  sdpa_tensor h[T_N], d[T_N];
  sdpa_fwd_desc host, dev;
} dbufs;

static void shuffle(int32_t *a, int64_t n) {
  for (int64_t k = n - 1; k > 0; --k) {
    int64_t r = test_rng_int(&rng, 0, k);
    int32_t t = a[k];
    a[k] = a[r];
    a[r] = t;
  }
}

static int32_t *perm_of(int64_t n) {
  int32_t *p = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t k = 0; k < n; ++k) p[k] = (int32_t)k;
  shuffle(p, n);
  return p;
}

/* Every cache row at or past its sequence's length (before the append,
 * which writes over the first s_new of them), and before its cache_leftpad,
 * NaN in K and V, so a kernel that reads one and weighs it by a zero
 * probability returns NaN instead of passing: 0 * NaN is NaN. */
static void poison_past_ends(const dcase *c, dbufs *f) {
  const int32_t *sl32 = (const int32_t *)f->h[T_SL].data;
  const int32_t *lp = c->leftpad ? (const int32_t *)f->h[T_LPAD].data : NULL;
  const int32_t *bt = c->page > 0 ? (const int32_t *)f->h[T_BT].data : NULL;
  const int32_t *bidx = c->batch_idx ? (const int32_t *)f->h[T_BIDX].data : NULL;
  const int64_t maxb = c->page > 0 ? (c->s_cache + c->page - 1) / c->page : 0;
  const int64_t rows = c->page > 0 ? maxb * c->page : c->s_cache;
  const int64_t rows_per = c->page > 0 ? c->page : c->s_cache; /* rows of one outer index */
  for (int64_t b = 0; b < c->b; ++b)
    for (int64_t j = 0; j < rows; ++j) {
      if (j < sl32[b] && !(lp && j < lp[b])) continue;
      const int64_t outer = bt ? bt[b * maxb + j / c->page] : bidx ? bidx[b] : b;
      const int64_t row = bt ? j % c->page : j;
      for (int64_t e = 0; e < c->h_k * c->d; ++e) {
        const int64_t flat = (outer * rows_per + row) * c->h_k * c->d + e;
        test_set(&f->h[T_KC], flat, NAN);
        test_set(&f->h[T_VC], flat, NAN);
      }
    }
}

/* Host descriptor (CPU device) and device descriptor over device copies. */
static void build(const dcase *c, dbufs *f) {
  memset(f, 0, sizeof *f);
  sdpa_fwd_init(&f->host);
  sdpa_attn *a = &f->host.attn;
  a->device = SDPA_DEVICE_CPU;
  a->num_threads = 4;
  a->causal = c->causal;
  if (!c->causal) {
    a->window_left = c->wl;
    a->window_right = c->wr;
  }
  a->softcap = c->softcap;
  int64_t sq[4] = {c->b, c->s_q, c->h, c->d}, sl[3] = {c->b, c->h, c->s_q}, sb[1] = {c->b};
  f->h[T_Q] = alloc_rows(c, sq);
  f->h[T_OUT] = alloc_rows(c, sq);
  f->h[T_LSE] = test_alloc(SDPA_DTYPE_F32, 3, sl);
  test_fill_normal(&f->h[T_Q], &rng, 1.0);
  if (c->dense) {
    int64_t sk[4] = {c->b, c->s_cache, c->h_k, c->d};
    f->h[T_KC] = alloc_rows(c, sk);
    f->h[T_VC] = alloc_rows(c, sk);
  } else {
    f->h[T_SL] = test_alloc(SDPA_DTYPE_I32, 1, sb);
    int32_t *sl32 = (int32_t *)f->h[T_SL].data;
    int64_t room = c->s_new > c->s_q ? c->s_new : c->s_q;
    for (int64_t b = 0; b < c->b; ++b)
      sl32[b] = (int32_t)(c->zero_seqlen && b == 0 ? 0 : test_rng_int(&rng, 0, c->s_cache - room));
    if (c->page > 0) {
      int64_t maxb = (c->s_cache + c->page - 1) / c->page, nblocks = c->b * maxb + 3;
      int64_t sk[4] = {nblocks, c->page, c->h_k, c->d}, st[2] = {c->b, maxb};
      f->h[T_KC] = alloc_rows(c, sk);
      f->h[T_VC] = alloc_rows(c, sk);
      f->h[T_BT] = test_alloc(SDPA_DTYPE_I32, 2, st);
      int32_t *perm = perm_of(nblocks);
      memcpy(f->h[T_BT].data, perm, sizeof(int32_t) * (size_t)(c->b * maxb));
      free(perm);
      f->host.block_table = f->h[T_BT];
    } else {
      int64_t bc = c->b + (c->batch_idx ? 2 : 0);
      int64_t sk[4] = {bc, c->s_cache, c->h_k, c->d};
      f->h[T_KC] = alloc_rows(c, sk);
      f->h[T_VC] = alloc_rows(c, sk);
      if (c->batch_idx) {
        f->h[T_BIDX] = test_alloc(SDPA_DTYPE_I32, 1, sb);
        int32_t *perm = perm_of(bc);
        memcpy(f->h[T_BIDX].data, perm, sizeof(int32_t) * (size_t)c->b);
        free(perm);
        f->host.cache_batch_idx = f->h[T_BIDX];
      }
    }
    f->host.cache_seqlens = f->h[T_SL];
    if (c->leftpad) {
      f->h[T_LPAD] = test_alloc(SDPA_DTYPE_I32, 1, sb);
      for (int64_t b = 0; b < c->b; ++b)
        ((int32_t *)f->h[T_LPAD].data)[b] = (int32_t)test_rng_int(&rng, 0, sl32[b]);
      f->host.cache_leftpad = f->h[T_LPAD];
    }
  }
  test_fill_normal(&f->h[T_KC], &rng, 1.0);
  test_fill_normal(&f->h[T_VC], &rng, 1.0);
  if (!c->dense) poison_past_ends(c, f);
  if (c->s_new > 0) {
    int64_t sk[4] = {c->b, c->s_new, c->h_k, c->d};
    f->h[T_KN] = alloc_rows(c, sk);
    f->h[T_VN] = alloc_rows(c, sk);
    test_fill_normal(&f->h[T_KN], &rng, 1.0);
    test_fill_normal(&f->h[T_VN], &rng, 1.0);
    f->host.k_new = f->h[T_KN];
    f->host.v_new = f->h[T_VN];
  }
  if (c->rotary) {
    int64_t half = c->rotary_dim / 2, sr[2] = {c->s_cache, half};
    f->h[T_COS] = test_alloc(SDPA_DTYPE_F32, 2, sr);
    f->h[T_SIN] = test_alloc(SDPA_DTYPE_F32, 2, sr);
    for (int64_t pos = 0; pos < c->s_cache; ++pos)
      for (int64_t t = 0; t < half; ++t) {
        double ang = (double)pos * pow(10000.0, -2.0 * (double)t / (double)c->rotary_dim);
        test_set(&f->h[T_COS], pos * half + t, cos(ang));
        test_set(&f->h[T_SIN], pos * half + t, sin(ang));
      }
    f->host.rotary_cos = f->h[T_COS];
    f->host.rotary_sin = f->h[T_SIN];
    f->host.rotary_interleaved = c->rotary == 1;
  }
  if (c->alibi) {
    int64_t s1[1] = {c->h}, s2[2] = {c->b, c->h};
    f->h[T_ALIBI] = c->alibi == 1 ? test_alloc(SDPA_DTYPE_F32, 1, s1) : test_alloc(SDPA_DTYPE_F32, 2, s2);
    test_fill_uniform(&f->h[T_ALIBI], &rng, 0.0, 0.5);
    a->alibi_slopes = f->h[T_ALIBI];
  }
  a->q = f->h[T_Q];
  a->k = f->h[T_KC];
  a->v = f->h[T_VC];
  f->host.out = f->h[T_OUT];
  f->host.lse = f->h[T_LSE];
  f->host.num_splits = c->splits;

  for (int k = 0; k < T_N; ++k) f->d[k] = to_device(&f->h[k]);
  f->dev = f->host;
  sdpa_attn *ad = &f->dev.attn;
  ad->device = SDPA_DEVICE_CUDA;
  ad->q = f->d[T_Q];
  ad->k = f->d[T_KC];
  ad->v = f->d[T_VC];
  if (c->alibi) ad->alibi_slopes = f->d[T_ALIBI];
  f->dev.out = f->d[T_OUT];
  f->dev.lse = f->d[T_LSE];
  if (!c->dense) f->dev.cache_seqlens = f->d[T_SL];
  if (c->page) f->dev.block_table = f->d[T_BT];
  if (c->batch_idx) f->dev.cache_batch_idx = f->d[T_BIDX];
  if (c->leftpad) f->dev.cache_leftpad = f->d[T_LPAD];
  if (c->s_new) {
    f->dev.k_new = f->d[T_KN];
    f->dev.v_new = f->d[T_VN];
  }
  if (c->rotary) {
    f->dev.rotary_cos = f->d[T_COS];
    f->dev.rotary_sin = f->d[T_SIN];
  }
}

static void release(dbufs *f) {
  for (int k = 0; k < T_N; ++k) {
    dev_free(&f->d[k]);
    test_free(&f->h[k]);
  }
}

static void print_case(const dcase *c, const char *tag) {
  printf("-- %s%s: %s b%lld h%lld/%lld s_q%lld s_new%lld d%lld cache %lld page %lld rotary %d "
         "causal %d window (%lld,%lld) softcap %g alibi %d splits %d%s\n",
         c->name, tag, sdpa_dtype_string(c->dtype), (long long)c->b, (long long)c->h,
         (long long)c->h_k, (long long)c->s_q, (long long)c->s_new, (long long)c->d,
         (long long)c->s_cache, (long long)c->page, c->rotary, c->causal, (long long)c->wl,
         (long long)c->wr, (double)c->softcap, c->alibi, c->splits, c->dense ? " dense" : "");
}

/* Runs the device descriptor on `stream` (optionally captured in a graph). */
static sdpa_status run_dev(sdpa_fwd_desc *desc, int graph) {
  if (!graph) {
    sdpa_status st = gpu_fwd(desc);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      printf("  device error: %s\n", cudaGetErrorString(e));
      return SDPA_ERR_CUDA;
    }
    return st;
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  desc->attn.stream = s;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ex = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  sdpa_status st = gpu_fwd(desc);
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (st == SDPA_OK && e == cudaSuccess) e = cudaGraphInstantiate(&ex, g, 0);
  /* twice, the outputs poisoned between: the second replay must write them
   * all again (nothing of the first replay's may stand in for it) */
  for (int rep = 0; rep < 2; ++rep) {
    if (rep == 1 && st == SDPA_OK && e == cudaSuccess) {
      CUDA_OK(cudaMemset(desc->out.data, 0xff, tensor_bytes(&desc->out)));
      if (desc->lse.data) CUDA_OK(cudaMemset(desc->lse.data, 0xff, tensor_bytes(&desc->lse)));
    }
    if (st == SDPA_OK && e == cudaSuccess) e = cudaGraphLaunch(ex, s);
    if (st == SDPA_OK && e == cudaSuccess) e = cudaStreamSynchronize(s);
  }
  if (ex) CUDA_OK(cudaGraphExecDestroy(ex));
  if (g) CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamDestroy(s));
  desc->attn.stream = NULL;
  if (e != cudaSuccess) {
    printf("  graph error: %s\n", cudaGetErrorString(e));
    return SDPA_ERR_CUDA;
  }
  return st;
}

/* graph: 0 plain, 1 captured without workspace, 2 captured with a caller workspace */
static void run_case_mode(const dcase *c, int graph) {
  print_case(c, graph == 1 ? " (graph)" : graph == 2 ? " (graph + workspace)" : "");
  dbufs f;
  build(c, &f);
  sdpa_problem p;
  if (!TEST_EXPECT(sdpa_validate_fwd(&f.host, &p) == SDPA_OK, "%s: validate: %s", c->name,
                   sdpa_last_error())) {
    release(&f);
    return;
  }
  /* the oracle reads the host cache before any append */
  const int64_t n_out = test_numel(&f.h[T_OUT]), n_lse = test_numel(&f.h[T_LSE]);
  double *ro = malloc(sizeof(double) * (size_t)n_out), *lo = malloc(sizeof(double) * (size_t)n_out);
  double *rl = malloc(sizeof(double) * (size_t)n_lse), *ll = malloc(sizeof(double) * (size_t)n_lse);
  ref_fwd(&p, 0, ro, rl, NULL);
  ref_fwd(&p, 1, lo, ll, NULL);

  char what[256];
  void *ws = NULL;
  if (graph == 2) {
    size_t bytes = 0;
    TEST_EXPECT(sdpa_fwd_workspace_size(&f.dev, &bytes) == SDPA_OK, "%s: workspace size: %s",
                c->name, sdpa_last_error());
    /* the answer passed as it is, 0 included, with a pointer (a caller's arena) */
    CUDA_OK(cudaMalloc(&ws, bytes > 0 ? bytes : 16));
    /* a caller's arena holds anything: all ones (NaN as floats) */
    CUDA_OK(cudaMemset(ws, 0xff, bytes > 0 ? bytes : 16));
    f.dev.workspace = ws;
    if (bytes > 0 && c->s_new > 0) {
      /* one byte short: an error naming the size, and the cache untouched
       * (the append runs only after every check) */
      f.dev.workspace_size = bytes - 1;
      TEST_EXPECT_ERROR(gpu_fwd(&f.dev), SDPA_ERR_INVALID_ARGUMENT, "workspace_size",
                        "expected at least");
      CUDA_OK(cudaDeviceSynchronize());
      static const int caches[2] = {T_KC, T_VC};
      for (int x = 0; x < 2; ++x) {
        sdpa_tensor gc = alloc_rows(c, f.h[caches[x]].shape);
        download(&gc, &f.d[caches[x]]);
        snprintf(what, sizeof what, "%s %c cache after the refused call", c->name, "kv"[x]);
        test_check_equal(what, &gc, &f.h[caches[x]]);
        test_free(&gc);
      }
    }
    f.dev.workspace_size = bytes;
    printf("  workspace %zu bytes\n", bytes);
  }
  sdpa_status st = run_dev(&f.dev, graph);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd on CUDA: %s (%s)", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    download(&f.h[T_OUT], &f.d[T_OUT]);
    download(&f.h[T_LSE], &f.d[T_LSE]);
    snprintf(what, sizeof what, "%s out", c->name);
    test_check(what, &f.h[T_OUT], ro, lo, test_atol(c->dtype));
    check_padding(what, c, &f.h[T_OUT]);
    snprintf(what, sizeof what, "%s lse", c->name);
    test_check(what, &f.h[T_LSE], rl, ll, test_lse_atol(rl, n_lse));

    /* the CPU backend on the host copies (it appends into them in place):
     * outputs within twice the oracle bound, caches equal bit for bit */
    sdpa_tensor cout = alloc_rows(c, f.h[T_OUT].shape);
    sdpa_fwd_desc cd = f.host;
    cd.out = cout;
    cd.lse.data = NULL;
    st = gpu_fwd(&cd);
    if (TEST_EXPECT(st == SDPA_OK, "%s: CPU backend: %s", c->name, sdpa_last_error())) {
      double *co = malloc(sizeof(double) * (size_t)n_out), lowp_err = 0.0;
      for (int64_t e = 0; e < n_out; ++e) {
        co[e] = test_get(&cout, e);
        if (fabs(lo[e] - ro[e]) > lowp_err) lowp_err = fabs(lo[e] - ro[e]);
      }
      snprintf(what, sizeof what, "%s out vs CPU backend", c->name);
      test_check(what, &f.h[T_OUT], co, NULL, 2.0 * (2.0 * lowp_err + test_atol(c->dtype)));
      free(co);
      sdpa_tensor gk = alloc_rows(c, f.h[T_KC].shape);
      sdpa_tensor gv = alloc_rows(c, f.h[T_VC].shape);
      download(&gk, &f.d[T_KC]);
      download(&gv, &f.d[T_VC]);
      snprintf(what, sizeof what, "%s k cache after the call vs CPU backend", c->name);
      test_check_equal(what, &gk, &f.h[T_KC]);
      check_padding(what, c, &gk);
      snprintf(what, sizeof what, "%s v cache after the call vs CPU backend", c->name);
      test_check_equal(what, &gv, &f.h[T_VC]);
      check_padding(what, c, &gv);
      test_free(&gk);
      test_free(&gv);
    }
    test_free(&cout);

    /* every forced split count equals the unsplit result (the append is
     * idempotent: the same rows land at the same places again) */
    if (c->sweep) {
      sdpa_tensor o1 = alloc_rows(c, f.h[T_OUT].shape);
      sdpa_tensor l1 = test_alloc(SDPA_DTYPE_F32, 3, f.h[T_LSE].shape);
      double *b1 = malloc(sizeof(double) * (size_t)n_out), *bl = malloc(sizeof(double) * (size_t)n_lse);
      int bad = 0;
      for (int s = 1; s <= 64 && !bad; ++s) {
        f.dev.num_splits = s;
        st = run_dev(&f.dev, 0);
        if (!TEST_EXPECT(st == SDPA_OK, "%s: splits %d: %s", c->name, s, sdpa_last_error())) break;
        download(&o1, &f.d[T_OUT]);
        download(&l1, &f.d[T_LSE]);
        if (s == 1) {
          for (int64_t e = 0; e < n_out; ++e) b1[e] = test_get(&o1, e);
          for (int64_t e = 0; e < n_lse; ++e) bl[e] = test_get(&l1, e);
          continue;
        }
        snprintf(what, sizeof what, "%s splits=%d vs 1 out", c->name, s);
        bad |= !test_check(what, &o1, b1, NULL, test_atol(c->dtype));
        snprintf(what, sizeof what, "%s splits=%d vs 1 lse", c->name, s);
        bad |= !test_check(what, &l1, bl, NULL, test_lse_atol(bl, n_lse));
      }
      f.dev.num_splits = c->splits;
      free(b1);
      free(bl);
      test_free(&o1);
      test_free(&l1);
    }
  }
  if (ws) CUDA_OK(cudaFree(ws));
  free(ro);
  free(lo);
  free(rl);
  free(ll);
  release(&f);
}

static void run_case(const dcase *c) { run_case_mode(c, 0); }

/* The same logical cache, contiguous and paged (shuffled blocks): the same
 * tiles in the same order and splits (on sm_90 a call on pages of 16 runs
 * the row's lean twin, the contiguous one the row: the same arithmetic), so
 * the outputs are equal bit for bit. */
static void run_paged_vs_contiguous(sdpa_dtype dt, int64_t page, int64_t s_q, int splits) {
  dcase c = dbase("paged == contiguous", dt, 3, 8, 2, s_q, 0, 128, 1000);
  c.page = 0;
  c.causal = 1;
  c.splits = splits;
  print_case(&c, "");
  dbufs f;
  build(&c, &f);
  const int64_t maxb = (c.s_cache + page - 1) / page, nblocks = c.b * maxb + 1;
  int64_t sk[4] = {nblocks, page, c.h_k, c.d}, st[2] = {c.b, maxb};
  sdpa_tensor pk = test_alloc(dt, 4, sk), pv = test_alloc(dt, 4, sk), bt = test_alloc(SDPA_DTYPE_I32, 2, st);
  test_fill_normal(&pk, &rng, 1.0); /* blocks past the sequences: random, never read */
  test_fill_normal(&pv, &rng, 1.0);
  int32_t *perm = perm_of(nblocks);
  memcpy(bt.data, perm, sizeof(int32_t) * (size_t)(c.b * maxb));
  free(perm);
  const size_t row = (size_t)(c.h_k * c.d) * 2;
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t j = 0; j < c.s_cache; ++j) {
      int64_t blk = ((int32_t *)bt.data)[b * maxb + j / page];
      size_t dst = (size_t)(blk * page + j % page) * row, src = (size_t)(b * c.s_cache + j) * row;
      memcpy((char *)pk.data + dst, (char *)f.h[T_KC].data + src, row);
      memcpy((char *)pv.data + dst, (char *)f.h[T_VC].data + src, row);
    }
  sdpa_tensor dpk = to_device(&pk), dpv = to_device(&pv), dbt = to_device(&bt);
  sdpa_tensor out_c = test_alloc(dt, 4, f.h[T_OUT].shape), out_p = test_alloc(dt, 4, f.h[T_OUT].shape);
  sdpa_status s1 = run_dev(&f.dev, 0);
  download(&out_c, &f.d[T_OUT]);
  CUDA_OK(cudaMemset(f.d[T_OUT].data, 0xff, tensor_bytes(&f.h[T_OUT])));
  f.dev.attn.k = dpk;
  f.dev.attn.v = dpv;
  f.dev.block_table = dbt;
  sdpa_status s2 = run_dev(&f.dev, 0);
  download(&out_p, &f.d[T_OUT]);
  char what[128];
  snprintf(what, sizeof what, "paged %lld vs contiguous s_q %lld splits %d", (long long)page,
           (long long)s_q, splits);
  if (TEST_EXPECT(s1 == SDPA_OK && s2 == SDPA_OK, "%s: %s", what, sdpa_last_error()))
    test_check_equal(what, &out_p, &out_c);
  dev_free(&dpk);
  dev_free(&dpv);
  dev_free(&dbt);
  test_free(&pk);
  test_free(&pv);
  test_free(&bt);
  test_free(&out_c);
  test_free(&out_p);
  release(&f);
}

/* merge_states on CUDA vs the CPU: n parts, some empty (+inf), one row all empty. */
static void run_merge(sdpa_dtype parts_dt, sdpa_dtype out_dt, int64_t n, int64_t t, int64_t h,
                      int64_t d) {
  printf("-- merge_states: parts %s out %s n%lld t%lld h%lld d%lld\n", sdpa_dtype_string(parts_dt),
         sdpa_dtype_string(out_dt), (long long)n, (long long)t, (long long)h, (long long)d);
  int64_t sp[4] = {n, t, h, d}, sl[3] = {n, t, h}, so[3] = {t, h, d}, slo[2] = {t, h};
  sdpa_tensor parts = test_alloc(parts_dt, 4, sp), lse = test_alloc(SDPA_DTYPE_F32, 3, sl);
  sdpa_tensor out = test_alloc(out_dt, 3, so), lo = test_alloc(SDPA_DTYPE_F32, 2, slo);
  sdpa_tensor cout = test_alloc(out_dt, 3, so), clo = test_alloc(SDPA_DTYPE_F32, 2, slo);
  test_fill_normal(&parts, &rng, 1.0);
  for (int64_t e = 0; e < test_numel(&lse); ++e) {
    int64_t row = e % (t * h);
    double x = row == 1 ? INFINITY : test_rng_uniform(&rng) < 0.2 ? INFINITY : 3.0 * test_rng_normal(&rng);
    test_set(&lse, e, x);
  }
  sdpa_tensor dparts = to_device(&parts), dlse = to_device(&lse), dout = to_device(&out), dlo = to_device(&lo);
  sdpa_merge_desc m;
  sdpa_merge_init(&m);
  m.device = SDPA_DEVICE_CUDA;
  m.out_parts = dparts;
  m.lse_parts = dlse;
  m.out = dout;
  m.lse = dlo;
  sdpa_status st = sdpa_merge_states(&m);
  CUDA_OK(cudaDeviceSynchronize());
  sdpa_merge_desc mc = m;
  mc.device = SDPA_DEVICE_CPU;
  mc.out_parts = parts;
  mc.lse_parts = lse;
  mc.out = cout;
  mc.lse = clo;
  sdpa_status stc = sdpa_merge_states(&mc);
  /* a 16-bit out_dt: the CPU merge in fp32 too, the reference, with the
   * out_dt one as the rounded result (docs/design.md §7's rule), so one
   * rounding of a 16-bit output that lands on the other side of a tie does not
   * fail the check (an fp32 out_dt is checked against the first CPU merge) */
  sdpa_tensor cf = test_alloc(SDPA_DTYPE_F32, 3, so);
  mc.out = cf;
  mc.lse.data = NULL;
  if (stc == SDPA_OK && out_dt != SDPA_DTYPE_F32) stc = sdpa_merge_states(&mc);
  if (TEST_EXPECT(st == SDPA_OK && stc == SDPA_OK, "merge_states: %s", sdpa_last_error())) {
    download(&out, &dout);
    download(&lo, &dlo);
    double *co = malloc(sizeof(double) * (size_t)test_numel(&cout));
    double *cr = malloc(sizeof(double) * (size_t)test_numel(&cf));
    double *cl = malloc(sizeof(double) * (size_t)test_numel(&clo));
    for (int64_t e = 0; e < test_numel(&cout); ++e) co[e] = test_get(&cout, e), cr[e] = test_get(&cf, e);
    for (int64_t e = 0; e < test_numel(&clo); ++e) cl[e] = test_get(&clo, e);
    if (out_dt == SDPA_DTYPE_F32)
      test_check("merge_states out vs CPU", &out, co, NULL, 1e-5);
    else
      test_check("merge_states out vs CPU", &out, cr, co, test_atol(out_dt));
    free(cr);
    test_check("merge_states lse vs CPU", &lo, cl, NULL, 1e-5);
    free(co);
    free(cl);
  }
  dev_free(&dparts);
  dev_free(&dlse);
  dev_free(&dout);
  dev_free(&dlo);
  sdpa_tensor *all[7] = {&parts, &lse, &out, &lo, &cout, &clo, &cf};
  for (int k = 0; k < 7; ++k) test_free(all[k]);
}

/* Which kernel a cache problem gets (printed for the log). */
static void show_choice(void) {
  dcase c = dbase("explain", SDPA_DTYPE_BF16, 2, 32, 8, 1, 1, 128, 512);
  c.page = 16;
  dbufs f;
  build(&c, &f);
  char buf[4096];
  sdpa_status st = sdpa_explain_fwd(&f.dev, buf, sizeof buf);
  printf("%s", buf);
  TEST_EXPECT(st == SDPA_OK && strstr(buf, "selected: decode_sm80_bf16_hd128") != NULL,
              "explain: expected decode_sm80_bf16_hd128 for a paged bf16 d=128 cache: %s",
              sdpa_last_error());
  release(&f);
}

int main(int argc, char **argv) {
  int small = argc > 1 && strcmp(argv[1], "--small") == 0;
  test_rng_init(&rng, test_seed());
  if (!sdpa_cuda_available()) {
    printf("no usable CUDA device: skipped\n");
    return 0;
  }
  dcase c;
  if (small) {
    const int64_t ds[3] = {64, 128, 256};
    for (int k = 0; k < 3; ++k) {
      c = dbase("small paged append rotary", k == 1 ? SDPA_DTYPE_F16 : SDPA_DTYPE_BF16, 2, 4, 2, 3,
                2, ds[k], 200);
      c.page = 16;
      c.rotary = 2;
      c.rotary_dim = ds[k] / 2;
      c.causal = 1;
      c.splits = 3;
      c.zero_seqlen = 1;
      run_case(&c);
    }
    c = dbase("small padded rows", SDPA_DTYPE_BF16, 2, 8, 2, 2, 1, 100, 150);
    c.padded = 1;
    c.page = 16;
    c.splits = 2;
    run_case(&c);
    c = dbase("small contiguous batch_idx", SDPA_DTYPE_F16, 2, 8, 1, 1, 1, 128, 300);
    c.batch_idx = 1;
    c.rotary = 1;
    c.rotary_dim = 64;
    run_case(&c);
    run_merge(SDPA_DTYPE_F32, SDPA_DTYPE_BF16, 3, 5, 4, 72);
    run_merge(SDPA_DTYPE_F32, SDPA_DTYPE_F16, 5, 2, 3, 30);
    c = dbase("small GQA 6/3 (group 2) h_k 3", SDPA_DTYPE_F16, 2, 6, 3, 2, 1, 64, 150);
    c.page = 16;
    c.splits = 3;
    run_case(&c);
    /* the d 128 rows' wide twin (decode_plan.cu): 2 groups, keys the cap */
    c = dbase("small wide twin paged append rotary", SDPA_DTYPE_BF16, 1, 8, 2, 1, 1, 128, 512);
    c.page = 16;
    c.rotary = 2;
    c.rotary_dim = 128;
    run_case(&c);
    /* sequences ending inside a warp's first tiles, a capacity (70) that is
     * not a whole number of tiles */
    c = dbase("small short contiguous caches", SDPA_DTYPE_BF16, 5, 8, 2, 1, 1, 128, 70);
    c.zero_seqlen = 1;
    run_case(&c);
    c = dbase("small leftpad append rotary", SDPA_DTYPE_F16, 2, 4, 2, 2, 2, 64, 150);
    c.leftpad = 1;
    c.rotary = 2;
    c.rotary_dim = 32;
    run_case(&c);
    /* rows that are not 16-byte aligned / f32: the SIMT row, after kv_append.cu */
    c = dbase("small d 59 append rotary (simt)", SDPA_DTYPE_BF16, 2, 4, 2, 3, 3, 59, 120);
    c.leftpad = 1;
    c.rotary = 1;
    c.rotary_dim = 32;
    c.causal = 1;
    run_case(&c);
    c = dbase("small f32 paged append rotary (simt)", SDPA_DTYPE_F32, 2, 4, 1, 2, 2, 64, 100);
    c.page = 16;
    c.rotary = 2;
    c.rotary_dim = 64;
    run_case(&c);
    return test_summary();
  }

  show_choice();
  const sdpa_dtype dts[2] = {SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  const int64_t sqs[4] = {1, 2, 7, 64};
  for (int k = 0; k < 8; ++k) {
    sdpa_dtype dt = dts[k % 2];
    int64_t s_q = sqs[k % 4];
    c = dbase("contiguous + batch_idx + append + rotary interleaved", dt, 3, 8, 2, s_q, s_q, 128, 700);
    c.batch_idx = 1;
    c.rotary = 1;
    c.rotary_dim = 64;
    c.causal = 1;
    c.zero_seqlen = 1;
    run_case(&c);
    c = dbase("paged 16 + append + rotary half", dt, 3, 8, 2, s_q, k < 4 ? s_q : 3, 64, 400);
    c.page = 16;
    c.rotary = 2;
    c.rotary_dim = 64;
    c.causal = k % 2;
    c.zero_seqlen = k == 1;
    run_case(&c);
    c = dbase("paged 256 no append", dt, 2, 4, 4, s_q, 0, 256, 700);
    c.page = 256;
    c.zero_seqlen = k == 2;
    c.causal = k >= 4;
    run_case(&c);
  }
  /* head-dim buckets, padded inside them, GQA / MQA */
  const int64_t hds[6] = {32, 40, 64, 72, 128, 200};
  for (int k = 0; k < 12; ++k) {
    c = dbase("head dim", dts[k / 6], 2, 8, k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 8, 1 + k % 3, 1,
              hds[k % 6], 333);
    c.page = k % 2 ? 16 : 0;
    run_case(&c);
  }
  /* d % 8 != 0 in 16-byte aligned rows (NaN in the padding): a part 16-byte
   * chunk at each row's end, zero past d (hd128: d 100 in 13 of 16 chunks;
   * hd64: d 36 in 5 of 8, d 60 in 8 of 8) */
  c = dbase("padded rows paged 16 + append + rotary", SDPA_DTYPE_BF16, 2, 8, 2, 1, 2, 100, 500);
  c.padded = 1;
  c.page = 16;
  c.rotary = 2;
  c.rotary_dim = 64;
  c.splits = 3;
  run_case(&c);
  c = dbase("padded rows contiguous causal", SDPA_DTYPE_F16, 3, 4, 2, 2, 2, 36, 300);
  c.padded = 1;
  c.causal = 1;
  run_case(&c);
  c = dbase("padded rows dense split-KV", SDPA_DTYPE_BF16, 2, 4, 4, 3, 0, 60, 200);
  c.padded = 1;
  c.dense = 1;
  c.splits = 4;
  run_case(&c);
  /* score modifiers */
  c = dbase("window", SDPA_DTYPE_BF16, 2, 8, 2, 7, 2, 128, 900);
  c.wl = 100;
  c.wr = 3;
  c.page = 16;
  run_case(&c);
  c = dbase("alibi [h] + softcap", SDPA_DTYPE_F16, 2, 8, 2, 2, 1, 128, 600);
  c.alibi = 1;
  c.softcap = 20.0f;
  c.causal = 1;
  run_case(&c);
  c = dbase("alibi [b, h] + window + GQA 8", SDPA_DTYPE_BF16, 2, 16, 2, 1, 1, 64, 800);
  c.alibi = 2;
  c.wl = 60;
  c.wr = 0;
  c.page = 256;
  run_case(&c);
  c = dbase("chunked prefill 64 causal", SDPA_DTYPE_BF16, 2, 32, 8, 64, 64, 128, 2000);
  c.causal = 1;
  c.page = 16;
  run_case(&c);
  c = dbase("empty caches, no append", SDPA_DTYPE_F16, 1, 4, 1, 3, 0, 64, 64);
  c.zero_seqlen = 1;
  run_case(&c);
  /* short contiguous caches: sequences that end inside a warp's first tiles
   * or before them, a capacity (70) that is not a whole number of tiles;
   * with append, cache_batch_idx, part chunks (d 100) and a forced split */
  for (int k = 0; k < 4; ++k) {
    const int64_t hd[4] = {128, 64, 256, 100};
    c = dbase("short contiguous caches", dts[k % 2], 9, 8, 2, 1 + k % 2, k % 3, hd[k], k < 2 ? 70 : 150);
    c.padded = hd[k] == 100;
    c.batch_idx = k % 2;
    c.zero_seqlen = 1;
    c.causal = k >= 2;
    c.splits = k == 3 ? 2 : 0;
    run_case(&c);
  }
  /* cache_leftpad (rows before it NaN): the decode rows, with a window, a
   * forced split and the lean / wide twins' shapes */
  for (int k = 0; k < 4; ++k) {
    c = dbase("leftpad", dts[k % 2], 3, 8, 2, sqs[k], k % 2 ? sqs[k] : 0, k < 2 ? 128 : 64, 500);
    c.leftpad = 1;
    c.batch_idx = k == 1;
    c.rotary = k % 2 ? 2 : 0;
    c.rotary_dim = 64;
    c.causal = k == 3;
    c.wl = k == 2 ? 40 : -1;
    c.splits = k == 0 ? 3 : 0;
    c.zero_seqlen = 1;
    run_case(&c);
  }
  /* head dims off 16-byte rows, and f32 caches, with append / rotary / leftpad:
   * the SIMT row after kv_append.cu (q rotated into its workspace) */
  const int64_t odd[3] = {59, 100, 161};
  for (int k = 0; k < 3; ++k) {
    c = dbase("unaligned rows append + rotary (simt)", dts[k % 2], 2, 6, 2, 1 + 3 * k, 2, odd[k], 300);
    c.rotary = 1 + k % 2;
    c.rotary_dim = 32;
    c.leftpad = k != 1;
    c.page = k == 1 ? 16 : 0;
    c.causal = k == 2;
    run_case(&c);
    run_case_mode(&c, 2); /* captured, with the queried workspace */
  }
  c = dbase("f32 contiguous append + rotary (simt)", SDPA_DTYPE_F32, 2, 4, 2, 7, 7, 128, 200);
  c.rotary = 2;
  c.rotary_dim = 128;
  c.leftpad = 1;
  c.wl = 3;
  run_case(&c);
  /* groups and kv heads that are not powers of two: the kernel divides its
   * block index and query rows by host-computed multipliers (sdpa_divmod),
   * which are plain shifts for powers of two */
  c = dbase("GQA 12/4 (group 3) paged 16 + append", SDPA_DTYPE_BF16, 2, 12, 4, 2, 1, 128, 700);
  c.page = 16;
  c.causal = 1;
  c.splits = 5;
  run_case(&c);
  c = dbase("GQA 15/3 (group 5) s_q 7 contiguous", SDPA_DTYPE_F16, 3, 15, 3, 7, 0, 64, 500);
  c.causal = 1;
  c.splits = 3;
  run_case(&c);
  c = dbase("h 6 / h_k 6 split sweep", SDPA_DTYPE_BF16, 1, 6, 6, 1, 0, 128, 1300);
  c.sweep = 1;
  run_case(&c);
  /* split counts */
  c = dbase("split sweep paged 16 + append + rotary", SDPA_DTYPE_BF16, 2, 8, 2, 1, 1, 128, 3000);
  c.page = 16;
  c.rotary = 2;
  c.rotary_dim = 128;
  c.sweep = 1;
  run_case(&c);
  c = dbase("split sweep contiguous causal s_q 7", SDPA_DTYPE_F16, 2, 4, 4, 7, 0, 64, 2000);
  c.batch_idx = 1;
  c.causal = 1;
  c.sweep = 1;
  run_case(&c);
  c = dbase("auto split long", SDPA_DTYPE_BF16, 1, 32, 8, 1, 1, 128, 20000);
  c.page = 256;
  run_case(&c);
  /* the d 128 rows' wide twin (decode_plan.cu: few groups, a plan capped
   * by the keys): the benchmark's b 1 s_k 4k, contiguous and paged with
   * append and rotary, s_q 1 and 2 */
  for (int k = 0; k < 2; ++k) {
    c = dbase("wide twin", dts[k], 1, 32, 8, 1 + k, k, 128, 4096);
    c.page = k ? 16 : 0;
    c.rotary = k;
    c.rotary_dim = k ? 64 : 0;
    c.causal = k;
    run_case(&c);
  }
  /* the d 128 rows' lean twin (decode_body.cuh: calls on pages of 16 where
   * three of its blocks fit an SM) at the row's split count (the row's grid
   * in one round of lean blocks: b 8 s_k 4k, 4 splits on 132 SMs), with
   * append and rotary; then past one round, at its own planner's count (b 50,
   * 8/8 heads, s_k 2048: the row's 3, lean 4 on 132 SMs) */
  for (int k = 0; k < 2; ++k) {
    c = dbase("lean twin", dts[k], 8, 32, 8, 1 + k, 1, 128, 4096);
    c.page = 16;
    c.rotary = 1 + k;
    c.rotary_dim = 128;
    c.causal = k;
    run_case(&c);
  }
  c = dbase("lean twin own splits", SDPA_DTYPE_BF16, 50, 8, 8, 1, 1, 128, 2048);
  c.page = 16;
  run_case(&c);
  /* a forced count past one round (the caller's count, not the row's plan),
   * above SDPA_DECODE_MAX_FORCED (clamped to 256: most splits empty) */
  c.splits = 300;
  run_case(&c);
  /* dense problems with forced splits */
  c = dbase("dense split-KV", SDPA_DTYPE_BF16, 2, 8, 2, 33, 0, 128, 500);
  c.dense = 1;
  c.causal = 1;
  c.splits = 5;
  run_case(&c);
  c = dbase("dense split-KV softcap", SDPA_DTYPE_F16, 1, 4, 1, 1, 0, 256, 1111);
  c.dense = 1;
  c.softcap = 30.0f;
  c.splits = 7;
  run_case(&c);
  /* paged == contiguous, bit for bit */
  for (int k = 0; k < 2; ++k) {
    run_paged_vs_contiguous(dts[k], 16, 1, 4);
    run_paged_vs_contiguous(dts[k], 256, 7, 1);
  }
  /* CUDA graphs: stream-ordered workspace, and a caller workspace */
  c = dbase("graph", SDPA_DTYPE_BF16, 2, 8, 2, 1, 1, 128, 1500);
  c.page = 16;
  c.rotary = 1;
  c.rotary_dim = 32;
  c.splits = 4;
  run_case_mode(&c, 1);
  run_case_mode(&c, 2);
  c.splits = 1; /* no workspace needed: a pointer with workspace_size = 0 */
  run_case_mode(&c, 2);
  /* the twins' workspaces (the planner's split counts): queried, passed, captured */
  c = dbase("graph wide twin", SDPA_DTYPE_BF16, 1, 32, 8, 1, 0, 128, 4096);
  run_case_mode(&c, 2);
  c = dbase("graph lean twin", SDPA_DTYPE_F16, 8, 32, 8, 1, 1, 128, 4096);
  c.page = 16;
  run_case_mode(&c, 2);
  c = dbase("graph lean twin own splits", SDPA_DTYPE_F16, 50, 8, 8, 1, 0, 128, 2048);
  c.page = 16;
  run_case_mode(&c, 2);
  /* merge_states */
  run_merge(SDPA_DTYPE_F32, SDPA_DTYPE_F32, 4, 7, 3, 64);
  run_merge(SDPA_DTYPE_BF16, SDPA_DTYPE_F16, 1, 5, 2, 300);
  run_merge(SDPA_DTYPE_F16, SDPA_DTYPE_BF16, 9, 3, 8, 128);
  /* d % 4 != 0: parts and out rows not 4-element aligned, the element paths */
  run_merge(SDPA_DTYPE_F32, SDPA_DTYPE_F32, 6, 3, 5, 30);
  run_merge(SDPA_DTYPE_F32, SDPA_DTYPE_BF16, 33, 2, 3, 30);
  return test_summary();
}
