/*
 * cases.h - what the case tables share (tests/common/<op>_cases.c: one table of
 * cases per operation, run by one runner against every backend present, in
 * the manner of ggml's test-backend-ops).
 *
 * A case names the backends it runs on (a mask: ON_CPU, ON_CUDA). A binary
 * runs the cases of its own backend (env.primary: the CPU suites ON_CPU, the
 * GPU suites ON_CUDA) and, for each, every backend of the case it has
 * (env.backends): a GPU suite runs the CPU backend on the same inputs too
 * where the case has both bits, and compares the two. The inputs are built
 * once, on the host (case_bufs: poisoned tensors of any strides), the oracle
 * runs once, and each backend's outputs land in the same host tensors
 * (poisoned again before each backend): the CPU backend through
 * env.cpu_fwd / env.cpu_bwd, CUDA through the hook the GPU suite passes
 * (upload, call through gpu_fwd / gpu_bwd, download: tests/gpu). This file
 * builds without CUDA.
 */
#ifndef SDPA_TEST_CASES_H
#define SDPA_TEST_CASES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/harness.h"
#include "sdpa.h"

enum { ON_CPU = 1, ON_CUDA = 2, ON_BOTH = 3 };

/* A case table: tab[max] of type, ntab, and add(c), which fills d_v = d where
 * the case leaves it 0. One definition, so that every table appends alike. */
#define CASE_TABLE(type, max, what)                                   \
  static type tab[max];                                               \
  static int ntab;                                                    \
  static void add(type c) {                                           \
    if (ntab == (max)) {                                              \
      printf("FATAL " what ": more than %d cases\n", (max));          \
      exit(1);                                                        \
    }                                                                 \
    if (!c.dv) c.dv = c.d;                                            \
    tab[ntab++] = c;                                                  \
  }

/* ---- a case's host buffers ---------------------------------------------------------- */
#define CASE_MAX_BUFS 24

typedef struct case_bufs {
  int n;
  sdpa_tensor t[CASE_MAX_BUFS]; /* as allocated (a descriptor may view them otherwise) */
  size_t bytes[CASE_MAX_BUFS];  /* the allocation: to the end of the last row's pitch */
  int out[CASE_MAX_BUFS];       /* 1: written by the call (poisoned before, brought back) */
} case_bufs;

/* A row-major host tensor owned by b, poisoned everywhere (padding too).
 * Strides: with rows16 the last dim's pitch is rounded up to 8 elements
 * (16-byte rows for 16-bit dtypes); pad is added to every stride but the
 * last (test_alloc_padded's layout when !rows16). The allocation reaches
 * the end of the last row's pitch, so its padding travels with it. */
sdpa_tensor case_alloc(case_bufs *b, sdpa_dtype dt, int rank, const int64_t *shape, int rows16,
                       int64_t pad, int is_out);
/* The buffer holding address p (-1 if none). */
int case_find(const case_bufs *b, const void *p);
void case_poison_outputs(case_bufs *b);
void case_bufs_free(case_bufs *b);

/* Pointers to every tensor field of a descriptor; returns how many. */
int case_fwd_fields(sdpa_fwd_desc *d, sdpa_tensor **f);
int case_bwd_fields(sdpa_bwd_desc *d, sdpa_tensor **f);
/* The oracle's full dbias [b, h, sq, sk] summed over the dims the bias
 * broadcasts (bs: its shape [b or 1, h or 1, sq or 1, sk]); malloc'd. */
double *case_reduce_dbias(const double *full, int64_t b, int64_t h, int64_t sq, int64_t sk,
                          const int64_t *bs);

/* The logical elements of t as doubles (malloc'd; never NULL). */
double *case_doubles(const sdpa_tensor *t);
/* max |a[e] - b[e]| over e < n (the oracle's lowp error). */
double case_max_diff(const double *a, const double *b, int64_t n);
/* A contiguous copy of t (same dtype and logical values). */
sdpa_tensor case_copy(const sdpa_tensor *t);
/* "<name> <what>" or, where both backends run, "<name> [<backend>] <what>". */
const char *case_label(char *buf, size_t n, const char *name, int backend, int both,
                       const char *what);

/* ---- how a binary runs a table -------------------------------------------------------- */
typedef struct case_env {
  unsigned primary;  /* the cases this binary runs: those with this bit */
  unsigned backends; /* and on each of these the case has */
  int small;         /* the --small set (compute-sanitizer) instead of the full one */
  int list;          /* print each case's line, run nothing */
  const char *only;  /* --only S: the cases whose name contains S (NULL: all) */
  sdpa_status (*cpu_fwd)(const sdpa_fwd_desc *); /* the CPU backend's calls */
  sdpa_status (*cpu_bwd)(const sdpa_bwd_desc *);
  test_rng *rng;
} case_env;

/* argv: --small, --list, --only S (the rest is the caller's). */
case_env case_env_init(int argc, char **argv, unsigned primary, unsigned backends,
                       test_rng *rng);
/* A case is run by this binary: its mask has env->primary, its set is env's
 * and its name matches --only. */
int case_selected(const case_env *env, const char *name, unsigned on, int small);

#endif /* SDPA_TEST_CASES_H */
