/*
 * pass.h - what the ring's forward (fwd.c) and backward (bwd.c) share,
 * implemented once in pass.c: the workspace's buffers, a step's block and
 * plan, the exchange of a pair of buffers around the ring, and the call
 * around each schedule (validate, size the workspace, agree with the peers,
 * run, release). A pass's kind holds what differs between the two.
 */
#ifndef SDPA_RING_PASS_H
#define SDPA_RING_PASS_H

#include "ring/check.h"
#include "ring/views.h"

/* The buffers carved from the workspace: the blocks both passes receive,
 * then the pass's own (the other pass's stay NULL). */
typedef struct sdpa_ring_bufs {
  void *kv[2][2];      /* blocks received, [buffer][0 = k, 1 = v], s_max rows each */
  /* forward */
  void *parts;         /* [world, b, s_local, h, d_v]: step t's partial out in slot t */
  float *lse_parts;    /* [world, b, h, s_local]: +inf where step t saw no key */
  /* backward */
  void *dkv[2][2];     /* fp32 dK / dV accumulators of the block in hand / coming, s_max rows */
  float *dq_acc;       /* [b, s_local, h, d] fp32 */
  void *dq_part;       /* one call's dq, [b, q_len, h, d] */
  void *dkv_part[2];   /* one call's dk / dv, [b, k_len, h_k, d | d_v] */
  void *sub;           /* the attention calls' workspace (NULL: sdpa allocates) */
  size_t sub_bytes;
} sdpa_ring_bufs;

/* Step t as this rank sees it. */
typedef struct sdpa_ring_step {
  int t, src;               /* the block in hand is rank src's */
  sdpa_ring_shard_t ks, fs; /* its rows; the rows of the block that follows it */
  sdpa_tensor k, v;         /* the block in hand */
  int calls;                /* the planned attention calls */
  sdpa_ring_item items[SDPA_RING_MAX_ITEMS];
} sdpa_ring_step;

/* A pass's schedule as it runs (or, without transport and ops, as the
 * workspace is sized): what every step reads, and the step in hand. */
typedef struct sdpa_ring_ctx {
  const sdpa_ring_pass *p;
  const sdpa_ring_geom *g;
  const sdpa_ring_bufs *w;
  sdpa_ring_transport *tp;
  const sdpa_ring_ops *ops;
  int posted[SDPA_RING_SLOTS]; /* exchanges in flight, which a failure drains */
  sdpa_ring_step s;
} sdpa_ring_ctx;

struct sdpa_ring_pass_kind {
  int op;               /* SDPA_RING_OP_FWD / _BWD: the agreement's header */
  const char *what;     /* "forward" / "backward": where an error happened */
  const char *type;     /* the descriptor's type and its init, for messages */
  const char *init;
  size_t desc_size;
  /* the pass's own buffers, after the blocks (world > 1) */
  void (*carve)(const sdpa_ring_geom *g, ring_carve *c, sdpa_ring_bufs *w, int *bad);
  /* one attention call of the step in hand: its workspace into *bytes, or
   * (bytes NULL) the call itself; the sizing and the schedule thus build the
   * same call */
  sdpa_status (*call)(const sdpa_ring_ctx *x, const sdpa_ring_item *it, size_t *bytes);
  sdpa_status (*schedule)(sdpa_ring_ctx *x);
};

extern const sdpa_ring_pass_kind sdpa_ring_fwd_kind; /* fwd.c */
extern const sdpa_ring_pass_kind sdpa_ring_bwd_kind; /* bwd.c */

/* Step t into x->s: its block and plan (nothing moves: the sizing walks the
 * steps too). */
void sdpa_ring_step_at(sdpa_ring_ctx *x, int t);
/* Step t begins: step_at, and but for the last step the block in hand goes
 * on (slot 0) while the following one comes in. */
sdpa_status sdpa_ring_step_begin(sdpa_ring_ctx *x, int t);
/* ... and ends with the wait for that exchange. */
sdpa_status sdpa_ring_step_end(sdpa_ring_ctx *x);

/* Exchange `slot` of a pair of [b, rows, h_k, d | d_v] buffers of es-byte
 * elements: send (the block in hand's rows) goes on, recv (the following
 * block's) comes in. */
sdpa_status sdpa_ring_post_pair(sdpa_ring_ctx *x, int slot, size_t es, void *const send[2],
                                void *const recv[2]);
/* A pair of [b, rows, h_k, d | d_v] buffers of es-byte elements. */
void sdpa_ring_take_pair(ring_carve *c, const sdpa_ring_geom *g, size_t es, int64_t rows,
                         void *pair[2], int *bad);

/* The caller's attn (a) narrowed to one call of step s. */
void sdpa_ring_item_attn(sdpa_attn *a, const sdpa_ring_step *s, const sdpa_ring_item *it);

#endif /* SDPA_RING_PASS_H */
