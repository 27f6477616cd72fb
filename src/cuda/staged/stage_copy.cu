/*
 * stage_copy.cu - sdpa_stage_in / sdpa_stage_out (stage_copy.h): the rows'
 * units (the widest the caller's alignment allows, 2 to 16 bytes) spread
 * over the threads in order, so consecutive threads touch consecutive
 * bytes, several units a thread in flight at once.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "error.h"
#include "cuda/fastdiv.cuh"
#include "cuda/staged/stage_copy.h"

enum { STAGE_THREADS = 256, STAGE_ILP = 4, STAGE_MAX_BLOCKS = 1 << 16 };

/* What a launch divides by: units a row (n), heads, rows; narrow when every
 * unit index fits 31 bits (multiply-high divisions), else 64-bit ones. */
typedef struct stage_div {
  sdpa_fastdiv n, heads, rows;
  int narrow;
} stage_div;

/* Unit idx (of total = rows x n) of the staged tensor: its row r (of
 * [outer, rows, heads]) and its unit c in the row. */
__device__ __forceinline__ void stage_locate(const sdpa_stage_shape *sh, const stage_div *dv,
                                             int64_t n, int64_t idx, int64_t *r, int64_t *c,
                                             int64_t *user_off) {
  int64_t hh, i, o;
  if (dv->narrow) {
    int c32, h32, i32;
    const int r32 = sdpa_divmod((int)idx, dv->n, &c32);
    o = sdpa_divmod(sdpa_divmod(r32, dv->heads, &h32), dv->rows, &i32);
    *r = r32, *c = c32, hh = h32, i = i32;
  } else {
    *r = idx / n, *c = idx % n;
    hh = *r % sh->heads, i = *r / sh->heads % sh->rows, o = *r / sh->heads / sh->rows;
  }
  *user_off = (o * sh->st.sb + i * sh->st.ss + hh * sh->st.sh) * sh->elem;
}

/* Every unit of the staged rows (zeros past n_cols when staging in), or of
 * the caller's (n_cols a row) when staging out: STAGE_ILP units a thread at
 * once, all loads before the stores. */
#define STAGE_UNITS(T, ZERO)                                                                    \
  __device__ __forceinline__ void stage_units_##T(char *user, char *staged,                    \
                                                  const sdpa_stage_shape *sh,                  \
                                                  const stage_div *dv, int to_staged,          \
                                                  int64_t n_cols, int64_t n, int64_t total) {  \
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;                                     \
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; base < total;          \
         base += stride * STAGE_ILP) {                                                         \
      T val[STAGE_ILP];                                                                        \
      T *dst[STAGE_ILP];                                                                       \
      _Pragma("unroll") for (int k = 0; k < STAGE_ILP; ++k) {                                  \
        const int64_t idx = base + k * stride;                                                 \
        dst[k] = NULL;                                                                         \
        if (idx >= total) continue;                                                            \
        int64_t r, c, uoff;                                                                    \
        stage_locate(sh, dv, n, idx, &r, &c, &uoff);                                           \
        T *u = (T *)(user + uoff) + c;                                                         \
        T *s = (T *)(staged + r * sh->pcols * sh->elem) + c;                                   \
        dst[k] = to_staged ? s : u;                                                            \
        val[k] = to_staged ? (c < n_cols ? *u : ZERO) : *s;                                    \
      }                                                                                        \
      _Pragma("unroll") for (int k = 0; k < STAGE_ILP; ++k) if (dst[k]) *dst[k] = val[k];      \
    }                                                                                          \
  }
STAGE_UNITS(uint16_t, (uint16_t)0)
STAGE_UNITS(uint32_t, 0u)
STAGE_UNITS(uint2, make_uint2(0u, 0u))
STAGE_UNITS(uint4, make_uint4(0u, 0u, 0u, 0u))
#undef STAGE_UNITS

/* to_staged: staged <- user (pad zeroed), else user <- staged; in units of
 * `unit` bytes (2, 4, 8 or 16: what every row start and the row length
 * allow on the caller's side). */
extern "C" __global__ void __launch_bounds__(STAGE_THREADS)
    sdpa_stage_kernel(char *user, char *staged, const sdpa_stage_shape sh, int to_staged,
                      int unit, const stage_div dv) {
  const int64_t n_cols = sh.cols * sh.elem / unit, n_pcols = sh.pcols * sh.elem / unit;
  const int64_t n = to_staged ? n_pcols : n_cols, total = sh.outer * sh.rows * sh.heads * n;
  switch (unit) {
  case 16: stage_units_uint4(user, staged, &sh, &dv, to_staged, n_cols, n, total); break;
  case 8: stage_units_uint2(user, staged, &sh, &dv, to_staged, n_cols, n, total); break;
  case 4: stage_units_uint32_t(user, staged, &sh, &dv, to_staged, n_cols, n, total); break;
  default: stage_units_uint16_t(user, staged, &sh, &dv, to_staged, n_cols, n, total); break;
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
  const int unit = stage_unit(user, sh);
  const int64_t n = (to_staged ? sh->pcols : sh->cols) * sh->elem / unit;
  const int64_t total = sh->outer * sh->rows * sh->heads * n;
  if (total <= 0) return SDPA_OK;
  stage_div dv;
  dv.narrow = total < 0x7fffffff;
  dv.n = sdpa_fastdiv_make(dv.narrow ? (uint32_t)n : 1u);
  dv.heads = sdpa_fastdiv_make(dv.narrow ? (uint32_t)sh->heads : 1u);
  dv.rows = sdpa_fastdiv_make(dv.narrow ? (uint32_t)sh->rows : 1u);
  int64_t blocks = (total + STAGE_THREADS * STAGE_ILP - 1) / (STAGE_THREADS * STAGE_ILP);
  if (blocks > STAGE_MAX_BLOCKS) blocks = STAGE_MAX_BLOCKS;
  sdpa_stage_kernel<<<(unsigned)blocks, STAGE_THREADS, 0, stream>>>(user, staged, *sh, to_staged,
                                                                   unit, dv);
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
