/*
 * cuda_ops.cu - the ring's elementwise work on the GPU (ring.h's ops): fill,
 * the fp32 accumulation of partial gradients, and the store of an fp32
 * accumulator into the caller's tensor. Memory-bound grid-stride loops on the
 * compute stream; buffers are stream-ordered allocations on it.
 */
#include <cuda_runtime.h>

#include "error.h"
#include "ring/ring.h"
#include "cuda/simt/simt_common.cuh" /* simt_ld, simt_st: the dtypes to and from fp32 */

enum { OPS_THREADS = 256, OPS_MAX_BLOCKS = 4096 };

extern "C" __global__ void sdpa_ring_fill_kernel(float *x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = value;
}

/* rows over blockIdx.y, columns grid-strided over x */
extern "C" __global__ void sdpa_ring_add_kernel(float *acc, int64_t acc_stride, const void *part,
                                                int dt, int64_t part_stride, int64_t rows,
                                                int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x)
      acc[r * acc_stride + c] += simt_ld(part, (sdpa_dtype)dt, r * part_stride + c);
}

/* element i of the contiguous [B, S, H, X] source to its strided place */
extern "C" __global__ void sdpa_ring_store_kernel(const float *src, void *dst, int dt, int64_t S,
                                                  int64_t H, int64_t X, int64_t sb, int64_t ss,
                                                  int64_t sh, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t x = i % X, r = i / X, hh = r % H, r2 = r / H, s = r2 % S, b = r2 / S;
    simt_st(dst, (sdpa_dtype)dt, b * sb + s * ss + hh * sh + x, src[i]);
  }
}

static unsigned blocks_for(int64_t n) {
  const int64_t b = (n + OPS_THREADS - 1) / OPS_THREADS;
  return (unsigned)(b < 1 ? 1 : b > OPS_MAX_BLOCKS ? OPS_MAX_BLOCKS : b);
}

static sdpa_status launched(const char *what) {
  const cudaError_t e = cudaGetLastError();
  SDPA_CHECK(e == cudaSuccess, SDPA_ERR_CUDA, "ring: the %s kernel's launch failed: %s", what,
             cudaGetErrorString(e));
  return SDPA_OK;
}

static sdpa_status gpu_alloc(const sdpa_ring_ops *o, size_t bytes, void **p) {
  const cudaError_t e = cudaMallocAsync(p, bytes > 0 ? bytes : 1, (cudaStream_t)o->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *p = NULL;
    return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "ring: cudaMallocAsync of %zu bytes of workspace"
                     " failed: %s (pass desc.workspace, of sdpa_ring_*_workspace_size bytes, to"
                     " avoid the allocation)", bytes, cudaGetErrorString(e));
  }
  return SDPA_OK;
}

static sdpa_status gpu_release(const sdpa_ring_ops *o, void *p) {
  const cudaError_t e = cudaFreeAsync(p, (cudaStream_t)o->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return sdpa_fail(SDPA_ERR_CUDA, "ring: cudaFreeAsync of the workspace failed: %s",
                     cudaGetErrorString(e));
  }
  return SDPA_OK;
}

static sdpa_status gpu_fill(const sdpa_ring_ops *o, float *x, int64_t n, float value) {
  if (n <= 0) return SDPA_OK;
  sdpa_ring_fill_kernel<<<blocks_for(n), OPS_THREADS, 0, (cudaStream_t)o->stream>>>(x, n, value);
  return launched("fill");
}

static sdpa_status gpu_add(const sdpa_ring_ops *o, float *acc, int64_t acc_stride,
                           const void *part, sdpa_dtype dt, int64_t part_stride, int64_t rows,
                           int64_t cols) {
  if (rows <= 0 || cols <= 0) return SDPA_OK;
  const dim3 grid(blocks_for(cols), (unsigned)(rows < 65535 ? rows : 65535));
  sdpa_ring_add_kernel<<<grid, OPS_THREADS, 0, (cudaStream_t)o->stream>>>(
      acc, acc_stride, part, (int)dt, part_stride, rows, cols);
  return launched("accumulate");
}

static sdpa_status gpu_store(const sdpa_ring_ops *o, const float *src, const sdpa_tensor *dst) {
  const int64_t n = dst->shape[0] * dst->shape[1] * dst->shape[2] * dst->shape[3];
  if (n <= 0) return SDPA_OK;
  sdpa_ring_store_kernel<<<blocks_for(n), OPS_THREADS, 0, (cudaStream_t)o->stream>>>(
      src, dst->data, (int)dst->dtype, dst->shape[1], dst->shape[2], dst->shape[3],
      dst->stride[0], dst->stride[1], dst->stride[2], n);
  return launched("store");
}

extern "C" void sdpa_ring_cuda_ops(sdpa_ring_ops *o, void *stream) {
  o->device = SDPA_DEVICE_CUDA;
  o->stream = stream;
  o->alloc = gpu_alloc;
  o->release = gpu_release;
  o->fill = gpu_fill;
  o->add = gpu_add;
  o->store = gpu_store;
}
