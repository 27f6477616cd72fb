/*
 * sdpa_ring.h - context parallelism: attention over a sequence split across
 * the GPUs of an NCCL communicator (ring attention). Optional: sdpa.h does not
 * need it, and libsdpa keeps no link dependency on NCCL (it loads
 * libnccl.so.2 with dlopen on first use; $SDPA_NCCL_LIBRARY names another).
 *
 * Each rank holds a shard of the rows of every sequence: q, k, v, out
 * [b, s_local, h | h_k, d]. K / V (only the h_k kv heads) travel around the
 * ring with ncclSend / ncclRecv on a communication stream while each rank
 * attends its queries to the block it holds on attn.stream; the partial
 * results merge exactly (sdpa_merge_states). The backward sends the dK / dV
 * accumulators (fp32) around the ring with K / V; dQ sums locally.
 *
 * Layouts (which global rows rank r holds; sdpa_ring_shard says exactly):
 *   SDPA_RING_CONTIGUOUS  chunk r of n equal chunks;
 *   SDPA_RING_ZIGZAG      chunks r and 2n-1-r of 2n, in that order: under a
 *                         causal mask every rank then has the same work.
 *   A sequence of length S is cut into m chunks (m = n or 2n); chunk c holds
 *   rows [c*(S/m) + min(c, S%m), ...) and is S/m rows long, one more for the
 *   first S%m chunks, so any S is accepted (uneven shards).
 *
 * The problem is self-attention over the global sequence: out_i is the
 * attention of global row i to every global row (causal: to rows <= i), with
 * the semantics of sdpa.h (scale, softcap; GQA h % h_k == 0; lse natural log).
 * Not with the ring: varlen, KV cache, bias, alibi, dropout, windows other
 * than causal (SDPA_ERR_NOT_SUPPORTED names the field).
 *
 * Every rank calls with the same shapes, dtype, mask, seqlen and layout. With
 * ring.check_peers = 1 (the default) each call first all-gathers a small
 * header from every rank (one host wait): a mismatch, or a rank whose own
 * arguments were refused, fails the call on every rank, so no rank is left
 * waiting for a transfer that will not come. Errors: SDPA_ERR_INVALID_ARGUMENT
 * (this rank's or another rank's arguments: the message names which),
 * SDPA_ERR_NOT_SUPPORTED (no NCCL in this build or on this machine), and
 * SDPA_ERR_CUDA (a CUDA or NCCL call failed: the message says which).
 */
#ifndef SDPA_RING_H
#define SDPA_RING_H

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sdpa_ring_layout {
  SDPA_RING_CONTIGUOUS = 0, /* rank r holds chunk r of n */
  SDPA_RING_ZIGZAG = 1      /* rank r holds chunks r and 2n-1-r of 2n (causal balance) */
} sdpa_ring_layout;

/* The ring: the communicator, this rank and the sequence's split. */
typedef struct sdpa_ring {
  void *nccl_comm;          /* an ncclComm_t whose device holds the tensors */
  int rank;                 /* this rank: must equal ncclCommUserRank(nccl_comm) */
  int world_size;           /* ranks: must equal ncclCommCount(nccl_comm) */
  sdpa_ring_layout layout;
  int64_t seqlen;           /* S: rows of each global sequence (>= 0) */
  void *comm_stream;        /* cudaStream_t for the transfers (on the comm's device);
                               NULL: the library makes one for the call */
  int check_peers;          /* 1 (default): the agreement check above; 0 skips it
                               (no host wait; every rank must pass the same value) */
  int64_t reserved[8];      /* keep zero */
} sdpa_ring;

typedef struct sdpa_ring_fwd_desc {
  size_t struct_size;       /* set by sdpa_ring_fwd_init */
  sdpa_attn attn;           /* device SDPA_DEVICE_CUDA; stream: the compute stream;
                               q [b, s_local, h, d], k [b, s_local, h_k, d],
                               v [b, s_local, h_k, d_v] this rank's rows (k, v
                               contiguous: they travel as bytes); causal, scale,
                               softcap, kernel (forced for every block) */
  sdpa_ring ring;
  sdpa_tensor out;          /* [b, s_local, h, d_v], the dtype of q */
  sdpa_tensor lse;          /* optional f32 [b, h, s_local]: over the global keys */
  void *workspace;          /* optional, 256-byte aligned; see
                               sdpa_ring_fwd_workspace_size. NULL: the library
                               allocates stream-ordered on attn.stream */
  size_t workspace_size;
} sdpa_ring_fwd_desc;

typedef struct sdpa_ring_bwd_desc {
  size_t struct_size;       /* set by sdpa_ring_bwd_init */
  sdpa_attn attn;           /* exactly as given to sdpa_ring_fwd */
  sdpa_ring ring;
  sdpa_tensor out;          /* sdpa_ring_fwd's out */
  sdpa_tensor lse;          /* sdpa_ring_fwd's lse (required) */
  sdpa_tensor dout;         /* same shape as out */
  sdpa_tensor dq;           /* same shape as q */
  sdpa_tensor dk;           /* same shape as k: this rank's rows, summed over every
                               rank's queries (and a GQA group's heads) */
  sdpa_tensor dv;           /* same shape as v */
  sdpa_tensor dlse;         /* optional f32, lse's shape: lse's gradient (sdpa.h) */
  int deterministic;        /* 1: bitwise reproducible run to run */
  void *workspace;          /* optional, 256-byte aligned; see sdpa_ring_bwd_workspace_size */
  size_t workspace_size;
} sdpa_ring_bwd_desc;

/* struct_size and every default: sdpa_attn's (sdpa_fwd_init) but device
 * SDPA_DEVICE_CUDA; layout zigzag, world_size 1, check_peers 1. */
SDPA_API void sdpa_ring_fwd_init(sdpa_ring_fwd_desc *desc);
SDPA_API void sdpa_ring_bwd_init(sdpa_ring_bwd_desc *desc);
/* Collective: every rank of the communicator calls, with matching arguments.
 * Asynchronous on attn.stream like sdpa_fwd (with check_peers = 1 the call
 * waits on the host for every rank to have reached it). */
SDPA_API sdpa_status sdpa_ring_fwd(const sdpa_ring_fwd_desc *desc);
SDPA_API sdpa_status sdpa_ring_bwd(const sdpa_ring_bwd_desc *desc);
/* The workspace a call needs (this rank's arguments only; no communication). */
SDPA_API sdpa_status sdpa_ring_fwd_workspace_size(const sdpa_ring_fwd_desc *desc, size_t *bytes);
SDPA_API sdpa_status sdpa_ring_bwd_workspace_size(const sdpa_ring_bwd_desc *desc, size_t *bytes);

/* The global rows rank `rank` holds: *parts (1 or 2) ranges [start[i],
 * start[i] + len[i]), in local order (zigzag: the second after the first). */
SDPA_API sdpa_status sdpa_ring_shard(int64_t seqlen, int world_size, sdpa_ring_layout layout,
                                     int rank, int64_t start[2], int64_t len[2], int *parts);

/* 1 if this build has the ring (CUDA and nccl.h at build time) and NCCL loads. */
SDPA_API int sdpa_ring_available(void);

/* Conveniences through the NCCL the library loaded (callers with their own
 * NCCL use ncclGetUniqueId / ncclCommInitRank directly): a unique id (128
 * bytes) on one rank, handed to every rank out of band; a communicator of
 * world_size ranks on the current CUDA device (collective); its release. */
SDPA_API sdpa_status sdpa_ring_unique_id(void *id, size_t id_size);
SDPA_API sdpa_status sdpa_ring_comm_init(void **comm, int world_size, const void *id,
                                         size_t id_size, int rank);
SDPA_API sdpa_status sdpa_ring_comm_destroy(void *comm);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_RING_H */
