/*
 * ring.h - ring attention inside the library: the sequence's split and each
 * step's work (plan.c), the two interfaces the schedule runs over, and the
 * schedule's entry points (pass.c over fwd.c and bwd.c).
 *
 * The schedule never names NCCL or CUDA: it moves blocks through a
 * transport (NCCL in nccl_transport.c; an in-process loopback in the tests)
 * and does elementwise work through ops (plain loops for the CPU device,
 * kernels for CUDA), while attention and merges go through the public
 * sdpa_fwd / sdpa_bwd / sdpa_merge_states. So the CPU tests run the very
 * schedule the GPUs run (docs/design.md §9).
 */
#ifndef SDPA_RING_INTERNAL_H
#define SDPA_RING_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa_ring.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the split (plan.c) ------------------------------------------------------ */

/* One range of global rows a rank holds, and where it sits locally. */
typedef struct sdpa_ring_part {
  int64_t chunk; /* global chunk index (order of the chunks = order of the rows) */
  int64_t start; /* first global row */
  int64_t len;
  int64_t local; /* first local row */
} sdpa_ring_part;

typedef struct sdpa_ring_shard_t {
  int parts;
  sdpa_ring_part part[2];
  int64_t len; /* local rows */
} sdpa_ring_shard_t;

/* Rank `rank`'s rows (arguments already checked). */
void sdpa_ring_shard_of(int64_t seqlen, int world, sdpa_ring_layout layout, int rank,
                        sdpa_ring_shard_t *s);
/* The most local rows any rank holds. */
int64_t sdpa_ring_max_local(int64_t seqlen, int world, sdpa_ring_layout layout);

/* One attention call of a step: local query rows [q0, q0 + q_len) against
 * rows [k0, k0 + k_len) of the block in hand; causal: the local square mask
 * (the block is this rank's own, and local order is global order). */
typedef struct sdpa_ring_item {
  int64_t q0, q_len, k0, k_len;
  int causal;
} sdpa_ring_item;

#define SDPA_RING_MAX_ITEMS 2

/* The calls of one step: queries of shard q against the block of shard k
 * (own: k is q's own block, step 0). Items have disjoint query rows; a
 * (query, key) pair the mask hides is in none, a visible one in exactly one.
 * Returns the count (0: nothing visible). */
int sdpa_ring_plan(const sdpa_ring_shard_t *q, const sdpa_ring_shard_t *k, int own, int causal,
                   sdpa_ring_item items[SDPA_RING_MAX_ITEMS]);

/* ---- the transport ------------------------------------------------------------- */

typedef struct sdpa_ring_buf {
  void *data;
  size_t bytes; /* 0: nothing travels (both sides agree: same rule, same rows) */
} sdpa_ring_buf;

#define SDPA_RING_SLOTS 2    /* exchanges in flight at once (K/V and dK/dV) */
#define SDPA_RING_MAX_BUFS 4 /* buffers one exchange moves */

typedef struct sdpa_ring_transport sdpa_ring_transport;
struct sdpa_ring_transport {
  int rank, world;
  /* Exchange `slot`: send[i] goes to rank + 1 while recv[i] fills from
   * rank - 1 (mod world). It starts after the compute work issued so far;
   * until wait(slot), the schedule neither writes send[] nor touches recv[]. */
  sdpa_status (*post)(sdpa_ring_transport *t, int slot, const sdpa_ring_buf *send,
                      const sdpa_ring_buf *recv, int count);
  /* Compute work issued after this runs after exchange `slot` completed. */
  sdpa_status (*wait)(sdpa_ring_transport *t, int slot);
  /* Blocking: every rank's `bytes` of mine, in rank order, into all. */
  sdpa_status (*allgather)(sdpa_ring_transport *t, const void *mine, void *all, size_t bytes);
};

/* ---- elementwise ops of the device -------------------------------------------- */

typedef struct sdpa_ring_ops sdpa_ring_ops;
struct sdpa_ring_ops {
  sdpa_device device;
  void *stream;
  sdpa_status (*alloc)(const sdpa_ring_ops *o, size_t bytes, void **p);
  sdpa_status (*release)(const sdpa_ring_ops *o, void *p);
  /* x[i] = value, i < n */
  sdpa_status (*fill)(const sdpa_ring_ops *o, float *x, int64_t n, float value);
  /* acc[r * acc_stride + c] += part[r * part_stride + c] (part of dtype dt) */
  sdpa_status (*add)(const sdpa_ring_ops *o, float *acc, int64_t acc_stride, const void *part,
                     sdpa_dtype dt, int64_t part_stride, int64_t rows, int64_t cols);
  /* dst (a [b, s, h, x] view, any strides, its dtype) = src (contiguous f32) */
  sdpa_status (*store)(const sdpa_ring_ops *o, const float *src, const sdpa_tensor *dst);
};

void sdpa_ring_cpu_ops(sdpa_ring_ops *o);
#ifdef SDPA_HAVE_RING
void sdpa_ring_cuda_ops(sdpa_ring_ops *o, void *stream); /* cuda_ops.cu */
#endif

/* ---- the schedule ---------------------------------------------------------------- */

/* One call of the forward or the backward: the caller's descriptor and what
 * the steps both passes share read of it (pass.h says what differs). */
typedef struct sdpa_ring_pass_kind sdpa_ring_pass_kind;
typedef struct sdpa_ring_pass {
  const sdpa_ring_pass_kind *kind;
  const void *desc;        /* the caller's sdpa_ring_fwd_desc / sdpa_ring_bwd_desc */
  size_t struct_size;      /* desc->struct_size (0 for NULL) */
  /* desc's fields; NULL / 0 where desc is NULL or too short to read (the
   * check says which) */
  const sdpa_attn *attn;
  const sdpa_ring *ring;
  void *workspace;
  size_t workspace_size;
} sdpa_ring_pass;

sdpa_ring_pass sdpa_ring_fwd_pass(const sdpa_ring_fwd_desc *d);
sdpa_ring_pass sdpa_ring_bwd_pass(const sdpa_ring_bwd_desc *d);

/* Validate this rank's descriptor (ring.rank / world_size must be the
 * transport's), allocate, agree with the peers (check_peers), run. The ops'
 * device must be attn.device. pre: a refusal the caller already found (its
 * message recorded; SDPA_OK if none), which the peers hear of through the
 * agreement all the same. */
sdpa_status sdpa_ring_run(const sdpa_ring_pass *p, sdpa_ring_transport *tp,
                          const sdpa_ring_ops *ops, sdpa_status pre);
/* The workspace of the call (no transport: this rank's arguments only). */
sdpa_status sdpa_ring_size(const sdpa_ring_pass *p, sdpa_device device, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_RING_INTERNAL_H */
