/*
 * bwd.c - the ring backward (docs/design.md §9). The blocks travel as in the
 * forward (exchange slot 0), and with each block its dK / dV accumulators in
 * fp32 (slot 1): at step t this rank adds its queries' share of the block's
 * gradient into them and passes them on, so after the last step and one more
 * hop every block's accumulators are back with their owner, summed over
 * every rank's queries. dQ sums locally in fp32. Every partial uses the
 * global out and lse, which makes each block's gradient exact on its own.
 *
 * The accumulators of step t arrive while step t's attention runs: the wait
 * comes just before the first add into them.
 */
#include <string.h>

#include "error.h"
#include "ring/check.h"
#include "ring/views.h"

typedef struct bwd_bufs {
  void *kv[2][2];  /* blocks received, [buffer][0 = k, 1 = v], s_max rows */
  float *dkv[2][2]; /* accumulators of the block in hand / coming, fp32, s_max rows */
  float *dq_acc;   /* [b, s_local, h, d] fp32 */
  void *dq_part;   /* one call's dq, [b, q_len, h, d] */
  void *dk_part;   /* one call's dk / dv, [b, k_len, h_k, d | d_v] */
  void *dv_part;
  void *sub;       /* the attention calls' workspace (NULL: sdpa allocates) */
  size_t sub_bytes;
} bwd_bufs;

static size_t bwd_carve(const sdpa_ring_geom *g, size_t sub_bytes, char *base, bwd_bufs *w,
                        int *bad) {
  ring_carve c = {base, 0, 0};
  memset(w, 0, sizeof *w);
  if (g->world > 1) {
    const int64_t s = g->own.len, sm = g->s_max;
    for (int i = 0; i < 2; ++i) {
      w->kv[i][0] = ring_take(&c, ring_bytes(bad, g->es, g->b, sm, g->h_k, g->d));
      w->kv[i][1] = ring_take(&c, ring_bytes(bad, g->es, g->b, sm, g->h_k, g->d_v));
      w->dkv[i][0] = (float *)ring_take(&c, ring_bytes(bad, 4, g->b, sm, g->h_k, g->d));
      w->dkv[i][1] = (float *)ring_take(&c, ring_bytes(bad, 4, g->b, sm, g->h_k, g->d_v));
    }
    w->dq_acc = (float *)ring_take(&c, ring_bytes(bad, 4, g->b, s, g->h, g->d));
    w->dq_part = ring_take(&c, ring_bytes(bad, g->es, g->b, s, g->h, g->d));
    w->dk_part = ring_take(&c, ring_bytes(bad, g->es, g->b, sm, g->h_k, g->d));
    w->dv_part = ring_take(&c, ring_bytes(bad, g->es, g->b, sm, g->h_k, g->d_v));
  }
  if (sub_bytes > 0) w->sub = ring_take(&c, sub_bytes);
  w->sub_bytes = sub_bytes;
  if (c.overflow) *bad = 1;
  return c.off;
}

static void block_kv(const sdpa_ring_bwd_desc *d, const sdpa_ring_geom *g, const bwd_bufs *w,
                     int t, int64_t rows, sdpa_tensor *k, sdpa_tensor *v) {
  if (t == 0) {
    *k = d->attn.k;
    *v = d->attn.v;
    return;
  }
  *k = ring_block(w->kv[t % 2][0], g->dtype, g->b, rows, g->h_k, g->d);
  *v = ring_block(w->kv[t % 2][1], g->dtype, g->b, rows, g->h_k, g->d_v);
}

/* The sdpa_bwd call of one item. With one rank it writes the caller's
 * gradients directly; else the parts, which the schedule adds up. */
static void bwd_item(const sdpa_ring_bwd_desc *d, const sdpa_ring_geom *g, const bwd_bufs *w,
                     const sdpa_tensor *k, const sdpa_tensor *v, const sdpa_ring_item *it,
                     sdpa_bwd_desc *b) {
  sdpa_bwd_init(b);
  b->attn = d->attn;
  b->attn.causal = it->causal;
  b->attn.align = SDPA_ALIGN_BOTTOM_RIGHT;
  b->attn.q = ring_rows(&d->attn.q, it->q0, it->q_len);
  b->attn.k = ring_rows(k, it->k0, it->k_len);
  b->attn.v = ring_rows(v, it->k0, it->k_len);
  b->out = ring_rows(&d->out, it->q0, it->q_len);
  b->dout = ring_rows(&d->dout, it->q0, it->q_len);
  b->lse = ring_lse_rows(&d->lse, it->q0, it->q_len);
  b->dlse = d->dlse.data ? ring_lse_rows(&d->dlse, it->q0, it->q_len) : ring_absent();
  if (g->world == 1) {
    b->dq = d->dq;
    b->dk = d->dk;
    b->dv = d->dv;
  } else {
    b->dq = ring_block(w->dq_part, g->dtype, g->b, it->q_len, g->h, g->d);
    b->dk = ring_block(w->dk_part, g->dtype, g->b, it->k_len, g->h_k, g->d);
    b->dv = ring_block(w->dv_part, g->dtype, g->b, it->k_len, g->h_k, g->d_v);
  }
  b->deterministic = d->deterministic;
  b->workspace = w->sub;
  b->workspace_size = w->sub_bytes;
}

static sdpa_status bwd_sizes(const sdpa_ring_bwd_desc *d, const sdpa_ring_geom *g, size_t *sub,
                             size_t *total) {
  bwd_bufs w;
  int bad = 0;
  *sub = 0;
  bwd_carve(g, 0, (char *)(uintptr_t)4096, &w, &bad); /* placed anywhere: only validated */
  for (int t = 0; t < g->world && !bad; ++t) {
    const int src = (g->rank - t + g->world) % g->world;
    sdpa_ring_shard_t ks;
    sdpa_ring_shard_of(g->seqlen, g->world, g->layout, src, &ks);
    sdpa_tensor k, v;
    block_kv(d, g, &w, t, ks.len, &k, &v);
    sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
    const int ni = sdpa_ring_plan(&g->own, &ks, t == 0, g->causal, items);
    for (int i = 0; i < ni; ++i) {
      sdpa_bwd_desc b;
      size_t bytes = 0;
      bwd_item(d, g, &w, &k, &v, &items[i], &b);
      sdpa_status st = sdpa_bwd_workspace_size(&b, &bytes);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, "backward", t, src);
      if (bytes > *sub) *sub = bytes;
    }
  }
  *total = bwd_carve(g, *sub, NULL, &w, &bad);
  if (bad)
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring backward: the workspace of %d ranks of %lld"
                     " rows overflows size_t", g->world, (long long)g->own.len);
  return SDPA_OK;
}

/* The exchange of slot 1: the accumulators in hand (block of `rows`) go on,
 * the next block's (`next_rows`) come in. */
static sdpa_status post_grads(sdpa_ring_transport *tp, const sdpa_ring_geom *g, const bwd_bufs *w,
                              int t, int64_t rows, int64_t next_rows) {
  int bad = 0;
  const sdpa_ring_buf send[2] = {
      {w->dkv[t % 2][0], ring_bytes(&bad, 4, g->b, rows, g->h_k, g->d)},
      {w->dkv[t % 2][1], ring_bytes(&bad, 4, g->b, rows, g->h_k, g->d_v)}};
  const sdpa_ring_buf recv[2] = {
      {w->dkv[(t + 1) % 2][0], ring_bytes(&bad, 4, g->b, next_rows, g->h_k, g->d)},
      {w->dkv[(t + 1) % 2][1], ring_bytes(&bad, 4, g->b, next_rows, g->h_k, g->d_v)}};
  return tp->post(tp, 1, send, recv, 2);
}

static sdpa_status bwd_schedule(const sdpa_ring_bwd_desc *d, const sdpa_ring_geom *g,
                                sdpa_ring_transport *tp, const sdpa_ring_ops *ops,
                                const bwd_bufs *w, int *posted) {
  const int n = g->world;
  const int64_t s = g->own.len, b = g->b, h = g->h, hk = g->h_k, dd = g->d, dv = g->d_v;
  if (n == 1) { /* the one block is this rank's: sdpa_bwd on the caller's tensors */
    sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
    sdpa_tensor k = d->attn.k, v = d->attn.v;
    if (sdpa_ring_plan(&g->own, &g->own, 1, g->causal, items) == 0) {
      /* nothing to attend (no rows): the gradients are empty too */
      return SDPA_OK;
    }
    sdpa_bwd_desc bd;
    bwd_item(d, g, w, &k, &v, &items[0], &bd);
    sdpa_status st = sdpa_bwd(&bd);
    return st == SDPA_OK ? st : sdpa_ring_annotate(st, "backward", 0, g->rank);
  }
  SDPA_TRY(ops->fill(ops, w->dq_acc, b * s * h * dd, 0.0f));
  SDPA_TRY(ops->fill(ops, w->dkv[0][0], b * s * hk * dd, 0.0f));
  SDPA_TRY(ops->fill(ops, w->dkv[0][1], b * s * hk * dv, 0.0f));
  for (int t = 0; t < n; ++t) {
    const int src = (g->rank - t + n) % n, following = (g->rank - t - 1 + n) % n;
    sdpa_ring_shard_t ks, fs;
    sdpa_ring_shard_of(g->seqlen, n, g->layout, src, &ks);
    sdpa_ring_shard_of(g->seqlen, n, g->layout, following, &fs);
    sdpa_tensor k, v;
    block_kv(d, g, w, t, ks.len, &k, &v);
    if (t < n - 1) {
      int bad = 0;
      const sdpa_ring_buf send[2] = {
          {k.data, ring_bytes(&bad, g->es, b, ks.len, hk, dd)},
          {v.data, ring_bytes(&bad, g->es, b, ks.len, hk, dv)}};
      const sdpa_ring_buf recv[2] = {
          {w->kv[(t + 1) % 2][0], ring_bytes(&bad, g->es, b, fs.len, hk, dd)},
          {w->kv[(t + 1) % 2][1], ring_bytes(&bad, g->es, b, fs.len, hk, dv)}};
      SDPA_TRY(tp->post(tp, 0, send, recv, 2));
      posted[0] = 1;
    }
    float *dk_acc = w->dkv[t % 2][0], *dv_acc = w->dkv[t % 2][1];
    int have_grads = t == 0; /* step 0's accumulators are this rank's zeros */
    sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
    const int ni = sdpa_ring_plan(&g->own, &ks, t == 0, g->causal, items);
    for (int i = 0; i < ni; ++i) {
      const sdpa_ring_item *it = &items[i];
      sdpa_bwd_desc bd;
      bwd_item(d, g, w, &k, &v, it, &bd);
      sdpa_status st = sdpa_bwd(&bd);
      if (st != SDPA_OK) return sdpa_ring_annotate(st, "backward", t, src);
      SDPA_TRY(ops->add(ops, w->dq_acc + it->q0 * h * dd, s * h * dd, w->dq_part, g->dtype,
                        it->q_len * h * dd, b, it->q_len * h * dd));
      if (!have_grads) {
        SDPA_TRY(tp->wait(tp, 1));
        posted[1] = 0;
        have_grads = 1;
      }
      SDPA_TRY(ops->add(ops, dk_acc + it->k0 * hk * dd, ks.len * hk * dd, w->dk_part, g->dtype,
                        it->k_len * hk * dd, b, it->k_len * hk * dd));
      SDPA_TRY(ops->add(ops, dv_acc + it->k0 * hk * dv, ks.len * hk * dv, w->dv_part, g->dtype,
                        it->k_len * hk * dv, b, it->k_len * hk * dv));
    }
    if (!have_grads) { /* nothing visible in this block: its accumulators pass through */
      SDPA_TRY(tp->wait(tp, 1));
      posted[1] = 0;
    }
    /* after the last step this is the hop home: the block of rank + 1 to its
     * owner, this rank's own block in from rank - 1 */
    SDPA_TRY(post_grads(tp, g, w, t, ks.len, fs.len));
    posted[1] = 1;
    if (t < n - 1) {
      SDPA_TRY(tp->wait(tp, 0));
      posted[0] = 0;
    }
  }
  SDPA_TRY(tp->wait(tp, 1));
  posted[1] = 0;
  const float *dk_own = w->dkv[n % 2][0], *dv_own = w->dkv[n % 2][1];
  SDPA_TRY(ops->store(ops, w->dq_acc, &d->dq));
  SDPA_TRY(ops->store(ops, dk_own, &d->dk));
  return ops->store(ops, dv_own, &d->dv);
}

sdpa_status sdpa_ring_bwd_run(const sdpa_ring_bwd_desc *d, sdpa_ring_transport *tp,
                              const sdpa_ring_ops *ops, sdpa_status pre) {
  sdpa_ring_geom g;
  memset(&g, 0, sizeof g);
  size_t sub = 0, need = 0;
  void *ws = NULL;
  int owned = 0;
  sdpa_status st = pre;
  if (st == SDPA_OK) st = sdpa_ring_check_bwd(d, tp->rank, tp->world, ops->device, &g);
  if (st == SDPA_OK) st = bwd_sizes(d, &g, &sub, &need);
  if (st == SDPA_OK)
    st = sdpa_ring_ws_acquire(ops, d->workspace, d->workspace_size, need, &ws, &owned);
  if (sdpa_ring_agrees(d && d->struct_size >= sizeof *d ? &d->ring : NULL, tp->world))
    st = sdpa_ring_agree(tp, &g, SDPA_RING_OP_BWD, st);
  if (st == SDPA_OK) {
    bwd_bufs w;
    int bad = 0, posted[SDPA_RING_SLOTS] = {0, 0};
    bwd_carve(&g, sub, (char *)ws, &w, &bad);
    st = bwd_schedule(d, &g, tp, ops, &w, posted);
    sdpa_ring_drain(tp, posted, st);
  }
  if (owned) {
    sdpa_status fs = ops->release(ops, ws);
    if (st == SDPA_OK) st = fs;
  }
  return st;
}

sdpa_status sdpa_ring_bwd_size(const sdpa_ring_bwd_desc *d, sdpa_device device, size_t *bytes) {
  sdpa_ring_geom g;
  size_t sub = 0;
  if (!bytes)
    return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT, "bytes = NULL: expected a pointer to a size_t");
  *bytes = 0;
  const int whole = d && d->struct_size >= sizeof *d; /* else check_bwd says why */
  SDPA_TRY(sdpa_ring_check_bwd(d, whole ? d->ring.rank : 0, whole ? d->ring.world_size : 1,
                               device, &g));
  return bwd_sizes(d, &g, &sub, bytes);
}
