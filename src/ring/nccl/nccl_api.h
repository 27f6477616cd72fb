/*
 * nccl_api.h - the NCCL functions the ring calls, loaded with dlopen on first
 * use (libsdpa keeps no link dependency on NCCL). Built only where nccl.h
 * was found: its declarations give the pointers their types.
 */
#ifndef SDPA_RING_NCCL_API_H
#define SDPA_RING_NCCL_API_H

#include <nccl.h>

#include "sdpa.h"

typedef struct sdpa_nccl_api {
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommCount)(const ncclComm_t, int *);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
  ncclResult_t (*CommCuDevice)(const ncclComm_t, int *);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t);
} sdpa_nccl_api;

/* The loaded NCCL, or SDPA_ERR_NOT_SUPPORTED saying why it did not load. */
sdpa_status sdpa_nccl(const sdpa_nccl_api **api);

/* SDPA_ERR_CUDA naming the call and NCCL's reason, unless r is ncclSuccess. */
sdpa_status sdpa_nccl_check(const sdpa_nccl_api *api, ncclResult_t r, const char *call);

#endif /* SDPA_RING_NCCL_API_H */
