/*
 * bwd_cases.h - the backward's case table and its runner, shared by
 * tests/test_cpu_bwd.c (the CPU backend) and tests/gpu/test_gpu_bwd.c (CUDA,
 * and the CPU backend on the same inputs).
 *
 * out and lse come from the CPU backend's forward on the same inputs, as a
 * training step would use them. Every gradient output is poisoned (NaN)
 * before each call. dq, dk, dv (and dbias, reduced over its broadcast dims)
 * are checked against the fp64 oracle (ref_bwd, exact and lowp) with the
 * harness rule, atol scaled by max(1, max |ref|) per tensor (test_check_grad:
 * gradients are not O(1)); where a GPU suite runs both backends, CUDA's
 * gradients must also be within twice that bound of the CPU backend's.
 */
#ifndef SDPA_TEST_BWD_CASES_H
#define SDPA_TEST_BWD_CASES_H

#include "common/cases.h"

enum bwd_kind {
  BWD_CHECK,   /* the call, checked (CPU: reruns over `threads`; CUDA: `det` reruns) */
  BWD_GRAPH,   /* CUDA: captured with a caller workspace on a non-default stream, replayed
                  twice, checked; a workspace one byte short refused */
  BWD_REFUSE,  /* CUDA: rows not 16-byte aligned: the sm80 rows decline ("unaligned"), a
                  fallback runs */
  BWD_BIAS_ROW /* CUDA: a Hopper bias row named for a problem without a bias: refused */
};

enum { BWD_BC_B = 2, BWD_BC_H = 4, BWD_BC_Q = 8 }; /* bias: 1 | broadcast dims */

typedef struct bwd_tcase {
  const char *name;
  unsigned on; /* ON_CPU | ON_CUDA */
  int small;   /* in the GPU suite's --small set (and only there) */
  int cuda_shape; /* a shape for CUDA's rows (the Hopper rows' walks): the CPU backend runs
                     it in the GPU suite (the comparison), not in the CPU suite */
  int kind;    /* enum bwd_kind */
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d, dv; /* dv 0: d */
  int causal, top_left;
  int window; /* (wl, wr), when !causal */
  int64_t wl, wr;
  int alibi; /* 0 off, 1 [h], 2 [b, h] */
  float softcap, scale, dropout;
  int bias;      /* 0 none, else 1 | BWD_BC_* (broadcast dims) */
  int bias_ninf; /* ~10% of the bias -inf */
  int dbias, dlse;
  int varlen;                    /* lengths drawn in [1, sq] / [1, sk]: sequence 1 empty,
                                    seqused_k on the last */
  const int32_t *lq, *lk, *used; /* or fixed lengths (b entries each; used may be NULL) */
  int rows16;  /* q, k, v, out, dout and the gradients: 16-byte rows (lse contiguous) */
  int64_t pad; /* added to every stride but the last (without rows16: lse, bias too) */
  int det;     /* CUDA: deterministic, and that many more runs equal bit for bit */
  const int *threads; /* CPU: reruns over these thread counts (0-terminated), bit for bit */
  int sm90;    /* CUDA on sm_90 (a build with the Hopper rows): a bwd_sm90 row selected */
  const char *row; /* with sm90: that exact row selected (where the build has it) */
  const char *kernel; /* CUDA: attn.kernel, a row forced (the sm80 rows on sm_90 too) */
} bwd_tcase;

/* The CUDA side (tests/gpu/test_gpu_bwd.c): runs case c on CUDA from the host
 * descriptor (upload, the call of c's kind through gpu_bwd, download the
 * gradients into b); 1 when b holds gradients to check, 0 otherwise (a
 * failure already counted, or a kind with nothing to check here). */
typedef int (*bwd_cuda_fn)(const bwd_tcase *c, const sdpa_bwd_desc *host, case_bufs *b);

/* The table, run by env's rules (cases.h); cuda NULL in a CPU suite. */
void bwd_cases_run(const case_env *env, bwd_cuda_fn cuda);

#endif /* SDPA_TEST_BWD_CASES_H */
