/*
 * transport.c - the ring's transport over NCCL (transport.h). Events, not
 * host waits, order the two streams, so the next block's transfer runs
 * under the current block's attention.
 */
#include "ring/nccl/transport.h"

#include <string.h>

#include "error.h"

static sdpa_status cuda_check(cudaError_t e, const char *call) {
  if (e == cudaSuccess) return SDPA_OK;
  cudaGetLastError(); /* not the next launch's error */
  return sdpa_fail(SDPA_ERR_CUDA, "ring: %s failed: %s", call, cudaGetErrorString(e));
}

static sdpa_status nccl_post(sdpa_ring_transport *base, int slot, const sdpa_ring_buf *send,
                             const sdpa_ring_buf *recv, int count) {
  sdpa_nccl_transport *t = (sdpa_nccl_transport *)base;
  const int next = (base->rank + 1) % base->world;
  const int prev = (base->rank - 1 + base->world) % base->world;
  SDPA_TRY(cuda_check(cudaEventRecord(t->ready, t->compute), "cudaEventRecord (compute)"));
  SDPA_TRY(cuda_check(cudaStreamWaitEvent(t->comm_stream, t->ready, 0), "cudaStreamWaitEvent"));
  SDPA_TRY(sdpa_nccl_check(t->api, t->api->GroupStart(), "ncclGroupStart"));
  sdpa_status st = SDPA_OK;
  for (int i = 0; i < count && st == SDPA_OK; ++i) {
    if (send[i].bytes)
      st = sdpa_nccl_check(t->api, t->api->Send(send[i].data, send[i].bytes, ncclUint8, next,
                                                t->comm, t->comm_stream), "ncclSend");
    if (st == SDPA_OK && recv[i].bytes)
      st = sdpa_nccl_check(t->api, t->api->Recv(recv[i].data, recv[i].bytes, ncclUint8, prev,
                                                t->comm, t->comm_stream), "ncclRecv");
  }
  /* the group is closed even after a failure inside it */
  sdpa_status end = sdpa_nccl_check(t->api, t->api->GroupEnd(), "ncclGroupEnd");
  SDPA_TRY(st);
  SDPA_TRY(end);
  return cuda_check(cudaEventRecord(t->done[slot], t->comm_stream), "cudaEventRecord (comm)");
}

static sdpa_status nccl_wait(sdpa_ring_transport *base, int slot) {
  sdpa_nccl_transport *t = (sdpa_nccl_transport *)base;
  return cuda_check(cudaStreamWaitEvent(t->compute, t->done[slot], 0), "cudaStreamWaitEvent");
}

static sdpa_status nccl_allgather(sdpa_ring_transport *base, const void *mine, void *all,
                                  size_t bytes) {
  sdpa_nccl_transport *t = (sdpa_nccl_transport *)base;
  const size_t total = bytes * (size_t)base->world;
  char *dev = NULL;
  SDPA_TRY(cuda_check(cudaMallocAsync((void **)&dev, total, t->comm_stream), "cudaMallocAsync"));
  sdpa_status st = cuda_check(cudaMemcpyAsync(dev + bytes * (size_t)base->rank, mine, bytes,
                                              cudaMemcpyHostToDevice, t->comm_stream),
                              "cudaMemcpyAsync");
  if (st == SDPA_OK)
    st = sdpa_nccl_check(t->api, t->api->AllGather(dev + bytes * (size_t)base->rank, dev, bytes,
                                                   ncclUint8, t->comm, t->comm_stream),
                         "ncclAllGather (the ranks' agreement)");
  if (st == SDPA_OK)
    st = cuda_check(cudaMemcpyAsync(all, dev, total, cudaMemcpyDeviceToHost, t->comm_stream),
                    "cudaMemcpyAsync");
  cudaFreeAsync(dev, t->comm_stream);
  sdpa_status sync = cuda_check(cudaStreamSynchronize(t->comm_stream), "cudaStreamSynchronize");
  return st != SDPA_OK ? st : sync;
}

sdpa_status sdpa_nccl_transport_open(sdpa_nccl_transport *t, const sdpa_nccl_api *api,
                                     ncclComm_t comm, int rank, int world, void *comm_stream,
                                     void *compute_stream) {
  memset(t, 0, sizeof *t);
  t->base.rank = rank;
  t->base.world = world;
  t->base.post = nccl_post;
  t->base.wait = nccl_wait;
  t->base.allgather = nccl_allgather;
  t->api = api;
  t->comm = comm;
  t->compute = (cudaStream_t)compute_stream;
  t->comm_stream = (cudaStream_t)comm_stream;
  if (!t->comm_stream) {
    SDPA_TRY(cuda_check(cudaStreamCreateWithFlags(&t->comm_stream, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags"));
    t->own_stream = 1;
  }
  sdpa_status st = cuda_check(cudaEventCreateWithFlags(&t->ready, cudaEventDisableTiming),
                              "cudaEventCreateWithFlags");
  for (int s = 0; s < SDPA_RING_SLOTS && st == SDPA_OK; ++s)
    st = cuda_check(cudaEventCreateWithFlags(&t->done[s], cudaEventDisableTiming),
                    "cudaEventCreateWithFlags");
  t->events = 1;
  if (st != SDPA_OK) sdpa_nccl_transport_close(t);
  return st;
}

/* Destroying a stream or an event with work pending is allowed: CUDA
 * releases them once it completes, so nothing here waits. */
void sdpa_nccl_transport_close(sdpa_nccl_transport *t) {
  if (t->events) {
    if (t->ready) cudaEventDestroy(t->ready);
    for (int s = 0; s < SDPA_RING_SLOTS; ++s)
      if (t->done[s]) cudaEventDestroy(t->done[s]);
    t->events = 0;
  }
  if (t->own_stream) {
    cudaStreamDestroy(t->comm_stream);
    t->own_stream = 0;
  }
}
