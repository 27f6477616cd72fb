/*
 * fuzz_validate.c - libFuzzer target for src/validate.c. The input bytes drive
 * the construction of a forward, backward or merge descriptor: small shapes
 * (dense, varlen, contiguous or paged KV cache), random dtypes, strides
 * (contiguous, padded, transposed, broadcast, arbitrary, negative, huge),
 * flags, scalars and index-tensor contents, each occasionally broken.
 *
 * Every tensor whose shape and strides name a representable extent gets its
 * own malloc'd buffer of exactly that many bytes, so under ASan any access the
 * validator lets through beyond what the descriptor names is reported. When
 * validation passes on the CPU device and every buffer is exact, the public
 * call runs (CPU backend). Invariants: nothing crashes; every failure leaves a
 * non-empty message; a descriptor that validates is not later rejected as
 * invalid by the public call.
 *
 * Build: cmake -DSDPA_FUZZ=ON -DCMAKE_C_COMPILER=clang -DSDPA_CUDA=OFF
 *   -DSDPA_BLAS=OFF -B build-fuzz && cmake --build build-fuzz --target fuzz_validate
 * Run:   build-fuzz/fuzz_validate -max_total_time=60 fuzz/corpus
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/dtype.h"

#define MAX_ALLOCS 64
#define MAX_BYTES (1 << 20)

typedef struct fz {
  const uint8_t *p;
  size_t n;
  uint64_t rng;
  void *allocs[MAX_ALLOCS];
  int nalloc;
  int exact;     /* every tensor's buffer is exactly its extent */
  int swap_last; /* next mk: store the last two dims transposed (lse [n, h, t]) */
} fz;

static _Alignas(64) unsigned char junk[256];

/* next input byte, 0 when exhausted */
static unsigned byte(fz *f) {
  if (!f->n) return 0;
  --f->n;
  return *f->p++;
}

/* a choice in [0, mod) */
static unsigned take(fz *f, unsigned mod) { return mod ? byte(f) % mod : 0; }

static uint64_t rnd(fz *f) { /* splitmix64 for contents */
  uint64_t z = (f->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* an occasional wild value for a shape, stride or scalar */
static int64_t wild(fz *f) {
  static const int64_t v[] = {-1, 0, 1, 2, 3, 7, 16, 33, INT64_C(1) << 31, INT64_C(1) << 40,
                              INT64_MAX / 3, INT64_MAX, INT64_MIN, -17, 5, 4};
  return v[take(f, 16)];
}

/* ---- tensors ----------------------------------------------------------------------- */

/* bytes an element offset range needs, or -1 when not representable / too big */
static int64_t extent_bytes(const sdpa_tensor *t) {
  if (t->rank < 1 || t->rank > SDPA_MAX_RANK || (unsigned)t->dtype > SDPA_DTYPE_I32) return -1;
  int64_t maxoff = 0;
  for (int i = 0; i < t->rank; ++i) {
    if (t->shape[i] < 0 || t->stride[i] < 0) return -1;
    if (t->shape[i] == 0) return (int64_t)sdpa_dtype_size(t->dtype);
  }
  for (int i = 0; i < t->rank; ++i) {
    int64_t term;
    if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &term) ||
        __builtin_add_overflow(maxoff, term, &maxoff))
      return -1;
  }
  int64_t bytes;
  if (maxoff == INT64_MAX ||
      __builtin_mul_overflow(maxoff + 1, (int64_t)sdpa_dtype_size(t->dtype), &bytes))
    return -1;
  return bytes;
}

static void fill(fz *f, void *data, sdpa_dtype dt, int64_t bytes) {
  int64_t n = bytes / (int64_t)sdpa_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = rnd(f);
    if (dt == SDPA_DTYPE_I32) {
      ((int32_t *)data)[i] = (int32_t)(r % 9) - 1;
    } else {
      float x = (float)((double)(r >> 11) * 0x1.0p-53 * 4.0 - 2.0);
      if ((r & 0x3ff) == 0) x = (r & 0x400) ? INFINITY : -INFINITY;
      sdpa_store(data, dt, i, x);
    }
  }
}

/* A tensor of the given logical shape, with byte-driven damage and layout. */
static sdpa_tensor mk(fz *f, sdpa_dtype dt, int rank, const int64_t *shape) {
  sdpa_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; ++i) t.shape[i] = shape[i];
  if (take(f, 24) == 0) { /* damage one property */
    switch (take(f, 4)) {
    case 0: t.rank = (int)take(f, 7) - 1; break;
    case 1: t.dtype = (sdpa_dtype)take(f, 5); break;
    default: t.shape[take(f, (unsigned)rank)] = wild(f); break;
    }
  }
  int r = t.rank >= 1 && t.rank <= SDPA_MAX_RANK ? t.rank : 0;
  /* strides: contiguous over dims in order `ord`, with optional padding */
  int ord[SDPA_MAX_RANK];
  for (int i = 0; i < r; ++i) ord[i] = i;
  if (f->swap_last && r >= 2) {
    ord[r - 2] = r - 1;
    ord[r - 1] = r - 2;
  } else if (r >= 3 && take(f, 8) == 0) { /* transpose two outer dims ([b, h, s, d] storage) */
    ord[r - 3] = r - 2;
    ord[r - 2] = r - 3;
  }
  f->swap_last = 0;
  unsigned mode = take(f, 16);
  int64_t s = 1;
  for (int k = r - 1; k >= 0; --k) {
    int i = ord[k];
    t.stride[i] = s;
    int64_t ext = t.shape[i] > 0 && t.shape[i] < (1 << 20) ? t.shape[i] : 1;
    s = s * ext + (mode == 1 ? (int64_t)take(f, 4) : 0);
  }
  if (r && mode == 2) t.stride[take(f, (unsigned)r)] = 0;              /* broadcast */
  if (r && mode == 3) t.stride[take(f, (unsigned)r)] = (int64_t)take(f, 40); /* arbitrary */
  if (r && mode == 4) t.stride[take(f, (unsigned)r)] = wild(f);         /* wild */

  unsigned dmode = take(f, 48);
  if (dmode == 0) return t; /* NULL data */
  int64_t bytes = extent_bytes(&t);
  int fits = bytes >= 0 && bytes <= MAX_BYTES && f->nalloc < MAX_ALLOCS;
  unsigned char *buf = fits ? malloc((size_t)(bytes + 1)) : NULL;
  if (!buf) {
    /* An index tensor on the CPU is read by the validator itself (cu_seqlens,
     * block_table ...): a buffer smaller than the declared extent would be the
     * caller's lie, not a library bug, so such tensors get no buffer at all. */
    if (dt == SDPA_DTYPE_I32 || t.dtype == SDPA_DTYPE_I32) {
      t.data = NULL;
      return t;
    }
    t.data = junk;
    f->exact = 0;
    return t;
  }
  f->allocs[f->nalloc++] = buf;
  fill(f, buf, t.dtype, bytes);
  t.data = dmode == 1 ? buf + 1 : buf; /* misaligned: the validator must refuse it */
  return t;
}

static sdpa_tensor mk1(fz *f, sdpa_dtype dt, int64_t a) { return mk(f, dt, 1, &a); }
static sdpa_tensor mk2(fz *f, sdpa_dtype dt, int64_t a, int64_t b) {
  int64_t s[2] = {a, b};
  return mk(f, dt, 2, s);
}
static sdpa_tensor mk3(fz *f, sdpa_dtype dt, int64_t a, int64_t b, int64_t c) {
  int64_t s[3] = {a, b, c};
  return mk(f, dt, 3, s);
}
static sdpa_tensor mk4(fz *f, sdpa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t s[4] = {a, b, c, d};
  return mk(f, dt, 4, s);
}

/* int32 vector holding v[0..n) (where the tensor still has room), occasionally damaged */
static sdpa_tensor ivec(fz *f, const int32_t *v, int64_t n) {
  sdpa_tensor t = mk1(f, SDPA_DTYPE_I32, n);
  if (t.data && t.data != junk && t.rank == 1 && t.dtype == SDPA_DTYPE_I32 &&
      ((uintptr_t)t.data & 3) == 0) {
    int64_t bytes = extent_bytes(&t);
    for (int64_t i = 0; i < n && i < t.shape[0]; ++i) {
      int64_t off = i * t.stride[0];
      if ((off + 1) * 4 <= bytes) ((int32_t *)t.data)[off] = v[i];
    }
    if (t.shape[0] > 0 && take(f, 24) == 0)
      ((int32_t *)t.data)[take(f, (unsigned)(t.shape[0] < 8 ? t.shape[0] : 8)) * t.stride[0]] =
          (int32_t)wild(f);
  }
  return t;
}

static void free_all(fz *f) {
  for (int i = 0; i < f->nalloc; ++i) free(f->allocs[i]);
  f->nalloc = 0;
}

/* validated, then refused as invalid by the public call: the two disagree */
static void refused(sdpa_status st) {
  if (st != SDPA_ERR_INVALID_ARGUMENT) return;
  fprintf(stderr, "validated descriptor refused: %s\n", sdpa_last_error());
  __builtin_trap();
}

static void check_failure(sdpa_status st) {
  if (st != SDPA_OK && sdpa_last_error()[0] == '\0') __builtin_trap(); /* silent failure */
}

/* ---- shared attention fields ---------------------------------------------------------- */

typedef struct dims {
  int64_t b, sq, sk, h, hk, d, dv;
  sdpa_dtype dt;
} dims;

static void scalars(fz *f, sdpa_attn *a) {
  static const float ps[] = {0.0f, 0.0f, 0.0f, 0.1f, 0.5f, 0.99f, 1.0f, -0.1f, NAN, 0.999999f};
  static const float sc[] = {0.0f, 0.0f, 0.5f, -1.0f, INFINITY, NAN, 1e-30f, 3.0f};
  a->device = take(f, 32) == 0 ? SDPA_DEVICE_CUDA : take(f, 64) == 0 ? (sdpa_device)5
                                                                      : SDPA_DEVICE_CPU;
  a->num_threads = take(f, 64) == 0 ? -1 : 1 + (int)take(f, 2);
  a->causal = (int)take(f, 3) == 0 ? 1 : take(f, 64) == 0 ? 2 : 0;
  a->align = take(f, 2) ? SDPA_ALIGN_BOTTOM_RIGHT : take(f, 32) ? SDPA_ALIGN_TOP_LEFT
                                                               : (sdpa_mask_align)3;
  a->window_left = take(f, 3) ? -1 : take(f, 4) ? (int64_t)take(f, 6) - 1 : wild(f);
  a->window_right = take(f, 3) ? -1 : take(f, 4) ? (int64_t)take(f, 6) - 1 : wild(f);
  a->dropout_p = ps[take(f, 10)];
  a->dropout_seed = rnd(f);
  a->dropout_offset = take(f, 32) ? take(f, 4) : (uint64_t)wild(f);
  a->scale = sc[take(f, 8)];
  a->softcap = take(f, 4) ? 0.0f : sc[take(f, 8)];
  if (take(f, 64) == 0) a->reserved[take(f, 8)] = 1;
  if (take(f, 32) == 0) a->kernel = "no_such_kernel";
}

static void modifiers(fz *f, sdpa_attn *a, const dims *m, int dense, sdpa_tensor *dbias) {
  if (take(f, 4) == 0)
    a->alibi_slopes = take(f, 2) ? mk1(f, SDPA_DTYPE_F32, m->h) : mk2(f, SDPA_DTYPE_F32, m->b, m->h);
  if ((dense || take(f, 16) == 0) && take(f, 3) == 0) {
    int64_t nb = take(f, 2) ? m->b : 1, nh = take(f, 2) ? m->h : 1, nq = take(f, 2) ? m->sq : 1;
    a->bias = mk4(f, m->dt, nb, nh, nq, m->sk);
    if (dbias && take(f, 2))
      *dbias = mk4(f, m->dt, take(f, 2) ? m->b : 1, take(f, 2) ? m->h : 1,
                   take(f, 2) ? m->sq : 1, m->sk);
  }
  if (dbias && !dbias->data && take(f, 64) == 0)
    *dbias = mk4(f, m->dt, m->b, m->h, m->sq, m->sk); /* without bias: rejected */
}

static void base_dims(fz *f, dims *m) {
  static const sdpa_dtype dts[] = {SDPA_DTYPE_F32, SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  m->b = take(f, 4);
  m->sq = take(f, 6);
  m->sk = take(f, 8);
  m->hk = 1 + take(f, 3);
  m->h = m->hk * (1 + take(f, 3));
  m->d = 1 + take(f, 10);
  m->dv = 1 + take(f, 10);
  m->dt = dts[take(f, 3)];
}

/* varlen lengths -> cu_seqlens, totals and max lengths */
static void varlen(fz *f, sdpa_attn *a, dims *m, int64_t *tq, int64_t *tk) {
  int32_t cq[5] = {0}, ck[5] = {0}, used[4] = {0};
  int64_t mq = 0, mk = 0;
  for (int64_t i = 0; i < m->b; ++i) {
    int32_t lq = (int32_t)take(f, 6), lk = (int32_t)take(f, 7);
    cq[i + 1] = cq[i] + lq;
    ck[i + 1] = ck[i] + lk;
    used[i] = lk ? (int32_t)take(f, (unsigned)lk + 1) : 0;
    if (lq > mq) mq = lq;
    if (lk > mk) mk = lk;
  }
  *tq = cq[m->b];
  *tk = ck[m->b];
  a->cu_seqlens_q = ivec(f, cq, m->b + 1);
  a->cu_seqlens_k = take(f, 64) ? ivec(f, ck, m->b + 1) : a->cu_seqlens_k;
  if (take(f, 4) == 0) a->seqused_k = ivec(f, used, m->b);
  a->max_seqlen_q = take(f, 2) ? 0 : mq + (int64_t)take(f, 3) - 1;
  a->max_seqlen_k = take(f, 2) ? 0 : mk + (int64_t)take(f, 3) - 1;
  m->sq = mq;
  m->sk = mk;
}

/* ---- forward ------------------------------------------------------------------------------ */

static void run_fwd(fz *f) {
  sdpa_fwd_desc d;
  sdpa_fwd_init(&d);
  dims m;
  base_dims(f, &m);
  sdpa_attn *a = &d.attn;
  scalars(f, a);
  unsigned layout = take(f, 4); /* 0, 1 dense; 2 varlen; 3 cache */
  int64_t tq = 0, tk = 0;
  if (layout == 2) {
    varlen(f, a, &m, &tq, &tk);
    a->q = mk3(f, m.dt, tq, m.h, m.d);
    a->k = mk3(f, m.dt, tk, m.hk, m.d);
    a->v = mk3(f, m.dt, tk, m.hk, m.dv);
    d.out = mk3(f, m.dt, tq, m.h, m.dv);
    if (take(f, 2)) d.lse = mk2(f, SDPA_DTYPE_F32, m.h, tq);
    modifiers(f, a, &m, 0, NULL);
  } else if (layout == 3) {
    int paged = take(f, 2);
    int64_t snew = take(f, 4), cap, nblk = 0, page = 0, maxb = 0, bcache = m.b;
    m.sq = 1 + take(f, 3);
    if (paged) {
      page = take(f, 16) ? 16 : 8 * (int64_t)take(f, 5);
      maxb = 1 + take(f, 3);
      nblk = 1 + take(f, 6);
      cap = maxb * page;
      a->k = mk4(f, m.dt, nblk, page, m.hk, m.d);
      a->v = mk4(f, m.dt, nblk, page, m.hk, m.dv);
    } else {
      bcache = m.b + take(f, 3);
      cap = 1 + take(f, 24);
      a->k = mk4(f, m.dt, bcache, cap, m.hk, m.d);
      a->v = mk4(f, m.dt, bcache, cap, m.hk, m.dv);
    }
    int32_t seq[4] = {0}, bidx[4] = {0}, bt[12] = {0};
    int64_t maxlen = 0;
    for (int64_t i = 0; i < m.b; ++i) {
      int64_t room = cap - snew;
      seq[i] = room >= 0 ? (int32_t)take(f, (unsigned)room + 1) : 0;
      if (seq[i] > maxlen) maxlen = seq[i];
      bidx[i] = (int32_t)take(f, (unsigned)bcache);
      for (int64_t j = 0; j < maxb; ++j) bt[i * maxb + j] = (int32_t)take(f, (unsigned)nblk);
    }
    d.cache_seqlens = ivec(f, seq, m.b);
    if (paged || take(f, 32) == 0) {
      sdpa_tensor t = mk2(f, SDPA_DTYPE_I32, m.b, maxb);
      if (t.data && t.data != junk && t.rank == 2 && t.dtype == SDPA_DTYPE_I32 &&
          !((uintptr_t)t.data & 3) && extent_bytes(&t) >= 0) {
        int64_t bytes = extent_bytes(&t);
        for (int64_t i = 0; i < m.b && i < t.shape[0]; ++i)
          for (int64_t j = 0; j < maxb && j < t.shape[1]; ++j) {
            int64_t off = i * t.stride[0] + j * t.stride[1];
            if ((off + 1) * 4 <= bytes) ((int32_t *)t.data)[off] = bt[i * maxb + j];
          }
      }
      d.block_table = t;
    }
    if ((!paged && take(f, 3) == 0) || take(f, 64) == 0) d.cache_batch_idx = ivec(f, bidx, m.b);
    if (snew && take(f, 4)) {
      d.k_new = mk4(f, m.dt, m.b, snew, m.hk, m.d);
      if (take(f, 32)) d.v_new = mk4(f, m.dt, m.b, snew, m.hk, m.dv);
    } else {
      snew = 0;
    }
    if (m.d >= 2 && take(f, 3) == 0) {
      int64_t cols = 1 + take(f, (unsigned)(m.d / 2));
      int64_t rows = maxlen + (m.sq > snew ? m.sq : snew) + (int64_t)take(f, 3) - 1;
      if (rows < 0) rows = 0;
      d.rotary_cos = mk2(f, SDPA_DTYPE_F32, rows, cols);
      if (take(f, 32)) d.rotary_sin = mk2(f, SDPA_DTYPE_F32, rows, cols);
      d.rotary_interleaved = take(f, 64) ? (int)take(f, 2) : 7;
    }
    a->q = mk4(f, m.dt, m.b, m.sq, m.h, m.d);
    d.out = mk4(f, m.dt, m.b, m.sq, m.h, m.dv);
    if (take(f, 2)) d.lse = mk3(f, SDPA_DTYPE_F32, m.b, m.h, m.sq);
    m.sk = cap;
    modifiers(f, a, &m, 0, NULL);
  } else {
    a->q = mk4(f, m.dt, m.b, m.sq, m.h, m.d);
    a->k = mk4(f, m.dt, m.b, m.sk, m.hk, m.d);
    a->v = mk4(f, m.dt, m.b, m.sk, m.hk, m.dv);
    d.out = mk4(f, m.dt, m.b, m.sq, m.h, m.dv);
    if (take(f, 2)) d.lse = mk3(f, SDPA_DTYPE_F32, m.b, m.h, m.sq);
    if (take(f, 4) == 0)
      d.probs = mk4(f, take(f, 2) ? SDPA_DTYPE_F32 : m.dt, m.b, m.h, m.sq, m.sk);
    modifiers(f, a, &m, 1, NULL);
    if (take(f, 32) == 0) a->seqused_k = mk1(f, SDPA_DTYPE_I32, m.b);
  }
  d.num_splits = take(f, 32) == 0 ? -1 : (int)take(f, 4);
  if (take(f, 32) == 0) d.workspace = junk;
  if (take(f, 32) == 0) d.workspace_size = 64;
  if (take(f, 128) == 0) d.struct_size = take(f, 2) ? 0 : sizeof d - 8;

  sdpa_problem p;
  sdpa_status st = sdpa_validate_fwd(&d, &p);
  check_failure(st);
  if (st == SDPA_OK && f->exact && a->device == SDPA_DEVICE_CPU && !d.workspace) {
    st = sdpa_fwd(&d);
    check_failure(st);
    if (!a->kernel) refused(st); /* an unknown forced kernel is refused by dispatch */
  }
}

/* ---- backward ------------------------------------------------------------------------------ */

static void run_bwd(fz *f) {
  sdpa_bwd_desc d;
  sdpa_bwd_init(&d);
  dims m;
  base_dims(f, &m);
  sdpa_attn *a = &d.attn;
  scalars(f, a);
  d.deterministic = take(f, 64) ? (int)take(f, 2) : 3;
  if (take(f, 3) == 0) {
    int64_t tq, tk;
    varlen(f, a, &m, &tq, &tk);
    a->q = mk3(f, m.dt, tq, m.h, m.d);
    a->k = mk3(f, m.dt, tk, m.hk, m.d);
    a->v = mk3(f, m.dt, tk, m.hk, m.dv);
    d.out = mk3(f, m.dt, tq, m.h, m.dv);
    d.dout = mk3(f, m.dt, tq, m.h, m.dv);
    if (take(f, 32)) d.lse = mk2(f, SDPA_DTYPE_F32, m.h, tq);
    d.dq = mk3(f, m.dt, tq, m.h, m.d);
    d.dk = mk3(f, m.dt, tk, m.hk, m.d);
    d.dv = mk3(f, m.dt, tk, m.hk, m.dv);
    modifiers(f, a, &m, 0, &d.dbias);
  } else {
    a->q = mk4(f, m.dt, m.b, m.sq, m.h, m.d);
    a->k = mk4(f, m.dt, m.b, m.sk, m.hk, m.d);
    a->v = mk4(f, m.dt, m.b, m.sk, m.hk, m.dv);
    d.out = mk4(f, m.dt, m.b, m.sq, m.h, m.dv);
    d.dout = mk4(f, m.dt, m.b, m.sq, m.h, m.dv);
    if (take(f, 32)) d.lse = mk3(f, SDPA_DTYPE_F32, m.b, m.h, m.sq);
    d.dq = mk4(f, m.dt, m.b, m.sq, m.h, m.d);
    d.dk = mk4(f, m.dt, m.b, m.sk, m.hk, m.d);
    d.dv = mk4(f, m.dt, m.b, m.sk, m.hk, m.dv);
    modifiers(f, a, &m, 1, &d.dbias);
  }
  if (take(f, 32) == 0) d.workspace = junk;
  if (take(f, 32) == 0) d.workspace_size = 64;
  if (take(f, 128) == 0) d.struct_size = take(f, 2) ? 0 : sizeof d - 8;

  sdpa_problem p;
  sdpa_status st = sdpa_validate_bwd(&d, &p);
  check_failure(st);
  if (st == SDPA_OK && f->exact && a->device == SDPA_DEVICE_CPU && !d.workspace) {
    st = sdpa_bwd(&d);
    check_failure(st);
    if (!a->kernel) refused(st);
  }
}

/* ---- merge ------------------------------------------------------------------------------------ */

static void run_merge(fz *f) {
  static const sdpa_dtype dts[] = {SDPA_DTYPE_F32, SDPA_DTYPE_F16, SDPA_DTYPE_BF16};
  sdpa_merge_desc d;
  sdpa_merge_init(&d);
  int64_t n = take(f, 4), t = take(f, 5), h = 1 + take(f, 3), dd = 1 + take(f, 8);
  d.device = take(f, 32) == 0 ? SDPA_DEVICE_CUDA : SDPA_DEVICE_CPU;
  d.out_parts = mk4(f, dts[take(f, 3)], n, t, h, dd);
  f->swap_last = take(f, 4) == 0; /* lse_parts stored [n, h, t] */
  d.lse_parts = mk3(f, SDPA_DTYPE_F32, n, t, h);
  d.out = mk3(f, dts[take(f, 3)], t, h, dd);
  if (take(f, 2)) d.lse = mk2(f, SDPA_DTYPE_F32, t, h);
  if (take(f, 128) == 0) d.struct_size = 0;

  sdpa_merge_problem mp;
  sdpa_status st = sdpa_validate_merge(&d, &mp);
  check_failure(st);
  if (st == SDPA_OK && f->exact && d.device == SDPA_DEVICE_CPU) {
    st = sdpa_merge_states(&d);
    check_failure(st);
    refused(st);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f;
  memset(&f, 0, sizeof f);
  f.p = data;
  f.n = size;
  f.exact = 1;
  for (int i = 0; i < 8; ++i) f.rng = f.rng << 8 | byte(&f);
  switch (take(&f, 8)) {
  case 0: run_merge(&f); break;
  case 1:
  case 2: run_bwd(&f); break;
  default: run_fwd(&f); break;
  }
  free_all(&f);
  return 0;
}
