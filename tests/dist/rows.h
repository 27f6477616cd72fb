/*
 * rows.h - what the ring's tests (test_ring_cpu.c, test_dist_ring.c) share:
 * the global row of a rank's local row, copies between a rank's rows and the
 * gathered tensor, tensors, the distance printed, and the descriptors' fields.
 */
#ifndef SDPA_TEST_ROWS_H
#define SDPA_TEST_ROWS_H

#include "ring/ring.h"

/* The global row of shard s's local row i. */
int64_t rows_global(const sdpa_ring_shard_t *s, int64_t i);

/* Local rows (dimension dim) of shard s: from the gathered tensor into the
 * local one (to_global = 0), or back (1). Contiguous tensors of any dtype. */
void rows_copy(const sdpa_tensor *src, sdpa_tensor *dst, const sdpa_ring_shard_t *s, int dim,
               int to_global);

/* A contiguous [a, b, c, d] / [a, b, c] tensor at p, or test_alloc'd where
 * p is NULL (the dist test also lays tensors out in shared memory). */
sdpa_tensor rows_t4(void *p, sdpa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d);
sdpa_tensor rows_t3(void *p, sdpa_dtype dt, int64_t a, int64_t b, int64_t c);

/* max |a - b| over the elements (equal infinities count 0, a NaN wins): the
 * distance printed between the ring and single-device sdpa. */
double rows_max_diff(const sdpa_tensor *a, const sdpa_tensor *b);

/* q, k, v and the mask of a ring case into an initialised descriptor's attn
 * (the forward and, copied, the backward: ring or single-device alike). */
void rows_attn(sdpa_attn *a, sdpa_device dev, sdpa_tensor q, sdpa_tensor k, sdpa_tensor v,
               int causal, float scale, float softcap);
/* The ring fields every rank sets (nccl_comm and comm_stream are the caller's). */
void rows_ring(sdpa_ring *r, int rank, int world, sdpa_ring_layout layout, int64_t seqlen,
               int check_peers);

/* A backward descriptor's tensors: sdpa_bwd_desc and sdpa_ring_bwd_desc name
 * them alike, so one macro fills either. */
#define ROWS_BWD_TENSORS(b, out_, lse_, dout_, dlse_, dq_, dk_, dv_)                         \
  ((b).out = (out_), (b).lse = (lse_), (b).dout = (dout_), (b).dlse = (dlse_), (b).dq = (dq_), \
   (b).dk = (dk_), (b).dv = (dv_))

#endif /* SDPA_TEST_ROWS_H */
