/*
 * registry.h - the kernel table of docs/design.md §5. Each row says what a
 * kernel covers (op, device, arch range, dtypes, head-dim range, features,
 * alignment) and how to run it; dispatch takes the first row, in preference
 * order, that supports the problem, and the same function that decides
 * ("supports") also explains every refusal, so dispatch, sdpa_explain_* and
 * workspace queries never disagree.
 *
 * CPU rows are listed in registry.c; CUDA rows come from the X-macro list
 * src/cuda/kernels.def, which also instantiates the kernels (one list).
 */
#ifndef SDPA_REGISTRY_H
#define SDPA_REGISTRY_H

#include <stddef.h>

#include "problem.h"
#include "backend.h"

typedef enum sdpa_op { SDPA_OP_FWD = 0, SDPA_OP_BWD = 1 } sdpa_op;

/* Features a problem may need; a row lists those it supports. */
enum {
  SDPA_FEAT_VARLEN = 1u << 0,
  SDPA_FEAT_CACHE = 1u << 1,      /* contiguous KV cache layout */
  SDPA_FEAT_PAGED = 1u << 2,      /* block_table */
  SDPA_FEAT_APPEND = 1u << 3,     /* k_new / v_new */
  SDPA_FEAT_ROTARY = 1u << 4,
  SDPA_FEAT_MASK = 1u << 5,       /* causal / window (either alignment) */
  SDPA_FEAT_ALIBI = 1u << 6,
  SDPA_FEAT_SOFTCAP = 1u << 7,
  SDPA_FEAT_BIAS = 1u << 8,
  SDPA_FEAT_DROPOUT = 1u << 9,
  SDPA_FEAT_PROBS = 1u << 10,
  SDPA_FEAT_GQA = 1u << 11,
  SDPA_FEAT_DV_NE_D = 1u << 12,   /* d_v != d */
  SDPA_FEAT_UNALIGNED = 1u << 13, /* rows or base pointers not 16-byte aligned */
  SDPA_FEAT_DBIAS = 1u << 14,
  SDPA_FEAT_SPLITKV = 1u << 15,   /* num_splits > 1 forced */
  SDPA_FEAT_SEQUSED = 1u << 16,   /* seqused_k */
  SDPA_FEAT_DBIAS_SUM = 1u << 17, /* dbias summed over a broadcast dim (extent 1 of b, h or s_q > 1) */
  SDPA_FEAT_EMPTY = 1u << 18,     /* no batch, queries or keys: outputs written as empty rows / zeros */
  SDPA_FEAT_DLSE = 1u << 19,      /* backward: lse's gradient given */
  SDPA_FEAT_ALL = (1u << 20) - 1u
};

#define SDPA_DT_F32 (1u << SDPA_DTYPE_F32)
#define SDPA_DT_F16 (1u << SDPA_DTYPE_F16)
#define SDPA_DT_BF16 (1u << SDPA_DTYPE_BF16)

typedef struct sdpa_kernel_row sdpa_kernel_row;
typedef sdpa_status (*sdpa_kernel_run_fn)(const sdpa_problem *p, const sdpa_kernel_row *row);
typedef size_t (*sdpa_kernel_ws_fn)(const sdpa_problem *p, const sdpa_kernel_row *row);
/* A row's own rule beyond the table's fields: NULL when the row runs p (a row
 * that runs p through another may leave a note naming it in why), else the
 * reason, written into why (n bytes). */
typedef const char *(*sdpa_kernel_refuse_fn)(const sdpa_problem *p, const sdpa_kernel_row *row,
                                             char *why, size_t n);

struct sdpa_kernel_row {
  const char *name;
  sdpa_op op;
  sdpa_device device;
  int min_arch, max_arch;   /* CUDA SM x10 (80, 90); 0 for CPU */
  unsigned dtypes;          /* SDPA_DT_* mask */
  int max_head_dim;         /* d and d_v must be <= this; 0 = unbounded */
  int min_head_dim;         /* d and d_v must be > this (head-dim buckets) */
  int block_m, block_n;
  unsigned features;        /* SDPA_FEAT_* supported */
  sdpa_kernel_run_fn run;
  sdpa_kernel_ws_fn workspace; /* NULL = needs none */
  unsigned required;        /* SDPA_FEAT_* the problem must have (0: none; the bias
                               rows of the backward: a bias) */
  sdpa_kernel_refuse_fn refuse; /* NULL: the fields above decide alone */
};

#ifdef __cplusplus
extern "C" {
#endif
/* Whether a tensor's rows (base ptr, strides st, elements of dtype t) are
 * not all 16-byte aligned: SDPA_FEAT_UNALIGNED (a NULL ptr is aligned). */
int sdpa_rows_misaligned(const void *ptr, sdpa_dtype t, const sdpa_bshd *st);
/* Features p needs (a pure function of the problem). */
unsigned sdpa_problem_features(const sdpa_problem *p);
/* Names of the feature bits set in f, comma separated, into buf. */
void sdpa_feature_names(unsigned f, char *buf, size_t n);

/* Rows a build may have (registry.c asserts it at compile time): what
 * sizes per-row tables such as the kernel info's feature strings. */
#define SDPA_REGISTRY_MAX_ROWS 256
int sdpa_registry_count(void);
const sdpa_kernel_row *sdpa_registry_row(int i);

/* NULL if row supports p on a device of compute capability arch (x10; 0 on
 * CPU); else writes the reason into why and returns it. A row that runs p
 * through another row (the staged rows) may leave a note naming it in why
 * when it accepts (sdpa explain shows it); why[0] = 0 otherwise. */
const char *sdpa_row_refusal(const sdpa_kernel_row *row, const sdpa_problem *p, int arch,
                             char *why, size_t n);

/* The first row of op that supports p, or NULL; no message either way (p->kernel
 * not read): what sdpa_dispatch picks unforced, for a row that runs another. */
const sdpa_kernel_row *sdpa_registry_first(const sdpa_problem *p, sdpa_op op);

/* The first row of op that supports p (honouring p->kernel), or
 * SDPA_ERR_NOT_SUPPORTED with every refusal in the message. */
sdpa_status sdpa_dispatch(const sdpa_problem *p, sdpa_op op, const sdpa_kernel_row **row);

/* Every run function names itself here first, so a test can check that the
 * kernel which ran is the row dispatch chose (one name a thread). */
void sdpa_trace_run(const char *name);
/* The name the calling thread's last run function gave, or NULL; cleared. */
const char *sdpa_trace_take(void);
#ifdef __cplusplus
}
#endif

/* CUDA (src/cuda/runtime.cu): compute capability x10 of the current device,
 * and its SM count; 0 when none is usable. */
#ifdef SDPA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif
int sdpa_cuda_arch(void);
int sdpa_cuda_sm_count(void);
/* the current device's opt-in shared memory a block in bytes (0: none usable) */
int sdpa_cuda_smem_optin(void);
/* A row's refusal of a device whose blocks cannot take `bytes` of dynamic
 * shared memory (the registry then moves on; the opt-in would fail at the
 * launch): why, written into why[n], or NULL when it fits. */
const char *sdpa_cuda_smem_refusal(int bytes, char *why, size_t n);
/* Devices the per-device caches and flags cover (more are used uncached). */
#define SDPA_MAX_DEVICES 64
/* Raises a kernel's dynamic shared-memory limit to `bytes` (> 48 KB needs it)
 * once per device; done[SDPA_MAX_DEVICES] is the caller's per-kernel flags. */
sdpa_status sdpa_cuda_opt_in_smem(const void *kernel, int bytes, unsigned char *done,
                                  const char *name);
/* Whether a kernel (as loaded on the current device) holds its
 * griddepcontrol.wait, so it may be launched as a programmatic dependent;
 * cache[SDPA_MAX_DEVICES] is the caller's per-kernel bytes. */
int sdpa_cuda_waits_for_grid(const void *kernel, unsigned char *cache);
/* The workspace of one call: the caller's (p->workspace: at least `need`
 * bytes, `align`-byte aligned, else INVALID_ARGUMENT naming `query`, the size
 * function to ask) or a stream-ordered allocation on p->stream from the
 * library's pool of the device (runtime.cu says why its own) (*owned = 1;
 * a failure is cleared from CUDA's error state and reported as
 * OUT_OF_MEMORY). sdpa_cuda_ws_release frees an owned one and returns st, or
 * the free's failure when st was SDPA_OK. */
sdpa_status sdpa_cuda_ws_acquire(const sdpa_problem *p, size_t need, size_t align,
                                 const char *who, const char *query, void **ws, int *owned);
sdpa_status sdpa_cuda_ws_release(const sdpa_problem *p, void *ws, int owned, sdpa_status st,
                                 const char *who);
#ifdef __cplusplus
}
#endif
#endif

#endif /* SDPA_REGISTRY_H */
