/*
 * api.c - the public calls of sdpa_ring.h. In a build with the ring
 * (SDPA_HAVE_RING: the CUDA backend and nccl.h at build time) they check the
 * communicator, open the NCCL transport on the communicator's device and run
 * the schedule; without it they still validate what they can and say why
 * they cannot run, so a caller links the same symbols either way.
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "ring/pass.h"

#ifdef SDPA_HAVE_RING
#include <cuda_runtime.h>

#include "ring/nccl/nccl_api.h"
#include "ring/nccl/transport.h"
#endif

#define INV SDPA_ERR_INVALID_ARGUMENT

static void ring_defaults(sdpa_attn *a, sdpa_ring *r) {
  sdpa_fwd_desc tmp; /* sdpa's own attn defaults */
  sdpa_fwd_init(&tmp);
  *a = tmp.attn;
  a->device = SDPA_DEVICE_CUDA; /* the only device the ring runs on */
  memset(r, 0, sizeof *r);
  r->layout = SDPA_RING_ZIGZAG;
  r->world_size = 1;
  r->check_peers = 1;
}

void sdpa_ring_fwd_init(sdpa_ring_fwd_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  ring_defaults(&desc->attn, &desc->ring);
}

void sdpa_ring_bwd_init(sdpa_ring_bwd_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  ring_defaults(&desc->attn, &desc->ring);
}

sdpa_status sdpa_ring_shard(int64_t seqlen, int world_size, sdpa_ring_layout layout, int rank,
                            int64_t start[2], int64_t len[2], int *parts) {
  sdpa_clear_error();
  SDPA_CHECK(start && len && parts, INV, "start = %p, len = %p, parts = %p: expected pointers to"
             " two int64_t, two int64_t and an int", (void *)start, (void *)len, (void *)parts);
  SDPA_CHECK(world_size >= 1, INV, "world_size = %d: expected >= 1", world_size);
  SDPA_CHECK(rank >= 0 && rank < world_size, INV, "rank = %d: expected 0 <= rank < world_size"
             " = %d", rank, world_size);
  SDPA_CHECK(layout == SDPA_RING_CONTIGUOUS || layout == SDPA_RING_ZIGZAG, INV,
             "layout = %d: expected SDPA_RING_CONTIGUOUS (0) or SDPA_RING_ZIGZAG (1)",
             (int)layout);
  SDPA_CHECK(seqlen >= 0, INV, "seqlen = %lld: expected >= 0", (long long)seqlen);
  sdpa_ring_shard_t s;
  sdpa_ring_shard_of(seqlen, world_size, layout, rank, &s);
  *parts = s.parts;
  for (int i = 0; i < 2; ++i) {
    start[i] = i < s.parts ? s.part[i].start : 0;
    len[i] = i < s.parts ? s.part[i].len : 0;
  }
  return SDPA_OK;
}

/* The device the query sizes for: the descriptor's, or the ring's own where
 * it cannot be read (the check then says why). */
static sdpa_status workspace_size(const sdpa_ring_pass *p, size_t *bytes) {
  sdpa_clear_error();
  return sdpa_ring_size(p, p->attn ? p->attn->device : SDPA_DEVICE_CUDA, bytes);
}

sdpa_status sdpa_ring_fwd_workspace_size(const sdpa_ring_fwd_desc *desc, size_t *bytes) {
  const sdpa_ring_pass p = sdpa_ring_fwd_pass(desc);
  return workspace_size(&p, bytes);
}

sdpa_status sdpa_ring_bwd_workspace_size(const sdpa_ring_bwd_desc *desc, size_t *bytes) {
  const sdpa_ring_pass p = sdpa_ring_bwd_pass(desc);
  return workspace_size(&p, bytes);
}

/* The ring's fwd / bwd calls, one function over either pass (below). */
static sdpa_status run_pass(const sdpa_ring_pass *p);

sdpa_status sdpa_ring_fwd(const sdpa_ring_fwd_desc *desc) {
  const sdpa_ring_pass p = sdpa_ring_fwd_pass(desc);
  return run_pass(&p);
}

sdpa_status sdpa_ring_bwd(const sdpa_ring_bwd_desc *desc) {
  const sdpa_ring_pass p = sdpa_ring_bwd_pass(desc);
  return run_pass(&p);
}

#ifndef SDPA_HAVE_RING

static sdpa_status no_ring(const char *call) {
  return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "%s: this libsdpa was built without the ring (it needs"
                   " the CUDA backend and NCCL's nccl.h at build time)", call);
}

int sdpa_ring_available(void) { return 0; }

/* The arguments are still checked: a wrong call hears about itself first. */
static sdpa_status run_pass(const sdpa_ring_pass *p) {
  sdpa_ring_geom g;
  sdpa_clear_error();
  SDPA_TRY(sdpa_ring_check_alone(p, SDPA_DEVICE_CUDA, &g));
  return no_ring(p->kind->op == SDPA_RING_OP_FWD ? "sdpa_ring_fwd" : "sdpa_ring_bwd");
}

sdpa_status sdpa_ring_unique_id(void *id, size_t id_size) {
  (void)id;
  (void)id_size;
  sdpa_clear_error();
  return no_ring("sdpa_ring_unique_id");
}

sdpa_status sdpa_ring_comm_init(void **comm, int world_size, const void *id, size_t id_size,
                                int rank) {
  (void)world_size;
  (void)id;
  (void)id_size;
  (void)rank;
  sdpa_clear_error();
  if (comm) *comm = NULL;
  return no_ring("sdpa_ring_comm_init");
}

sdpa_status sdpa_ring_comm_destroy(void *comm) {
  (void)comm;
  sdpa_clear_error();
  return no_ring("sdpa_ring_comm_destroy");
}

#else /* SDPA_HAVE_RING */

int sdpa_ring_available(void) {
  const sdpa_nccl_api *api;
  const int ok = sdpa_nccl(&api) == SDPA_OK;
  sdpa_clear_error();
  return ok;
}

/* What a call needs before any peer can hear from it: NCCL, a communicator
 * that answers, and its device made current (restored by ring_close). */
typedef struct ring_call {
  const sdpa_nccl_api *api;
  sdpa_nccl_transport tp;
  sdpa_ring_ops ops;
  int saved_device, opened;
} ring_call;

static sdpa_status ring_open(ring_call *c, const sdpa_attn *a, const sdpa_ring *r) {
  memset(c, 0, sizeof *c);
  c->saved_device = -1;
  SDPA_CHECK(r->nccl_comm != NULL, INV, "ring.nccl_comm = NULL: expected an ncclComm_t");
  SDPA_TRY(sdpa_nccl(&c->api));
  ncclComm_t comm = (ncclComm_t)r->nccl_comm;
  int world = 0, rank = 0, dev = 0;
  SDPA_TRY(sdpa_nccl_check(c->api, c->api->CommCount(comm, &world),
                           "ncclCommCount(ring.nccl_comm)"));
  SDPA_TRY(sdpa_nccl_check(c->api, c->api->CommUserRank(comm, &rank),
                           "ncclCommUserRank(ring.nccl_comm)"));
  SDPA_TRY(sdpa_nccl_check(c->api, c->api->CommCuDevice(comm, &dev),
                           "ncclCommCuDevice(ring.nccl_comm)"));
  int cur = 0;
  if (cudaGetDevice(&cur) != cudaSuccess) {
    cudaGetLastError();
    return sdpa_fail(SDPA_ERR_CUDA, "ring: cudaGetDevice failed (no usable CUDA device)");
  }
  if (cur != dev) {
    if (cudaSetDevice(dev) != cudaSuccess) {
      cudaGetLastError();
      return sdpa_fail(SDPA_ERR_CUDA, "ring: cudaSetDevice(%d), the device of ring.nccl_comm,"
                       " failed", dev);
    }
    c->saved_device = cur;
  }
  SDPA_TRY(sdpa_nccl_transport_open(&c->tp, c->api, comm, rank, world, r->comm_stream,
                                    a->stream));
  c->opened = 1;
  sdpa_ring_cuda_ops(&c->ops, a->stream);
  return SDPA_OK;
}

static void ring_close(ring_call *c) {
  if (c->opened) sdpa_nccl_transport_close(&c->tp);
  if (c->saved_device >= 0) cudaSetDevice(c->saved_device);
}

/* The tensors live on the communicator's device (a refusal the peers hear of;
 * attn.device itself is sdpa_ring_check's). */
static sdpa_status check_device(const sdpa_attn *a, const ring_call *c) {
  int dev = 0;
  c->api->CommCuDevice(c->tp.comm, &dev);
  struct cudaPointerAttributes at;
  if (a->q.data && cudaPointerGetAttributes(&at, a->q.data) == cudaSuccess &&
      at.type == cudaMemoryTypeDevice && at.device != dev)
    return sdpa_fail(INV, "attn.q.data = %p is on CUDA device %d, ring.nccl_comm on device %d:"
                     " expected the communicator of the tensors' device", a->q.data, at.device,
                     dev);
  cudaGetLastError();
#if CUDART_VERSION >= 12080
  /* a stream of another device would fail the first transfer after the peers agreed */
  void *const streams[2] = {a->stream, c->tp.own_stream ? NULL : (void *)c->tp.comm_stream};
  static const char *const names[2] = {"attn.stream", "ring.comm_stream"};
  for (int i = 0; i < 2; ++i) {
    int sdev = dev;
    if (streams[i] && cudaStreamGetDevice((cudaStream_t)streams[i], &sdev) == cudaSuccess &&
        sdev != dev)
      return sdpa_fail(INV, "%s = %p is a stream of CUDA device %d, ring.nccl_comm's device is"
                       " %d: expected a stream of the communicator's device", names[i],
                       streams[i], sdev, dev);
    cudaGetLastError();
  }
#endif
  return SDPA_OK;
}

static sdpa_status run_pass(const sdpa_ring_pass *p) {
  sdpa_clear_error();
  SDPA_TRY(sdpa_ring_check_desc(p));
  ring_call c;
  sdpa_status st = ring_open(&c, p->attn, p->ring);
  if (st == SDPA_OK) {
    sdpa_status pre = check_device(p->attn, &c);
    st = sdpa_ring_run(p, &c.tp.base, &c.ops, pre);
  }
  ring_close(&c);
  return st;
}

sdpa_status sdpa_ring_unique_id(void *id, size_t id_size) {
  sdpa_clear_error();
  const sdpa_nccl_api *api;
  SDPA_CHECK(id != NULL, INV, "id = NULL: expected a buffer of %d bytes", NCCL_UNIQUE_ID_BYTES);
  SDPA_CHECK(id_size >= sizeof(ncclUniqueId), INV, "id_size = %zu: expected >= %zu (an"
             " ncclUniqueId)", id_size, sizeof(ncclUniqueId));
  SDPA_TRY(sdpa_nccl(&api));
  ncclUniqueId u;
  SDPA_TRY(sdpa_nccl_check(api, api->GetUniqueId(&u), "ncclGetUniqueId"));
  memcpy(id, &u, sizeof u);
  return SDPA_OK;
}

sdpa_status sdpa_ring_comm_init(void **comm, int world_size, const void *id, size_t id_size,
                                int rank) {
  sdpa_clear_error();
  const sdpa_nccl_api *api;
  SDPA_CHECK(comm != NULL, INV, "comm = NULL: expected a pointer to a void * (an ncclComm_t)");
  *comm = NULL;
  SDPA_CHECK(id != NULL && id_size >= sizeof(ncclUniqueId), INV, "id = %p, id_size = %zu:"
             " expected the %zu bytes of sdpa_ring_unique_id", id, id_size, sizeof(ncclUniqueId));
  SDPA_CHECK(world_size >= 1, INV, "world_size = %d: expected >= 1", world_size);
  SDPA_CHECK(rank >= 0 && rank < world_size, INV, "rank = %d: expected 0 <= rank < world_size ="
             " %d", rank, world_size);
  SDPA_TRY(sdpa_nccl(&api));
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclComm_t c = NULL;
  SDPA_TRY(sdpa_nccl_check(api, api->CommInitRank(&c, world_size, u, rank), "ncclCommInitRank"));
  *comm = c;
  return SDPA_OK;
}

sdpa_status sdpa_ring_comm_destroy(void *comm) {
  sdpa_clear_error();
  const sdpa_nccl_api *api;
  if (!comm) return SDPA_OK;
  SDPA_TRY(sdpa_nccl(&api));
  return sdpa_nccl_check(api, api->CommDestroy((ncclComm_t)comm), "ncclCommDestroy");
}

#endif /* SDPA_HAVE_RING */
