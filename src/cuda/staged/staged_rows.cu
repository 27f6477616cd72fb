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

static const char *const tensor_names[ST_N] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};

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

/* Tensor t of problem p: its base pointer's slot and its strides. */
static void **tensor_slot(sdpa_problem *p, int t, sdpa_bshd **st) {
  switch (t) {
  case ST_Q: *st = &p->q_st; return (void **)&p->q;
  case ST_K: *st = &p->k_st; return (void **)&p->k;
  case ST_V: *st = &p->v_st; return (void **)&p->v;
  case ST_OUT: *st = &p->o_st; return &p->out;
  case ST_DOUT: *st = &p->do_st; return (void **)&p->dout;
  case ST_DQ: *st = &p->dq_st; return &p->dq;
  case ST_DK: *st = &p->dk_st; return &p->dk;
  default: *st = &p->dv_st; return &p->dv;
  }
}

/* The staged problem, its copies at offsets from STAGE_PROBE_BASE (a run
 * moves them onto its workspace), and the row that runs it
 * (SDPA_ERR_NOT_SUPPORTED when none does). */
static sdpa_status stage_plan_make(const sdpa_problem *p, sdpa_op op, stage_plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->in = *p;
  pl->in.kernel = NULL;
  pl->in.workspace = NULL;
  pl->in.workspace_size = 0;
  const int elem = p->dtype == SDPA_DTYPE_F32 ? 4 : 2, per16 = 16 / elem;
  const int varlen = p->layout == SDPA_LAYOUT_VARLEN;
  for (int t = 0; t < (op == SDPA_OP_BWD ? ST_N : ST_DOUT); ++t) {
    sdpa_bshd *st;
    void **slot = tensor_slot(&pl->in, t, &st);
    if (!sdpa_rows_misaligned(*slot, p->dtype, st)) continue;
    const int qlike = t == ST_Q || t == ST_OUT || t == ST_DOUT || t == ST_DQ;
    sdpa_stage_shape *sh = &pl->sh[t];
    sh->outer = varlen ? 1 : p->b;
    sh->rows = varlen ? (qlike ? p->total_q : p->total_k) : (qlike ? p->s_q : p->s_k);
    sh->heads = qlike ? p->h : p->h_k;
    sh->cols = (t == ST_Q || t == ST_K || t == ST_DQ || t == ST_DK) ? p->d : p->d_v;
    sh->pcols = (sh->cols + per16 - 1) / per16 * per16;
    sh->st = *st;
    sh->elem = elem;
    pl->staged[t] = 1;
    *slot = STAGE_PROBE_BASE + pl->bytes;
    st->sh = sh->pcols;
    st->ss = sh->heads * sh->pcols;
    st->sb = varlen ? 0 : sh->rows * st->ss;
    pl->bytes += ((size_t)(sh->outer * sh->rows * sh->heads * sh->pcols) * elem + 255) & ~(size_t)255;
  }
  SDPA_TRY(sdpa_dispatch(&pl->in, op, &pl->row));
  pl->row_ws = pl->row->workspace ? pl->row->workspace(&pl->in, pl->row) : 0;
  return SDPA_OK;
}

/* stage_plan_make for a refusal or a size, which leave the caller's error
 * message as it was (a failed nested dispatch words its own). */
static sdpa_status stage_plan_quiet(const sdpa_problem *p, sdpa_op op, stage_plan *pl) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", sdpa_last_error());
  const sdpa_status st = stage_plan_make(p, op, pl);
  if (st != SDPA_OK) {
    if (saved[0])
      sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "%s", saved);
    else
      sdpa_clear_error();
  }
  return st;
}

static const char *staged_refuse(const sdpa_problem *p, sdpa_op op, char *why, size_t n) {
  stage_plan pl;
  if (stage_plan_quiet(p, op, &pl) != SDPA_OK) {
    snprintf(why, n, "no row runs the problem on aligned copies");
    return why;
  }
  if (pl.row->features & SDPA_FEAT_UNALIGNED) {
    snprintf(why, n, "on aligned copies the problem would go to %s as well", pl.row->name);
    return why;
  }
  int used = snprintf(why, n, "runs %s on 16-byte aligned copies of", pl.row->name);
  for (int t = 0; t < ST_N && used > 0 && (size_t)used < n; ++t)
    if (pl.staged[t]) used += snprintf(why + used, n - (size_t)used, " %s", tensor_names[t]);
  return NULL;
}

static size_t staged_workspace(const sdpa_problem *p, sdpa_op op) {
  stage_plan pl;
  if (stage_plan_quiet(p, op, &pl) != SDPA_OK) return 0;
  return pl.bytes + pl.row_ws;
}

static sdpa_status staged_run(const sdpa_problem *p, sdpa_op op, const char *name,
                              const char *query) {
  cudaStream_t stream = (cudaStream_t)p->stream;
  stage_plan pl;
  SDPA_TRY(stage_plan_make(p, op, &pl));
  void *ws = NULL;
  int owned = 0;
  SDPA_TRY(sdpa_cuda_ws_acquire(p, pl.bytes + pl.row_ws, 16, name, query, &ws, &owned));
  sdpa_status st = SDPA_OK;
  for (int t = 0; t < ST_N; ++t) { /* the probe's copies moved onto the workspace */
    sdpa_bshd *unused;
    void **slot = tensor_slot(&pl.in, t, &unused);
    if (pl.staged[t]) *slot = (char *)ws + ((char *)*slot - STAGE_PROBE_BASE);
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
  for (int t = 0; st == SDPA_OK && t <= copy_in; ++t) {
    if (!pl.staged[t]) continue;
    sdpa_bshd *unused;
    st = sdpa_stage_in(*tensor_slot(&pl.in, t, &unused), *tensor_slot((sdpa_problem *)p, t, &unused),
                       &pl.sh[t], stream);
  }
  if (st == SDPA_OK) st = pl.row->run(&pl.in, pl.row);
  for (int t = last_in + 1; st == SDPA_OK && t < n_tensors; ++t) {
    if (!pl.staged[t]) continue;
    sdpa_bshd *unused;
    st = sdpa_stage_out(*tensor_slot((sdpa_problem *)p, t, &unused), *tensor_slot(&pl.in, t, &unused),
                        &pl.sh[t], stream);
  }
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
