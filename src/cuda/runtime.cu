/*
 * runtime.cu - what the host side of the CUDA backend asks of the device: the
 * current device's compute capability (x10), SM count, opt-in shared
 * memory a block and memory-pool support, read once per device and cached
 * (registry.h). 0 when no device is usable, so
 * sdpa_cuda_available() is `sdpa_cuda_arch() > 0`; the once-per-device
 * shared-memory opt-in; whether a kernel may be launched as a programmatic
 * dependent; and every call's workspace (the caller's, or a stream-ordered
 * allocation from the library's pool).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "error.h"
#include "registry.h"

/* 0 = not read yet; -1 = unusable; else the value. Races only store the
 * same value twice. */
static int arch_cache[SDPA_MAX_DEVICES];
static int sm_cache[SDPA_MAX_DEVICES];
static int smem_cache[SDPA_MAX_DEVICES]; /* opt-in shared memory a block, bytes */
static int pools_cache[SDPA_MAX_DEVICES]; /* 1: stream-ordered memory pools supported */

static int read_device(int *dev_out) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError(); /* clear, so a later launch check does not see it */
    return 0;
  }
  if (dev < 0 || dev >= SDPA_MAX_DEVICES) return 0;
  if (arch_cache[dev] == 0) {
    int major = 0, minor = 0, sms = 0, smem = 0, pools = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) {
      cudaGetLastError();
      arch_cache[dev] = -1;
      sm_cache[dev] = -1;
      smem_cache[dev] = -1;
      pools_cache[dev] = -1;
    } else {
      sm_cache[dev] = sms;
      smem_cache[dev] = smem;
      pools_cache[dev] = pools ? 1 : -1;
      arch_cache[dev] = major * 10 + minor; /* last: it marks the entry read */
    }
  }
  *dev_out = dev;
  return 1;
}

extern "C" int sdpa_cuda_arch(void) {
  int dev;
  if (!read_device(&dev)) return 0;
  return arch_cache[dev] > 0 ? arch_cache[dev] : 0;
}

extern "C" int sdpa_cuda_sm_count(void) {
  int dev;
  if (!read_device(&dev)) return 0;
  return sm_cache[dev] > 0 ? sm_cache[dev] : 0;
}

extern "C" int sdpa_cuda_smem_optin(void) {
  int dev;
  if (!read_device(&dev)) return 0;
  return smem_cache[dev] > 0 ? smem_cache[dev] : 0;
}

extern "C" const char *sdpa_cuda_smem_refusal(int bytes, char *why, size_t n) {
  const int optin = sdpa_cuda_smem_optin();
  if (bytes <= 48 * 1024 || bytes <= optin) return NULL;
  snprintf(why, n, "its block takes %d bytes of shared memory; this device allows %d", bytes,
           optin);
  return why;
}

/* Whether `kernel`, as loaded on the current device, was compiled from PTX
 * of sm_90 or later, so its griddepcontrol.wait is there and it may be
 * launched as a programmatic dependent (ptx_griddep.cuh compiles the wait
 * out below sm_90: a newer GPU running the sm_80 PTX gets none). `cache` is
 * the caller's per-kernel array, one byte per device (0 unknown, 1 yes,
 * 2 no); a race stores the same answer twice. */
extern "C" int sdpa_cuda_waits_for_grid(const void *kernel, unsigned char *cache) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (dev >= 0 && dev < SDPA_MAX_DEVICES && cache[dev]) return cache[dev] == 1;
  cudaFuncAttributes a;
  int yes = 0;
  if (cudaFuncGetAttributes(&a, kernel) == cudaSuccess)
    yes = a.ptxVersion >= 90;
  else
    cudaGetLastError();
  if (dev >= 0 && dev < SDPA_MAX_DEVICES) cache[dev] = yes ? 1 : 2;
  return yes;
}

/* Kernels that take more than 48 KB of dynamic shared memory must opt in, once
 * per device. `done` is the caller's per-instance flag array (one byte per
 * device); a race only sets the attribute twice, which is harmless. */
extern "C" sdpa_status sdpa_cuda_opt_in_smem(const void *kernel, int bytes, unsigned char *done,
                                             const char *name) {
  if (bytes <= 48 * 1024) return SDPA_OK;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: cudaGetDevice failed: %s", name, cudaGetErrorString(e));
  if (dev >= 0 && dev < SDPA_MAX_DEVICES && done[dev]) return SDPA_OK;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* cleared, so a later launch check does not see it */
    return sdpa_fail(SDPA_ERR_CUDA, "%s: cudaFuncSetAttribute(%d bytes of shared memory) failed: %s",
                     name, bytes, cudaGetErrorString(e));
  }
  if (dev >= 0 && dev < SDPA_MAX_DEVICES) done[dev] = 1;
  return SDPA_OK;
}

/*
 * The library's own stream-ordered memory pool, one a device, for the
 * workspace of a call that brings none. It keeps up to SDPA_WS_POOL_KEEP bytes
 * reserved across synchronizations. The device's default pool
 * (cudaMallocAsync) keeps nothing by default (release threshold 0): every
 * synchronization hands its memory back, and the next allocation maps memory
 * again. A decoding loop synchronizes every step (to read the sampled token),
 * and each step's call would pay for it. The default pool's threshold is not
 * ours to change (the process's: torch's and other libraries' allocations
 * share it). 64 MB covers every decoding workspace many times (b 8, s_k 16k:
 * 0.5 MB); a larger one (a long backward's) is handed back down to it at a
 * synchronization, a cost small next to such a call. Inside a stream
 * capture the default pool's allocation stays (the graph's memory nodes); a
 * device without memory pools (read_device's cache), or a pool refused this
 * once (while a stream of the process captures in the global mode; the next
 * call tries again), falls back to it too. The pool lives as long as the
 * process; torch.cuda.empty_cache does not reach it.
 */
#define SDPA_WS_POOL_KEEP ((uint64_t)64 << 20)
static cudaMemPool_t ws_pool[SDPA_MAX_DEVICES];

static cudaMemPool_t workspace_pool(cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  int dev = 0;
  if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
    cudaGetLastError(); /* not the caller's: cleared (the default pool then reports) */
    return NULL;
  }
  if (cap != cudaStreamCaptureStatusNone || !read_device(&dev) || pools_cache[dev] != 1)
    return NULL;
  cudaMemPool_t pool = __atomic_load_n(&ws_pool[dev], __ATOMIC_ACQUIRE);
  if (pool) return pool;
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t made = NULL;
  uint64_t keep = SDPA_WS_POOL_KEEP;
  if (cudaMemPoolCreate(&made, &props) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  if (cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
    cudaGetLastError();
    cudaMemPoolDestroy(made);
    return NULL;
  }
  /* two threads may both have made one: the first stored is everyone's */
  cudaMemPool_t none = NULL;
  if (!__atomic_compare_exchange_n(&ws_pool[dev], &none, made, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    cudaMemPoolDestroy(made);
    return none;
  }
  return made;
}

extern "C" sdpa_status sdpa_cuda_ws_acquire(const sdpa_problem *p, size_t need, size_t align,
                                            const char *who, const char *query, void **ws,
                                            int *owned) {
  *ws = NULL;
  *owned = 0;
  if (p->workspace) {
    if (p->workspace_size < need)
      return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT,
                       "workspace_size = %zu: expected at least %zu bytes for this problem (%s)",
                       p->workspace_size, need, query);
    if (align > 1 && (uintptr_t)p->workspace % align)
      return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT,
                       "workspace = %p: expected a %zu-byte aligned device pointer", p->workspace,
                       align);
    *ws = p->workspace;
    return SDPA_OK;
  }
  const cudaStream_t stream = (cudaStream_t)p->stream;
  const size_t bytes = need > 0 ? need : 1;
  const cudaMemPool_t pool = workspace_pool(stream);
  const cudaError_t e = pool ? cudaMallocFromPoolAsync(ws, bytes, pool, stream)
                             : cudaMallocAsync(ws, bytes, stream);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* clear, so the next launch check does not report it as its own */
    *ws = NULL;
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY,
                     "%s: %s of %zu bytes of workspace failed: %s (pass desc.workspace, of %s "
                     "bytes, to avoid the allocation)",
                     who, pool ? "cudaMallocFromPoolAsync" : "cudaMallocAsync", need,
                     cudaGetErrorString(e), query);
  }
  *owned = 1;
  return SDPA_OK;
}

extern "C" sdpa_status sdpa_cuda_ws_release(const sdpa_problem *p, void *ws, int owned,
                                            sdpa_status st, const char *who) {
  if (!owned) return st;
  const cudaError_t e = cudaFreeAsync(ws, (cudaStream_t)p->stream);
  if (e != cudaSuccess && st == SDPA_OK)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: cudaFreeAsync of the workspace failed: %s", who,
                     cudaGetErrorString(e));
  return st;
}
