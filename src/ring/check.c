/*
 * check.c - validation of the ring descriptors on one rank, and the
 * agreement of all ranks (one all-gather of a small header) before anything
 * travels: a rank that refused its arguments, or shapes that differ between
 * ranks, fail the call on every rank instead of leaving one waiting for a
 * transfer that never comes.
 *
 * The tensors themselves are checked by sdpa_validate_fwd / _bwd on the
 * rank's local problem, so their messages are sdpa's own ("attn.k.shape[2]
 * = 3: expected h_k dividing h = 8 ..."); this file adds what only the ring
 * knows: its fields, the rows a rank must hold, what travels as bytes, and
 * the modifiers the ring does not carry.
 */
#include "ring/check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common/dtype.h"
#include "error.h"
#include "ring/pass.h"

#define INV SDPA_ERR_INVALID_ARGUMENT
#define UNSUP SDPA_ERR_NOT_SUPPORTED
#define D64 "%" PRId64

static const char *layout_name(sdpa_ring_layout l) {
  return l == SDPA_RING_ZIGZAG ? "zigzag" : "contiguous";
}

static const char *device_name(sdpa_device d) {
  return d == SDPA_DEVICE_CUDA ? "SDPA_DEVICE_CUDA" : d == SDPA_DEVICE_CPU ? "SDPA_DEVICE_CPU"
                                                                           : "unknown";
}

static sdpa_status check_ring(const sdpa_ring *r, int rank, int world) {
  for (int i = 0; i < 8; ++i)
    if (r->reserved[i] != 0)
      return sdpa_fail(INV, "ring.reserved[%d] = " D64 ": expected 0 (reserved; initialise the"
                       " descriptor with its *_init function)", i, r->reserved[i]);
  if (r->world_size < 1)
    return sdpa_fail(INV, "ring.world_size = %d: expected >= 1", r->world_size);
  if (r->world_size != world)
    return sdpa_fail(INV, "ring.world_size = %d: expected %d, the ranks of the communicator",
                     r->world_size, world);
  if (r->rank != rank)
    return sdpa_fail(INV, "ring.rank = %d: expected %d, this process's rank in the communicator",
                     r->rank, rank);
  if (r->layout != SDPA_RING_CONTIGUOUS && r->layout != SDPA_RING_ZIGZAG)
    return sdpa_fail(INV, "ring.layout = %d: expected SDPA_RING_CONTIGUOUS (0) or"
                     " SDPA_RING_ZIGZAG (1)", (int)r->layout);
  if (r->seqlen < 0 || r->seqlen > INT64_C(2147483647))
    return sdpa_fail(INV, "ring.seqlen = " D64 ": expected 0 <= seqlen < 2^31", r->seqlen);
  if (r->check_peers != 0 && r->check_peers != 1)
    return sdpa_fail(INV, "ring.check_peers = %d: expected 0 or 1", r->check_peers);
  return SDPA_OK;
}

/* What sdpa_attn holds that the ring cannot carry, worded as sdpa's own
 * messages are. */
static sdpa_status check_modifiers(const sdpa_attn *a, sdpa_device device) {
  if (a->device != device)
    return sdpa_fail(a->device == SDPA_DEVICE_CPU || a->device == SDPA_DEVICE_CUDA ? UNSUP : INV,
                     "attn.device = %s: expected %s (the ring's transfers run between %s)",
                     device_name(a->device), device_name(device),
                     device == SDPA_DEVICE_CUDA ? "GPUs, over NCCL" : "host buffers");
  if (a->cu_seqlens_q.data || a->cu_seqlens_k.data || a->seqused_k.data)
    return sdpa_fail(UNSUP, "attn.%s given: the ring takes the dense layout q [b, s_local, h, d]"
                     " (varlen is not supported)",
                     a->cu_seqlens_q.data ? "cu_seqlens_q" : a->cu_seqlens_k.data ? "cu_seqlens_k"
                                                                                 : "seqused_k");
  if (a->bias.data)
    return sdpa_fail(UNSUP, "attn.bias given: the ring does not carry an additive bias");
  if (a->alibi_slopes.data)
    return sdpa_fail(UNSUP, "attn.alibi_slopes given: the ring does not carry ALiBi (its"
                     " distances are global positions)");
  if (a->dropout_p != 0.0f)
    return sdpa_fail(UNSUP, "attn.dropout_p = %g: expected 0 (the ring does not carry dropout:"
                     " its mask indexes rows within one call)", (double)a->dropout_p);
  if (a->window_left != -1 || a->window_right != -1)
    return sdpa_fail(UNSUP, "attn.window_%s = " D64 ": expected -1 (the ring's masks are none"
                     " or causal)", a->window_left != -1 ? "left" : "right",
                     a->window_left != -1 ? a->window_left : a->window_right);
  return SDPA_OK;
}

/* Rows the rank holds, for q-like (dimension 1) tensors. */
static sdpa_status check_rows(const sdpa_tensor *t, const char *name, const sdpa_ring *r,
                              int64_t want) {
  if (t->shape[1] != want)
    return sdpa_fail(INV, "%s.shape[1] = " D64 ": expected " D64 ", the rows rank %d holds of"
                     " ring.seqlen = " D64 " split %s over %d ranks (sdpa_ring_shard)", name,
                     t->shape[1], want, r->rank, r->seqlen, layout_name(r->layout), r->world_size);
  return SDPA_OK;
}

/* k / v leave the rank as bytes: contiguous [b, s, h_k, x]. */
static sdpa_status check_contiguous(const sdpa_tensor *t, const char *name) {
  int64_t want = 1;
  for (int i = t->rank - 1; i >= 0; --i) {
    if (t->shape[i] > 1 && t->stride[i] != want)
      return sdpa_fail(INV, "%s.stride[%d] = " D64 ": expected " D64 " (%s travels the ring as"
                       " bytes: a contiguous [b, s_local, h_k, x])", name, i, t->stride[i], want,
                       name);
    want *= t->shape[i];
  }
  return SDPA_OK;
}

static void fill_geom(const sdpa_problem *p, const sdpa_ring *r, sdpa_ring_geom *g) {
  *g = (sdpa_ring_geom){.rank = r->rank, .world = r->world_size, .layout = r->layout,
                        .seqlen = r->seqlen,
                        .s_max = sdpa_ring_max_local(r->seqlen, r->world_size, r->layout),
                        .b = p->b, .h = p->h, .h_k = p->h_k, .d = p->d, .d_v = p->d_v,
                        .dtype = p->dtype, .es = sdpa_dtype_size(p->dtype),
                        .causal = p->window_right == 0 && p->window_left < 0,
                        .scale = p->scale, .softcap = p->softcap};
  sdpa_ring_shard_of(r->seqlen, r->world_size, r->layout, r->rank, &g->own);
}

/* The rows this rank holds, before sdpa's checks (whose messages would name
 * the first tensor that disagrees with q, not the ring's rule). */
static sdpa_status check_held(const sdpa_attn *a, const sdpa_ring *r) {
  sdpa_ring_shard_t s;
  sdpa_ring_shard_of(r->seqlen, r->world_size, r->layout, r->rank, &s);
  if (a->q.rank == 4) SDPA_TRY(check_rows(&a->q, "attn.q", r, s.len));
  if (a->k.rank == 4) SDPA_TRY(check_rows(&a->k, "attn.k", r, s.len));
  return SDPA_OK;
}

/* What travels, on the validated local problem. */
static sdpa_status check_local(const sdpa_attn *a) {
  SDPA_TRY(check_contiguous(&a->k, "attn.k"));
  return check_contiguous(&a->v, "attn.v");
}

void sdpa_ring_caller_fwd(const sdpa_ring_fwd_desc *d, sdpa_fwd_desc *f) {
  sdpa_fwd_init(f);
  f->attn = d->attn;
  f->out = d->out, f->lse = d->lse;
}

void sdpa_ring_caller_bwd(const sdpa_ring_bwd_desc *d, sdpa_bwd_desc *b) {
  sdpa_bwd_init(b);
  b->attn = d->attn;
  b->out = d->out, b->lse = d->lse, b->dout = d->dout, b->dlse = d->dlse;
  b->dq = d->dq, b->dk = d->dk, b->dv = d->dv;
  b->deterministic = d->deterministic;
}

/* sdpa's own checks of this rank's local problem. */
static sdpa_status validate(const sdpa_ring_pass *p, sdpa_problem *prob) {
  if (p->kind->op == SDPA_RING_OP_FWD) {
    sdpa_fwd_desc f;
    sdpa_ring_caller_fwd((const sdpa_ring_fwd_desc *)p->desc, &f);
    return sdpa_validate_fwd(&f, prob);
  }
  sdpa_bwd_desc b;
  sdpa_ring_caller_bwd((const sdpa_ring_bwd_desc *)p->desc, &b);
  return sdpa_validate_bwd(&b, prob);
}

sdpa_status sdpa_ring_check_desc(const sdpa_ring_pass *p) {
  if (!p->desc) return sdpa_fail(INV, "desc = NULL: expected a pointer to an %s", p->kind->type);
  if (!p->attn)
    return sdpa_fail(INV, "desc->struct_size = %zu: expected >= %zu (sizeof(%s)); initialise the"
                     " descriptor with %s()", p->struct_size, p->kind->desc_size, p->kind->type,
                     p->kind->init);
  return SDPA_OK;
}

sdpa_status sdpa_ring_check(const sdpa_ring_pass *p, int rank, int world, sdpa_device device,
                            sdpa_ring_geom *g) {
  SDPA_TRY(sdpa_ring_check_desc(p));
  SDPA_TRY(check_ring(p->ring, rank, world));
  SDPA_TRY(check_modifiers(p->attn, device));
  SDPA_TRY(check_held(p->attn, p->ring));
  sdpa_problem prob;
  SDPA_TRY(validate(p, &prob));
  fill_geom(&prob, p->ring, g);
  return check_local(p->attn);
}

sdpa_status sdpa_ring_check_alone(const sdpa_ring_pass *p, sdpa_device device, sdpa_ring_geom *g) {
  const int rank = p->ring ? p->ring->rank : 0, world = p->ring ? p->ring->world_size : 1;
  return sdpa_ring_check(p, rank, world, device, g);
}

/* ---- agreement ------------------------------------------------------------------ */

/* The header every rank contributes: what must be equal everywhere. */
enum {
  H_VERSION, H_OP, H_WORLD, H_LAYOUT, H_SEQLEN, H_B, H_H, H_HK, H_D, H_DV, H_DTYPE, H_CAUSAL,
  H_SCALE, H_SOFTCAP, H_OK, H_COUNT
};

static const char *const h_name[H_OK] = {
    "the library version", "the call", "ring.world_size", "ring.layout", "ring.seqlen",
    "attn.q.shape[0] (b)", "attn.q.shape[2] (h)", "attn.k.shape[2] (h_k)", "attn.q.shape[3] (d)",
    "attn.v.shape[3] (d_v)", "attn.q.dtype", "attn.causal", "attn.scale (0 resolved to 1/sqrt(d))",
    "attn.softcap"};

static void h_value(int f, int64_t v, char *buf, size_t n) {
  if (f == H_OP) {
    snprintf(buf, n, "%s", v == SDPA_RING_OP_FWD ? "sdpa_ring_fwd" : "sdpa_ring_bwd");
  } else if (f == H_DTYPE) {
    snprintf(buf, n, "%s", (uint64_t)v <= SDPA_DTYPE_I32 ? sdpa_dtype_string((sdpa_dtype)v) : "?");
  } else if (f == H_LAYOUT) {
    snprintf(buf, n, "%s", layout_name((sdpa_ring_layout)v));
  } else if (f == H_SCALE || f == H_SOFTCAP) {
    snprintf(buf, n, "%g", (double)sdpa_f32_from_bits((uint32_t)v));
  } else {
    snprintf(buf, n, D64, v);
  }
}

sdpa_status sdpa_ring_agree(sdpa_ring_transport *tp, const sdpa_ring_geom *g, int op,
                            sdpa_status local) {
  int64_t mine[H_COUNT];
  memset(mine, 0, sizeof mine);
  mine[H_VERSION] = SDPA_VERSION_NUMBER;
  mine[H_OP] = op;
  mine[H_OK] = local == SDPA_OK;
  if (local == SDPA_OK) {
    mine[H_WORLD] = g->world;
    mine[H_LAYOUT] = g->layout;
    mine[H_SEQLEN] = g->seqlen;
    mine[H_B] = g->b;
    mine[H_H] = g->h;
    mine[H_HK] = g->h_k;
    mine[H_D] = g->d;
    mine[H_DV] = g->d_v;
    mine[H_DTYPE] = g->dtype;
    mine[H_CAUSAL] = g->causal;
    mine[H_SCALE] = (int64_t)sdpa_f32_bits(g->scale);
    mine[H_SOFTCAP] = (int64_t)sdpa_f32_bits(g->softcap);
  }
  /* this rank's own refusal keeps its message through the exchange */
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", sdpa_last_error());
  const int n = tp->world;
  int64_t all[64 * H_COUNT], *heap = NULL, *hdr = all;
  if (n > 64) {
    heap = (int64_t *)malloc(sizeof(int64_t) * H_COUNT * (size_t)n);
    if (!heap) return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring: out of host memory for the"
                                " agreement of %d ranks", n);
    hdr = heap;
  }
  sdpa_status st = tp->allgather(tp, mine, hdr, sizeof mine);
  if (st == SDPA_OK && local != SDPA_OK) st = sdpa_fail(local, "%s", saved);
  for (int r = 0; st == SDPA_OK && r < n; ++r)
    if (!hdr[r * H_COUNT + H_OK])
      st = sdpa_fail(INV, "rank %d of %d refused its arguments (its sdpa_last_error() names"
                     " which); nothing was sent", r, n);
  /* the first field that differs from rank 0's, in a fixed order, so every
   * rank words the same refusal */
  for (int f = 0; st == SDPA_OK && f < H_OK; ++f)
    for (int r = 1; r < n; ++r) {
      const int64_t a = hdr[f], b = hdr[r * H_COUNT + f];
      if (a == b) continue;
      char va[64], vb[64];
      h_value(f, a, va, sizeof va);
      h_value(f, b, vb, sizeof vb);
      st = sdpa_fail(INV, "%s = %s on rank 0 but %s on rank %d: expected the same on every"
                     " rank of the ring; nothing was sent", h_name[f], va, vb, r);
      break;
    }
  free(heap);
  return st;
}

/* ---- workspace and messages ------------------------------------------------------------- */

sdpa_status sdpa_ring_ws_acquire(const sdpa_ring_ops *ops, void *given, size_t given_size,
                                 size_t need, void **ws, int *owned) {
  *ws = NULL;
  *owned = 0;
  if (!given && given_size > 0)
    return sdpa_fail(INV, "workspace = NULL with workspace_size = %zu: expected a pointer (or"
                     " workspace_size = 0)", given_size);
  if (given) {
    if (given_size < need)
      return sdpa_fail(INV, "workspace_size = %zu: expected at least %zu bytes for this call"
                       " (sdpa_ring_*_workspace_size)", given_size, need);
    if ((uintptr_t)given % 256)
      return sdpa_fail(INV, "workspace = %p: expected a 256-byte aligned pointer", given);
    *ws = given;
    return SDPA_OK;
  }
  if (need == 0) return SDPA_OK;
  SDPA_TRY(ops->alloc(ops, need, ws));
  *owned = 1;
  return SDPA_OK;
}

sdpa_status sdpa_ring_annotate(sdpa_status st, const char *what, int step, int src) {
  char inner[1024];
  snprintf(inner, sizeof inner, "%s", sdpa_last_error());
  return sdpa_fail(st, "ring %s, step %d (the block of rank %d): %s", what, step, src, inner);
}

void sdpa_ring_drain(sdpa_ring_transport *tp, const int *posted, sdpa_status st) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", sdpa_last_error());
  for (int s = 0; s < SDPA_RING_SLOTS; ++s)
    if (posted[s]) tp->wait(tp, s);
  if (st != SDPA_OK) sdpa_fail(st, "%s", saved);
}

int sdpa_ring_agrees(const sdpa_ring *ring, int world) {
  return world > 1 && ring && ring->check_peers != 0;
}
