/*
 * validate.c - every argument check of the public descriptors, one message per
 * failure, and the normalized sdpa_problem / sdpa_merge_problem the backends
 * consume. Three layouts (dense, varlen, KV cache: contiguous or paged) for
 * the forward, dense and varlen for the backward, and merge_states.
 *
 * What a backend may assume after this (the point of the file): every tensor
 * it is given lies inside [data, data + extent) where the extent is the
 * largest element offset its shape and strides name, computed here without
 * int64 overflow; every dimension fits int32; on the CPU device every index
 * the backend reads from an index tensor (cu_seqlens, seqused_k,
 * cache_seqlens, block_table, cache_batch_idx) keeps it inside those extents.
 * On CUDA the contents of index tensors live in device memory and are not
 * read here; their shapes and dtypes are still checked.
 *
 * Messages name the argument by its path in the descriptor, its value and what
 * was expected: "attn.k.shape[2] = 3: expected h_k dividing h = 8".
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "common/dtype.h"
#include "cpu/parallel.h"
#include "error.h"

#define INV SDPA_ERR_INVALID_ARGUMENT
#define UNSUP SDPA_ERR_NOT_SUPPORTED
#define D64 "%" PRId64

/* Dimensions are 32-bit inside the kernels (grid sizes, Philox counter words). */
#define DIM_MAX INT64_C(2147483647)

/* ---- tensors ---------------------------------------------------------------- */

enum {
  T_OUT = 1,      /* written: no stride 0 on a dimension longer than 1 */
  T_ANY_LAST = 2  /* the last dimension may have any stride (merge lse tensors) */
};

static int is_float_dtype(sdpa_dtype t) {
  return t == SDPA_DTYPE_F32 || t == SDPA_DTYPE_F16 || t == SDPA_DTYPE_BF16;
}

static const char *dtype_name(sdpa_dtype t) {
  return (unsigned)t <= (unsigned)SDPA_DTYPE_I32 ? sdpa_dtype_string(t) : "unknown";
}

/* Present = data given; optional tensors are absent when data is NULL. */
static int present(const sdpa_tensor *t) { return t->data != NULL; }

/* A tensor with an extent 0: valid without data (see check_tensor). */
static int empty_shape(const sdpa_tensor *t) {
  for (int i = 0; i < t->rank && i < SDPA_MAX_RANK; ++i)
    if (t->shape[i] == 0) return 1;
  return 0;
}

/* Structure of one tensor: data, rank, dtype, shape and strides in range, the
 * last dimension contiguous, outputs not broadcast, and every offset, the
 * element count and the byte extent representable (int64, address space). */
static sdpa_status check_tensor(const sdpa_tensor *t, const char *name, int rank, const char *doc,
                                int flags) {
  if (!t->data && t->rank != rank) /* not given at all */
    return sdpa_fail(INV, "%s.data = NULL: expected a pointer to %s", name, doc);
  if (t->rank != rank)
    return sdpa_fail(INV, "%s.rank = %d: expected %d (%s)", name, t->rank, rank, doc);
  if ((unsigned)t->dtype > (unsigned)SDPA_DTYPE_I32)
    return sdpa_fail(INV, "%s.dtype = %d: expected one of SDPA_DTYPE_F32, _F16, _BF16, _I32",
                     name, (int)t->dtype);
  for (int i = 0; i < rank; ++i) {
    int64_t n = t->shape[i];
    if (n < 0) return sdpa_fail(INV, "%s.shape[%d] = " D64 ": expected >= 0", name, i, n);
    if (n > DIM_MAX)
      return sdpa_fail(UNSUP, "%s.shape[%d] = " D64 ": expected <= " D64
                       " (dimensions are 32-bit in the kernels)", name, i, n, DIM_MAX);
  }
  /* no element is read or written: no storage (numpy and torch give NULL) and
   * any strides */
  if (empty_shape(t)) return SDPA_OK;
  if (!t->data) return sdpa_fail(INV, "%s.data = NULL: expected a pointer to %s", name, doc);
  int64_t numel = 1, maxoff = 0, span = 0;
  for (int i = 0; i < rank; ++i) {
    int64_t n = t->shape[i], s = t->stride[i];
    if (s < 0)
      return sdpa_fail(INV, "%s.stride[%d] = " D64 ": expected >= 0 (negative strides are not"
                       " accepted)", name, i, s);
    if (i == rank - 1 && !(flags & T_ANY_LAST) && n > 1 && s != 1)
      return sdpa_fail(INV, "%s.stride[%d] = " D64 ": expected 1 (the last dimension must be"
                       " contiguous)", name, i, s);
    if ((flags & T_OUT) && n > 1 && s == 0)
      return sdpa_fail(INV, "%s.stride[%d] = 0: expected > 0 (an output cannot broadcast a"
                       " dimension of extent " D64 ")", name, i, n);
    int64_t prod;
    if (__builtin_mul_overflow(n, s, &prod) || __builtin_add_overflow(span, prod, &span))
      return sdpa_fail(INV, "%s.shape[%d] = " D64 " times %s.stride[%d] = " D64
                       ": expected offsets that fit in int64", name, i, n, name, i, s);
    if (__builtin_mul_overflow(numel, n, &numel))
      return sdpa_fail(INV, "%s.shape[%d] = " D64 ": expected an element count that fits in"
                       " int64", name, i, n);
    if (n > 0) maxoff += (n - 1) * s; /* <= span: no overflow */
  }
  size_t es = sdpa_dtype_size(t->dtype);
  int64_t bytes;
  if (__builtin_mul_overflow(span, (int64_t)es, &bytes) ||
      __builtin_mul_overflow(numel, (int64_t)es, &bytes))
    return sdpa_fail(INV, "%s: extent of " D64 " elements of %zu bytes: expected a byte size that"
                     " fits in int64", name, span > numel ? span : numel, es);
  uintptr_t base = (uintptr_t)t->data;
  if (base % es)
    return sdpa_fail(INV, "%s.data = %p: expected alignment to %zu bytes (%s)", name, t->data, es,
                     dtype_name(t->dtype));
  if (numel > 0 && (uint64_t)(maxoff + 1) * es - 1 > (uint64_t)(UINTPTR_MAX - base))
    return sdpa_fail(INV, "%s.data = %p: expected the tensor's last element (offset " D64
                     ") inside the address space", name, t->data, maxoff);
  return SDPA_OK;
}

static sdpa_status expect_dim(const sdpa_tensor *t, const char *name, int i, int64_t want,
                              const char *what, const char *from) {
  if (t->shape[i] != want)
    return sdpa_fail(INV, "%s.shape[%d] = " D64 ": expected %s = " D64 " (%s)", name, i,
                     t->shape[i], what, want, from);
  return SDPA_OK;
}

static sdpa_status expect_dtype(const sdpa_tensor *t, const char *name, sdpa_dtype want,
                                const char *why) {
  if (t->dtype != want)
    return sdpa_fail(INV, "%s.dtype = %s: expected %s (%s)", name, dtype_name(t->dtype),
                     dtype_name(want), why);
  return SDPA_OK;
}

/* [b, s, h, x] (rank 4) or varlen [rows, h, x] (rank 3) strides. */
static sdpa_bshd bshd_of(const sdpa_tensor *t) {
  sdpa_bshd st;
  if (t->rank == 3) {
    st.sb = 0;
    st.ss = t->stride[0];
    st.sh = t->stride[1];
  } else {
    st.sb = t->stride[0];
    st.ss = t->stride[1];
    st.sh = t->stride[2];
  }
  return st;
}

/* A query-like or key-like tensor: [n0, s, h, x] or varlen [n0, h, x], every
 * dimension matched against the problem. want_* < 0 = not checked (set). */
typedef struct shape4 {
  int64_t v[4];
  const char *what[4];
  const char *from[4];
} shape4;

static sdpa_status expect_shape(const sdpa_tensor *t, const char *name, const shape4 *sh) {
  for (int i = 0; i < t->rank; ++i)
    SDPA_TRY(expect_dim(t, name, i, sh->v[i], sh->what[i], sh->from[i]));
  return SDPA_OK;
}

/* ---- scalars ---------------------------------------------------------------- */

static sdpa_status check_reserved(const int64_t *r, int n, const char *name) {
  for (int i = 0; i < n; ++i)
    if (r[i] != 0)
      return sdpa_fail(INV, "%s[%d] = " D64 ": expected 0 (reserved; initialise the descriptor"
                       " with its *_init function)", name, i, r[i]);
  return SDPA_OK;
}

static sdpa_status check_flag(int v, const char *name) {
  if (v != 0 && v != 1) return sdpa_fail(INV, "%s = %d: expected 0 or 1", name, v);
  return SDPA_OK;
}

static sdpa_status check_device(sdpa_device dev, const char *name) {
  if (dev != SDPA_DEVICE_CPU && dev != SDPA_DEVICE_CUDA)
    return sdpa_fail(INV, "%s = %d: expected SDPA_DEVICE_CPU (0) or SDPA_DEVICE_CUDA (1)", name,
                     (int)dev);
  return SDPA_OK;
}

/* A pointer with size 0 is valid: the workspace query's answer passed as it
 * is, e.g. a caller's scratch arena with the 0 bytes a problem needs (a
 * problem that needs more gets "expected at least N bytes" where it runs). */
static sdpa_status check_workspace(const void *ws, size_t size, const char *pre) {
  if (!ws && size > 0)
    return sdpa_fail(INV, "%sworkspace = NULL with %sworkspace_size = %zu: expected a pointer"
                     " (or workspace_size = 0)", pre, pre, size);
  return SDPA_OK;
}

/* The forward's and backward's caller workspace, checked, into the problem. */
static sdpa_status take_workspace(sdpa_problem *p, void *ws, size_t size) {
  SDPA_TRY(check_workspace(ws, size, ""));
  p->workspace = ws;
  p->workspace_size = size;
  return SDPA_OK;
}

/* What every descriptor is checked for first: the output and descriptor
 * pointers, then the ABI guard (struct_size; pass 0 for a NULL desc). op
 * names the call in the messages: fwd, bwd or merge. */
static sdpa_status check_desc(const char *op, const void *out, const void *desc,
                              size_t struct_size, size_t expected) {
  if (!out) return sdpa_fail(SDPA_ERR_INTERNAL, "sdpa_validate_%s: problem = NULL", op);
  if (!desc) return sdpa_fail(INV, "desc = NULL: expected a pointer to an sdpa_%s_desc", op);
  if (struct_size < expected)
    return sdpa_fail(INV, "desc->struct_size = %zu: expected >= %zu (sizeof(sdpa_%s_desc));"
                     " initialise the descriptor with sdpa_%s_init()", struct_size, expected, op,
                     op);
  return SDPA_OK;
}

/* The sdpa_attn scalars: device, threads, mask, dropout, scale, softcap. */
static sdpa_status check_attn_scalars(const sdpa_attn *a, sdpa_problem *p) {
  SDPA_TRY(check_device(a->device, "attn.device"));
  if (a->num_threads < 0)
    return sdpa_fail(INV, "attn.num_threads = %d: expected >= 0 (0 = $SDPA_NUM_THREADS or all"
                     " cores)", a->num_threads);
  SDPA_TRY(check_reserved(a->reserved, (int)(sizeof a->reserved / sizeof a->reserved[0]),
                          "attn.reserved"));
  SDPA_TRY(check_flag(a->causal, "attn.causal"));
  if (a->align != SDPA_ALIGN_BOTTOM_RIGHT && a->align != SDPA_ALIGN_TOP_LEFT)
    return sdpa_fail(INV, "attn.align = %d: expected SDPA_ALIGN_BOTTOM_RIGHT (0) or"
                     " SDPA_ALIGN_TOP_LEFT (1)", (int)a->align);
  if (a->window_left < -1)
    return sdpa_fail(INV, "attn.window_left = " D64 ": expected >= -1 (-1 = unbounded)",
                     a->window_left);
  if (a->window_right < -1)
    return sdpa_fail(INV, "attn.window_right = " D64 ": expected >= -1 (-1 = unbounded)",
                     a->window_right);
  if (!(a->dropout_p >= 0.0f && a->dropout_p < 1.0f)) /* also rejects NaN */
    return sdpa_fail(INV, "attn.dropout_p = %g: expected a probability in [0, 1)",
                     (double)a->dropout_p);
  if (a->dropout_offset > UINT64_C(0xffffffff))
    return sdpa_fail(INV, "attn.dropout_offset = %" PRIu64 ": expected < 2^32 (a Philox counter"
                     " word)", a->dropout_offset);
  if (!isfinite(a->scale))
    return sdpa_fail(INV, "attn.scale = %g: expected a finite number (0 = 1/sqrt(d))",
                     (double)a->scale);
  if (!(isfinite(a->softcap) && a->softcap >= 0.0f))
    return sdpa_fail(INV, "attn.softcap = %g: expected a finite number >= 0 (0 = off)",
                     (double)a->softcap);

  p->device = a->device;
  p->stream = a->stream;
  p->num_threads = sdpa_cpu_resolve_threads(a->num_threads);
  p->softcap = a->softcap;
  p->bottom_right = a->align == SDPA_ALIGN_BOTTOM_RIGHT;
  /* causal = window (-1, 0), FlashAttention's rule: a given left bound stays. */
  p->window_left = a->window_left; /* folded in finish_common, once the lengths are known */
  p->window_right = a->causal ? 0 : a->window_right;
  p->dropout_p = a->dropout_p;
  p->seed = a->dropout_seed;
  p->offset = (uint32_t)a->dropout_offset;
  if (a->dropout_p > 0.0f) {
    /* round(p * 256), halves away from zero (sdpa.h; the oracle's llround):
     * lrint would round them to even, in the caller's rounding mode */
    p->drop_threshold = (uint32_t)llround((double)a->dropout_p * 256.0);
    p->drop_scale = (float)(1.0 / (1.0 - (double)a->dropout_p));
  } else {
    p->dropout_p = 0.0f;
    p->drop_threshold = 0;
    p->drop_scale = 1.0f;
  }
  p->kernel = a->kernel;
  return SDPA_OK;
}

/* ---- q, k, v ------------------------------------------------------------------ */

/* q, k, v of any layout; sets dtype, b (dense/cache), h, h_k, d, d_v, s_q, s_k
 * (dense), total_q/total_k (varlen). k/v are written when the cache appends. */
static sdpa_status check_qkv(const sdpa_attn *a, sdpa_problem *p, int kv_out, int paged_varlen) {
  int varlen = p->layout == SDPA_LAYOUT_VARLEN;
  int cache = p->layout == SDPA_LAYOUT_CACHE;
  const char *qdoc = varlen ? "varlen q [total_q, h, d]" : "q [b, s_q, h, d]";
  const char *kdoc = paged_varlen ? "paged k [num_blocks, page_size, h_k, d] (with block_table)"
                     : varlen ? "varlen k [total_k, h_k, d]"
                     : cache ? "cache k [b_cache, s_cache, h_k, d] or paged [num_blocks, page_size, h_k, d]"
                             : "k [b, s_k, h_k, d]";
  const char *vdoc = paged_varlen ? "paged v [num_blocks, page_size, h_k, d_v] (with block_table)"
                     : varlen ? "varlen v [total_k, h_k, d_v]"
                     : cache ? "cache v [b_cache, s_cache, h_k, d_v] or paged [num_blocks, page_size, h_k, d_v]"
                             : "v [b, s_k, h_k, d_v]";
  int r = varlen ? 3 : 4, kr = paged_varlen ? 4 : r;
  if (present(&a->q) && !varlen && a->q.rank == 3)
    return sdpa_fail(INV, "attn.q.rank = 3: expected 4 (q [b, s_q, h, d]; a rank-3 varlen q needs"
                     " attn.cu_seqlens_q)");
  SDPA_TRY(check_tensor(&a->q, "attn.q", r, qdoc, 0));
  if (!is_float_dtype(a->q.dtype))
    return sdpa_fail(INV, "attn.q.dtype = %s: expected f32, f16 or bf16", dtype_name(a->q.dtype));
  p->dtype = a->q.dtype;
  SDPA_TRY(check_tensor(&a->k, "attn.k", kr, kdoc, kv_out ? T_OUT : 0));
  SDPA_TRY(expect_dtype(&a->k, "attn.k", p->dtype, "the dtype of attn.q"));
  SDPA_TRY(check_tensor(&a->v, "attn.v", kr, vdoc, kv_out ? T_OUT : 0));
  SDPA_TRY(expect_dtype(&a->v, "attn.v", p->dtype, "the dtype of attn.q"));

  int hq = r - 2, dq = r - 1; /* head and feature dimension indices of q */
  int hk = kr - 2, dk = kr - 1; /* and of k / v */
  p->h = a->q.shape[hq];
  p->d = a->q.shape[dq];
  if (p->h < 1) return sdpa_fail(INV, "attn.q.shape[%d] = " D64 ": expected h >= 1", hq, p->h);
  if (p->d < 1) return sdpa_fail(INV, "attn.q.shape[%d] = " D64 ": expected d >= 1", dq, p->d);
  p->h_k = a->k.shape[hk];
  if (p->h_k < 1 || p->h % p->h_k != 0)
    return sdpa_fail(INV, "attn.k.shape[%d] = " D64 ": expected h_k dividing h = " D64
                     " (attn.q.shape[%d])", hk, p->h_k, p->h, hq);
  SDPA_TRY(expect_dim(&a->k, "attn.k", dk, p->d, "d", "attn.q.shape[last]"));
  if (p->layout == SDPA_LAYOUT_DENSE)
    SDPA_TRY(expect_dim(&a->k, "attn.k", 0, a->q.shape[0], "b", "attn.q.shape[0]"));
  p->d_v = a->v.shape[dk];
  if (p->d_v < 1)
    return sdpa_fail(INV, "attn.v.shape[%d] = " D64 ": expected d_v >= 1", dk, p->d_v);
  /* v matches k on every dimension but the last */
  for (int i = 0; i < dk; ++i)
    if (a->v.shape[i] != a->k.shape[i])
      return sdpa_fail(INV, "attn.v.shape[%d] = " D64 ": expected " D64 " (attn.k.shape[%d])", i,
                       a->v.shape[i], a->k.shape[i], i);

  p->q = a->q.data;
  p->k = a->k.data;
  p->v = a->v.data;
  p->q_st = bshd_of(&a->q);
  p->k_st = bshd_of(&a->k);
  p->v_st = bshd_of(&a->v);
  if (varlen) {
    p->total_q = a->q.shape[0];
    p->total_k = paged_varlen ? 0 : a->k.shape[0]; /* paged: set from cu_seqlens_k */
  } else if (!cache) {
    p->b = a->q.shape[0];
    p->s_q = a->q.shape[1];
    p->s_k = a->k.shape[1];
    p->total_q = p->b * p->s_q;
    p->total_k = p->b * p->s_k;
  } else {
    p->b = a->q.shape[0];
    p->s_q = a->q.shape[1];
  }
  return SDPA_OK;
}

/* Shape of a [b, s_q, h, x] / varlen [total_q, h, x] tensor (out, dout, dq). */
static shape4 q_like(const sdpa_problem *p, int64_t x, const char *xwhat, const char *xfrom) {
  shape4 s;
  if (p->layout == SDPA_LAYOUT_VARLEN) {
    s = (shape4){{p->total_q, p->h, x, 0}, {"total_q", "h", xwhat, 0},
                 {"attn.q.shape[0]", "attn.q.shape[1]", xfrom, 0}};
  } else {
    s = (shape4){{p->b, p->s_q, p->h, x}, {"b", "s_q", "h", xwhat},
                 {"attn.q.shape[0]", "attn.q.shape[1]", "attn.q.shape[2]", xfrom}};
  }
  return s;
}

static sdpa_status check_q_like(const sdpa_tensor *t, const char *name, const sdpa_problem *p,
                                int64_t x, const char *xwhat, const char *xfrom, int flags) {
  int varlen = p->layout == SDPA_LAYOUT_VARLEN;
  char doc[96];
  snprintf(doc, sizeof doc, "%s %s", name, varlen ? "[total_q, h, x]" : "[b, s_q, h, x]");
  SDPA_TRY(check_tensor(t, name, varlen ? 3 : 4, doc, flags));
  SDPA_TRY(expect_dtype(t, name, p->dtype, "the dtype of attn.q"));
  shape4 s = q_like(p, x, xwhat, xfrom);
  return expect_shape(t, name, &s);
}

/* Same shape, rank and dtype as a key tensor (dk, dv). */
static sdpa_status check_same_as(const sdpa_tensor *t, const char *name, const sdpa_tensor *ref,
                                 const char *refname, int flags) {
  char doc[64];
  snprintf(doc, sizeof doc, "the shape of %s", refname);
  SDPA_TRY(check_tensor(t, name, ref->rank, doc, flags));
  SDPA_TRY(expect_dtype(t, name, ref->dtype, "the dtype of attn.q"));
  for (int i = 0; i < ref->rank; ++i)
    if (t->shape[i] != ref->shape[i])
      return sdpa_fail(INV, "%s.shape[%d] = " D64 ": expected " D64 " (%s.shape[%d])", name, i,
                       t->shape[i], ref->shape[i], refname, i);
  return SDPA_OK;
}

/* lse-shaped (lse, dlse): dense/cache [b, h, s_q] -> (sb, sh, ss); varlen
 * [h, total_q] -> (0, sh, ss). */
static sdpa_status check_lse(const sdpa_tensor *t, const char *name, const sdpa_problem *p,
                             int flags, int64_t *sb, int64_t *sh, int64_t *ss) {
  int varlen = p->layout == SDPA_LAYOUT_VARLEN;
  SDPA_TRY(check_tensor(t, name, varlen ? 2 : 3,
                        varlen ? "f32 lse [h, total_q]" : "f32 lse [b, h, s_q]", flags));
  SDPA_TRY(expect_dtype(t, name, SDPA_DTYPE_F32, "lse is always f32"));
  if (varlen) {
    SDPA_TRY(expect_dim(t, name, 0, p->h, "h", "attn.q.shape[1]"));
    SDPA_TRY(expect_dim(t, name, 1, p->total_q, "total_q", "attn.q.shape[0]"));
  } else {
    SDPA_TRY(expect_dim(t, name, 0, p->b, "b", "attn.q.shape[0]"));
    SDPA_TRY(expect_dim(t, name, 1, p->h, "h", "attn.q.shape[2]"));
    SDPA_TRY(expect_dim(t, name, 2, p->s_q, "s_q", "attn.q.shape[1]"));
  }
  *sb = varlen ? 0 : t->stride[0];
  *sh = t->stride[varlen ? 0 : 1];
  *ss = t->stride[varlen ? 1 : 2];
  return SDPA_OK;
}

/* ---- score modifiers ------------------------------------------------------------ */

static sdpa_status check_alibi(const sdpa_attn *a, sdpa_problem *p) {
  const sdpa_tensor *t = &a->alibi_slopes;
  if (!present(t)) return SDPA_OK;
  int r = t->rank == 2 ? 2 : 1;
  SDPA_TRY(check_tensor(t, "attn.alibi_slopes", r, "f32 slopes [h] or [b, h]", 0));
  SDPA_TRY(expect_dtype(t, "attn.alibi_slopes", SDPA_DTYPE_F32, "slopes are always f32"));
  if (r == 2) {
    SDPA_TRY(expect_dim(t, "attn.alibi_slopes", 0, p->b, "b", "the batch of attn.q"));
    SDPA_TRY(expect_dim(t, "attn.alibi_slopes", 1, p->h, "h", "the heads of attn.q"));
    p->alibi_sb = t->stride[0];
    p->alibi_sh = t->stride[1];
  } else {
    SDPA_TRY(expect_dim(t, "attn.alibi_slopes", 0, p->h, "h", "the heads of attn.q"));
    p->alibi_sb = 0;
    p->alibi_sh = t->stride[0];
  }
  p->alibi = (const float *)t->data;
  return SDPA_OK;
}

/* bias / dbias [b|1, h|1, s_q|1, s_k]: strides of size-1 dims become 0
 * (broadcast; for dbias: summed over), extents of the first three returned. */
static sdpa_status check_bias_like(const sdpa_tensor *t, const char *name, const sdpa_problem *p,
                                   int flags, int64_t st[4], int64_t n[3]) {
  SDPA_TRY(check_tensor(t, name, 4, "[b|1, h|1, s_q|1, s_k] in the dtype of attn.q", flags));
  SDPA_TRY(expect_dtype(t, name, p->dtype, "the dtype of attn.q"));
  static const char *const what[3] = {"b", "h", "s_q"};
  static const char *const from[3] = {"attn.q.shape[0]", "attn.q.shape[2]", "attn.q.shape[1]"};
  int64_t full[3] = {p->b, p->h, p->s_q};
  for (int i = 0; i < 3; ++i) {
    if (t->shape[i] != full[i] && t->shape[i] != 1)
      return sdpa_fail(INV, "%s.shape[%d] = " D64 ": expected %s = " D64 " (%s) or 1 (broadcast)",
                       name, i, t->shape[i], what[i], full[i], from[i]);
    n[i] = t->shape[i];
    st[i] = t->shape[i] == 1 ? 0 : t->stride[i];
  }
  SDPA_TRY(expect_dim(t, name, 3, p->s_k, "s_k", "attn.k.shape[1]"));
  st[3] = 1;
  return SDPA_OK;
}

static sdpa_status check_bias(const sdpa_attn *a, sdpa_problem *p) {
  if (!present(&a->bias)) return SDPA_OK;
  if (p->layout != SDPA_LAYOUT_DENSE)
    return sdpa_fail(UNSUP, "attn.bias given with the %s layout: an additive bias is supported"
                     " with the dense layout only",
                     p->layout == SDPA_LAYOUT_VARLEN ? "varlen (attn.cu_seqlens_q)"
                                                     : "KV cache (cache_seqlens)");
  int64_t st[4] = {0}, n[3] = {0}; /* set by check_bias_like; zeroed for gcc -O3 */
  SDPA_TRY(check_bias_like(&a->bias, "attn.bias", p, 0, st, n));
  p->bias = a->bias.data;
  p->bias_sb = st[0];
  p->bias_sh = st[1];
  p->bias_sq = st[2];
  p->bias_sk = st[3];
  return SDPA_OK;
}

/* ---- paged keys (KV cache or varlen) ------------------------------------------------- */

/* block_table [b, max_blocks] and the page size k.shape[1] into p. */
static sdpa_status check_block_table(const sdpa_tensor *bt, const sdpa_attn *a, sdpa_problem *p) {
  SDPA_TRY(check_tensor(bt, "block_table", 2, "int32 block_table [b, max_blocks]", 0));
  SDPA_TRY(expect_dtype(bt, "block_table", SDPA_DTYPE_I32, "index tensors are int32"));
  SDPA_TRY(expect_dim(bt, "block_table", 0, p->b, "b",
                      p->layout == SDPA_LAYOUT_VARLEN ? "attn.cu_seqlens_q.shape[0] - 1"
                                                      : "attn.q.shape[0]"));
  p->page_size = a->k.shape[1];
  /* the cache's decoding tiles never cross a page; paged varlen keys are read
     row by row, so any page size (1: a table of rows) */
  if (p->layout == SDPA_LAYOUT_VARLEN ? p->page_size < 1
                                      : p->page_size < 16 || p->page_size % 16 != 0)
    return sdpa_fail(INV, "attn.k.shape[1] = " D64 ": expected a page size that is %s"
                     " (paged %s [num_blocks, page_size, h_k, d])", p->page_size,
                     p->layout == SDPA_LAYOUT_VARLEN ? ">= 1" : "a positive multiple of 16",
                     p->layout == SDPA_LAYOUT_VARLEN ? "varlen keys" : "cache");
  p->block_table = (const int32_t *)bt->data;
  p->bt_stride = bt->stride[0];
  p->max_blocks = bt->shape[1];
  p->num_blocks = a->k.shape[0];
  return SDPA_OK;
}

/* The pages holding rows [0, rows) of sequence i (host-visible block_table). */
static sdpa_status check_pages(const sdpa_problem *p, int64_t i, int64_t rows) {
  int64_t used = (rows + p->page_size - 1) / p->page_size;
  for (int64_t j = 0; j < used; ++j) {
    int32_t blk = p->block_table[i * p->bt_stride + j];
    if (blk < 0 || blk >= p->num_blocks)
      return sdpa_fail(INV, "block_table[" D64 "][" D64 "] = %d: expected a block index in"
                       " [0, " D64 ") (attn.k.shape[0])", i, j, blk, p->num_blocks);
  }
  return SDPA_OK;
}

/* ---- varlen ----------------------------------------------------------------------- */

static sdpa_status check_index_vec(const sdpa_tensor *t, const char *name, int64_t len,
                                   const char *doc) {
  SDPA_TRY(check_tensor(t, name, 1, doc, 0));
  SDPA_TRY(expect_dtype(t, name, SDPA_DTYPE_I32, "index tensors are int32"));
  if (t->shape[0] != len)
    return sdpa_fail(INV, "%s.shape[0] = " D64 ": expected " D64 " (%s)", name, t->shape[0], len,
                     doc);
  return SDPA_OK;
}

/* Prefix sums on the host: cu[0] = 0, non-decreasing, cu[b] = total, each
 * length <= *max (or *max computed when 0). */
static sdpa_status check_prefix(const int32_t *cu, int64_t b, int64_t total, const char *name,
                                const char *rows_of, int64_t *max, const char *max_name) {
  if (cu[0] != 0) return sdpa_fail(INV, "%s[0] = %d: expected 0 (prefix sums)", name, cu[0]);
  int64_t m = 0;
  for (int64_t i = 1; i <= b; ++i) {
    if (cu[i] < cu[i - 1])
      return sdpa_fail(INV, "%s[" D64 "] = %d < %s[" D64 "] = %d: expected non-decreasing prefix"
                       " sums", name, i, cu[i], name, i - 1, cu[i - 1]);
    int64_t len = (int64_t)cu[i] - cu[i - 1];
    if (*max > 0 && len > *max)
      return sdpa_fail(INV, "%s[" D64 "] - %s[" D64 "] = " D64 ": expected a sequence length <="
                       " %s = " D64, name, i, name, i - 1, len, max_name, *max);
    if (len > m) m = len;
  }
  /* <= as flash_attn allows: rows past the last sequence are padding; no
     output (out, lse, dq, dk, dv) is written there */
  if (cu[b] > total)
    return sdpa_fail(INV, "%s[" D64 "] = %d: expected at most the row count of %s = " D64, name, b,
                     cu[b], rows_of, total);
  if (*max == 0) *max = m;
  return SDPA_OK;
}

static sdpa_status check_varlen(const sdpa_attn *a, const sdpa_tensor *block_table,
                                sdpa_problem *p) {
  const sdpa_tensor *cq = &a->cu_seqlens_q, *ck = &a->cu_seqlens_k;
  SDPA_TRY(check_tensor(cq, "attn.cu_seqlens_q", 1, "int32 cu_seqlens_q [b+1]", 0));
  SDPA_TRY(expect_dtype(cq, "attn.cu_seqlens_q", SDPA_DTYPE_I32, "index tensors are int32"));
  if (cq->shape[0] < 1)
    return sdpa_fail(INV, "attn.cu_seqlens_q.shape[0] = 0: expected b + 1 >= 1 entries");
  p->b = cq->shape[0] - 1;
  if (!present(ck))
    return sdpa_fail(INV, "attn.cu_seqlens_k.data = NULL: expected int32 [b+1] together with"
                     " attn.cu_seqlens_q");
  SDPA_TRY(check_index_vec(ck, "attn.cu_seqlens_k", p->b + 1,
                           "b + 1, from attn.cu_seqlens_q.shape[0]"));
  if (present(&a->seqused_k))
    SDPA_TRY(check_index_vec(&a->seqused_k, "attn.seqused_k", p->b,
                             "b, from attn.cu_seqlens_q.shape[0] - 1"));
  if (a->max_seqlen_q < 0 || a->max_seqlen_q > DIM_MAX)
    return sdpa_fail(INV, "attn.max_seqlen_q = " D64 ": expected in [0, " D64 "]", a->max_seqlen_q,
                     DIM_MAX);
  if (a->max_seqlen_k < 0 || a->max_seqlen_k > DIM_MAX)
    return sdpa_fail(INV, "attn.max_seqlen_k = " D64 ": expected in [0, " D64 "]", a->max_seqlen_k,
                     DIM_MAX);
  p->cu_q = (const int32_t *)cq->data;
  p->cu_k = (const int32_t *)ck->data;
  p->seqused_k = (const int32_t *)a->seqused_k.data;
  p->s_q = a->max_seqlen_q;
  p->s_k = a->max_seqlen_k;
  if (block_table && present(block_table)) {
    SDPA_TRY(check_block_table(block_table, a, p));
    p->total_k = p->num_blocks * p->page_size; /* the rows there are (exact on the CPU below) */
  }
  if (p->device != SDPA_DEVICE_CPU) {
    if (p->b > 0 && p->s_q == 0)
      return sdpa_fail(INV, "attn.max_seqlen_q = 0: expected > 0 on SDPA_DEVICE_CUDA (the"
                       " library cannot read cu_seqlens_q in device memory)");
    if (p->b > 0 && p->s_k == 0)
      return sdpa_fail(INV, "attn.max_seqlen_k = 0: expected > 0 on SDPA_DEVICE_CUDA (the"
                       " library cannot read cu_seqlens_k in device memory)");
    return SDPA_OK;
  }
  SDPA_TRY(check_prefix(p->cu_q, p->b, p->total_q, "attn.cu_seqlens_q", "attn.q (shape[0])",
                        &p->s_q, "attn.max_seqlen_q"));
  if (p->page_size > 0) {
    /* paged keys: a length is bounded by the block_table row, not by k's rows */
    int64_t cap = p->max_blocks * p->page_size;
    SDPA_TRY(check_prefix(p->cu_k, p->b, INT64_MAX, "attn.cu_seqlens_k", "", &p->s_k,
                          "attn.max_seqlen_k"));
    p->total_k = p->cu_k[p->b];
    for (int64_t i = 0; i < p->b; ++i) {
      int64_t len = (int64_t)p->cu_k[i + 1] - p->cu_k[i];
      if (len > cap)
        return sdpa_fail(INV, "attn.cu_seqlens_k[" D64 "] - attn.cu_seqlens_k[" D64 "] = " D64
                         ": expected at most block_table.shape[1] * page_size = " D64, i + 1, i,
                         len, cap);
      SDPA_TRY(check_pages(p, i, len));
    }
  } else {
    SDPA_TRY(check_prefix(p->cu_k, p->b, p->total_k, "attn.cu_seqlens_k", "attn.k (shape[0])",
                          &p->s_k, "attn.max_seqlen_k"));
  }
  if (p->seqused_k)
    for (int64_t i = 0; i < p->b; ++i) {
      int64_t len = (int64_t)p->cu_k[i + 1] - p->cu_k[i];
      if (p->seqused_k[i] < 0 || p->seqused_k[i] > len)
        return sdpa_fail(INV, "attn.seqused_k[" D64 "] = %d: expected in [0, " D64 "] (the length"
                         " of key sequence " D64 " in attn.cu_seqlens_k)", i, p->seqused_k[i], len,
                         i);
    }
  return SDPA_OK;
}

/* ---- KV cache ------------------------------------------------------------------- */

static sdpa_status check_cache(const sdpa_fwd_desc *desc, sdpa_problem *p) {
  const sdpa_attn *a = &desc->attn;
  int paged = present(&desc->block_table);
  if (present(&desc->cache_batch_idx) && paged)
    return sdpa_fail(UNSUP, "cache_batch_idx given with block_table: cache_batch_idx is supported"
                     " with a contiguous cache only");
  SDPA_TRY(check_index_vec(&desc->cache_seqlens, "cache_seqlens", p->b, "b, from attn.q.shape[0]"));
  p->cache_seqlens = (const int32_t *)desc->cache_seqlens.data;
  if (present(&desc->cache_leftpad)) {
    if (paged)
      return sdpa_fail(UNSUP, "cache_leftpad given with block_table: cache_leftpad is supported"
                       " with a contiguous cache only");
    SDPA_TRY(check_index_vec(&desc->cache_leftpad, "cache_leftpad", p->b,
                             "b, from attn.q.shape[0]"));
    p->cache_leftpad = (const int32_t *)desc->cache_leftpad.data;
  }

  int has_new = present(&desc->k_new), has_vnew = present(&desc->v_new);
  if (has_new != has_vnew)
    return has_new ? sdpa_fail(INV, "v_new.data = NULL: expected v_new [b, s_new, h_k, d_v]"
                               " together with k_new")
                   : sdpa_fail(INV, "k_new.data = NULL: expected k_new [b, s_new, h_k, d]"
                               " together with v_new");
  if (has_new) {
    const sdpa_tensor *kn = &desc->k_new, *vn = &desc->v_new;
    SDPA_TRY(check_tensor(kn, "k_new", 4, "k_new [b, s_new, h_k, d]", 0));
    SDPA_TRY(expect_dtype(kn, "k_new", p->dtype, "the dtype of attn.q"));
    p->s_new = kn->shape[1];
    shape4 ks = {{p->b, p->s_new, p->h_k, p->d}, {"b", "s_new", "h_k", "d"},
                 {"attn.q.shape[0]", "k_new.shape[1]", "attn.k.shape[2]", "attn.q.shape[3]"}};
    SDPA_TRY(expect_shape(kn, "k_new", &ks));
    SDPA_TRY(check_tensor(vn, "v_new", 4, "v_new [b, s_new, h_k, d_v]", 0));
    SDPA_TRY(expect_dtype(vn, "v_new", p->dtype, "the dtype of attn.q"));
    shape4 vs = {{p->b, p->s_new, p->h_k, p->d_v}, {"b", "s_new", "h_k", "d_v"},
                 {"attn.q.shape[0]", "k_new.shape[1]", "attn.k.shape[2]", "attn.v.shape[3]"}};
    SDPA_TRY(expect_shape(vn, "v_new", &vs));
    p->k_new = kn->data;
    p->v_new = vn->data;
    p->kn_st = bshd_of(kn);
    p->vn_st = bshd_of(vn);
  }

  int64_t cap;
  const char *capdoc;
  if (paged) {
    SDPA_TRY(check_block_table(&desc->block_table, a, p));
    cap = p->max_blocks * p->page_size; /* both <= 2^31 */
    capdoc = "block_table.shape[1] * page_size";
  } else {
    int64_t b_cache = a->k.shape[0];
    if (present(&desc->cache_batch_idx)) {
      SDPA_TRY(check_index_vec(&desc->cache_batch_idx, "cache_batch_idx", p->b,
                               "b, from attn.q.shape[0]"));
      p->cache_batch_idx = (const int32_t *)desc->cache_batch_idx.data;
    } else if (b_cache < p->b) {
      return sdpa_fail(INV, "attn.k.shape[0] = " D64 ": expected at least b = " D64 " cache rows"
                       " (attn.q.shape[0]), or give cache_batch_idx", b_cache, p->b);
    }
    p->num_blocks = b_cache;
    cap = a->k.shape[1];
    capdoc = "attn.k.shape[1]";
  }
  if (cap > DIM_MAX)
    return sdpa_fail(UNSUP, "%s = " D64 ": expected a cache capacity <= " D64, capdoc, cap,
                     DIM_MAX);
  p->s_k = cap;
  p->total_q = p->b * p->s_q;
  p->total_k = p->b * p->s_k;

  int has_cos = present(&desc->rotary_cos), has_sin = present(&desc->rotary_sin);
  if (has_cos != has_sin)
    return sdpa_fail(INV, "%s.data = NULL: expected f32 [s_max, rotary_dim/2] together with %s",
                     has_cos ? "rotary_sin" : "rotary_cos", has_cos ? "rotary_cos" : "rotary_sin");
  if (has_cos) {
    const sdpa_tensor *c = &desc->rotary_cos, *s = &desc->rotary_sin;
    SDPA_TRY(check_tensor(c, "rotary_cos", 2, "f32 rotary_cos [s_max, rotary_dim/2]", 0));
    SDPA_TRY(expect_dtype(c, "rotary_cos", SDPA_DTYPE_F32, "rotary tables are f32"));
    SDPA_TRY(check_tensor(s, "rotary_sin", 2, "f32 rotary_sin [s_max, rotary_dim/2]", 0));
    SDPA_TRY(expect_dtype(s, "rotary_sin", SDPA_DTYPE_F32, "rotary tables are f32"));
    for (int i = 0; i < 2; ++i)
      if (s->shape[i] != c->shape[i])
        return sdpa_fail(INV, "rotary_sin.shape[%d] = " D64 ": expected " D64
                         " (rotary_cos.shape[%d])", i, s->shape[i], c->shape[i], i);
    if (c->shape[1] < 1 || 2 * c->shape[1] > p->d)
      return sdpa_fail(INV, "rotary_cos.shape[1] = " D64 ": expected rotary_dim/2 with 1 <="
                       " rotary_dim = 2 * " D64 " <= d = " D64 " (attn.q.shape[3])", c->shape[1],
                       c->shape[1], p->d);
    if (c->shape[0] > 1 && s->stride[0] != c->stride[0])
      return sdpa_fail(UNSUP, "rotary_sin.stride[0] = " D64 ": expected the row stride of"
                       " rotary_cos = " D64, s->stride[0], c->stride[0]);
    p->rot_cos = (const float *)c->data;
    p->rot_sin = (const float *)s->data;
    p->rot_stride = c->stride[0];
    p->rot_rows = c->shape[0];
    p->rotary_dim = 2 * c->shape[1];
    p->rotary_interleaved = desc->rotary_interleaved;
  }

  if (p->device != SDPA_DEVICE_CPU) return SDPA_OK;
  /* host-visible index tensors: every row and block the backend touches */
  int64_t maxlen = 0;
  for (int64_t i = 0; i < p->b; ++i) {
    int64_t L = p->cache_seqlens[i];
    if (L < 0 || L + p->s_new > cap)
      return sdpa_fail(INV, "cache_seqlens[" D64 "] = " D64 ": expected >= 0 and cache_seqlens["
                       D64 "] + s_new (" D64 ") <= the cache capacity " D64 " (%s)", i, L, i,
                       p->s_new, cap, capdoc);
    if (L > maxlen) maxlen = L;
    if (p->cache_leftpad && (p->cache_leftpad[i] < 0 || p->cache_leftpad[i] > L))
      return sdpa_fail(INV, "cache_leftpad[" D64 "] = %d: expected in [0, cache_seqlens[" D64
                       "] = " D64 "]", i, p->cache_leftpad[i], i, L);
    if (paged) {
      SDPA_TRY(check_pages(p, i, L + p->s_new));
    } else if (p->cache_batch_idx) {
      int32_t row = p->cache_batch_idx[i];
      if (row < 0 || row >= p->num_blocks)
        return sdpa_fail(INV, "cache_batch_idx[" D64 "] = %d: expected a cache row in [0, " D64
                         ") (attn.k.shape[0])", i, row, p->num_blocks);
    }
  }
  if (p->rotary_dim > 0) {
    int64_t need = maxlen + (p->s_q > p->s_new ? p->s_q : p->s_new);
    if (p->b > 0 && p->rot_rows < need)
      return sdpa_fail(INV, "rotary_cos.shape[0] = " D64 ": expected >= " D64 " rows (max"
                       " cache_seqlens " D64 " + max(s_q, s_new) " D64 ")", p->rot_rows, need,
                       maxlen, need - maxlen);
  }
  return SDPA_OK;
}

/* Fields that only mean something with one layout. */
static sdpa_status check_layout_fields(const sdpa_fwd_desc *desc, const sdpa_attn *a,
                                       sdpa_layout layout) {
  if (layout != SDPA_LAYOUT_VARLEN) {
    if (present(&a->cu_seqlens_k))
      return sdpa_fail(INV, "attn.cu_seqlens_k given without attn.cu_seqlens_q: expected both"
                       " (varlen) or neither");
    if (a->max_seqlen_q != 0)
      return sdpa_fail(INV, "attn.max_seqlen_q = " D64 ": expected 0 without attn.cu_seqlens_q",
                       a->max_seqlen_q);
    if (a->max_seqlen_k != 0)
      return sdpa_fail(INV, "attn.max_seqlen_k = " D64 ": expected 0 without attn.cu_seqlens_q",
                       a->max_seqlen_k);
    if (present(&a->seqused_k))
      return sdpa_fail(UNSUP, "attn.seqused_k given without attn.cu_seqlens_q: seqused_k is"
                       " supported with the varlen layout only");
  }
  if (!desc) return SDPA_OK;
  SDPA_TRY(check_flag(desc->rotary_interleaved, "rotary_interleaved"));
  if (desc->num_splits < 0)
    return sdpa_fail(INV, "num_splits = %d: expected >= 0 (0 = automatic, 1 = no split)",
                     desc->num_splits);
  if (layout == SDPA_LAYOUT_CACHE) return SDPA_OK;
  static const char *const names[7] = {"block_table", "cache_batch_idx", "k_new", "v_new",
                                       "rotary_cos", "rotary_sin", "cache_leftpad"};
  const sdpa_tensor *ts[7] = {&desc->block_table, &desc->cache_batch_idx, &desc->k_new,
                              &desc->v_new, &desc->rotary_cos, &desc->rotary_sin,
                              &desc->cache_leftpad};
  /* block_table also pages the keys of the varlen layout */
  for (int i = layout == SDPA_LAYOUT_VARLEN; i < 7; ++i)
    if (present(ts[i]))
      return sdpa_fail(UNSUP, "%s given without cache_seqlens: %s requires the KV-cache layout"
                       " (set cache_seqlens)", names[i], names[i]);
  return SDPA_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

/* A window side of at least the longest length never restricts a row (the
 * mask keeps i + off - left <= j <= i + off + right, and i + off lies in
 * [min(0, s_k - s_q), max(s_q, s_k)) ): it is folded to -1 (unbounded). The
 * kernels hold a side as an int up to SDPA_WINDOW_UNBOUNDED (problem.h); a
 * wider one that still restricts (sequences longer than that) is refused. */
static sdpa_status fold_window(sdpa_problem *p) {
  const int64_t longest = p->s_q > p->s_k ? p->s_q : p->s_k;
  int64_t *side[2] = {&p->window_left, &p->window_right};
  static const char *const name[2] = {"attn.window_left", "attn.window_right"};
  for (int i = 0; i < 2; ++i) {
    if (*side[i] >= longest) *side[i] = -1;
    if (*side[i] > SDPA_WINDOW_UNBOUNDED)
      return sdpa_fail(UNSUP, "%s = " D64 ": expected <= %d with sequences of up to " D64
                       " rows (wider windows are unbounded only past the longest length)",
                       name[i], *side[i], SDPA_WINDOW_UNBOUNDED, longest);
  }
  return SDPA_OK;
}

static sdpa_status finish_common(sdpa_problem *p, const sdpa_attn *a) {
  p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->d));
  SDPA_TRY(fold_window(p));
  if (p->dropout_p > 0.0f && p->b * p->h > INT64_C(4294967296))
    return sdpa_fail(UNSUP, "b * h = " D64 ": expected <= 2^32 with dropout (batch * h + head is"
                     " a 32-bit Philox counter word)", p->b * p->h);
  return SDPA_OK;
}

sdpa_status sdpa_validate_fwd(const sdpa_fwd_desc *desc, sdpa_problem *p) {
  SDPA_TRY(check_desc("fwd", p, desc, desc ? desc->struct_size : 0, sizeof(sdpa_fwd_desc)));
  memset(p, 0, sizeof *p);
  const sdpa_attn *a = &desc->attn;
  SDPA_TRY(check_attn_scalars(a, p));

  if (present(&desc->cache_seqlens)) {
    p->layout = SDPA_LAYOUT_CACHE;
    if (present(&a->cu_seqlens_q))
      return sdpa_fail(UNSUP, "attn.cu_seqlens_q given with cache_seqlens: varlen queries with a"
                       " KV cache are not supported");
  } else {
    p->layout = present(&a->cu_seqlens_q) ? SDPA_LAYOUT_VARLEN : SDPA_LAYOUT_DENSE;
  }
  SDPA_TRY(check_layout_fields(desc, a, p->layout));
  if (p->layout == SDPA_LAYOUT_CACHE) {
    if (present(&desc->probs))
      return sdpa_fail(UNSUP, "probs given with the KV-cache layout: probs are supported with the"
                       " dense layout only");
  }

  const int paged_varlen = p->layout == SDPA_LAYOUT_VARLEN && present(&desc->block_table);
  SDPA_TRY(check_qkv(a, p, p->layout == SDPA_LAYOUT_CACHE && present(&desc->k_new), paged_varlen));
  if (p->layout == SDPA_LAYOUT_VARLEN) SDPA_TRY(check_varlen(a, &desc->block_table, p));
  if (p->layout == SDPA_LAYOUT_CACHE) {
    /* cache k/v: [b_cache|num_blocks, s_cache|page_size, h_k, d]; h_k, d checked above */
    SDPA_TRY(check_cache(desc, p));
  }

  SDPA_TRY(check_q_like(&desc->out, "out", p, p->d_v, "d_v", "attn.v.shape[last]", T_OUT));
  p->out = desc->out.data;
  p->o_st = bshd_of(&desc->out);
  if (present(&desc->lse)) {
    SDPA_TRY(check_lse(&desc->lse, "lse", p, T_OUT, &p->lse_sb, &p->lse_sh, &p->lse_ss));
    p->lse = (float *)desc->lse.data;
  }

  if (present(&desc->probs)) {
    const sdpa_tensor *t = &desc->probs;
    /* varlen: [b, h, max_seqlen_q, max_seqlen_k], sequence b's block at its origin */
    SDPA_TRY(check_tensor(t, "probs", 4, "probs [b, h, s_q, s_k]", T_OUT));
    if (t->dtype != SDPA_DTYPE_F32 && t->dtype != p->dtype)
      return sdpa_fail(INV, "probs.dtype = %s: expected f32 or the dtype of attn.q (%s)",
                       dtype_name(t->dtype), dtype_name(p->dtype));
    shape4 s = {{p->b, p->h, p->s_q, p->s_k}, {"b", "h", "s_q", "s_k"},
                {"attn.q.shape[0]", "attn.q.shape[2]", "attn.q.shape[1]", "attn.k.shape[1]"}};
    SDPA_TRY(expect_shape(t, "probs", &s));
    p->probs = t->data;
    p->probs_dtype = t->dtype;
    p->probs_sb = t->stride[0];
    p->probs_sh = t->stride[1];
    p->probs_sq = t->stride[2];
  }

  SDPA_TRY(check_alibi(a, p));
  SDPA_TRY(check_bias(a, p));
  SDPA_TRY(take_workspace(p, desc->workspace, desc->workspace_size));
  p->num_splits = desc->num_splits;
  return finish_common(p, a);
}

/* ---- backward --------------------------------------------------------------------- */

sdpa_status sdpa_validate_bwd(const sdpa_bwd_desc *desc, sdpa_problem *p) {
  SDPA_TRY(check_desc("bwd", p, desc, desc ? desc->struct_size : 0, sizeof(sdpa_bwd_desc)));
  memset(p, 0, sizeof *p);
  p->is_bwd = 1;
  const sdpa_attn *a = &desc->attn;
  SDPA_TRY(check_attn_scalars(a, p));
  SDPA_TRY(check_flag(desc->deterministic, "deterministic"));
  p->deterministic = desc->deterministic;
  p->layout = present(&a->cu_seqlens_q) ? SDPA_LAYOUT_VARLEN : SDPA_LAYOUT_DENSE;
  SDPA_TRY(check_layout_fields(NULL, a, p->layout));

  SDPA_TRY(check_qkv(a, p, 0, 0));
  if (p->layout == SDPA_LAYOUT_VARLEN) SDPA_TRY(check_varlen(a, NULL, p));

  SDPA_TRY(check_q_like(&desc->out, "out", p, p->d_v, "d_v", "attn.v.shape[last]", 0));
  p->out = desc->out.data;
  p->o_st = bshd_of(&desc->out);
  if (!present(&desc->lse) && !empty_shape(&desc->lse))
    return sdpa_fail(INV, "lse.data = NULL: expected the forward's f32 lse (required by the"
                     " backward)");
  SDPA_TRY(check_lse(&desc->lse, "lse", p, 0, &p->lse_sb, &p->lse_sh, &p->lse_ss));
  p->lse = (float *)desc->lse.data;
  if (present(&desc->dlse)) {
    SDPA_TRY(check_lse(&desc->dlse, "dlse", p, 0, &p->dlse_sb, &p->dlse_sh, &p->dlse_ss));
    p->dlse = (const float *)desc->dlse.data;
  }
  SDPA_TRY(check_q_like(&desc->dout, "dout", p, p->d_v, "d_v", "attn.v.shape[last]", 0));
  p->dout = desc->dout.data;
  p->do_st = bshd_of(&desc->dout);
  SDPA_TRY(check_q_like(&desc->dq, "dq", p, p->d, "d", "attn.q.shape[last]", T_OUT));
  p->dq = desc->dq.data;
  p->dq_st = bshd_of(&desc->dq);
  SDPA_TRY(check_same_as(&desc->dk, "dk", &a->k, "attn.k", T_OUT));
  p->dk = desc->dk.data;
  p->dk_st = bshd_of(&desc->dk);
  SDPA_TRY(check_same_as(&desc->dv, "dv", &a->v, "attn.v", T_OUT));
  p->dv = desc->dv.data;
  p->dv_st = bshd_of(&desc->dv);

  SDPA_TRY(check_alibi(a, p));
  SDPA_TRY(check_bias(a, p));
  if (present(&desc->dbias)) {
    if (!p->bias)
      return sdpa_fail(INV, "dbias given without attn.bias: expected dbias only with a bias");
    int64_t st[4] = {0}, n[3] = {0}; /* set by check_bias_like; zeroed for gcc -O3 */
    SDPA_TRY(check_bias_like(&desc->dbias, "dbias", p, T_OUT, st, n));
    p->dbias = desc->dbias.data;
    p->dbias_sb = st[0];
    p->dbias_sh = st[1];
    p->dbias_sq = st[2];
    p->dbias_sk = st[3];
    p->dbias_nb = n[0];
    p->dbias_nh = n[1];
    p->dbias_nq = n[2];
  }
  SDPA_TRY(take_workspace(p, desc->workspace, desc->workspace_size));
  return finish_common(p, a);
}

/* ---- merge_states ---------------------------------------------------------------- */

sdpa_status sdpa_validate_merge(const sdpa_merge_desc *desc, sdpa_merge_problem *m) {
  SDPA_TRY(check_desc("merge", m, desc, desc ? desc->struct_size : 0, sizeof(sdpa_merge_desc)));
  memset(m, 0, sizeof *m);
  SDPA_TRY(check_device(desc->device, "device"));
  const sdpa_tensor *op = &desc->out_parts, *lp = &desc->lse_parts, *o = &desc->out,
                    *l = &desc->lse;
  SDPA_TRY(check_tensor(op, "out_parts", 4, "out_parts [n, t, h, d]", 0));
  if (!is_float_dtype(op->dtype))
    return sdpa_fail(INV, "out_parts.dtype = %s: expected f32, f16 or bf16", dtype_name(op->dtype));
  m->n = op->shape[0];
  m->t = op->shape[1];
  m->h = op->shape[2];
  m->d = op->shape[3];
  SDPA_TRY(check_tensor(lp, "lse_parts", 3, "f32 lse_parts [n, t, h]", T_ANY_LAST));
  SDPA_TRY(expect_dtype(lp, "lse_parts", SDPA_DTYPE_F32, "lse is always f32"));
  static const char *const what[4] = {"n", "t", "h", "d"};
  static const char *const from[4] = {"out_parts.shape[0]", "out_parts.shape[1]",
                                      "out_parts.shape[2]", "out_parts.shape[3]"};
  for (int i = 0; i < 3; ++i)
    SDPA_TRY(expect_dim(lp, "lse_parts", i, op->shape[i], what[i], from[i]));
  SDPA_TRY(check_tensor(o, "out", 3, "out [t, h, d]", T_OUT));
  if (!is_float_dtype(o->dtype))
    return sdpa_fail(INV, "out.dtype = %s: expected f32, f16 or bf16", dtype_name(o->dtype));
  for (int i = 0; i < 3; ++i)
    SDPA_TRY(expect_dim(o, "out", i, op->shape[i + 1], what[i + 1], from[i + 1]));
  if (present(l)) {
    SDPA_TRY(check_tensor(l, "lse", 2, "f32 lse [t, h]", T_OUT | T_ANY_LAST));
    SDPA_TRY(expect_dtype(l, "lse", SDPA_DTYPE_F32, "lse is always f32"));
    for (int i = 0; i < 2; ++i)
      SDPA_TRY(expect_dim(l, "lse", i, op->shape[i + 1], what[i + 1], from[i + 1]));
    m->lse = (float *)l->data;
    m->l_st = l->stride[0];
    m->l_sh = l->stride[1];
  }
  m->device = desc->device;
  m->stream = desc->stream;
  m->out_parts = op->data;
  m->parts_dtype = op->dtype;
  m->op_sn = op->stride[0];
  m->op_st = op->stride[1];
  m->op_sh = op->stride[2];
  m->lse_parts = (const float *)lp->data;
  m->lp_sn = lp->stride[0];
  m->lp_st = lp->stride[1];
  m->lp_sh = lp->stride[2];
  m->out = o->data;
  m->out_dtype = o->dtype;
  m->o_st = o->stride[0];
  m->o_sh = o->stride[1];
  return SDPA_OK;
}
