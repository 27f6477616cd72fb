/*
 * stage_copy.cu - sdpa_stage_in / sdpa_stage_out (stage_copy.h): a warp a
 * row (8 rows a block, grid-striding over the rows), its lanes over the
 * columns, so the caller's rows are read and written element by element
 * (any alignment) and the staged ones contiguously.
 */
#include <cuda_runtime.h>

#include "error.h"
#include "cuda/staged/stage_copy.h"

enum { STAGE_ROWS = 8, STAGE_MAX_BLOCKS = 65535 };

/* to_staged: staged <- user (pad zeroed), else user <- staged */
extern "C" __global__ void __launch_bounds__(32 * STAGE_ROWS)
    sdpa_stage_kernel(char *user, char *staged, const sdpa_stage_shape sh, int to_staged) {
  const int64_t nrows = sh.outer * sh.rows * sh.heads;
  const int lane = threadIdx.x & 31;
  for (int64_t r = (int64_t)blockIdx.x * STAGE_ROWS + (threadIdx.x >> 5); r < nrows;
       r += (int64_t)gridDim.x * STAGE_ROWS) {
    const int64_t hh = r % sh.heads, rest = r / sh.heads;
    const int64_t i = rest % sh.rows, o = rest / sh.rows;
    char *u = user + (o * sh.st.sb + i * sh.st.ss + hh * sh.st.sh) * sh.elem;
    char *s = staged + r * sh.pcols * sh.elem;
    const int64_t n = to_staged ? sh.pcols : sh.cols;
    for (int64_t c = lane; c < n; c += 32) {
      if (sh.elem == 4) {
        float *dst = (float *)(to_staged ? s : u) + c;
        *dst = c < sh.cols ? ((const float *)(to_staged ? u : s))[c] : 0.f;
      } else {
        uint16_t *dst = (uint16_t *)(to_staged ? s : u) + c;
        *dst = c < sh.cols ? ((const uint16_t *)(to_staged ? u : s))[c] : (uint16_t)0;
      }
    }
  }
}

static sdpa_status stage(char *user, char *staged, const sdpa_stage_shape *sh, int to_staged,
                         cudaStream_t stream) {
  const int64_t nrows = sh->outer * sh->rows * sh->heads;
  if (nrows <= 0 || sh->cols <= 0) return SDPA_OK;
  int64_t blocks = (nrows + STAGE_ROWS - 1) / STAGE_ROWS;
  if (blocks > STAGE_MAX_BLOCKS) blocks = STAGE_MAX_BLOCKS;
  sdpa_stage_kernel<<<(unsigned)blocks, 32 * STAGE_ROWS, 0, stream>>>(user, staged, *sh, to_staged);
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
