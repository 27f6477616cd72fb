/*
 * fwd_cases.h - the forward's case table (dense and varlen) and its runner,
 * shared by tests/test_cpu_fwd.c (the CPU backend) and
 * tests/gpu/test_gpu_fwd.c (CUDA, and the CPU backend on the same inputs).
 *
 * Each case is checked against the fp64 oracle (out, lse, probs and the
 * dropout bits in probs' signs) with the tolerance of docs/design.md §7 (probs:
 * atol 1e-5 on the CPU, 5e-5 on CUDA); where a GPU suite runs both backends,
 * CUDA's out must also be within twice the oracle bound of the CPU backend's.
 */
#ifndef SDPA_TEST_FWD_CASES_H
#define SDPA_TEST_FWD_CASES_H

#include "common/cases.h"

enum fwd_kind {
  FWD_CHECK,  /* the call, checked against the oracle */
  FWD_REPEAT, /* CPU: bitwise reruns over thread counts, every split count 2..16 vs 1 */
  FWD_GRAPH,  /* CUDA: captured in a CUDA graph on a non-default stream, replayed */
  FWD_REFUSE  /* CUDA: refuse_row declines with refuse_why; what runs instead is checked */
};

enum fwd_bias {
  BIAS_NONE,
  BIAS_SHAPE,        /* [b|1, h|1, s_q|1, s_k] (bias_bc), N(0, 2), the case's layout */
  BIAS_FULL_SPARSE,  /* [b, h, s_q, s_k] contiguous, N(0, 1), every 11th from 3 -inf */
  BIAS_STRIDE0_H_SK, /* [h, s_k] viewed [b, h, s_q, s_k] with strides (0, s_k, 0, 1), a -inf column */
  BIAS_STRIDE0_H     /* [b, 1, s_q, s_k] viewed with stride 0 over h, row (0, 0) and every 7th -inf */
};

enum { BC_B = 1, BC_H = 2, BC_Q = 4 }; /* BIAS_SHAPE's broadcast dims */

typedef struct fwd_case {
  const char *name;
  unsigned on; /* ON_CPU | ON_CUDA */
  int small;   /* in the GPU suite's --small set (and only there) */
  int kind;    /* enum fwd_kind */
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d, dv; /* dv 0: d */
  int causal, top_left;
  int window; /* window (wl, wr), when !causal */
  int64_t wl, wr;
  float softcap, scale;
  int alibi; /* 0 off, 1 [h], 2 [b, h] */
  int bias;  /* enum fwd_bias */
  int bias_bc, bias_inf, bias_packed; /* BIAS_SHAPE: broadcast dims, ~10% -inf and row 0
                                         of (0, 0) all -inf, rows s_k apart (packed) */
  float dropout;
  int probs;
  int varlen; /* 1: cu_seqlens, sequence 1 empty, seqused_k on the last;
                 2: the same and sequence 2's keys empty */
  int rows16; /* q, k, v, out (and a BIAS_SHAPE bias): 16-byte rows */
  int64_t pad; /* added to every stride but the last */
  int q_contig; /* q alone contiguous (rows of d elements) */
  int splits;   /* num_splits */
  int threads;  /* CPU num_threads (0: 2) */
  int sm90;     /* CUDA on sm_90 (a build with the Hopper rows): a fwd_sm90 row selected */
  const char *row; /* CUDA on sm_90 (a build listing it): this row selected, by its whole name */
  const char *kernel; /* CUDA: attn.kernel, a row forced (the sm80 rows on sm_90 too) */
  const char *refuse_row, *refuse_why; /* FWD_REFUSE */
} fwd_case;

/* The CUDA side (tests/gpu/test_gpu_fwd.c): runs case c on CUDA from the host
 * descriptor (upload, gpu_fwd, download into b's outputs); 1 when b's
 * outputs hold results to check, 0 when there is nothing to check (a failure
 * already counted, or an expected refusal). */
typedef int (*fwd_cuda_fn)(const fwd_case *c, const sdpa_fwd_desc *host, case_bufs *b);

/* The table, run by env's rules (cases.h); cuda NULL in a CPU suite. */
void fwd_cases_run(const case_env *env, fwd_cuda_fn cuda);

#endif /* SDPA_TEST_FWD_CASES_H */
