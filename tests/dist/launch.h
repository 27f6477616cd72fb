/*
 * launch.h - one process a GPU on one host, without mpirun: dist_launch
 * forks `world` children (rank r on CUDA device r), rank 0 makes NCCL's
 * unique id (sdpa_ring_unique_id) and shared memory hands it to the others,
 * every rank joins one communicator (sdpa_ring_comm_init) and runs fn. The
 * parent never touches CUDA (a CUDA context does not survive fork): a probe
 * child counts the GPUs first. A child that fails or a run past the deadline
 * ends every child; the parent returns 0 (all passed), 1 (a failure) or 77
 * (skipped: fewer GPUs than ranks, or no NCCL to load).
 */
#ifndef SDPA_TEST_LAUNCH_H
#define SDPA_TEST_LAUNCH_H

#include <stddef.h>

typedef struct dist_ctx {
  int rank, world;
  void *comm;    /* an ncclComm_t over every rank, on this rank's device */
  void *shared;  /* `shared_bytes` of memory every rank sees (MAP_SHARED) */
  void *barrier; /* the launcher's: use dist_barrier */
} dist_ctx;

/* fn's return value is the child's exit status (0 = passed). */
int dist_launch(int world, size_t shared_bytes, int timeout_s, int (*fn)(dist_ctx *, void *),
                void *arg);
/* Every rank waits here until all ranks arrived. */
void dist_barrier(dist_ctx *c);

#endif /* SDPA_TEST_LAUNCH_H */
