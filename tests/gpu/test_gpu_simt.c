/*
 * test_gpu_simt.c - the SIMT kernels (fwd_simt, bwd_simt: src/cuda/simt/simt_*.cu)
 * through the public API on cudaMalloc'd buffers, forced by attn.kernel so
 * they are tested where a faster row exists, against the fp64 oracle (ref_fwd
 * / ref_bwd, exact and lowp) under the harness tolerance; gradients with atol
 * scaled by max(1, max |ref|) as in test_cpu_bwd.c, dbias compared with the
 * oracle's full dbias summed over the broadcast dims. f32 results must also
 * reach max |got - ref| / max |ref| <= 1e-5 (fp32-class accuracy).
 *
 * Matrix: f32 / f16 / bf16; d in {1, 3, 40, 72, 80, 96, 112, 257, 320, 512}
 * and d = 576 / d_v = 512; causal in both alignments, windows, alibi [h] and
 * [b, h], softcap, bias with every broadcast pattern and -inf entries (+ dbias),
 * dropout (+ probs), GQA, varlen with an empty sequence and seqused_k, odd row
 * padding, q / k / v sliced from one packed qkv buffer at an odd element
 * offset, KV cache forward (contiguous with cache_batch_idx, paged with a
 * shuffled block table). Each backward also reruns with a caller workspace
 * and must reproduce the first run bit for bit. out / lse for the backward
 * come from the CPU forward.
 *
 * The bias section at the end runs the same checks through the registry's
 * own choice (.expect: no attn.kernel, and explain must select that row):
 * the sm80 backward's bias kernels (bias of every broadcast pattern with a
 * full dbias, or without dbias; masks, softcap, alibi, dropout; atomic and
 * deterministic), and a broadcast dbias routed to bwd_simt. On sm_90 in a
 * build with the Hopper bias rows (bwd_sm90_bias_*, d in (32, 64] and (96,
 * 128]) the registry must select those instead (.hopper), and the case runs
 * again forced onto its sm80 row, so both stay tested there. Then the fp32
 * backward's bias rows (bwd_tf32_*_bias) the same way.
 *
 *   test_gpu_simt            the whole matrix
 *   test_gpu_simt --small    a few small problems (for compute-sanitizer)
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


enum { BC_B = 8, BC_H = 2, BC_Q = 4 }; /* bias broadcast dims (bit 0 of .bias = on) */
enum { MAX_BUFS = 32 };

/* ---- buffers: a host copy and a device copy of the same bytes ------------------------- */

typedef struct env {
  void *h[MAX_BUFS], *d[MAX_BUFS];
  size_t bytes[MAX_BUFS];
  int n;
} env;


/* A new buffer of `elems` elements, host bytes 0xff (NaN for every float dtype). */
static int buf_new(env *E, int64_t elems, size_t es) {
  if (E->n == MAX_BUFS) {
    printf("FATAL: more than %d buffers in one case\n", MAX_BUFS);
    exit(1);
  }
  const int i = E->n++;
  E->bytes[i] = (size_t)(elems > 0 ? elems : 1) * es;
  E->h[i] = malloc(E->bytes[i]);
  memset(E->h[i], 0xff, E->bytes[i]);
  CUDA_OK(cudaMalloc(&E->d[i], E->bytes[i]));
  return i;
}

static void env_up(env *E) {
  for (int i = 0; i < E->n; ++i)
    CUDA_OK(cudaMemcpy(E->d[i], E->h[i], E->bytes[i], cudaMemcpyHostToDevice));
}

static void env_down(env *E) {
  for (int i = 0; i < E->n; ++i)
    CUDA_OK(cudaMemcpy(E->h[i], E->d[i], E->bytes[i], cudaMemcpyDeviceToHost));
}

static void env_free(env *E) {
  for (int i = 0; i < E->n; ++i) {
    free(E->h[i]);
    CUDA_OK(cudaFree(E->d[i]));
  }
  E->n = 0;
}

/* A tensor on both sides: host view h, device view d, same layout in buffer `buf`. */
typedef struct pair {
  sdpa_tensor h, d;
  int buf;
} pair;

/* View of buffer `buf` at element offset base with the given strides. */
static pair view(env *E, int buf, sdpa_dtype dt, int64_t base, int rank, const int64_t *shape,
                 const int64_t *stride) {
  pair x;
  memset(&x, 0, sizeof x);
  x.buf = buf;
  x.h.dtype = dt;
  x.h.rank = rank;
  for (int k = 0; k < rank; ++k) x.h.shape[k] = shape[k], x.h.stride[k] = stride[k];
  x.d = x.h;
  x.h.data = (char *)E->h[buf] + (size_t)base * sdpa_dtype_size(dt);
  x.d.data = (char *)E->d[buf] + (size_t)base * sdpa_dtype_size(dt);
  return x;
}

/* A fresh tensor in its own buffer: row-major, every stride but the last
 * grown by pad (odd pad: rows off any 16-byte grid), at element offset base. */
static pair tensor(env *E, sdpa_dtype dt, int rank, const int64_t *shape, int64_t pad,
                   int64_t base) {
  int64_t stride[SDPA_MAX_RANK], span = 1;
  stride[rank - 1] = 1;
  for (int k = rank - 2; k >= 0; --k) stride[k] = stride[k + 1] * shape[k + 1] + pad;
  for (int k = 0; k < rank; ++k)
    span = shape[k] == 0 || span == 0 ? 0 : span + (shape[k] - 1) * stride[k];
  return view(E, buf_new(E, base + span, sdpa_dtype_size(dt)), dt, base, rank, shape, stride);
}

static pair ivec(env *E, int64_t n, const int32_t *vals) {
  pair x = tensor(E, SDPA_DTYPE_I32, 1, &n, 0, 0);
  memcpy(x.h.data, vals, sizeof(int32_t) * (size_t)n);
  return x;
}

/* ---- cases ------------------------------------------------------------------------------ */

typedef struct scase {
  const char *name;
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d, dv;
  int causal, top_left;
  int64_t wl, wr;
  int wset;
  float softcap, scale, dropout;
  int alibi;     /* 0 off, 1 [h], 2 [b, h] */
  int bias;      /* 0 off, else 1 | BC_* */
  int bias_ninf; /* about 10% of the bias -inf */
  int dbias;
  int varlen;    /* lengths in [1, sq] / [1, sk], sequence 1 empty, seqused_k on the last */
  int cache;     /* forward: 1 contiguous + cache_batch_idx, 2 paged (page 16) */
  int64_t pad;   /* odd: unaligned rows */
  int64_t bpad;  /* more row padding of bias / dbias alone (odd: only their rows unaligned) */
  int packed;    /* q, k, v from one [b, s, h, 2d + d_v] buffer at element offset 1 */
  int probs;
  const char *expect; /* backward: let the registry choose, and expect this row */
  int hopper;         /* ... or on sm_90, where the build has it, its bwd_sm90_bias_ twin */
  const char *force;  /* backward: attn.kernel (no expectation checked) */
  int atomic;         /* backward: deterministic = 0 (dq compared to the first run only
                         within tolerance) */
} scase;

static scase mk(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t hk, int64_t sq,
                int64_t sk, int64_t d, int64_t dv) {
  scase c;
  memset(&c, 0, sizeof c);
  c.name = name, c.dt = dt, c.b = b, c.h = h, c.hk = hk, c.sq = sq, c.sk = sk, c.d = d, c.dv = dv;
  return c;
}

/* Everything one case needs, host and device. */
typedef struct prob {
  env E;
  pair q, k, v, out, lse, probs, dout, dq, dk, dv, dbias, bias;
  sdpa_attn ha, da;         /* host (CPU) and device attention descriptors */
  sdpa_fwd_desc hf, df;     /* forward descriptors */
  int64_t nq, nk, sq, sk;   /* rows of q / k; max lengths */
  int64_t bshape[4];
} prob;

static void fill(pair *x) { test_fill_normal(&x->h, &rng, 1.0); }

/* q, k, v and the attention fields of both descriptors (not the cache). */
static void build_inputs(const scase *c, prob *f, int bwd) {
  env *E = &f->E;
  sdpa_attn *a = &f->ha, *g = &f->da;
  const int64_t pad = c->pad;
  f->sq = c->sq, f->sk = c->sk;
  if (c->varlen) {
    int32_t cq[17], ck[17], used[16];
    cq[0] = ck[0] = 0;
    f->sq = f->sk = 0;
    for (int64_t b = 0; b < c->b; ++b) {
      const int64_t lq = b == 1 ? 0 : test_rng_int(&rng, 1, c->sq);
      const int64_t lk = b == 1 ? 0 : test_rng_int(&rng, 1, c->sk);
      cq[b + 1] = (int32_t)(cq[b] + lq), ck[b + 1] = (int32_t)(ck[b] + lk);
      used[b] = (int32_t)(b == c->b - 1 ? (lk + 1) / 2 : lk);
      if (lq > f->sq) f->sq = lq;
      if (lk > f->sk) f->sk = lk;
    }
    f->nq = cq[c->b], f->nk = ck[c->b];
    pair cu_q = ivec(E, c->b + 1, cq), cu_k = ivec(E, c->b + 1, ck), us = ivec(E, c->b, used);
    a->cu_seqlens_q = cu_q.h, a->cu_seqlens_k = cu_k.h, a->seqused_k = us.h;
    g->cu_seqlens_q = cu_q.d, g->cu_seqlens_k = cu_k.d, g->seqused_k = us.d;
    a->max_seqlen_q = g->max_seqlen_q = f->sq;
    a->max_seqlen_k = g->max_seqlen_k = f->sk;
    const int64_t qs[3] = {f->nq, c->h, c->d}, ks[3] = {f->nk, c->hk, c->d};
    const int64_t vs[3] = {f->nk, c->hk, c->dv}, os[3] = {f->nq, c->h, c->dv};
    const int64_t ls[2] = {c->h, f->nq};
    f->q = tensor(E, c->dt, 3, qs, pad, 0), f->k = tensor(E, c->dt, 3, ks, pad, 0);
    f->v = tensor(E, c->dt, 3, vs, pad, 0), f->out = tensor(E, c->dt, 3, os, pad, 0);
    f->lse = tensor(E, SDPA_DTYPE_F32, 2, ls, 0, 0);
    if (bwd) {
      f->dout = tensor(E, c->dt, 3, os, pad, 0), f->dq = tensor(E, c->dt, 3, qs, pad, 0);
      f->dk = tensor(E, c->dt, 3, ks, pad, 0), f->dv = tensor(E, c->dt, 3, vs, pad, 0);
    }
  } else {
    f->nq = c->b * c->sq, f->nk = c->b * c->sk;
    const int64_t qs[4] = {c->b, c->sq, c->h, c->d}, ks[4] = {c->b, c->sk, c->hk, c->d};
    const int64_t vs[4] = {c->b, c->sk, c->hk, c->dv}, os[4] = {c->b, c->sq, c->h, c->dv};
    const int64_t ls[3] = {c->b, c->h, c->sq};
    if (c->packed) { /* needs sq == sk, h == hk */
      const int64_t w = 2 * c->d + c->dv;
      const int64_t st[4] = {c->sq * c->h * w, c->h * w, w, 1};
      const int buf = buf_new(E, 1 + c->b * c->sq * c->h * w, sdpa_dtype_size(c->dt));
      f->q = view(E, buf, c->dt, 1, 4, qs, st);
      f->k = view(E, buf, c->dt, 1 + c->d, 4, ks, st);
      f->v = view(E, buf, c->dt, 1 + 2 * c->d, 4, vs, st);
    } else {
      f->q = tensor(E, c->dt, 4, qs, pad, 0), f->k = tensor(E, c->dt, 4, ks, pad, 0);
      f->v = tensor(E, c->dt, 4, vs, pad, 0);
    }
    f->out = tensor(E, c->dt, 4, os, pad, 0);
    f->lse = tensor(E, SDPA_DTYPE_F32, 3, ls, 0, 0);
    if (bwd) {
      f->dout = tensor(E, c->dt, 4, os, pad, 0), f->dq = tensor(E, c->dt, 4, qs, pad, 0);
      f->dk = tensor(E, c->dt, 4, ks, pad, 0), f->dv = tensor(E, c->dt, 4, vs, pad, 0);
    }
  }
  fill(&f->q), fill(&f->k), fill(&f->v);
  if (bwd) fill(&f->dout);
  a->q = f->q.h, a->k = f->k.h, a->v = f->v.h;
  g->q = f->q.d, g->k = f->k.d, g->v = f->v.d;
}

/* Score modifiers, mask, dropout, bias (+ dbias) on both descriptors. */
static void build_modifiers(const scase *c, prob *f, int bwd) {
  env *E = &f->E;
  sdpa_attn *a = &f->ha, *g = &f->da;
  if (c->alibi) {
    const int64_t as[2] = {c->b, c->h};
    pair al = c->alibi == 1 ? tensor(E, SDPA_DTYPE_F32, 1, &as[1], 0, 0)
                            : tensor(E, SDPA_DTYPE_F32, 2, as, 0, 0);
    test_fill_uniform(&al.h, &rng, 0.05, 0.6);
    a->alibi_slopes = al.h, g->alibi_slopes = al.d;
  }
  if (c->bias) {
    f->bshape[0] = c->bias & BC_B ? 1 : c->b, f->bshape[1] = c->bias & BC_H ? 1 : c->h;
    f->bshape[2] = c->bias & BC_Q ? 1 : c->sq, f->bshape[3] = c->sk;
    f->bias = tensor(E, c->dt, 4, f->bshape, c->pad + c->bpad, 0);
    fill(&f->bias);
    /* broadcast dims read with stride 0, as the contract allows */
    for (int k = 0; k < 3; ++k)
      if (f->bshape[k] == 1) f->bias.h.stride[k] = f->bias.d.stride[k] = 0;
    if (c->bias_ninf)
      for (int64_t e = 0; e < test_numel(&f->bias.h); ++e)
        if (test_rng_uniform(&rng) < 0.1) test_set(&f->bias.h, e, -INFINITY);
    a->bias = f->bias.h, g->bias = f->bias.d;
    if (bwd && c->dbias) f->dbias = tensor(E, c->dt, 4, f->bshape, c->pad + c->bpad, 0);
  }
  a->scale = c->scale, a->softcap = c->softcap;
  a->causal = c->causal;
  a->align = c->top_left ? SDPA_ALIGN_TOP_LEFT : SDPA_ALIGN_BOTTOM_RIGHT;
  if (c->wset) a->window_left = c->wl, a->window_right = c->wr;
  a->dropout_p = c->dropout;
  a->dropout_seed = test_rng_u64(&rng);
  a->dropout_offset = test_rng_u64(&rng) & 0xffffu;
  g->scale = a->scale, g->softcap = a->softcap, g->causal = a->causal, g->align = a->align;
  g->window_left = a->window_left, g->window_right = a->window_right;
  g->dropout_p = a->dropout_p, g->dropout_seed = a->dropout_seed;
  g->dropout_offset = a->dropout_offset;
}

static void init_attn(prob *f, const char *kernel) {
  sdpa_fwd_desc tmp;
  sdpa_fwd_init(&tmp);
  f->ha = f->da = tmp.attn;
  f->ha.device = SDPA_DEVICE_CPU;
  f->ha.num_threads = 4;
  f->da.device = SDPA_DEVICE_CUDA;
  f->da.kernel = kernel;
}

/* ---- checks ---------------------------------------------------------------------------- */

/* The harness rule (grad: atol scaled by max(1, max |ref|)); for f32 inputs
 * also the relative bound, max |got - ref| / max |ref| <= 1e-5. */
static void check_out(const scase *c, const char *what, const sdpa_tensor *got, const double *ref,
                      const double *lowp, int grad) {
  if (grad) {
    test_check_grad(c->name, what, got, ref, lowp);
  } else {
    char label[200];
    snprintf(label, sizeof label, "%s %s", c->name, what);
    test_check(label, got, ref, lowp, test_atol(got->dtype));
  }
  if (c->dt != SDPA_DTYPE_F32) return;
  const double rel = gpu_rel_error(got, ref);
  if (TEST_EXPECT(rel <= 1e-5, "%s %s: f32 relative error %.3g > 1e-5", c->name, what, rel))
    printf("ok   %s %s: f32 relative error %.3g <= 1e-5\n", c->name, what, rel);
}

static double *dalloc(int64_t n) {
  double *x = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!x) {
    printf("FATAL: out of host memory\n");
    exit(1);
  }
  return x;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* KV cache inputs (forward only): q [b, sq, h, d]; cache_seqlens in [0, sk]. */
static void build_cache(const scase *c, prob *f) {
  env *E = &f->E;
  const int64_t s_cache = c->sk + 5;
  int32_t lens[16];
  for (int64_t b = 0; b < c->b; ++b) lens[b] = (int32_t)test_rng_int(&rng, b == 0 ? 0 : 1, c->sk);
  pair sl = ivec(E, c->b, lens);
  f->hf.cache_seqlens = sl.h, f->df.cache_seqlens = sl.d;
  if (c->cache == 2) {
    const int64_t page = 16, maxb = (s_cache + page - 1) / page, nblocks = c->b * maxb + 3;
    const int64_t ks[4] = {nblocks, page, c->hk, c->d}, vs[4] = {nblocks, page, c->hk, c->dv};
    f->k = tensor(E, c->dt, 4, ks, c->pad, 0), f->v = tensor(E, c->dt, 4, vs, c->pad, 0);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)nblocks);
    for (int64_t k = 0; k < nblocks; ++k) perm[k] = (int32_t)k;
    for (int64_t k = nblocks - 1; k > 0; --k) {
      const int64_t r = test_rng_int(&rng, 0, k);
      const int32_t t = perm[k];
      perm[k] = perm[r], perm[r] = t;
    }
    const int64_t bts[2] = {c->b, maxb};
    pair bt = tensor(E, SDPA_DTYPE_I32, 2, bts, 0, 0);
    memcpy(bt.h.data, perm, sizeof(int32_t) * (size_t)(c->b * maxb));
    free(perm);
    f->hf.block_table = bt.h, f->df.block_table = bt.d;
  } else {
    const int64_t bc = c->b + 2;
    const int64_t ks[4] = {bc, s_cache, c->hk, c->d}, vs[4] = {bc, s_cache, c->hk, c->dv};
    f->k = tensor(E, c->dt, 4, ks, c->pad, 0), f->v = tensor(E, c->dt, 4, vs, c->pad, 0);
    int32_t idx[16];
    for (int64_t b = 0; b < c->b; ++b) idx[b] = (int32_t)(bc - 1 - b);
    pair bi = ivec(E, c->b, idx);
    f->hf.cache_batch_idx = bi.h, f->df.cache_batch_idx = bi.d;
  }
  const int64_t qs[4] = {c->b, c->sq, c->h, c->d}, os[4] = {c->b, c->sq, c->h, c->dv};
  const int64_t ls[3] = {c->b, c->h, c->sq};
  f->q = tensor(E, c->dt, 4, qs, c->pad, 0);
  f->out = tensor(E, c->dt, 4, os, c->pad, 0);
  f->lse = tensor(E, SDPA_DTYPE_F32, 3, ls, 0, 0);
  fill(&f->q), fill(&f->k), fill(&f->v);
  f->nq = c->b * c->sq;
  f->sq = c->sq, f->sk = s_cache;
  f->ha.q = f->q.h, f->ha.k = f->k.h, f->ha.v = f->v.h;
  f->da.q = f->q.d, f->da.k = f->k.d, f->da.v = f->v.d;
}

static void run_fwd(const scase *c) {
  prob f;
  memset(&f, 0, sizeof f);
  printf("-- fwd %s: %s b%lld h%lld/%lld s%lld/%lld d%lld/%lld%s%s\n", c->name,
         sdpa_dtype_string(c->dt), (long long)c->b, (long long)c->h, (long long)c->hk,
         (long long)c->sq, (long long)c->sk, (long long)c->d, (long long)c->dv,
         c->varlen ? " varlen" : "", c->cache == 2 ? " paged" : c->cache ? " cache" : "");
  init_attn(&f, "fwd_simt");
  sdpa_fwd_init(&f.hf);
  sdpa_fwd_init(&f.df);
  if (c->cache)
    build_cache(c, &f);
  else
    build_inputs(c, &f, 0);
  build_modifiers(c, &f, 0);
  if (c->probs) {
    const int64_t ps[4] = {c->b, c->h, c->sq, c->sk};
    f.probs = tensor(&f.E, c->dt, 4, ps, c->pad, 0);
    f.hf.probs = f.probs.h, f.df.probs = f.probs.d;
  }
  f.hf.attn = f.ha, f.df.attn = f.da;
  f.hf.out = f.out.h, f.df.out = f.out.d;
  f.hf.lse = f.lse.h, f.df.lse = f.lse.d;

  sdpa_problem p;
  sdpa_status st = sdpa_validate_fwd(&f.hf, &p);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: validate: %s", c->name, sdpa_last_error())) {
    env_free(&f.E);
    return;
  }
  const int64_t no = f.nq * c->h * c->dv, nl = f.nq * c->h;
  const int64_t np = c->probs ? c->b * c->h * c->sq * c->sk : 0;
  double *ro[2], *rl[2], *rp[2];
  for (int l = 0; l < 2; ++l) {
    ro[l] = dalloc(no), rl[l] = dalloc(nl), rp[l] = c->probs ? dalloc(np) : NULL;
    if (ref_fwd(&p, l, ro[l], rl[l], rp[l])) {
      printf("FATAL ref_fwd: out of memory\n");
      exit(1);
    }
  }
  env_up(&f.E);
  st = gpu_fwd(&f.df);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_fwd: %s: %s", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    CUDA_OK(cudaDeviceSynchronize());
    env_down(&f.E);
    check_out(c, "out", &f.out.h, ro[0], ro[1], 0);
    check_out(c, "lse", &f.lse.h, rl[0], rl[1], 0);
    if (c->probs) check_out(c, "probs", &f.probs.h, rp[0], rp[1], 0);
  }
  for (int l = 0; l < 2; ++l) free(ro[l]), free(rl[l]), free(rp[l]);
  env_free(&f.E);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* 1 if the registry selected the case's Hopper bias row. */
static int run_bwd(const scase *c) {
  prob f;
  memset(&f, 0, sizeof f);
  printf("-- bwd %s: %s b%lld h%lld/%lld s%lld/%lld d%lld/%lld%s\n", c->name,
         sdpa_dtype_string(c->dt), (long long)c->b, (long long)c->h, (long long)c->hk,
         (long long)c->sq, (long long)c->sk, (long long)c->d, (long long)c->dv,
         c->varlen ? " varlen" : "");
  init_attn(&f, c->force ? c->force : c->expect ? NULL : "bwd_simt");
  build_inputs(c, &f, 1);
  build_modifiers(c, &f, 1);
  int hopper_row = 0;

  /* out and lse from the CPU forward */
  sdpa_fwd_desc fd;
  sdpa_fwd_init(&fd);
  fd.attn = f.ha, fd.out = f.out.h, fd.lse = f.lse.h;
  sdpa_status st = gpu_fwd(&fd);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: CPU sdpa_fwd: %s", c->name, sdpa_last_error())) {
    env_free(&f.E);
    return 0;
  }
  sdpa_bwd_desc hb, db;
  sdpa_bwd_init(&hb);
  sdpa_bwd_init(&db);
  hb.attn = f.ha, db.attn = f.da;
  hb.out = f.out.h, hb.lse = f.lse.h, hb.dout = f.dout.h;
  hb.dq = f.dq.h, hb.dk = f.dk.h, hb.dv = f.dv.h, hb.dbias = f.dbias.h;
  db.out = f.out.d, db.lse = f.lse.d, db.dout = f.dout.d;
  db.dq = f.dq.d, db.dk = f.dk.d, db.dv = f.dv.d, db.dbias = f.dbias.d;
  db.deterministic = !c->atomic;
  if (c->expect && !c->force) {
    char buf[8192], want[96], h90[64];
    const char *row = c->expect;
    sdpa_status ex = sdpa_explain_bwd(&db, buf, sizeof buf);
    if (c->hopper) { /* expect is a bwd_sm80_<dtype>_hd<d>_bias row here (run_fast) */
      snprintf(h90, sizeof h90, "bwd_sm90_bias_%.*s", (int)(strlen(c->expect) - strlen("bwd_sm80_") - strlen("_bias")),
               c->expect + strlen("bwd_sm80_"));
      if (gpu_sm90_lists(c->name, ex, buf, h90)) row = h90, hopper_row = 1;
    }
    snprintf(want, sizeof want, "selected: %s\n", row);
    TEST_EXPECT(ex == SDPA_OK && strncmp(buf, want, strlen(want)) == 0,
                "%s: expected the registry to select %s:\n%s", c->name, row, buf);
  }
  sdpa_problem p;
  st = sdpa_validate_bwd(&hb, &p);
  if (!TEST_EXPECT(st == SDPA_OK, "%s: validate: %s", c->name, sdpa_last_error())) {
    env_free(&f.E);
    return 0;
  }
  const int64_t n[3] = {f.nq * c->h * c->d, f.nk * c->hk * c->d, f.nk * c->hk * c->dv};
  const int64_t nfull = c->b * c->h * c->sq * c->sk;
  double *r[2][4], *rdb[2] = {NULL, NULL};
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 3; ++e) r[l][e] = dalloc(n[e]);
    r[l][3] = c->dbias ? dalloc(nfull) : NULL;
    if (ref_bwd(&p, l, NULL, r[l][0], r[l][1], r[l][2], r[l][3])) {
      printf("FATAL ref_bwd: out of memory\n");
      exit(1);
    }
    if (!c->dbias) continue;
    /* the oracle's full dbias summed over the broadcast dims */
    rdb[l] = case_reduce_dbias(r[l][3], c->b, c->h, c->sq, c->sk, f.bshape);
  }

  env_up(&f.E);
  st = gpu_bwd(&db);
  if (TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd: %s: %s", c->name, sdpa_status_string(st),
                  sdpa_last_error())) {
    CUDA_OK(cudaDeviceSynchronize());
    env_down(&f.E);
    check_out(c, "dq", &f.dq.h, r[0][0], r[1][0], 1);
    check_out(c, "dk", &f.dk.h, r[0][1], r[1][1], 1);
    check_out(c, "dv", &f.dv.h, r[0][2], r[1][2], 1);
    if (c->dbias) check_out(c, "dbias", &f.dbias.h, rdb[0], rdb[1], 1);

    /* again with a caller workspace: the same bytes */
    pair *g[4] = {&f.dq, &f.dk, &f.dv, &f.dbias};
    void *first[4] = {NULL, NULL, NULL, NULL};
    const int ng = c->dbias ? 4 : 3;
    const int e0 = c->atomic ? 1 : 0; /* atomics add dq in any order: dk, dv, dbias must repeat */
    for (int e = e0; e < ng; ++e) {
      first[e] = malloc(f.E.bytes[g[e]->buf]);
      memcpy(first[e], f.E.h[g[e]->buf], f.E.bytes[g[e]->buf]);
      CUDA_OK(cudaMemset(f.E.d[g[e]->buf], 0xff, f.E.bytes[g[e]->buf]));
    }
    size_t ws_bytes = 0;
    st = sdpa_bwd_workspace_size(&db, &ws_bytes);
    TEST_EXPECT(st == SDPA_OK && ws_bytes > 0, "%s: workspace size: %s", c->name,
                sdpa_last_error());
    void *ws = NULL;
    CUDA_OK(cudaMalloc(&ws, ws_bytes));
    CUDA_OK(cudaMemset(ws, 0xff, ws_bytes)); /* a hole in a summed full dbias shows as NaN */
    db.workspace = ws, db.workspace_size = ws_bytes;
    st = gpu_bwd(&db);
    TEST_EXPECT(st == SDPA_OK, "%s: sdpa_bwd with a workspace: %s", c->name, sdpa_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    int same = 1;
    for (int e = e0; e < ng; ++e) {
      CUDA_OK(cudaMemcpy(f.E.h[g[e]->buf], f.E.d[g[e]->buf], f.E.bytes[g[e]->buf],
                         cudaMemcpyDeviceToHost));
      if (memcmp(first[e], f.E.h[g[e]->buf], f.E.bytes[g[e]->buf]) != 0) same = 0;
      free(first[e]);
    }
    TEST_EXPECT(same, "%s: a second run (caller workspace) differs from the first", c->name);
    CUDA_OK(cudaFree(ws));
  }
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e) free(r[l][e]);
    free(rdb[l]);
  }
  env_free(&f.E);
  return hopper_row;
}

/* ---- the matrix -------------------------------------------------------------------------- */

#define F32 SDPA_DTYPE_F32
#define F16 SDPA_DTYPE_F16
#define BF16 SDPA_DTYPE_BF16

/* A case of the fast bias rows: the registry's choice, and where that was
 * the Hopper bias row, the same case forced onto the sm80 row. */
static void run_fast(scase c) {
  c.hopper = 1;
  if (run_bwd(&c)) {
    c.force = c.expect;
    run_bwd(&c);
  }
}

/* The bias through the registry: the sm80 backward's bias kernels (and on
 * sm_90 the Hopper bias rows) for a full dbias (or none), across the
 * head-dim rows, tile edges, masks (the skipped dbias tiles must come back
 * zero: dbias is poisoned), every score feature, atomic and deterministic,
 * GQA (dbias per query head), unaligned bias rows, and dbias summed over
 * broadcast dims (through the full gradient and sdpa_dbias_sum). */
static void fast_bias(void) {
  scase c;
  c = mk("fb_full_causal", BF16, 2, 4, 2, 200, 260, 128, 128);
  c.bias = 1, c.bias_ninf = 1, c.dbias = 1, c.causal = 1, c.expect = "bwd_sm80_bf16_hd128_bias";
  run_fast(c);
  c = mk("fb_full_atomic", F16, 2, 2, 2, 150, 150, 128, 128);
  c.bias = 1, c.dbias = 1, c.atomic = 1, c.expect = "bwd_sm80_f16_hd128_bias", run_fast(c);
  c = mk("fb_bh_window", F16, 2, 4, 4, 130, 70, 64, 64), c.bias = 1 | BC_B | BC_H;
  c.wset = 1, c.wl = 20, c.wr = 5, c.expect = "bwd_sm80_f16_hd64_bias", run_fast(c);
  c = mk("fb_d112_gqa4_unaligned_bias_all_mods", F16, 2, 4, 1, 150, 300, 112, 112);
  c.bias = 1, c.bpad = 3, c.bias_ninf = 1, c.dbias = 1, c.softcap = 3.f, c.alibi = 2;
  c.dropout = 0.17f, c.causal = 1, c.top_left = 1, c.expect = "bwd_sm80_f16_hd128_bias", run_fast(c);
  c = mk("fb_d64_gqa4_window_steps", BF16, 1, 8, 2, 300, 270, 64, 64);
  c.bias = 1, c.bpad = 1, c.dbias = 1, c.wset = 1, c.wl = 40, c.wr = 10;
  c.expect = "bwd_sm80_bf16_hd64_bias", run_fast(c);
  /* more than 16 key blocks: the deterministic blocks walk several (dQ slices) */
  c = mk("fb_d128_det_walk", BF16, 1, 2, 1, 96, 2200, 128, 128), c.bias = 1, c.dbias = 1;
  c.bias_ninf = 1, c.expect = "bwd_sm80_bf16_hd128_bias", run_fast(c);
  c = mk("fb_d128_q_bcast_softcap", BF16, 2, 2, 2, 190, 140, 128, 128), c.bias = 1 | BC_Q;
  c.softcap = 4.f, c.atomic = 1, c.expect = "bwd_sm80_bf16_hd128_bias", run_fast(c);
  c = mk("fb_all_mods", BF16, 1, 4, 1, 90, 140, 256, 256);
  c.bias = 1, c.bias_ninf = 1, c.dbias = 1, c.softcap = 3.f, c.alibi = 2, c.dropout = 0.17f;
  c.expect = "bwd_sm80_bf16_hd256_bias", run_bwd(&c);
  c = mk("fb_q_topleft", F16, 2, 2, 1, 100, 77, 96, 96), c.bias = 1 | BC_Q, c.causal = 1;
  c.top_left = 1, c.expect = "bwd_sm80_f16_hd96_bias", run_bwd(&c);
  c = mk("fb_d32_atomic", BF16, 3, 2, 2, 65, 129, 32, 32), c.bias = 1, c.dbias = 1;
  c.atomic = 1, c.causal = 1, c.expect = "bwd_sm80_bf16_hd32_bias", run_bwd(&c);
  c = mk("fb_d192_gqa", F16, 1, 4, 2, 70, 70, 160, 160), c.bias = 1, c.dbias = 1;
  c.wset = 1, c.wl = 9, c.wr = 30, c.softcap = 5.f, c.expect = "bwd_sm80_f16_hd192_bias", run_bwd(&c);
  /* above d = 256: dK / dV split four ways */
  c = mk("fb_d320_causal", BF16, 1, 2, 1, 90, 130, 320, 320), c.bias = 1, c.dbias = 1;
  c.causal = 1, c.bias_ninf = 1, c.expect = "bwd_sm80_bf16_hd384_bias", run_bwd(&c);
  c = mk("fb_d512_bcast_h_softcap", F16, 2, 2, 2, 70, 90, 512, 512), c.bias = 1 | BC_H;
  c.dbias = 1, c.softcap = 3.f, c.dropout = 0.17f, c.expect = "bwd_sm80_f16_hd512_bias";
  run_bwd(&c);
  /* dbias summed over broadcast dims: the bias rows write the full gradient
   * and sum it (dense problems; varlen ones stay on bwd_simt, above) */
  c = mk("fb_dbias_bcast_b", BF16, 2, 2, 2, 40, 50, 64, 64), c.bias = 1 | BC_B, c.dbias = 1;
  c.expect = "bwd_sm80_bf16_hd64_bias", run_fast(c);
  c = mk("fb_dbias_bcast_h_gqa", F16, 2, 4, 2, 150, 130, 128, 128), c.bias = 1 | BC_H;
  c.dbias = 1, c.causal = 1, c.bias_ninf = 1, c.expect = "bwd_sm80_f16_hd128_bias", run_fast(c);
  c = mk("fb_dbias_bcast_q_atomic", BF16, 3, 2, 2, 70, 200, 128, 128), c.bias = 1 | BC_Q;
  c.dbias = 1, c.atomic = 1, c.softcap = 4.f, c.expect = "bwd_sm80_bf16_hd128_bias", run_fast(c);
  c = mk("fb_dbias_bcast_bhq_window", F16, 2, 2, 1, 90, 60, 64, 64);
  c.bias = 1 | BC_B | BC_H | BC_Q, c.dbias = 1, c.wset = 1, c.wl = 20, c.wr = 5;
  c.expect = "bwd_sm80_f16_hd64_bias", run_fast(c);
  c = mk("fb_dbias_bcast_d256", BF16, 2, 2, 2, 70, 90, 256, 256), c.bias = 1 | BC_B | BC_H;
  c.dbias = 1, c.dropout = 0.17f, c.expect = "bwd_sm80_bf16_hd256_bias", run_bwd(&c);
}

/* fp32 with a bias on the tensor cores (bwd_tf32_*_bias): every bucket
 * (and the warp pairs above d = 128), masks in both alignments and a window
 * over many query blocks (skipped blocks: dbias must come back zero), -inf
 * bias entries, softcap, alibi, GQA, unaligned bias rows, atomic and
 * deterministic, dbias summed over b / h / q / all of them, no dbias; dropout
 * goes to bwd_simt. */
static void tf32_bias(void) {
  scase c;
  c = mk("tb_d32_causal", F32, 2, 2, 2, 150, 130, 32, 32), c.bias = 1, c.dbias = 1;
  c.causal = 1, c.bias_ninf = 1, c.expect = "bwd_tf32_hd32_bias", run_bwd(&c);
  c = mk("tb_d64_window_steps", F32, 1, 4, 2, 600, 300, 64, 64), c.bias = 1, c.dbias = 1;
  c.wset = 1, c.wl = 40, c.wr = 10, c.expect = "bwd_tf32_hd64_bias", run_bwd(&c);
  c = mk("tb_d80_softcap_alibi_atomic", F32, 2, 4, 4, 90, 140, 80, 80), c.bias = 1 | BC_B;
  c.dbias = 1, c.softcap = 3.f, c.alibi = 2, c.atomic = 1, c.expect = "bwd_tf32_hd96_bias";
  run_bwd(&c);
  c = mk("tb_d128_gqa_topleft_bpad", F32, 2, 4, 1, 130, 70, 128, 128), c.bias = 1, c.bpad = 3;
  c.dbias = 1, c.causal = 1, c.top_left = 1, c.expect = "bwd_tf32_hd128_bias", run_bwd(&c);
  c = mk("tb_d112_det_walk", F32, 1, 2, 1, 64, 2300, 112, 112), c.bias = 1, c.dbias = 1;
  c.bias_ninf = 1, c.expect = "bwd_tf32_hd128_bias", run_bwd(&c);
  c = mk("tb_d256_causal_br", F32, 2, 2, 1, 150, 100, 256, 256), c.bias = 1, c.dbias = 1;
  c.causal = 1, c.softcap = 4.f, c.expect = "bwd_tf32_hd256_bias", run_bwd(&c);
  c = mk("tb_d200_window_gqa", F32, 1, 4, 2, 300, 200, 200, 200), c.bias = 1, c.dbias = 1;
  c.wset = 1, c.wl = 30, c.wr = 5, c.alibi = 1, c.expect = "bwd_tf32_hd256_bias", run_bwd(&c);
  c = mk("tb_no_dbias", F32, 2, 2, 2, 70, 90, 64, 64), c.bias = 1 | BC_H, c.bias_ninf = 1;
  c.expect = "bwd_tf32_hd64_bias", run_bwd(&c);
  /* dbias summed over broadcast dims (the full gradient in the workspace) */
  c = mk("tb_sum_b", F32, 3, 2, 2, 70, 90, 64, 64), c.bias = 1 | BC_B, c.dbias = 1;
  c.causal = 1, c.expect = "bwd_tf32_hd64_bias", run_bwd(&c);
  c = mk("tb_sum_h_gqa", F32, 2, 4, 2, 100, 77, 128, 128), c.bias = 1 | BC_H, c.dbias = 1;
  c.wset = 1, c.wl = 20, c.wr = 3, c.expect = "bwd_tf32_hd128_bias", run_bwd(&c);
  c = mk("tb_sum_q_atomic", F32, 2, 2, 2, 90, 66, 32, 32), c.bias = 1 | BC_Q, c.dbias = 1;
  c.atomic = 1, c.expect = "bwd_tf32_hd32_bias", run_bwd(&c);
  c = mk("tb_sum_all_d256", F32, 2, 2, 1, 60, 70, 256, 256), c.bias = 1 | BC_B | BC_H | BC_Q;
  c.dbias = 1, c.causal = 1, c.expect = "bwd_tf32_hd256_bias", run_bwd(&c);
  c = mk("tb_dropout_simt", F32, 1, 2, 2, 40, 50, 64, 64), c.bias = 1, c.dbias = 1;
  c.dropout = 0.17f, c.expect = "bwd_simt", run_bwd(&c);
}

static void small(void) {
  scase c;
  c = mk("small_bias_dropout_probs", F16, 2, 2, 1, 20, 37, 40, 40);
  c.bias = 1 | BC_H, c.bias_ninf = 1, c.dropout = 0.2f, c.probs = 1, c.causal = 1, c.pad = 3;
  run_fwd(&c);
  c = mk("small_paged", F32, 2, 4, 2, 3, 40, 72, 72), c.cache = 2, c.causal = 1, run_fwd(&c);
  c = mk("small_cache_idx", BF16, 2, 2, 2, 5, 30, 130, 130), c.cache = 1, run_fwd(&c);
  c = mk("small_dbias_dropout", F32, 2, 2, 1, 20, 37, 40, 24);
  c.bias = 1 | BC_B, c.dbias = 1, c.dropout = 0.2f, c.softcap = 3.f, c.alibi = 1, c.pad = 1;
  run_bwd(&c);
  c = mk("small_varlen", BF16, 3, 4, 2, 20, 37, 130, 130), c.varlen = 1, c.causal = 1;
  run_bwd(&c);
  c = mk("small_fast_bias", BF16, 1, 2, 1, 70, 150, 64, 64), c.bias = 1, c.bias_ninf = 1;
  c.dbias = 1, c.causal = 1, c.dropout = 0.1f, c.expect = "bwd_sm80_bf16_hd64_bias", run_fast(c);
  c = mk("small_fast_bias_d128", F16, 1, 2, 1, 90, 150, 128, 128), c.bias = 1, c.bpad = 1;
  c.dbias = 1, c.wset = 1, c.wl = 30, c.wr = 0, c.expect = "bwd_sm80_f16_hd128_bias", run_fast(c);
  c = mk("small_wide_bias", BF16, 1, 2, 1, 40, 70, 448, 448), c.bias = 1, c.dbias = 1;
  c.causal = 1, c.expect = "bwd_sm80_bf16_hd512_bias", run_bwd(&c);
  static const int64_t tdims[5] = {32, 64, 96, 128, 256};
  static const char *trows[5] = {"bwd_tf32_hd32_bias", "bwd_tf32_hd64_bias", "bwd_tf32_hd96_bias",
                                 "bwd_tf32_hd128_bias", "bwd_tf32_hd256_bias"};
  for (int k = 0; k < 5; ++k) {
    c = mk("small_tf32_bias", F32, 2, 2, 1, 70, 90, tdims[k], tdims[k]);
    c.bias = k & 1 ? 1 | BC_B : 1, c.dbias = 1, c.causal = 1, c.expect = trows[k], run_bwd(&c);
  }
}

int main(int argc, char **argv) {
  test_rng_init(&rng, test_seed());
  if (!sdpa_cuda_available()) {
    printf("no CUDA device: skipped\n");
    return test_summary();
  }
  if (argc > 1 && strcmp(argv[1], "--small") == 0) {
    small();
    return test_summary();
  }
  scase c;
  /* the head-dim sweep: one modifier set per d, both ops */
  static const int64_t dims[10] = {1, 3, 40, 72, 80, 96, 112, 257, 320, 512};
  static const sdpa_dtype dts[3] = {F32, F16, BF16};
  for (int k = 0; k < 10; ++k) {
    const int64_t d = dims[k];
    const int64_t s = d > 256 ? 40 : 70;
    c = mk("dsweep", dts[k % 3], 2, 4, 2, s - 5, s, d, d);
    switch (k) {
    case 0: c.causal = 1; break;
    case 1: c.causal = 1, c.top_left = 1; break;
    case 2: c.wset = 1, c.wl = 9, c.wr = 4; break;
    case 3: c.alibi = 2; break;
    case 4: c.softcap = 4.f, c.scale = 0.3f; break;
    case 5: c.dropout = 0.17f, c.probs = 1; break;
    case 6: c.bias = 1, c.dbias = 1; break;
    case 7: c.causal = 1, c.hk = 1, c.pad = 1; break;
    case 8: c.varlen = 1, c.b = 3; break;
    case 9: c.bias = 1 | BC_B | BC_H, c.dbias = 1, c.causal = 1; break;
    }
    run_fwd(&c);
    c.probs = 0;
    run_bwd(&c);
  }
  c = mk("basic_f32", F32, 2, 2, 2, 65, 70, 64, 64), run_fwd(&c), run_bwd(&c);
  c = mk("basic_f16", F16, 2, 2, 2, 65, 70, 64, 64), run_fwd(&c), run_bwd(&c);
  c = mk("basic_bf16", BF16, 2, 2, 2, 65, 70, 64, 64), run_fwd(&c), run_bwd(&c);
  c = mk("d576_dv512_f32", F32, 1, 2, 1, 9, 20, 576, 512), c.causal = 1, run_fwd(&c), run_bwd(&c);
  c = mk("d576_dv512_bf16", BF16, 1, 2, 1, 9, 20, 576, 512), run_fwd(&c), run_bwd(&c);
  c = mk("dv_gt_d_f16", F16, 2, 2, 2, 33, 40, 24, 200), c.alibi = 1, run_fwd(&c), run_bwd(&c);
  /* masks: both alignments, s_q > s_k and s_q < s_k */
  c = mk("causal_br_sq_gt_sk", F32, 2, 4, 2, 100, 37, 32, 32), c.causal = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("causal_tl_sq_gt_sk", F16, 2, 4, 2, 100, 37, 32, 32), c.causal = 1, c.top_left = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("causal_br_sq_lt_sk", BF16, 1, 2, 2, 17, 130, 64, 64), c.causal = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("causal_tl_sq_lt_sk", F32, 1, 2, 2, 17, 130, 64, 64), c.causal = 1, c.top_left = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("window_tl", F32, 1, 2, 1, 80, 80, 48, 48), c.wset = 1, c.wl = 20, c.wr = -1;
  c.top_left = 1;
  run_fwd(&c), run_bwd(&c);
  /* dropout, probs */
  c = mk("dropout_probs_f32", F32, 2, 4, 2, 50, 75, 64, 64), c.dropout = 0.17f, c.probs = 1;
  c.causal = 1, run_fwd(&c), c.probs = 0, run_bwd(&c);
  c = mk("dropout_probs_bf16", BF16, 1, 2, 2, 40, 33, 96, 96), c.dropout = 0.3f, c.probs = 1;
  c.softcap = 2.f, run_fwd(&c), c.probs = 0, run_bwd(&c);
  /* bias broadcast patterns, -inf entries, dbias */
  static const int pats[6] = {1,         1 | BC_B,           1 | BC_H,
                              1 | BC_Q,  1 | BC_H | BC_Q,    1 | BC_B | BC_H | BC_Q};
  for (int k = 0; k < 6; ++k) {
    c = mk("bias_bcast", dts[k % 3], 2, 4, 2, 40, 50, 32, 32);
    c.bias = pats[k], c.bias_ninf = 1, c.dbias = 1;
    c.softcap = k == 4 ? 3.f : 0.f, c.alibi = k == 5, c.causal = k == 2, c.pad = k == 3 ? 1 : 0;
    c.dropout = k == 1 ? 0.17f : 0.f, c.probs = k == 0;
    run_fwd(&c), c.probs = 0, run_bwd(&c);
  }
  c = mk("bias_sq1", F32, 2, 2, 2, 1, 50, 32, 32), c.bias = 1 | BC_Q, c.dbias = 1, run_bwd(&c);
  /* varlen */
  c = mk("varlen_causal_gqa", F32, 4, 4, 2, 90, 100, 64, 64), c.varlen = 1, c.causal = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("varlen_all_mods", F16, 3, 4, 1, 70, 75, 40, 72), c.varlen = 1, c.wset = 1, c.wl = 7;
  c.wr = 9, c.alibi = 1, c.softcap = 3.f, c.dropout = 0.17f, c.pad = 3, run_fwd(&c), run_bwd(&c);
  /* unaligned: packed qkv at an odd element offset, odd padding */
  c = mk("packed_qkv_odd", F16, 2, 3, 3, 45, 45, 40, 24), c.packed = 1, c.causal = 1;
  run_fwd(&c), run_bwd(&c);
  c = mk("packed_qkv_odd_f32", F32, 1, 2, 2, 33, 33, 72, 72), c.packed = 1, c.bias = 1 | BC_B;
  c.dbias = 1, run_fwd(&c), run_bwd(&c);
  c = mk("pad_odd_bf16", BF16, 2, 2, 1, 30, 41, 80, 80), c.pad = 5, c.dropout = 0.1f;
  run_fwd(&c), run_bwd(&c);
  /* KV cache forward */
  c = mk("paged_causal_gqa", F16, 3, 8, 2, 7, 90, 64, 64), c.cache = 2, c.causal = 1, run_fwd(&c);
  c = mk("paged_f32_window", F32, 2, 4, 4, 1, 200, 128, 128), c.cache = 2, c.wset = 1, c.wl = 50;
  c.wr = 0, c.alibi = 1, run_fwd(&c);
  c = mk("paged_d320_bf16", BF16, 2, 2, 1, 4, 60, 320, 320), c.cache = 2, c.softcap = 5.f;
  run_fwd(&c);
  c = mk("cache_batch_idx", F32, 3, 4, 2, 5, 70, 96, 96), c.cache = 1, c.causal = 1, c.pad = 1;
  run_fwd(&c);
  c = mk("cache_batch_idx_dropout", F16, 2, 2, 2, 6, 50, 64, 64), c.cache = 1, c.dropout = 0.2f;
  run_fwd(&c);
  /* lengths off the tile grid, single rows */
  c = mk("len1", F32, 1, 2, 2, 1, 1, 64, 64), run_fwd(&c), run_bwd(&c);
  c = mk("multi_block", BF16, 1, 4, 2, 200, 170, 128, 128), c.causal = 1, c.alibi = 1;
  c.dropout = 0.17f, run_fwd(&c), run_bwd(&c);
  fast_bias();
  tf32_bias();
  return test_summary();
}
