/*
 * stage_copy.h - copies between a caller's tensor whose rows are not 16-byte
 * aligned and an aligned, contiguous staging copy of it (the staged rows,
 * staged_rows.cu): a tensor of [outer, rows, heads] rows of `cols` elements,
 * strides st (elements; outer 1 and st.sb unused for varlen's global rows),
 * against [outer, rows, heads, pcols] contiguous, pcols >= cols a row.
 */
#ifndef SDPA_CUDA_STAGE_COPY_H
#define SDPA_CUDA_STAGE_COPY_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "problem.h"

typedef struct sdpa_stage_shape {
  int64_t outer, rows, heads, cols, pcols;
  sdpa_bshd st; /* the caller's tensor */
  int elem;     /* bytes an element: 2 or 4 */
} sdpa_stage_shape;

#ifdef __cplusplus
extern "C" {
#endif
/* staged <- the caller's src; columns cols..pcols of every staged row zeroed. */
sdpa_status sdpa_stage_in(void *staged, const void *src, const sdpa_stage_shape *sh,
                          cudaStream_t stream);
/* The caller's dst <- staged (its first cols columns a row). */
sdpa_status sdpa_stage_out(void *dst, const void *staged, const sdpa_stage_shape *sh,
                           cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif /* SDPA_CUDA_STAGE_COPY_H */
