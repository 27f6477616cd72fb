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
#include "ring/check.h"
#include "ring/views.h"

typedef struct fwd_bufs {
  void *kv[2][2];   /* blocks received, [buffer][0 = k, 1 = v], s_max rows each */
  void *parts;      /* [world, b, s_local, h, d_v]: step t's partial out in slot t */
  float *lse_parts; /* [world, b, h, s_local]: +inf where step t saw no key */
  void *sub;        /* the attention calls' workspace (NULL: sdpa allocates) */
  size_t sub_bytes;
} fwd_bufs;

/* Places the buffers at base (NULL: sizes only); returns the bytes. */
static size_t fwd_carve(const sdpa_ring_geom *g, size_t sub_bytes, char *base, fwd_bufs *w,
                        int *bad) {
  ring_carve c = {base, 0, 0};
  memset(w, 0, sizeof *w);
  if (g->world > 1) {
    const size_t kb = ring_bytes(bad, g->es, g->b, g->s_max, g->h_k, g->d);
    const size_t vb = ring_bytes(bad, g->es, g->b, g->s_max, g->h_k, g->d_v);
    for (int i = 0; i < 2; ++i) {
      w->kv[i][0] = ring_take(&c, kb);
      w->kv[i][1] = ring_take(&c, vb);
    }
    w->parts = ring_take(&c, ring_bytes(bad, g->es * (size_t)g->world, g->b, g->own.len, g->h,
                                        g->d_v));
    w->lse_parts = (float *)ring_take(&c, ring_bytes(bad, sizeof(float) * (size_t)g->world, g->b,
                                                     g->h, g->own.len, 1));
  }
  if (sub_bytes > 0) w->sub = ring_take(&c, sub_bytes);
  w->sub_bytes = sub_bytes;
  if (c.overflow) *bad = 1;
  return c.off;
}

/* K / V of the block in hand at step t (rows of rank src). */
static void block_kv(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g, const fwd_bufs *w,
                     int t, int64_t rows, sdpa_tensor *k, sdpa_tensor *v) {
  if (t == 0) {
    *k = d->attn.k;
    *v = d->attn.v;
    return;
  }
  *k = ring_block(w->kv[t % 2][0], g->dtype, g->b, rows, g->h_k, g->d);
  *v = ring_block(w->kv[t % 2][1], g->dtype, g->b, rows, g->h_k, g->d_v);
}

/* The sdpa_fwd call of one item of step t. With one rank it writes the
 * caller's out and lse directly. */
static void fwd_item(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g, const fwd_bufs *w,
                     int t, const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_ring_item *it,
                     sdpa_fwd_desc *f) {
  sdpa_fwd_init(f);
  f->attn = d->attn;
  f->attn.causal = it->causal;
  f->attn.align = SDPA_ALIGN_BOTTOM_RIGHT; /* a causal item is square */
  f->attn.q = ring_rows(&d->attn.q, it->q0, it->q_len);
  f->attn.k = ring_rows(k, it->k0, it->k_len);
  f->attn.v = ring_rows(v, it->k0, it->k_len);
  if (g->world == 1) {
    f->out = ring_rows(&d->out, it->q0, it->q_len);
    f->lse = d->lse.data ? ring_lse_rows(&d->lse, it->q0, it->q_len) : ring_absent();
  } else {
    const int64_t s = g->own.len, slot_elems = g->b * s * g->h * g->d_v;
    char *slot = (char *)w->parts + (size_t)t * (size_t)slot_elems * g->es;
    f->out = ring_block_rows(slot, g->dtype, g->b, s, it->q0, it->q_len, g->h, g->d_v);
    const int64_t lshape[3] = {g->b, g->h, s};
    sdpa_tensor l = sdpa_tensor_contiguous(w->lse_parts + (size_t)t * (size_t)(g->b * g->h * s),
                                           SDPA_DTYPE_F32, 3, lshape);
    f->lse = ring_lse_rows(&l, it->q0, it->q_len);
  }
  f->workspace = w->sub;
  f->workspace_size = w->sub_bytes;
}

/* The most workspace any call of the schedule asks for, and the total. */
static sdpa_status fwd_sizes(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g, size_t *sub,
                             size_t *total) {
  fwd_bufs w;
  int bad = 0;
  *sub = 0;
  /* any aligned non-null address: the queries validate views, never read them */
  fwd_carve(g, 0, (char *)(uintptr_t)4096, &w, &bad);
  for (int t = 0; t < g->world && !bad; ++t) {
    const int src = (g->rank - t + g->world) % g->world;
    sdpa_ring_shard_t ks;
    sdpa_ring_shard_of(g->seqlen, g->world, g->layout, src, &ks);
    sdpa_tensor k, v;
    block_kv(d, g, &w, t, ks.len, &k, &v);
    sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
    const int ni = sdpa_ring_plan(&g->own, &ks, t == 0, g->causal, items);
    for (int i = 0; i < ni; ++i) {
      sdpa_fwd_desc f;
      size_t bytes = 0;
      fwd_item(d, g, &w, t, &k, &v, &items[i], &f);
      sdpa_status st = sdpa_fwd_workspace_size(&f, &bytes);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, "forward", t, src);
      if (bytes > *sub) *sub = bytes;
    }
  }
  *total = fwd_carve(g, *sub, NULL, &w, &bad);
  if (bad)
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring forward: the workspace of %d ranks of %lld"
                     " rows overflows size_t", g->world, (long long)g->own.len);
  return SDPA_OK;
}

/* out, lse = the merge of every step's slot, one batch entry a call. */
static sdpa_status fwd_merge(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g,
                             const fwd_bufs *w) {
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

static sdpa_status fwd_schedule(const sdpa_ring_fwd_desc *d, const sdpa_ring_geom *g,
                                sdpa_ring_transport *tp, const sdpa_ring_ops *ops,
                                const fwd_bufs *w, int *posted) {
  const int n = g->world;
  if (n > 1)
    SDPA_TRY(ops->fill(ops, w->lse_parts, n * g->b * g->h * g->own.len, INFINITY));
  for (int t = 0; t < n; ++t) {
    const int src = (g->rank - t + n) % n, following = (g->rank - t - 1 + n) % n;
    sdpa_ring_shard_t ks, fs;
    sdpa_ring_shard_of(g->seqlen, n, g->layout, src, &ks);
    sdpa_tensor k, v;
    block_kv(d, g, w, t, ks.len, &k, &v);
    if (t < n - 1) {
      /* the block in hand goes on while the next one comes in */
      sdpa_ring_shard_of(g->seqlen, n, g->layout, following, &fs);
      int bad = 0;
      const sdpa_ring_buf send[2] = {
          {k.data, ring_bytes(&bad, g->es, g->b, ks.len, g->h_k, g->d)},
          {v.data, ring_bytes(&bad, g->es, g->b, ks.len, g->h_k, g->d_v)}};
      const sdpa_ring_buf recv[2] = {
          {w->kv[(t + 1) % 2][0], ring_bytes(&bad, g->es, g->b, fs.len, g->h_k, g->d)},
          {w->kv[(t + 1) % 2][1], ring_bytes(&bad, g->es, g->b, fs.len, g->h_k, g->d_v)}};
      SDPA_TRY(tp->post(tp, 0, send, recv, 2));
      posted[0] = 1;
    }
    sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
    const int ni = sdpa_ring_plan(&g->own, &ks, t == 0, g->causal, items);
    for (int i = 0; i < ni; ++i) {
      sdpa_fwd_desc f;
      fwd_item(d, g, w, t, &k, &v, &items[i], &f);
      sdpa_status st = sdpa_fwd(&f);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, "forward", t, src);
    }
    if (t < n - 1) {
      SDPA_TRY(tp->wait(tp, 0));
      posted[0] = 0;
    }
  }
  return n > 1 ? fwd_merge(d, g, w) : SDPA_OK;
}

sdpa_status sdpa_ring_fwd_run(const sdpa_ring_fwd_desc *d, sdpa_ring_transport *tp,
                              const sdpa_ring_ops *ops, sdpa_status pre) {
  sdpa_ring_geom g;
  memset(&g, 0, sizeof g);
  size_t sub = 0, need = 0;
  void *ws = NULL;
  int owned = 0;
  sdpa_status st = pre;
  if (st == SDPA_OK) st = sdpa_ring_check_fwd(d, tp->rank, tp->world, ops->device, &g);
  if (st == SDPA_OK) st = fwd_sizes(d, &g, &sub, &need);
  if (st == SDPA_OK)
    st = sdpa_ring_ws_acquire(ops, d->workspace, d->workspace_size, need, &ws, &owned);
  if (sdpa_ring_agrees(d && d->struct_size >= sizeof *d ? &d->ring : NULL, tp->world))
    st = sdpa_ring_agree(tp, &g, SDPA_RING_OP_FWD, st);
  if (st == SDPA_OK) {
    fwd_bufs w;
    int bad = 0, posted[SDPA_RING_SLOTS] = {0, 0};
    fwd_carve(&g, sub, (char *)ws, &w, &bad);
    st = fwd_schedule(d, &g, tp, ops, &w, posted);
    sdpa_ring_drain(tp, posted, st);
  }
  if (owned) {
    sdpa_status fs = ops->release(ops, ws);
    if (st == SDPA_OK) st = fs;
  }
  return st;
}

sdpa_status sdpa_ring_fwd_size(const sdpa_ring_fwd_desc *d, sdpa_device device, size_t *bytes) {
  sdpa_ring_geom g;
  size_t sub = 0;
  if (!bytes)
    return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT, "bytes = NULL: expected a pointer to a size_t");
  *bytes = 0;
  const int whole = d && d->struct_size >= sizeof *d; /* else check_fwd says why */
  SDPA_TRY(sdpa_ring_check_fwd(d, whole ? d->ring.rank : 0, whole ? d->ring.world_size : 1,
                               device, &g));
  return fwd_sizes(d, &g, &sub, bytes);
}
