/*
 * decode_cases.h - decoding with a KV cache (and split-KV, merge_states):
 * the case table and its runner, shared by tests/test_cpu_cache.c (the CPU
 * backend) and tests/gpu/test_gpu_decode.c (CUDA, and the CPU backend on the
 * same inputs).
 *
 * A cache case is checked against the fp64 oracle (out, lse) with the
 * tolerance of docs/design.md §7, and, after an append, the cache itself
 * (check_cache: the appended rows hold k_new rotated and v_new, every other
 * element bit for bit what it was, the padding of rows padded to 16 bytes
 * still NaN). Every cache row past its sequence's end (and before its
 * cache_leftpad) holds NaN, so a kernel that reads one fails. Where a GPU
 * suite runs both backends (each starting from the same cache), CUDA's out
 * must be within twice the oracle bound of the CPU backend's and the caches
 * after the call equal bit for bit.
 */
#ifndef SDPA_TEST_DECODE_CASES_H
#define SDPA_TEST_DECODE_CASES_H

#include "common/cases.h"

enum dec_kind {
  DEC_CHECK,    /* the call, checked (CPU: with sweep, every split count 2..16 vs the first) */
  DEC_GRAPH,    /* CUDA: captured in a graph on a non-default stream, replayed twice */
  DEC_GRAPH_WS, /* CUDA: the same with the queried workspace passed (one byte short refused) */
  DEC_PAGED_EQ, /* CUDA: the contiguous cache and the same one paged (page), equal bit for bit */
  DEC_EXPLAIN,  /* CUDA: the row sdpa_explain_fwd selects (name: explain_row), nothing run */
  DEC_MERGE     /* CUDA: merge_states on CUDA vs the CPU backend */
};

typedef struct dec_case {
  const char *name;
  unsigned on; /* ON_CPU | ON_CUDA */
  int small;   /* in the GPU suite's --small set (and only there) */
  int cuda_shape; /* a shape for CUDA's planners (the d 128 rows' twins, a long cache: caches
                     of up to 10^8 elements): the CPU backend runs it in the GPU suite (the
                     comparison), not in the CPU suite */
  int kind;    /* enum dec_kind */
  sdpa_dtype dt;
  int64_t b, h, hk, sq, snew, d, dv; /* dv 0: d */
  int64_t s_cache;                   /* cache rows a sequence (dense: s_k) */
  int64_t page;                      /* 0: contiguous cache */
  int batch_idx;   /* contiguous: cache_batch_idx over b + 2 shuffled rows */
  int leftpad;     /* contiguous: cache_leftpad in [0, cache_seqlens[b]] (rows before it NaN) */
  int zero_seqlen; /* sequence 0 starts with an empty cache */
  int dense;       /* no cache: dense k / v [b, s_cache, hk, d] */
  int latent;      /* v is k's first dv columns (MLA's latent cache: a view, k's strides) */
  const char *hopper_row; /* CUDA: the row the call must select on an sm_90 device whose
                             build has it (NULL: any) */
  int padded;      /* rows of d elements padded to a multiple of 8 (NaN padding) */
  int rotary;      /* 0 off, 1 interleaved, 2 half-split */
  int64_t rotary_dim;
  int causal;
  int window; /* (wl, wr), when !causal */
  int64_t wl, wr;
  float softcap;
  float scale; /* 0: 1 / sqrt(d) */
  int alibi;  /* 0 off, 1 [h], 2 [b, h] */
  int splits; /* num_splits */
  int sweep;  /* CPU: every split count 2..16 vs the call's; CUDA: every forced count 1..64 vs 1 */
  const char *explain_row; /* DEC_EXPLAIN */
  sdpa_dtype merge_out;    /* DEC_MERGE: parts dt, out merge_out, n = b parts, t = sq, h, d */
} dec_case;

/* The CUDA side (tests/gpu/test_gpu_decode.c): runs case c on CUDA from the
 * host descriptor (upload every buffer, the call of c's kind through gpu_fwd,
 * download every buffer into b: the outputs and the cache); 1 when b holds
 * results to check, 0 when there is nothing to check (a failure already
 * counted, or DEC_EXPLAIN). */
typedef int (*dec_cuda_fn)(const dec_case *c, const sdpa_fwd_desc *host, case_bufs *b);
/* merge_states on CUDA from the host descriptor (upload, call, download the
 * outputs into b); 1 on success. */
typedef int (*dec_merge_fn)(const sdpa_merge_desc *host, case_bufs *b);

/* The table, run by env's rules (cases.h); cuda and merge NULL in a CPU suite. */
void decode_cases_run(const case_env *env, dec_cuda_fn cuda, dec_merge_fn merge);

#endif /* SDPA_TEST_DECODE_CASES_H */
