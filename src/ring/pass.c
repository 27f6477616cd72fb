/*
 * pass.c - the steps the ring's forward and backward take alike (pass.h):
 * the call around the schedule, the workspace's blocks and its sizing, and a
 * step's block moving on while its attention runs. The passes' kinds (fwd.c,
 * bwd.c) supply the rest.
 */
#include "ring/pass.h"

#include <string.h>

#include "error.h"

void sdpa_ring_take_pair(ring_carve *c, const sdpa_ring_geom *g, size_t es, int64_t rows,
                         void *pair[2], int *bad) {
  pair[0] = ring_take(c, ring_bytes(bad, es, g->b, rows, g->h_k, g->d));
  pair[1] = ring_take(c, ring_bytes(bad, es, g->b, rows, g->h_k, g->d_v));
}

/* Places the buffers at base (NULL: sizes only); returns the bytes. */
static size_t carve(const sdpa_ring_pass *p, const sdpa_ring_geom *g, size_t sub_bytes,
                    char *base, sdpa_ring_bufs *w, int *bad) {
  ring_carve c = {base, 0, 0};
  memset(w, 0, sizeof *w);
  if (g->world > 1) {
    for (int i = 0; i < 2; ++i) sdpa_ring_take_pair(&c, g, g->es, g->s_max, w->kv[i], bad);
    p->kind->carve(g, &c, w, bad);
  }
  if (sub_bytes > 0) w->sub = ring_take(&c, sub_bytes);
  w->sub_bytes = sub_bytes;
  if (c.overflow) *bad = 1;
  return c.off;
}

void sdpa_ring_item_attn(sdpa_attn *a, const sdpa_ring_step *s, const sdpa_ring_item *it) {
  a->causal = it->causal;
  a->align = SDPA_ALIGN_BOTTOM_RIGHT; /* a causal item is square */
  a->q = ring_rows(&a->q, it->q0, it->q_len);
  a->k = ring_rows(&s->k, it->k0, it->k_len);
  a->v = ring_rows(&s->v, it->k0, it->k_len);
}

void sdpa_ring_step_at(sdpa_ring_ctx *x, int t) {
  const sdpa_ring_geom *g = x->g;
  sdpa_ring_step *s = &x->s;
  const int n = g->world;
  s->t = t;
  s->src = (g->rank - t + n) % n;
  sdpa_ring_shard_of(g->seqlen, n, g->layout, s->src, &s->ks);
  sdpa_ring_shard_of(g->seqlen, n, g->layout, (g->rank - t - 1 + n) % n, &s->fs);
  if (t == 0) {
    s->k = x->p->attn->k;
    s->v = x->p->attn->v;
  } else {
    s->k = ring_block(x->w->kv[t % 2][0], g->dtype, g->b, s->ks.len, g->h_k, g->d);
    s->v = ring_block(x->w->kv[t % 2][1], g->dtype, g->b, s->ks.len, g->h_k, g->d_v);
  }
  s->calls = sdpa_ring_plan(&g->own, &s->ks, t == 0, g->causal, s->items);
}

sdpa_status sdpa_ring_post_pair(sdpa_ring_ctx *x, int slot, size_t es, void *const send[2],
                                void *const recv[2]) {
  const sdpa_ring_geom *g = x->g;
  const int64_t rows = x->s.ks.len, next_rows = x->s.fs.len;
  int bad = 0;
  const sdpa_ring_buf out[2] = {{send[0], ring_bytes(&bad, es, g->b, rows, g->h_k, g->d)},
                                {send[1], ring_bytes(&bad, es, g->b, rows, g->h_k, g->d_v)}};
  const sdpa_ring_buf in[2] = {{recv[0], ring_bytes(&bad, es, g->b, next_rows, g->h_k, g->d)},
                               {recv[1], ring_bytes(&bad, es, g->b, next_rows, g->h_k, g->d_v)}};
  SDPA_TRY(x->tp->post(x->tp, slot, out, in, 2));
  x->posted[slot] = 1;
  return SDPA_OK;
}

sdpa_status sdpa_ring_step_begin(sdpa_ring_ctx *x, int t) {
  sdpa_ring_step_at(x, t);
  if (t == x->g->world - 1) return SDPA_OK;
  void *const send[2] = {x->s.k.data, x->s.v.data};
  return sdpa_ring_post_pair(x, 0, x->g->es, send, x->w->kv[(t + 1) % 2]);
}

sdpa_status sdpa_ring_step_end(sdpa_ring_ctx *x) {
  if (x->s.t == x->g->world - 1) return SDPA_OK;
  SDPA_TRY(x->tp->wait(x->tp, 0));
  x->posted[0] = 0;
  return SDPA_OK;
}

/* The most workspace any attention call of the schedule asks for, and the total. */
static sdpa_status sizes(const sdpa_ring_pass *p, const sdpa_ring_geom *g, size_t *sub,
                         size_t *total) {
  sdpa_ring_bufs w;
  sdpa_ring_ctx x = {.p = p, .g = g, .w = &w}; /* no transport: nothing moves */
  int bad = 0;
  *sub = 0;
  /* any aligned non-null address: the queries validate views, never read them */
  carve(p, g, 0, (char *)(uintptr_t)4096, &w, &bad);
  for (int t = 0; t < g->world && !bad; ++t) {
    sdpa_ring_step_at(&x, t);
    for (int i = 0; i < x.s.calls; ++i) {
      size_t bytes = 0;
      sdpa_status st = p->kind->call(&x, &x.s.items[i], &bytes);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, p->kind->what, t, x.s.src);
      if (bytes > *sub) *sub = bytes;
    }
  }
  *total = carve(p, g, *sub, NULL, &w, &bad);
  if (bad)
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring %s: the workspace of %d ranks of %lld rows"
                     " overflows size_t", p->kind->what, g->world, (long long)g->own.len);
  return SDPA_OK;
}

sdpa_status sdpa_ring_run(const sdpa_ring_pass *p, sdpa_ring_transport *tp,
                          const sdpa_ring_ops *ops, sdpa_status pre) {
  sdpa_ring_geom g;
  memset(&g, 0, sizeof g);
  size_t sub = 0, need = 0;
  void *ws = NULL;
  int owned = 0;
  sdpa_status st = pre;
  if (st == SDPA_OK) st = sdpa_ring_check(p, tp->rank, tp->world, ops->device, &g);
  if (st == SDPA_OK) st = sizes(p, &g, &sub, &need);
  if (st == SDPA_OK)
    st = sdpa_ring_ws_acquire(ops, p->workspace, p->workspace_size, need, &ws, &owned);
  if (sdpa_ring_agrees(p->ring, tp->world)) st = sdpa_ring_agree(tp, &g, p->kind->op, st);
  if (st == SDPA_OK) {
    sdpa_ring_bufs w;
    sdpa_ring_ctx x = {.p = p, .g = &g, .w = &w, .tp = tp, .ops = ops};
    int bad = 0;
    carve(p, &g, sub, (char *)ws, &w, &bad);
    st = p->kind->schedule(&x);
    sdpa_ring_drain(tp, x.posted, st);
  }
  if (owned) {
    sdpa_status fs = ops->release(ops, ws);
    if (st == SDPA_OK) st = fs;
  }
  return st;
}

sdpa_status sdpa_ring_size(const sdpa_ring_pass *p, sdpa_device device, size_t *bytes) {
  sdpa_ring_geom g;
  size_t sub = 0;
  if (!bytes)
    return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT, "bytes = NULL: expected a pointer to a size_t");
  *bytes = 0;
  SDPA_TRY(sdpa_ring_check_alone(p, device, &g));
  return sizes(p, &g, &sub, bytes);
}

/* Both descriptors name these fields alike; where d cannot be read they stay
 * NULL, and the check says why. */
#define PASS_OF(kind, d)                                                                      \
  ((d) && (d)->struct_size >= sizeof *(d)                                                     \
       ? (sdpa_ring_pass){(kind), (d), (d)->struct_size, &(d)->attn, &(d)->ring,              \
                          (d)->workspace, (d)->workspace_size}                                \
       : (sdpa_ring_pass){(kind), (d), (d) ? (d)->struct_size : 0, NULL, NULL, NULL, 0})

sdpa_ring_pass sdpa_ring_fwd_pass(const sdpa_ring_fwd_desc *d) {
  return PASS_OF(&sdpa_ring_fwd_kind, d);
}

sdpa_ring_pass sdpa_ring_bwd_pass(const sdpa_ring_bwd_desc *d) {
  return PASS_OF(&sdpa_ring_bwd_kind, d);
}
