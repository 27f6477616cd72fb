/*
 * backend.h - what each backend exports to the dispatcher (api.c, registry.c):
 * plain functions over a validated sdpa_problem / sdpa_merge_problem. A
 * backend may assume everything validate.c checks; it still returns a status
 * (allocation, CUDA errors) and never prints.
 */
#ifndef SDPA_BACKEND_H
#define SDPA_BACKEND_H

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* merge_states, normalized: part n, token t, head hh, element e of
 * out_parts at n*op_sn + t*op_st + hh*op_sh + e; lse likewise. */
typedef struct sdpa_merge_problem {
  sdpa_device device;
  void *stream;
  int64_t n, t, h, d;
  const void *out_parts;
  sdpa_dtype parts_dtype;
  int64_t op_sn, op_st, op_sh;
  const float *lse_parts;
  int64_t lp_sn, lp_st, lp_sh;
  void *out;
  sdpa_dtype out_dtype;
  int64_t o_st, o_sh;
  float *lse; /* NULL = not asked */
  int64_t l_st, l_sh;
} sdpa_merge_problem;

/* ---- CPU backend (src/cpu/) ------------------------------------------------ */
sdpa_status sdpa_cpu_fwd(const sdpa_problem *p);
sdpa_status sdpa_cpu_bwd(const sdpa_problem *p);
sdpa_status sdpa_cpu_merge(const sdpa_merge_problem *m);
/* The number of key splits the CPU forward uses for p (p->num_splits if > 0). */
int sdpa_cpu_num_splits(const sdpa_problem *p);

/* ---- validation (src/validate.c) ------------------------------------------- */
/* Check every argument of desc and fill *p. On failure *p is unspecified and
 * the last-error message names the argument, its value and what was expected. */
sdpa_status sdpa_validate_fwd(const sdpa_fwd_desc *desc, sdpa_problem *p);
sdpa_status sdpa_validate_bwd(const sdpa_bwd_desc *desc, sdpa_problem *p);
sdpa_status sdpa_validate_merge(const sdpa_merge_desc *desc, sdpa_merge_problem *m);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_BACKEND_H */
