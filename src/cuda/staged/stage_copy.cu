/*
 * stage_copy.cu - sdpa_stage_in / sdpa_stage_out (stage_copy.h): a warp a
 * row (8 rows a block, grid-striding over the rows), its lanes over the
 * row in the widest units the caller's alignment allows (2 to 16 bytes),
 * the staged rows contiguous.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "error.h"
#include "cuda/fastdiv.cuh"
#include "cuda/staged/stage_copy.h"

enum { STAGE_ROWS = 8, STAGE_MAX_BLOCKS = 65535 };

/* One row's units (n_copy from the source side, n_total written: zeros
 * past n_copy when staging in), each lane every 32nd. */
#define STAGE_ROW_COPY(T, ZERO)                                                               \
  __device__ __forceinline__ void stage_row_##T(T *dst, const T *src, int64_t n_copy,        \
                                                int64_t n_total, int lane) {                 \
    for (int64_t c = lane; c < n_total; c += 32) dst[c] = c < n_copy ? src[c] : ZERO;         \
  }
STAGE_ROW_COPY(uint16_t, (uint16_t)0)
STAGE_ROW_COPY(uint32_t, 0u)
STAGE_ROW_COPY(uint2, make_uint2(0u, 0u))
STAGE_ROW_COPY(uint4, make_uint4(0u, 0u, 0u, 0u))
#undef STAGE_ROW_COPY

/* to_staged: staged <- user (pad zeroed), else user <- staged; in units of
 * `unit` bytes (2, 4, 8 or 16: what every row start and the row length
 * allow on the caller's side). */
extern "C" __global__ void __launch_bounds__(32 * STAGE_ROWS)
    sdpa_stage_kernel(char *user, char *staged, const sdpa_stage_shape sh, int to_staged,
                      int unit, sdpa_fastdiv heads, sdpa_fastdiv rows) {
  const int64_t nrows = sh.outer * sh.rows * sh.heads;
  const int64_t n_cols = sh.cols * sh.elem / unit, n_pcols = sh.pcols * sh.elem / unit;
  const int lane = threadIdx.x & 31, narrow = nrows < 0x7fffffff;
  for (int64_t r = (int64_t)blockIdx.x * STAGE_ROWS + (threadIdx.x >> 5); r < nrows;
       r += (int64_t)gridDim.x * STAGE_ROWS) {
    int64_t hh, i, o;
    if (narrow) { /* the common case: two multiply-high divisions, not 64-bit ones */
      int h32, i32;
      o = sdpa_divmod(sdpa_divmod((int)r, heads, &h32), rows, &i32);
      hh = h32, i = i32;
    } else {
      hh = r % sh.heads, i = r / sh.heads % sh.rows, o = r / sh.heads / sh.rows;
    }
    char *u = user + (o * sh.st.sb + i * sh.st.ss + hh * sh.st.sh) * sh.elem;
    char *s = staged + r * sh.pcols * sh.elem;
    char *dst = to_staged ? s : u;
    const char *src = to_staged ? u : s;
    const int64_t n = to_staged ? n_pcols : n_cols;
    switch (unit) {
    case 16: stage_row_uint4((uint4 *)dst, (const uint4 *)src, n_cols, n, lane); break;
    case 8: stage_row_uint2((uint2 *)dst, (const uint2 *)src, n_cols, n, lane); break;
    case 4: stage_row_uint32_t((uint32_t *)dst, (const uint32_t *)src, n_cols, n, lane); break;
    default: stage_row_uint16_t((uint16_t *)dst, (const uint16_t *)src, n_cols, n, lane); break;
    }
  }
}

/* The widest unit (<= 16 bytes) dividing the caller's base, its strides over
 * dims of extent > 1, and a row's bytes. */
static int stage_unit(const void *user, const sdpa_stage_shape *sh) {
  uint64_t bits = (uint64_t)(uintptr_t)user | (uint64_t)(sh->cols * sh->elem) | 16u;
  if (sh->outer > 1) bits |= (uint64_t)(sh->st.sb * sh->elem);
  if (sh->rows > 1) bits |= (uint64_t)(sh->st.ss * sh->elem);
  if (sh->heads > 1) bits |= (uint64_t)(sh->st.sh * sh->elem);
  return (int)(bits & (~bits + 1)); /* the lowest set bit */
}

static sdpa_status stage(char *user, char *staged, const sdpa_stage_shape *sh, int to_staged,
                         cudaStream_t stream) {
  const int64_t nrows = sh->outer * sh->rows * sh->heads;
  if (nrows <= 0 || sh->cols <= 0) return SDPA_OK;
  int64_t blocks = (nrows + STAGE_ROWS - 1) / STAGE_ROWS;
  if (blocks > STAGE_MAX_BLOCKS) blocks = STAGE_MAX_BLOCKS;
  const sdpa_fastdiv heads = sdpa_fastdiv_make((uint32_t)(sh->heads < 0x7fffffff ? sh->heads : 1));
  const sdpa_fastdiv rows = sdpa_fastdiv_make((uint32_t)(sh->rows < 0x7fffffff ? sh->rows : 1));
  sdpa_stage_kernel<<<(unsigned)blocks, 32 * STAGE_ROWS, 0, stream>>>(
      user, staged, *sh, to_staged, stage_unit(user, sh), heads, rows);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "the staging copy (rows not 16-byte aligned): kernel launch "
                     "failed: %s", cudaGetErrorString(e));
  return SDPA_OK;
}

extern "C" sdpa_status sdpa_stage_in(void *staged, const void *src, const sdpa_stage_shape *sh,
                                     cudaStream_t stream) {
  return stage((char *)src, (char *)staged, sh, 1, stream);
}

extern "C" sdpa_status sdpa_stage_out(void *dst, const void *staged, const sdpa_stage_shape *sh,
                                      cudaStream_t stream) {
  return stage((char *)dst, (char *)staged, sh, 0, stream);
}
