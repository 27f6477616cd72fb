/*
 * check.h - the ring descriptors' validation on one rank (check.c) and the
 * agreement of every rank before the first transfer.
 */
#ifndef SDPA_RING_CHECK_H
#define SDPA_RING_CHECK_H

#include "ring/ring.h"

/* What the schedule needs of a validated call. */
typedef struct sdpa_ring_geom {
  int rank, world;
  sdpa_ring_layout layout;
  int64_t seqlen;
  sdpa_ring_shard_t own;
  int64_t s_max; /* the most rows any rank holds: the size of a traveling block */
  int64_t b, h, h_k, d, d_v;
  sdpa_dtype dtype;
  size_t es;
  int causal;
  float scale, softcap; /* scale resolved (0 = 1/sqrt(d) folded) */
} sdpa_ring_geom;

enum { SDPA_RING_OP_FWD = 1, SDPA_RING_OP_BWD = 2 };

/* The caller's tensors as one sdpa_fwd / sdpa_bwd call: what sdpa validates
 * (sdpa_ring_check), and what each step's calls take rows of. */
void sdpa_ring_caller_fwd(const sdpa_ring_fwd_desc *d, sdpa_fwd_desc *f);
void sdpa_ring_caller_bwd(const sdpa_ring_bwd_desc *d, sdpa_bwd_desc *b);

/* The descriptor can be read: not NULL, and its struct_size. */
sdpa_status sdpa_ring_check_desc(const sdpa_ring_pass *p);
/* This rank's arguments against each other and against the transport's
 * rank / world and the ops' device; fills *g. */
sdpa_status sdpa_ring_check(const sdpa_ring_pass *p, int rank, int world, sdpa_device device,
                            sdpa_ring_geom *g);
/* The same where no transport says the rank and world: the descriptor's own
 * (the workspace query, and a build without the ring). */
sdpa_status sdpa_ring_check_alone(const sdpa_ring_pass *p, sdpa_device device, sdpa_ring_geom *g);

/* Every rank's verdict and shapes, all-gathered: SDPA_OK on every rank when
 * all agree; else the same refusal on every rank (this rank's own message
 * when it refused itself). local: this rank's status so far (its message
 * already recorded). */
sdpa_status sdpa_ring_agree(sdpa_ring_transport *tp, const sdpa_ring_geom *g, int op,
                            sdpa_status local);

/* The caller's workspace (need bytes at least) or one from ops; *owned set
 * when the library allocated it. */
sdpa_status sdpa_ring_ws_acquire(const sdpa_ring_ops *ops, void *given, size_t given_size,
                                 size_t need, void **ws, int *owned);

/* After a failed schedule: waits for the exchanges still in flight (they
 * write buffers about to be freed), keeping st's message. */
void sdpa_ring_drain(sdpa_ring_transport *tp, const int *posted, sdpa_status st);

/* Whether the call runs the agreement: check_peers of a descriptor that
 * could be read, with more than one rank. */
int sdpa_ring_agrees(const sdpa_ring *ring_or_null, int world);

/* Prefixes the last error with where in the ring it happened. */
sdpa_status sdpa_ring_annotate(sdpa_status st, const char *what, int step, int src);

#endif /* SDPA_RING_CHECK_H */
