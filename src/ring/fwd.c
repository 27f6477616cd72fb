/*
 * fwd.c - the ring forward (docs/design.md §9). Step t of n: this rank holds
 * the K / V block of rank (rank - t) mod n; it posts that block to the next
 * rank and the receive of the following block from the previous one, attends
 * its queries to the block in hand (sdpa_ring_plan's calls), and waits for
 * the exchange before the next step. Each step's partial (out, lse) goes to
 * its own slot; one sdpa_merge_states over the slots writes out and lse, so
 * each partial is rounded once and merged in fp32.
 */
#include <math.h>
#include <string.h>

#include "error.h"
#include "ring/pass.h"

/* After the blocks: a slot of partial out and lse for every step. */
static void fwd_carve(const sdpa_ring_geom *g, ring_carve *c, sdpa_ring_bufs *w, int *bad) {
  w->parts = ring_take(c, ring_bytes(bad, g->es * (size_t)g->world, g->b, g->own.len, g->h,
                                     g->d_v));
  w->lse_parts = (float *)ring_take(c, ring_bytes(bad, sizeof(float) * (size_t)g->world, g->b,
                                                  g->h, g->own.len, 1));
}

/* The sdpa_fwd call of one item of the step in hand. With one rank it writes
 * the caller's out and lse directly, else the step's slot. */
static sdpa_status fwd_call(const sdpa_ring_ctx *x, const sdpa_ring_item *it, size_t *bytes) {
  const sdpa_ring_geom *g = x->g;
  const sdpa_ring_bufs *w = x->w;
  sdpa_fwd_desc f;
  sdpa_ring_caller_fwd((const sdpa_ring_fwd_desc *)x->p->desc, &f);
  sdpa_ring_item_attn(&f.attn, &x->s, it);
  if (g->world == 1) {
    f.out = ring_rows(&f.out, it->q0, it->q_len);
    f.lse = f.lse.data ? ring_lse_rows(&f.lse, it->q0, it->q_len) : ring_absent();
  } else {
    const int64_t rows = g->own.len, slot_elems = g->b * rows * g->h * g->d_v;
    const size_t t = (size_t)x->s.t;
    f.out = ring_block_rows((char *)w->parts + t * (size_t)slot_elems * g->es, g->dtype, g->b,
                            rows, it->q0, it->q_len, g->h, g->d_v);
    const int64_t lshape[3] = {g->b, g->h, rows};
    const sdpa_tensor l = sdpa_tensor_contiguous(w->lse_parts + t * (size_t)(g->b * g->h * rows),
                                                 SDPA_DTYPE_F32, 3, lshape);
    f.lse = ring_lse_rows(&l, it->q0, it->q_len);
  }
  f.workspace = w->sub;
  f.workspace_size = w->sub_bytes;
  return bytes ? sdpa_fwd_workspace_size(&f, bytes) : sdpa_fwd(&f);
}

/* out, lse = the merge of every step's slot, one batch entry a call. */
static sdpa_status fwd_merge(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g,
                             const sdpa_ring_bufs *w) {
  const int64_t n = g->world, s = g->own.len, b = g->b, h = g->h, dv = g->d_v;
  if (s == 0) return SDPA_OK;
  for (int64_t bb = 0; bb < b; ++bb) {
    sdpa_merge_desc m;
    sdpa_merge_init(&m);
    m.device = d->attn.device;
    m.stream = d->attn.stream;
    const int64_t ps[4] = {n, s, h, dv};
    m.out_parts = sdpa_tensor_contiguous((char *)w->parts + (size_t)(bb * s * h * dv) * g->es,
                                         g->dtype, 4, ps);
    m.out_parts.stride[0] = b * s * h * dv;
    const int64_t ls[3] = {n, s, h};
    m.lse_parts = sdpa_tensor_contiguous(w->lse_parts + bb * h * s, SDPA_DTYPE_F32, 3, ls);
    m.lse_parts.stride[0] = b * h * s;
    m.lse_parts.stride[1] = 1;
    m.lse_parts.stride[2] = s;
    const int64_t os[3] = {s, h, dv};
    m.out = sdpa_tensor_contiguous((char *)d->out.data + (size_t)(bb * d->out.stride[0]) * g->es,
                                   g->dtype, 3, os);
    m.out.stride[0] = d->out.stride[1];
    m.out.stride[1] = d->out.stride[2];
    if (d->lse.data) {
      const int64_t l2[2] = {s, h};
      m.lse = sdpa_tensor_contiguous((float *)d->lse.data + bb * d->lse.stride[0],
                                     SDPA_DTYPE_F32, 2, l2);
      m.lse.stride[0] = d->lse.stride[2];
      m.lse.stride[1] = d->lse.stride[1];
    }
    sdpa_status st = sdpa_merge_states(&m);
    if (st != SDPA_OK) return sdpa_ring_annotate(st, "forward's merge", g->world - 1, g->rank);
  }
  return SDPA_OK;
}

static sdpa_status fwd_schedule(sdpa_ring_ctx *x) {
  const sdpa_ring_geom *g = x->g;
  const int n = g->world;
  if (n > 1)
    SDPA_TRY(x->ops->fill(x->ops, x->w->lse_parts, n * g->b * g->h * g->own.len, INFINITY));
  for (int t = 0; t < n; ++t) {
    SDPA_TRY(sdpa_ring_step_begin(x, t));
    for (int i = 0; i < x->s.calls; ++i) {
      sdpa_status st = fwd_call(x, &x->s.items[i], NULL);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, "forward", t, x->s.src);
    }
    SDPA_TRY(sdpa_ring_step_end(x));
  }
  return n > 1 ? fwd_merge((const sdpa_ring_fwd_desc *)x->p->desc, g, x->w) : SDPA_OK;
}

const sdpa_ring_pass_kind sdpa_ring_fwd_kind = {
    SDPA_RING_OP_FWD, "forward", "sdpa_ring_fwd_desc", "sdpa_ring_fwd_init",
    sizeof(sdpa_ring_fwd_desc), fwd_carve, fwd_call, fwd_schedule};
