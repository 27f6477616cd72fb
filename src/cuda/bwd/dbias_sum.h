/*
 * dbias_sum.h - dbias summed over its broadcast dims for the bias rows of
 * the backward (dbias_sum.cu): they write the full [b, h, s_q, s_k]
 * gradient into their workspace, and this adds it into the caller's dbias.
 */
#ifndef SDPA_CUDA_DBIAS_SUM_H
#define SDPA_CUDA_DBIAS_SUM_H

#include <stddef.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the full gradient (the problem's dtype), 0 when dbias is not summed. */
size_t sdpa_dbias_full_bytes(const sdpa_problem *p);
/* *q = *p with dbias pointing at full, its strides and extents the full ones. */
void sdpa_dbias_full_view(const sdpa_problem *p, void *full, sdpa_problem *q);
/* The caller's dbias = full summed over the broadcast dims, on p's stream. */
sdpa_status sdpa_dbias_sum(const sdpa_problem *p, const void *full, const char *who);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_CUDA_DBIAS_SUM_H */
