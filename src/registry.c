/*
 * registry.c - the kernel table and dispatch (docs/design.md §5). Rows are
 * in preference order: CUDA rows (from src/cuda/kernels.def through
 * cuda/registry_rows.h) first, then the CPU backend, which covers every valid
 * problem on its device. One rule, row_check, decides support; dispatch tests
 * it row by row, and sdpa_row_refusal (explain, a forced kernel, dispatch's
 * message when no row fits) words its answer, so they never disagree.
 */
#include "registry.h"

#include <stdio.h>
#include <string.h>

#include "error.h"

#ifdef SDPA_HAVE_CUDA
#include "cuda/kernels.h"
#endif

static _Thread_local const char *trace_name;

void sdpa_trace_run(const char *name) { trace_name = name; }

const char *sdpa_trace_take(void) {
  const char *name = trace_name;
  trace_name = NULL;
  return name;
}

static sdpa_status cpu_fwd_run(const sdpa_problem *p, const sdpa_kernel_row *row) {
  sdpa_trace_run(row->name);
  return sdpa_cpu_fwd(p);
}

static sdpa_status cpu_bwd_run(const sdpa_problem *p, const sdpa_kernel_row *row) {
  sdpa_trace_run(row->name);
  return sdpa_cpu_bwd(p);
}

/* Listed, never "all but": a new feature bit is refused until a row says it
 * runs it. The backward has no cache layouts, append, rotary, probs or
 * forced splits. */
#define CPU_COMMON_FEATURES                                                                 \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP | SDPA_FEAT_BIAS |   \
   SDPA_FEAT_DROPOUT | SDPA_FEAT_GQA | SDPA_FEAT_DV_NE_D | SDPA_FEAT_UNALIGNED |              \
   SDPA_FEAT_SEQUSED | SDPA_FEAT_EMPTY)
#define CPU_FWD_FEATURES                                                                    \
  (CPU_COMMON_FEATURES | SDPA_FEAT_CACHE | SDPA_FEAT_PAGED | SDPA_FEAT_APPEND |              \
   SDPA_FEAT_ROTARY | SDPA_FEAT_PROBS | SDPA_FEAT_SPLITKV)
#define CPU_BWD_FEATURES                                                                    \
  (CPU_COMMON_FEATURES | SDPA_FEAT_DBIAS | SDPA_FEAT_DBIAS_SUM | SDPA_FEAT_DLSE)

static const sdpa_kernel_row rows[] = {
#ifdef SDPA_HAVE_CUDA
#include "cuda/registry_rows.h"
#endif
    {"cpu_fwd", SDPA_OP_FWD, SDPA_DEVICE_CPU, 0, 0, SDPA_DT_F32 | SDPA_DT_F16 | SDPA_DT_BF16, 0, 0,
     0, 0, CPU_FWD_FEATURES, cpu_fwd_run, NULL, 0, NULL},
    {"cpu_bwd", SDPA_OP_BWD, SDPA_DEVICE_CPU, 0, 0, SDPA_DT_F32 | SDPA_DT_F16 | SDPA_DT_BF16, 0, 0,
     0, 0, CPU_BWD_FEATURES, cpu_bwd_run, NULL, 0, NULL},
};

_Static_assert(sizeof rows / sizeof rows[0] <= SDPA_REGISTRY_MAX_ROWS,
               "more registry rows than SDPA_REGISTRY_MAX_ROWS: raise it");

int sdpa_registry_count(void) { return (int)(sizeof rows / sizeof rows[0]); }

const sdpa_kernel_row *sdpa_registry_row(int i) {
  return i >= 0 && i < sdpa_registry_count() ? &rows[i] : NULL;
}

/* ---- what a problem needs ---------------------------------------------------- */

/* 16-byte alignment of a base pointer and its row strides: what cp.async and
 * vector loads need. A head dim that is not a multiple of 8 is fine as long as
 * the rows are (e.g. a padded buffer); the tile is zero-filled past d. */
int sdpa_rows_misaligned(const void *ptr, sdpa_dtype t, const sdpa_bshd *st) {
  size_t es = (t == SDPA_DTYPE_F32) ? 4 : 2;
  if (!ptr) return 0;
  if (((uintptr_t)ptr) % 16) return 1;
  if (st && (((size_t)st->sb * es) % 16 || ((size_t)st->ss * es) % 16 || ((size_t)st->sh * es) % 16))
    return 1;
  return 0;
}

/* A problem with no batch, no query rows or no key rows: the tiled kernels
 * (fixed grids, tensor maps of non-zero extent) leave it to the rows that
 * write empty rows (out 0, lse +inf) and zero gradients element by element.
 * An append with no queries is not empty: the cache is still written. */
static int sdpa_problem_empty(const sdpa_problem *p) {
  if (p->b == 0) return 1;
  if (p->layout == SDPA_LAYOUT_VARLEN) return p->total_q == 0 || p->total_k == 0;
  if (p->s_new > 0) return 0;
  return p->s_q == 0 || p->s_k == 0;
}

unsigned sdpa_problem_features(const sdpa_problem *p) {
  unsigned f = 0;
  if (p->layout == SDPA_LAYOUT_VARLEN) f |= SDPA_FEAT_VARLEN;
  if (p->page_size > 0)
    f |= SDPA_FEAT_PAGED; /* a paged cache, or paged varlen keys */
  else if (p->layout == SDPA_LAYOUT_CACHE)
    f |= SDPA_FEAT_CACHE;
  if (p->s_new > 0) f |= SDPA_FEAT_APPEND;
  if (p->rotary_dim > 0) f |= SDPA_FEAT_ROTARY;
  if (p->window_left >= 0 || p->window_right >= 0) f |= SDPA_FEAT_MASK;
  if (p->alibi) f |= SDPA_FEAT_ALIBI;
  if (p->softcap > 0.0f) f |= SDPA_FEAT_SOFTCAP;
  if (p->bias) f |= SDPA_FEAT_BIAS;
  if (p->dropout_p > 0.0f) f |= SDPA_FEAT_DROPOUT;
  if (p->probs) f |= SDPA_FEAT_PROBS;
  if (p->h != p->h_k) f |= SDPA_FEAT_GQA;
  if (p->d != p->d_v) f |= SDPA_FEAT_DV_NE_D;
  if (p->dbias) f |= SDPA_FEAT_DBIAS;
  if (sdpa_dbias_sums(p)) f |= SDPA_FEAT_DBIAS_SUM;
  if (p->num_splits > 1) f |= SDPA_FEAT_SPLITKV;
  if (p->seqused_k) f |= SDPA_FEAT_SEQUSED;
  if (sdpa_problem_empty(p)) f |= SDPA_FEAT_EMPTY;
  if (p->dlse) f |= SDPA_FEAT_DLSE;
  if (sdpa_rows_misaligned(p->q, p->dtype, &p->q_st) ||
      sdpa_rows_misaligned(p->k, p->dtype, &p->k_st) ||
      sdpa_rows_misaligned(p->v, p->dtype, &p->v_st) ||
      sdpa_rows_misaligned(p->out, p->dtype, &p->o_st) ||
      (p->is_bwd && (sdpa_rows_misaligned(p->dout, p->dtype, &p->do_st) ||
                     sdpa_rows_misaligned(p->dq, p->dtype, &p->dq_st) ||
                     sdpa_rows_misaligned(p->dk, p->dtype, &p->dk_st) ||
                     sdpa_rows_misaligned(p->dv, p->dtype, &p->dv_st))) ||
      (p->s_new > 0 && (sdpa_rows_misaligned(p->k_new, p->dtype, &p->kn_st) ||
                        sdpa_rows_misaligned(p->v_new, p->dtype, &p->vn_st))))
    f |= SDPA_FEAT_UNALIGNED;
  return f;
}

static const char *feature_name(unsigned bit) {
  switch (bit) {
  case SDPA_FEAT_VARLEN: return "varlen";
  case SDPA_FEAT_CACHE: return "kv-cache";
  case SDPA_FEAT_PAGED: return "paged-kv";
  case SDPA_FEAT_APPEND: return "append";
  case SDPA_FEAT_ROTARY: return "rotary";
  case SDPA_FEAT_MASK: return "causal/window";
  case SDPA_FEAT_ALIBI: return "alibi";
  case SDPA_FEAT_SOFTCAP: return "softcap";
  case SDPA_FEAT_BIAS: return "bias";
  case SDPA_FEAT_DROPOUT: return "dropout";
  case SDPA_FEAT_PROBS: return "return-probs";
  case SDPA_FEAT_GQA: return "gqa";
  case SDPA_FEAT_DV_NE_D: return "d_v!=d";
  case SDPA_FEAT_UNALIGNED: return "unaligned";
  case SDPA_FEAT_DBIAS: return "dbias";
  case SDPA_FEAT_DBIAS_SUM: return "dbias-broadcast";
  case SDPA_FEAT_SPLITKV: return "split-kv";
  case SDPA_FEAT_SEQUSED: return "seqused_k";
  case SDPA_FEAT_EMPTY: return "empty";
  case SDPA_FEAT_DLSE: return "dlse";
  }
  return "?";
}

void sdpa_feature_names(unsigned f, char *buf, size_t n) {
  size_t used = 0;
  if (n == 0) return;
  buf[0] = '\0';
  for (unsigned bit = 1; bit && bit <= SDPA_FEAT_ALL; bit <<= 1) {
    if (!(f & bit)) continue;
    int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", feature_name(bit));
    if (w < 0 || (size_t)w >= n - used) return;
    used += (size_t)w;
  }
  if (used == 0) snprintf(buf, n, "none");
}

/* ---- support ------------------------------------------------------------------ */

/* Why a row cannot run a problem: the one rule behind dispatch (which only
 * tests it) and sdpa_row_refusal (which also words it). */
typedef enum refusal {
  FITS = 0,
  WRONG_DEVICE,
  NO_GPU,
  WRONG_ARCH,
  WRONG_DTYPE,
  WRONG_HEAD_DIM,
  MISSING_FEATURES, /* the problem needs features the row lacks */
  REQUIRED_FEATURES, /* the row needs features the problem lacks */
  OWN_RULE           /* the row's refuse function declines */
} refusal;

static int64_t head_dim_max(const sdpa_problem *p) { return p->d > p->d_v ? p->d : p->d_v; }

/* f: sdpa_problem_features(p), computed once by the caller; why (n bytes)
 * receives the words of a row's own rule. */
static refusal row_check(const sdpa_kernel_row *row, const sdpa_problem *p, int arch, unsigned f,
                         char *why, size_t n) {
  if (row->device != p->device) return WRONG_DEVICE;
  if (row->device == SDPA_DEVICE_CUDA) {
    if (arch == 0) return NO_GPU;
    if (arch < row->min_arch || (row->max_arch && arch > row->max_arch)) return WRONG_ARCH;
  }
  if (!(row->dtypes & (1u << p->dtype))) return WRONG_DTYPE;
  const int64_t dmax = head_dim_max(p);
  if ((row->max_head_dim && dmax > row->max_head_dim) || dmax <= row->min_head_dim)
    return WRONG_HEAD_DIM;
  if (f & ~row->features) return MISSING_FEATURES;
  if (row->required & ~f) return REQUIRED_FEATURES;
  if (row->refuse && row->refuse(p, row, why, n)) return OWN_RULE;
  return FITS;
}

const char *sdpa_row_refusal(const sdpa_kernel_row *row, const sdpa_problem *p, int arch,
                             char *why, size_t n) {
  const unsigned f = sdpa_problem_features(p);
  char names[256];
  if (n > 0) why[0] = '\0';
  switch (row_check(row, p, arch, f, why, n)) {
  case FITS: return NULL;
  case WRONG_DEVICE:
    snprintf(why, n, "runs on %s, the problem is on %s",
             row->device == SDPA_DEVICE_CUDA ? "CUDA" : "the CPU",
             p->device == SDPA_DEVICE_CUDA ? "CUDA" : "the CPU");
    break;
  case NO_GPU: snprintf(why, n, "no usable CUDA device is visible"); break;
  case WRONG_ARCH:
    snprintf(why, n, "needs sm_%d..sm_%d, the device is sm_%d", row->min_arch, row->max_arch, arch);
    break;
  case WRONG_DTYPE: snprintf(why, n, "dtype %s not supported", sdpa_dtype_string(p->dtype)); break;
  case WRONG_HEAD_DIM:
    snprintf(why, n, "head dim %lld outside (%d, %d]", (long long)head_dim_max(p), row->min_head_dim,
             row->max_head_dim);
    break;
  case MISSING_FEATURES:
    sdpa_feature_names(f & ~row->features, names, sizeof names);
    snprintf(why, n, "does not support: %s", names);
    break;
  case REQUIRED_FEATURES:
    sdpa_feature_names(row->required & ~f, names, sizeof names);
    snprintf(why, n, "needs: %s (a kernel for problems with it)", names);
    break;
  case OWN_RULE: break; /* worded by the row */
  }
  return why;
}

static int current_arch(const sdpa_problem *p) {
#ifdef SDPA_HAVE_CUDA
  if (p->device == SDPA_DEVICE_CUDA) return sdpa_cuda_arch();
#else
  (void)p;
#endif
  return 0;
}

const sdpa_kernel_row *sdpa_registry_first(const sdpa_problem *p, sdpa_op op) {
  const int arch = current_arch(p);
  const unsigned f = sdpa_problem_features(p);
  char why[256];
  for (int i = 0; i < sdpa_registry_count(); ++i) {
    const sdpa_kernel_row *row = &rows[i];
    if (row->op != op || row->device != p->device) continue;
    if (row_check(row, p, arch, f, why, sizeof why) == FITS) return row;
  }
  return NULL;
}

sdpa_status sdpa_dispatch(const sdpa_problem *p, sdpa_op op, const sdpa_kernel_row **out) {
  const char *opname = op == SDPA_OP_FWD ? "forward" : "backward";
  char why[256];
  *out = NULL;
  if (p->kernel) {
    const int arch = current_arch(p);
    for (int i = 0; i < sdpa_registry_count(); ++i) {
      const sdpa_kernel_row *row = &rows[i];
      if (row->op != op || strcmp(row->name, p->kernel) != 0) continue;
      if (sdpa_row_refusal(row, p, arch, why, sizeof why))
        return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "attn.kernel = \"%s\": this kernel cannot run the problem: %s",
                         p->kernel, why);
      *out = row;
      return SDPA_OK;
    }
    return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT,
                     "attn.kernel = \"%s\": no %s kernel of that name in this build (see `sdpa kernels`)",
                     p->kernel, opname);
  }
  /* the first row that fits, tested without words ... */
  *out = sdpa_registry_first(p, op);
  if (*out) return SDPA_OK;
  /* ... and only when none does, every refusal worded for the message */
  const int arch = current_arch(p);
  char msg[900];
  size_t used = 0;
  msg[0] = '\0';
  for (int i = 0; i < sdpa_registry_count(); ++i) {
    const sdpa_kernel_row *row = &rows[i];
    if (row->op != op || row->device != p->device) continue;
    if (!sdpa_row_refusal(row, p, arch, why, sizeof why)) continue; /* never: no row fit above */
    if (used < sizeof msg) {
      int w = snprintf(msg + used, sizeof msg - used, "; %s: %s", row->name, why);
      if (w > 0) used += (size_t)w;
    }
  }
  if (p->device == SDPA_DEVICE_CUDA) {
#ifndef SDPA_HAVE_CUDA
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "attn.device = SDPA_DEVICE_CUDA: no %s kernel covers the problem: this libsdpa "
                     "was built without the CUDA backend (no nvcc at build time)", opname);
#else
    if (arch == 0)
      return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                       "attn.device = SDPA_DEVICE_CUDA: no %s kernel covers the problem: no usable "
                       "CUDA device is visible", opname);
#endif
  }
  return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "no %s kernel covers the problem on %s%s", opname,
                   p->device == SDPA_DEVICE_CUDA ? "CUDA" : "the CPU",
                   used ? msg : " (no kernel of this device in this build)");
}
