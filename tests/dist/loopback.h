/*
 * loopback.h - the ring's transport between threads of one process: n
 * simulated ranks, each a thread, exchange host buffers through mailboxes.
 * It holds the schedule to the transport's contract (src/ring/ring.h): a
 * receive buffer is poisoned when its exchange is posted (reading it early
 * reads NaN), and in the late mode a send buffer is read only at the
 * sender's wait and must not have changed since the post. A receive of the
 * wrong size, a second exchange on a busy slot, or a wait with no message
 * after SDPA_LOOPBACK_TIMEOUT seconds fails the call instead of hanging.
 */
#ifndef SDPA_TEST_LOOPBACK_H
#define SDPA_TEST_LOOPBACK_H

#include "ring/ring.h"

#define SDPA_LOOPBACK_TIMEOUT 60

typedef struct loop_world loop_world;

/* late = 0: sends copied at the post (the earliest a transfer may read them);
 * late = 1: at the sender's wait (the latest), checked unchanged. */
loop_world *loop_world_new(int world, int late);
sdpa_ring_transport *loop_transport(loop_world *w, int rank);
void loop_world_free(loop_world *w);

#endif /* SDPA_TEST_LOOPBACK_H */
