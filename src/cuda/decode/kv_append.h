/*
 * kv_append.h - the KV-cache forward's steps before attention (kv_append.cu),
 * on p->stream: the in-call append, and q's rotary into a copy for kernels
 * that read q as stored.
 */
#ifndef SDPA_CUDA_KV_APPEND_H
#define SDPA_CUDA_KV_APPEND_H

#include <stddef.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif
/* k_new / v_new into the cache (rotary on k) */
sdpa_status sdpa_cuda_kv_append(const sdpa_problem *p);
/* bytes of q rotated ([b, s_q, h, d] in q's dtype); 0 without rotary */
size_t sdpa_cuda_rotated_q_bytes(const sdpa_problem *p);
/* q rotated at sdpa_rotary_q_pos into dst (sdpa_cuda_rotated_q_bytes) */
sdpa_status sdpa_cuda_rotate_q(const sdpa_problem *p, void *dst);
#ifdef __cplusplus
}
#endif

#endif /* SDPA_CUDA_KV_APPEND_H */
