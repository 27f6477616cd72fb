/*
 * staged_rows.cu - the rows fwd_staged and bwd_staged (kernels.def): a dense
 * or varlen problem whose q, k, v, out (dout, dq, dk, dv) rows are not all
 * 16-byte aligned, which only the SIMT rows take as it is, runs on the
 * tensor-core row that takes the same problem on aligned copies
 * (docs/design.md §6, staged rows). Each unaligned tensor gets a contiguous
 * copy whose rows are padded to 16 bytes (stage_copy.cu); the inputs (and
 * for varlen the outputs, whose padding rows no row writes) are copied in,
 * the row the registry picks for the staged problem runs, the unaligned
 * outputs are copied back. The copies live in the call's
 * workspace, ahead of that row's own. A row refuses (and the SIMT row runs
 * the problem) when the staged problem would go to a row that takes
 * unaligned rows anyway.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "error.h"
#include "problem.h"
#include "registry.h"
#include "cuda/kernels.h"
#include "cuda/staged/stage_copy.h"

enum { ST_Q, ST_K, ST_V, ST_OUT, ST_DOUT, ST_DQ, ST_DK, ST_DV, ST_N };

/* The tensors a staged row may copy (in this order: a forward reads those
 * before out and writes out; a backward reads those up to dout and writes
 * the rest): where the problem keeps each, whether its rows are q's (else
 * k's) and whether it has d columns (else d_v). */
typedef struct stage_tensor {
  const char *name;
  size_t ptr, st; /* offsetof the base pointer and of its strides in sdpa_problem */
  int qlike, of_d;
} stage_tensor;

#define STAGE_TENSOR(NAME, ST, QLIKE, OF_D) \
  {#NAME, offsetof(sdpa_problem, NAME), offsetof(sdpa_problem, ST), QLIKE, OF_D}
static const stage_tensor tensors[ST_N] = {
    STAGE_TENSOR(q, q_st, 1, 1),      STAGE_TENSOR(k, k_st, 0, 1),   STAGE_TENSOR(v, v_st, 0, 0),
    STAGE_TENSOR(out, o_st, 1, 0),    STAGE_TENSOR(dout, do_st, 1, 0),
    STAGE_TENSOR(dq, dq_st, 1, 1),    STAGE_TENSOR(dk, dk_st, 0, 1), STAGE_TENSOR(dv, dv_st, 0, 0)};
#undef STAGE_TENSOR

static void **tensor_ptr(const sdpa_problem *p, int t) {
  return (void **)((char *)p + tensors[t].ptr);
}
static sdpa_bshd *tensor_strides(sdpa_problem *p, int t) {
  return (sdpa_bshd *)((char *)p + tensors[t].st);
}

/* An address for sizing and refusing before the workspace exists: aligned,
 * never dereferenced (the rows' refuse functions only encode it). */
#define STAGE_PROBE_BASE ((char *)(uintptr_t)(1u << 20))

typedef struct stage_plan {
  sdpa_problem in;               /* the problem on the staged copies */
  sdpa_stage_shape sh[ST_N];
  int staged[ST_N];
  size_t bytes;                  /* the copies, each 256-byte aligned */
  const sdpa_kernel_row *row;    /* the row that runs `in` */
  size_t row_ws;                 /* its workspace */
} stage_plan;

/* The staged problem, its copies at offsets from STAGE_PROBE_BASE (a run
 * moves them onto its workspace), and the row that runs it: 0 when no row
 * does (nothing worded: a refusal words it, a run fails). */
static int stage_plan_make(const sdpa_problem *p, sdpa_op op, stage_plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->in = *p;
  pl->in.kernel = NULL;
  pl->in.workspace = NULL;
  pl->in.workspace_size = 0;
  const int elem = p->dtype == SDPA_DTYPE_F32 ? 4 : 2, per16 = 16 / elem;
  const int varlen = p->layout == SDPA_LAYOUT_VARLEN;
  for (int t = 0; t < (op == SDPA_OP_BWD ? ST_N : ST_DOUT); ++t) {
    void **ptr = tensor_ptr(&pl->in, t);
    sdpa_bshd *st = tensor_strides(&pl->in, t);
    if (!sdpa_rows_misaligned(*ptr, p->dtype, st)) continue;
    const int qlike = tensors[t].qlike;
    sdpa_stage_shape *sh = &pl->sh[t];
    sh->outer = varlen ? 1 : p->b;
    sh->rows = varlen ? (qlike ? p->total_q : p->total_k) : (qlike ? p->s_q : p->s_k);
    sh->heads = qlike ? p->h : p->h_k;
    sh->cols = tensors[t].of_d ? p->d : p->d_v;
    sh->pcols = (sh->cols + per16 - 1) / per16 * per16;
    sh->st = *st;
    sh->elem = elem;
    pl->staged[t] = 1;
    *ptr = STAGE_PROBE_BASE + pl->bytes;
    st->sh = sh->pcols;
    st->ss = sh->heads * sh->pcols;
    st->sb = varlen ? 0 : sh->rows * st->ss;
    const size_t bytes = (size_t)(sh->outer * sh->rows * sh->heads * sh->pcols) * elem;
    pl->bytes += (bytes + 255) & ~(size_t)255;
  }
  pl->row = sdpa_registry_first(&pl->in, op);
  if (!pl->row) return 0;
  pl->row_ws = pl->row->workspace ? pl->row->workspace(&pl->in, pl->row) : 0;
  return 1;
}

static const char *staged_refuse(const sdpa_problem *p, sdpa_op op, char *why, size_t n) {
  stage_plan pl;
  if (!stage_plan_make(p, op, &pl)) {
    snprintf(why, n, "no row runs the problem on aligned copies");
    return why;
  }
  if (pl.row->features & SDPA_FEAT_UNALIGNED) {
    snprintf(why, n, "on aligned copies the problem would go to %s as well", pl.row->name);
    return why;
  }
  int used = snprintf(why, n, "runs %s on 16-byte aligned copies of", pl.row->name);
  for (int t = 0; t < ST_N && used > 0 && (size_t)used < n; ++t)
    if (pl.staged[t]) used += snprintf(why + used, n - (size_t)used, " %s", tensors[t].name);
  return NULL;
}

static size_t staged_workspace(const sdpa_problem *p, sdpa_op op) {
  stage_plan pl;
  return stage_plan_make(p, op, &pl) ? pl.bytes + pl.row_ws : 0;
}

static sdpa_status staged_run(const sdpa_problem *p, sdpa_op op, const char *name,
                              const char *query) {
  cudaStream_t stream = (cudaStream_t)p->stream;
  stage_plan pl;
  if (!stage_plan_make(p, op, &pl))
    return sdpa_fail(SDPA_ERR_INTERNAL, "%s: no row runs the problem on aligned copies", name);
  void *ws = NULL;
  int owned = 0;
  SDPA_TRY(sdpa_cuda_ws_acquire(p, pl.bytes + pl.row_ws, 16, name, query, &ws, &owned));
  sdpa_status st = SDPA_OK;
  for (int t = 0; t < ST_N; ++t) /* the probe's copies moved onto the workspace */
    if (pl.staged[t]) {
      void **ptr = tensor_ptr(&pl.in, t);
      *ptr = (char *)ws + ((char *)*ptr - STAGE_PROBE_BASE);
    }
  if (pl.row_ws > 0) {
    pl.in.workspace = (char *)ws + pl.bytes;
    pl.in.workspace_size = pl.row_ws;
  }
  /* the inputs; varlen outputs too: rows past the last sequence (padding,
   * cu_seqlens[b] < total) are the caller's, which no row writes */
  const int last_in = op == SDPA_OP_BWD ? ST_DOUT : ST_V;
  const int n_tensors = op == SDPA_OP_BWD ? ST_N : ST_DOUT;
  const int copy_in = p->layout == SDPA_LAYOUT_VARLEN ? n_tensors - 1 : last_in;
  for (int t = 0; st == SDPA_OK && t <= copy_in; ++t)
    if (pl.staged[t])
      st = sdpa_stage_in(*tensor_ptr(&pl.in, t), *tensor_ptr(p, t), &pl.sh[t], stream);
  if (st == SDPA_OK) st = pl.row->run(&pl.in, pl.row);
  for (int t = last_in + 1; st == SDPA_OK && t < n_tensors; ++t)
    if (pl.staged[t])
      st = sdpa_stage_out(*tensor_ptr(p, t), *tensor_ptr(&pl.in, t), &pl.sh[t], stream);
  sdpa_trace_run(name); /* after the staged row's own: the row dispatch chose */
  return sdpa_cuda_ws_release(p, ws, owned, st, name);
}

/* ---- the rows ------------------------------------------------------------------ */

#define STAGED_ROW(NAME, OP, QUERY)                                                            \
  extern "C" const char *NAME##_refuse(const sdpa_problem *p, const sdpa_kernel_row *row,     \
                                       char *why, size_t n) {                                 \
    (void)row;                                                                                 \
    return staged_refuse(p, OP, why, n);                                                       \
  }                                                                                            \
  extern "C" size_t NAME##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row) {     \
    (void)row;                                                                                 \
    return staged_workspace(p, OP);                                                            \
  }                                                                                            \
  extern "C" sdpa_status NAME##_run(const sdpa_problem *p, const sdpa_kernel_row *row) {      \
    (void)row;                                                                                 \
    sdpa_trace_run(#NAME);                                                                     \
    return staged_run(p, OP, #NAME, QUERY);                                                    \
  }

STAGED_ROW(fwd_staged, SDPA_OP_FWD, "sdpa_fwd_workspace_size")
STAGED_ROW(bwd_staged, SDPA_OP_BWD, "sdpa_bwd_workspace_size")
