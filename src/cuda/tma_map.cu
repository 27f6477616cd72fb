/*
 * tma_map.cu - sdpa_tma_map_bshd (tma_map.h): the driver's tensor-map
 * encoder behind the runtime's entry-point query.
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/tma_map.h"

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's encoder, or NULL (a driver older than CUDA 12). Looked up on
 * the first call; a racing second lookup stores the same pointer. */
static encode_tiled_fn encoder(void) {
  static encode_tiled_fn fn;
  static int looked;
  if (!looked) {
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = (encode_tiled_fn)f;
    looked = 1;
  }
  return fn;
}

extern "C" int sdpa_tma_map_bshd(CUtensorMap *m, const void *base, sdpa_dtype dt, int64_t d,
                                 int64_t rows, int64_t heads, int64_t outer, sdpa_bshd st,
                                 int box_rows) {
  encode_tiled_fn enc = encoder();
  if (!enc || st.ss <= 0 || st.sh < 0 || st.sb < 0) return 0;
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads,
                              (cuuint64_t)outer};
  const cuuint64_t strides[3] = {(cuuint64_t)st.ss * 2, (cuuint64_t)st.sh * 2,
                                 (cuuint64_t)st.sb * 2};
  const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  const CUtensorMapDataType t = dt == SDPA_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return enc(m, t, 4, (void *)base, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
