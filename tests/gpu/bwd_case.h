/*
 * bwd_case.h - a backward test problem on the GPU, shared by test_gpu_bwd.c
 * (fp16 / bf16 rows) and test_gpu_bwd_tf32.c (fp32 rows): the case
 * description, its buffers (host and device, `dual`), inputs drawn from the
 * test RNG with out / lse from the CPU backend's forward, a descriptor for
 * each side (host: the oracle's; dev: the one sdpa_bwd runs), the oracle's
 * gradients, and bitwise reruns for the deterministic mode.
 */
#ifndef SDPA_TEST_GPU_BWD_CASE_H
#define SDPA_TEST_GPU_BWD_CASE_H

#include <stdint.h>

#include "common/harness.h"
#include "gpu/gpu_common.h"
#include "sdpa.h"

typedef struct bcase {
  const char *name;
  sdpa_dtype dt;
  int64_t b, h, hk, sq, sk, d;
  int causal, top_left;
  int64_t wl, wr; /* -1 unbounded; used when !causal */
  float softcap, scale, dropout;
  int alibi;      /* 0 off, 1 [h], 2 [b, h] */
  int varlen;     /* lengths drawn in [1, sq] / [1, sk]; sequence 1 empty, seqused_k on the last */
  int contiguous; /* no 16-byte row padding (rows of d % 8 != 0 elements: unaligned) */
  int64_t pad;
  int sm90;       /* on sm_90 (a build with the Hopper rows) explain must select bwd_sm90 */
} bcase;


bcase bwd_case(const char *name, sdpa_dtype dt, int64_t b, int64_t h, int64_t hk, int64_t sq,
               int64_t sk, int64_t d);

typedef struct bbufs {
  dual q, k, v, out, lse, dout, dq, dk, dv, alibi, cu_q, cu_k, used;
  sdpa_bwd_desc host, dev;
  int64_t nq, nk; /* rows of q / k (b * s or totals) */
} bbufs;

/* Inputs (N(0, 1); alibi slopes U(0.05, 0.6)), out / lse from the CPU
 * forward, both descriptors; gradients left poisoned. 0 on failure (reported). */
int bwd_case_build(const bcase *c, bbufs *f, test_rng *rng);
void bwd_case_release(bbufs *f);
/* Poisons dq / dk / dv on the host and uploads them. */
void bwd_case_poison(bbufs *f);
/* bwd_case_build, then the exact oracle in r[0] and (with_lowp) the lowp one
 * in r[1] (else r[1][*] = NULL). 1 on success: the caller owns f and r and
 * ends with bwd_case_done. 0 on failure (reported): f released, nothing left
 * to free. */
int bwd_case_prepare(const bcase *c, bbufs *f, test_rng *rng, int with_lowp, double *r[2][3]);
/* Frees r[0..1][0..2] (NULL entries too) and releases f. */
void bwd_case_done(bbufs *f, double *r[2][3]);
/* sdpa_bwd `runs` more times on fresh poison, 1 if every run returns
 * dq / dk / dv bit for bit equal to what the buffers hold now (downloaded). */
int bwd_case_rerun_same(const bcase *c, bbufs *f, int runs);

/* A dense backward descriptor on contiguous device buffers (the benches):
 * t[0..7] = q, k, v, out, dout, dq, dk, dv ([b, s, h, d], dtype dt), t[8] =
 * lse ([b, h, s], fp32). */
sdpa_bwd_desc bwd_case_dense_desc(void *const t[9], sdpa_dtype dt, int64_t b, int64_t s, int64_t h,
                                  int64_t d, int causal);

#endif /* SDPA_TEST_GPU_BWD_CASE_H */
