/*
 * rows.h - what the ring's tests share about sharded host tensors: the
 * global row of a rank's local row, and copies between a rank's rows and
 * the gathered tensor.
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

#endif /* SDPA_TEST_ROWS_H */
