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
#include "ring/pass.h"

/* After the blocks: their accumulators, traveling with them; dQ's; and one
 * call's gradients. */
static void bwd_carve(const sdpa_ring_geom *g, ring_carve *c, sdpa_ring_bufs *w, int *bad) {
  for (int i = 0; i < 2; ++i) sdpa_ring_take_pair(c, g, sizeof(float), g->s_max, w->dkv[i], bad);
  w->dq_acc = (float *)ring_take(c, ring_bytes(bad, sizeof(float), g->b, g->own.len, g->h, g->d));
  w->dq_part = ring_take(c, ring_bytes(bad, g->es, g->b, g->own.len, g->h, g->d));
  sdpa_ring_take_pair(c, g, g->es, g->s_max, w->dkv_part, bad);
}

/* The sdpa_bwd call of one item of the step in hand. With one rank it writes
 * the caller's gradients directly; else the parts, which the schedule adds
 * up. */
static sdpa_status bwd_call(const sdpa_ring_ctx *x, const sdpa_ring_item *it, size_t *bytes) {
  const sdpa_ring_geom *g = x->g;
  sdpa_bwd_desc b;
  sdpa_ring_caller_bwd((const sdpa_ring_bwd_desc *)x->p->desc, &b);
  sdpa_ring_item_attn(&b.attn, &x->s, it);
  b.out = ring_rows(&b.out, it->q0, it->q_len);
  b.dout = ring_rows(&b.dout, it->q0, it->q_len);
  b.lse = ring_lse_rows(&b.lse, it->q0, it->q_len);
  b.dlse = b.dlse.data ? ring_lse_rows(&b.dlse, it->q0, it->q_len) : ring_absent();
  if (g->world > 1) {
    b.dq = ring_block(x->w->dq_part, g->dtype, g->b, it->q_len, g->h, g->d);
    b.dk = ring_block(x->w->dkv_part[0], g->dtype, g->b, it->k_len, g->h_k, g->d);
    b.dv = ring_block(x->w->dkv_part[1], g->dtype, g->b, it->k_len, g->h_k, g->d_v);
  }
  b.workspace = x->w->sub;
  b.workspace_size = x->w->sub_bytes;
  return bytes ? sdpa_bwd_workspace_size(&b, bytes) : sdpa_bwd(&b);
}

/* The step in hand's attention: dQ into its accumulator, dK / dV into the
 * block's, which are waited for (slot 1) just before the first add. */
static sdpa_status bwd_step(sdpa_ring_ctx *x) {
  const sdpa_ring_geom *g = x->g;
  const sdpa_ring_bufs *w = x->w;
  const sdpa_ring_step *s = &x->s;
  const int64_t q_row = g->h * g->d, k_row = g->h_k * g->d, v_row = g->h_k * g->d_v;
  float *dk_acc = (float *)w->dkv[s->t % 2][0], *dv_acc = (float *)w->dkv[s->t % 2][1];
  int have_grads = s->t == 0; /* step 0's accumulators are this rank's zeros */
  for (int i = 0; i < s->calls; ++i) {
    const sdpa_ring_item *it = &s->items[i];
    sdpa_status st = bwd_call(x, it, NULL);
    if (st != SDPA_OK) return sdpa_ring_annotate(st, "backward", s->t, s->src);
    SDPA_TRY(x->ops->add(x->ops, w->dq_acc + it->q0 * q_row, g->own.len * q_row, w->dq_part,
                         g->dtype, it->q_len * q_row, g->b, it->q_len * q_row));
    if (!have_grads) {
      SDPA_TRY(x->tp->wait(x->tp, 1));
      x->posted[1] = 0;
      have_grads = 1;
    }
    SDPA_TRY(x->ops->add(x->ops, dk_acc + it->k0 * k_row, s->ks.len * k_row, w->dkv_part[0],
                         g->dtype, it->k_len * k_row, g->b, it->k_len * k_row));
    SDPA_TRY(x->ops->add(x->ops, dv_acc + it->k0 * v_row, s->ks.len * v_row, w->dkv_part[1],
                         g->dtype, it->k_len * v_row, g->b, it->k_len * v_row));
  }
  if (!have_grads) { /* nothing visible in this block: its accumulators pass through */
    SDPA_TRY(x->tp->wait(x->tp, 1));
    x->posted[1] = 0;
  }
  return SDPA_OK;
}

static sdpa_status bwd_schedule(sdpa_ring_ctx *x) {
  const sdpa_ring_bwd_desc *d = (const sdpa_ring_bwd_desc *)x->p->desc;
  const sdpa_ring_geom *g = x->g;
  const sdpa_ring_bufs *w = x->w;
  const sdpa_ring_ops *ops = x->ops;
  const int n = g->world;
  const int64_t s = g->own.len, b = g->b, h = g->h, hk = g->h_k, dd = g->d, dv = g->d_v;
  if (n == 1) { /* the one block is this rank's: sdpa_bwd on the caller's tensors */
    sdpa_ring_step_at(x, 0);
    if (x->s.calls == 0) return SDPA_OK; /* nothing to attend (no rows): no gradients either */
    sdpa_status st = bwd_call(x, &x->s.items[0], NULL);
    return st == SDPA_OK ? st : sdpa_ring_annotate(st, "backward", 0, g->rank);
  }
  SDPA_TRY(ops->fill(ops, w->dq_acc, b * s * h * dd, 0.0f));
  SDPA_TRY(ops->fill(ops, (float *)w->dkv[0][0], b * s * hk * dd, 0.0f));
  SDPA_TRY(ops->fill(ops, (float *)w->dkv[0][1], b * s * hk * dv, 0.0f));
  for (int t = 0; t < n; ++t) {
    SDPA_TRY(sdpa_ring_step_begin(x, t));
    SDPA_TRY(bwd_step(x));
    /* after the last step this is the hop home: the block of rank + 1 to its
     * owner, this rank's own block in from rank - 1 */
    SDPA_TRY(sdpa_ring_post_pair(x, 1, sizeof(float), w->dkv[t % 2], w->dkv[(t + 1) % 2]));
    SDPA_TRY(sdpa_ring_step_end(x));
  }
  SDPA_TRY(x->tp->wait(x->tp, 1));
  x->posted[1] = 0;
  SDPA_TRY(ops->store(ops, w->dq_acc, &d->dq));
  SDPA_TRY(ops->store(ops, (const float *)w->dkv[n % 2][0], &d->dk));
  return ops->store(ops, (const float *)w->dkv[n % 2][1], &d->dv);
}

const sdpa_ring_pass_kind sdpa_ring_bwd_kind = {
    SDPA_RING_OP_BWD, "backward", "sdpa_ring_bwd_desc", "sdpa_ring_bwd_init",
    sizeof(sdpa_ring_bwd_desc), bwd_carve, bwd_call, bwd_schedule};
