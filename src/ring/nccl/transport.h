/*
 * transport.h - the ring's transport over NCCL (transport.c): each exchange
 * is one ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd on the
 * communication stream, ordered after the compute stream's work by an event,
 * and the compute stream waits on an event recorded after it.
 */
#ifndef SDPA_RING_NCCL_TRANSPORT_H
#define SDPA_RING_NCCL_TRANSPORT_H

#include "ring/nccl/nccl_api.h"
#include "ring/ring.h"

typedef struct sdpa_nccl_transport {
  sdpa_ring_transport base; /* first: the schedule sees only this */
  const sdpa_nccl_api *api;
  ncclComm_t comm;
  cudaStream_t compute, comm_stream;
  int own_stream;
  cudaEvent_t ready, done[SDPA_RING_SLOTS];
  int events;
} sdpa_nccl_transport;

/* rank / world: the communicator's (ncclCommUserRank / ncclCommCount).
 * comm_stream NULL: a stream of the current device made for the call. */
sdpa_status sdpa_nccl_transport_open(sdpa_nccl_transport *t, const sdpa_nccl_api *api,
                                     ncclComm_t comm, int rank, int world, void *comm_stream,
                                     void *compute_stream);
void sdpa_nccl_transport_close(sdpa_nccl_transport *t);

#endif /* SDPA_RING_NCCL_TRANSPORT_H */
