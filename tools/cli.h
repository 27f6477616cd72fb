/*
 * cli.h - what the files of the `sdpa` command-line tool share: the options of
 * one attention problem (parsed by cli_args.c from the flags of `sdpa run` and
 * `sdpa explain`), the problem itself with its host (and, on CUDA, device)
 * buffers (cli_problem.c), the check against the double-precision oracle
 * (cli_check.c), and the subcommands (cli_run.c, cli_kernels.c).
 *
 * Exit codes of every subcommand: 0 = ran (and the check passed), 1 = a library
 * error or a failed check, 2 = bad flags.
 */
#ifndef SDPA_CLI_H
#define SDPA_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "sdpa.h"
#include "problem.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_HELP = -1 };

typedef enum cli_rotary { CLI_ROTARY_NONE = 0, CLI_ROTARY_INTERLEAVED, CLI_ROTARY_HALF } cli_rotary;

/* ---- options (cli_args.c) -------------------------------------------------- */
typedef struct cli_opts {
  int64_t b, s_q, s_k, h, h_k, d, d_v; /* 0 = not given: filled after parsing */
  int seqlen_k_given;      /* --seqlen-k itself (not --seqlen) */
  sdpa_dtype dtype;
  int causal;              /* -1 = not given (on unless --window or --no-causal) */
  sdpa_mask_align align;
  int window;              /* 1 if --window was given */
  int64_t window_left, window_right;
  float softcap;
  int alibi, bias;
  float dropout;
  uint64_t seed;
  int varlen;
  int64_t cache;           /* -1 = dense / varlen; else tokens already in the cache */
  int64_t page;            /* 0 = contiguous cache */
  int64_t new_kv;          /* tokens appended to the cache */
  cli_rotary rotary;
  int splits, threads, iters;
  int device;              /* -1 = auto, else an sdpa_device */
  const char *kernel;
  int bwd, check;
} cli_opts;

/* Parses argv[0..argc) (the flags after the subcommand name cmd) into *o and
 * resolves defaults. Returns CLI_OK, CLI_HELP (usage printed to stdout) or
 * CLI_USAGE (message printed to stderr). */
int cli_parse(const char *cmd, int argc, char **argv, cli_opts *o);
void cli_usage_main(FILE *f);
void cli_usage_problem(FILE *f, const char *cmd);
/* One-line summary of the problem ("b=2 s_q=1024 ... bf16 causal"). */
void cli_describe(const cli_opts *o, char *buf, size_t n);

/* ---- the problem and its buffers (cli_problem.c) ---------------------------- */
/* A tensor of the problem: the host copy (always) and, on CUDA, a device copy. */
typedef struct cli_tensor {
  sdpa_tensor t;           /* host view (data NULL = absent) */
  void *dev;               /* device copy (CUDA runs) */
  size_t bytes;
} cli_tensor;

typedef struct cli_problem {
  cli_opts o;
  sdpa_device device;
  cli_tensor q, k, v, out, lse;
  cli_tensor cu_q, cu_k, cache_seqlens, block_table, k_new, v_new, rot_cos, rot_sin;
  cli_tensor alibi, bias;
  cli_tensor dout, dq, dk, dv, dbias;
  int64_t max_len_q, max_len_k; /* varlen maxima */
} cli_problem;

/* Allocates and fills the buffers (random with o->seed when fill, else only
 * the index arrays), uploads them on CUDA. Returns CLI_OK, CLI_FAIL. */
int cli_problem_build(cli_problem *P, const cli_opts *o, sdpa_device device, int fill);
void cli_problem_free(cli_problem *P);
/* Descriptors over the device buffers (dev = 1) or the host buffers (dev = 0,
 * for the oracle; device = CPU). bwd may be NULL. */
void cli_problem_desc(const cli_problem *P, int dev, sdpa_fwd_desc *fwd, sdpa_bwd_desc *bwd);
/* Poisons the outputs (NaN) on the run's device. */
int cli_problem_poison(cli_problem *P, int bwd);
/* Copies the outputs back to the host copies (no-op on CPU). */
int cli_problem_download(cli_problem *P, int bwd);
/* The forward FLOPs under the bench convention (4*b*h*s_q*s_k*d, /2 causal);
 * varlen sums the per-sequence products. */
double cli_problem_flops(const cli_problem *P);

/* ---- the oracle check (cli_check.c) ------------------------------------------ */
/* Checks the outputs held in the host copies against ref_fwd (and ref_bwd with
 * bwd), on every row of a subset of (batch, kv-head group) slices chosen to keep
 * the check to a few seconds. Prints the result; returns CLI_OK or CLI_FAIL. */
int cli_check(cli_problem *P, int bwd);
double cli_atol(sdpa_dtype dtype);

/* ---- helpers ------------------------------------------------------------------ */
int cli_library_error(const char *cmd, const char *what, sdpa_status st);
double cli_now(void); /* seconds, monotonic */

/* ---- subcommands ---------------------------------------------------------------- */
int cli_cmd_run(int argc, char **argv);
int cli_cmd_explain(int argc, char **argv);
int cli_cmd_kernels(int argc, char **argv);

#endif /* SDPA_CLI_H */
