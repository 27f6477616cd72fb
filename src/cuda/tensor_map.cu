/*
 * tensor_map.cu - tensor maps for the copy engine (cp.async.bulk.tensor) over
 * a [outer, rows, h, d] tensor of 16-bit elements, made by the driver's
 * cuTensorMapEncodeTiled (looked up once through the runtime, so the library
 * links no libcuda). Used by the decoding kernels (decode_plan.cu); the
 * Hopper forward's fwd_sm90_launch.cu still has its own copy of the lookup.
 */
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "decode_common.cuh"

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's encoder, or NULL (a driver older than CUDA 12); a racing
 * second lookup stores the same pointer. */
static encode_tiled_fn tiled_encoder(void) {
  static encode_tiled_fn fn;
  static int looked;
  if (looked) return fn;
  void *f = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
          cudaSuccess && q == cudaDriverEntryPointSuccess)
    fn = (encode_tiled_fn)f;
  else
    cudaGetLastError(); /* a later launch check must not see it */
  looked = 1;
  return fn;
}

extern "C" int sdpa_cuda_map_rows(CUtensorMap *m, const void *base, sdpa_dtype dt, int64_t d,
                                  int64_t rows, int64_t h, int64_t outer, sdpa_bshd st,
                                  int box_rows) {
  encode_tiled_fn enc = tiled_encoder();
  if (!enc || st.ss <= 0 || st.sh < 0 || st.sb < 0 || dt == SDPA_DTYPE_F32) return 0;
  /* innermost first: elements, rows, heads, outer */
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)h, (cuuint64_t)outer};
  const cuuint64_t bytes[3] = {(cuuint64_t)st.ss * 2, (cuuint64_t)st.sh * 2, (cuuint64_t)st.sb * 2};
  const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1}, unit[4] = {1, 1, 1, 1};
  return enc(m, dt == SDPA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             4, (void *)base, dims, bytes, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
