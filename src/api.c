/*
 * api.c - the public entry points: initialise descriptors, validate, pick a
 * kernel from the registry, run it. Everything else lives behind these calls:
 * validate.c (arguments), registry.c (choice), the backends (work).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "registry.h"

#ifdef SDPA_HAVE_CUDA
sdpa_status sdpa_cuda_merge(const sdpa_merge_problem *m);
#endif

/* ---- descriptors -------------------------------------------------------------- */

static void attn_defaults(sdpa_attn *a) {
  memset(a, 0, sizeof *a);
  a->device = SDPA_DEVICE_CPU;
  a->align = SDPA_ALIGN_BOTTOM_RIGHT;
  a->window_left = -1;
  a->window_right = -1;
}

void sdpa_fwd_init(sdpa_fwd_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  attn_defaults(&desc->attn);
}

void sdpa_bwd_init(sdpa_bwd_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  attn_defaults(&desc->attn);
}

void sdpa_merge_init(sdpa_merge_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->device = SDPA_DEVICE_CPU;
}

sdpa_tensor sdpa_tensor_contiguous(void *data, sdpa_dtype dtype, int rank, const int64_t *shape) {
  sdpa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  if (rank < 0 || rank > SDPA_MAX_RANK || (!shape && rank > 0)) {
    t.rank = -1; /* rejected by validation with a message naming the tensor */
    return t;
  }
  t.rank = rank;
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.stride[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
  return t;
}

int sdpa_cuda_available(void) {
#ifdef SDPA_HAVE_CUDA
  return sdpa_cuda_arch() > 0;
#else
  return 0;
#endif
}

/* ---- forward / backward ---------------------------------------------------------- */

/* A validated problem to the registry's row for it, which runs it. */
static sdpa_status dispatch_run(const sdpa_problem *p, sdpa_op op) {
  const sdpa_kernel_row *row;
  SDPA_TRY(sdpa_dispatch(p, op, &row));
  return row->run(p, row);
}

sdpa_status sdpa_fwd(const sdpa_fwd_desc *desc) {
  sdpa_problem p;
  sdpa_clear_error();
  SDPA_TRY(sdpa_validate_fwd(desc, &p));
  return dispatch_run(&p, SDPA_OP_FWD);
}

sdpa_status sdpa_bwd(const sdpa_bwd_desc *desc) {
  sdpa_problem p;
  sdpa_clear_error();
  SDPA_TRY(sdpa_validate_bwd(desc, &p));
  return dispatch_run(&p, SDPA_OP_BWD);
}

static sdpa_status workspace_of(const sdpa_problem *p, sdpa_op op, size_t *bytes) {
  const sdpa_kernel_row *row;
  SDPA_CHECK(bytes != NULL, SDPA_ERR_INVALID_ARGUMENT, "bytes = NULL: expected a pointer to a size_t");
  *bytes = 0;
  SDPA_TRY(sdpa_dispatch(p, op, &row));
  *bytes = row->workspace ? row->workspace(p, row) : 0;
  return SDPA_OK;
}

sdpa_status sdpa_fwd_workspace_size(const sdpa_fwd_desc *desc, size_t *bytes) {
  sdpa_problem p;
  sdpa_clear_error();
  SDPA_TRY(sdpa_validate_fwd(desc, &p));
  return workspace_of(&p, SDPA_OP_FWD, bytes);
}

sdpa_status sdpa_bwd_workspace_size(const sdpa_bwd_desc *desc, size_t *bytes) {
  sdpa_problem p;
  sdpa_clear_error();
  SDPA_TRY(sdpa_validate_bwd(desc, &p));
  return workspace_of(&p, SDPA_OP_BWD, bytes);
}

/* ---- merge_states ------------------------------------------------------------------ */

sdpa_status sdpa_merge_states(const sdpa_merge_desc *desc) {
  sdpa_merge_problem m;
  sdpa_clear_error();
  SDPA_TRY(sdpa_validate_merge(desc, &m));
  if (m.device == SDPA_DEVICE_CPU) return sdpa_cpu_merge(&m);
#ifdef SDPA_HAVE_CUDA
  return sdpa_cuda_merge(&m);
#else
  return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                   "device = SDPA_DEVICE_CUDA: no merge kernel covers the problem: this libsdpa was "
                   "built without the CUDA backend (no nvcc at build time)");
#endif
}

/* ---- registry and explain ------------------------------------------------------------ */

int sdpa_kernel_count(void) { return sdpa_registry_count(); }

static const char *dtype_list(unsigned mask) {
  switch (mask) {
  case SDPA_DT_F32: return "f32";
  case SDPA_DT_F16: return "f16";
  case SDPA_DT_BF16: return "bf16";
  case SDPA_DT_F16 | SDPA_DT_BF16: return "f16,bf16";
  case SDPA_DT_F32 | SDPA_DT_F16 | SDPA_DT_BF16: return "f32,f16,bf16";
  }
  return "mixed";
}

/* Feature strings for the info struct must outlive the call: one static
 * string per row, all built once (rows are constant; pthread_once, so
 * concurrent sdpa_kernel_get calls never see one half written). */
#define SDPA_FEATURE_TEXT 256
static char feature_text[SDPA_REGISTRY_MAX_ROWS][SDPA_FEATURE_TEXT];
static pthread_once_t feature_text_once = PTHREAD_ONCE_INIT;

static void feature_text_build(void) {
  int n = sdpa_registry_count();
  for (int i = 0; i < n; ++i)
    sdpa_feature_names(sdpa_registry_row(i)->features, feature_text[i], SDPA_FEATURE_TEXT);
}

sdpa_status sdpa_kernel_get(int index, sdpa_kernel_info *info) {
  sdpa_clear_error();
  SDPA_CHECK(info != NULL, SDPA_ERR_INVALID_ARGUMENT, "info = NULL: expected a pointer to sdpa_kernel_info");
  SDPA_CHECK(index >= 0 && index < sdpa_registry_count(), SDPA_ERR_INVALID_ARGUMENT,
             "index = %d: expected 0 <= index < sdpa_kernel_count() = %d", index, sdpa_registry_count());
  const sdpa_kernel_row *row = sdpa_registry_row(index);
  pthread_once(&feature_text_once, feature_text_build);
  info->name = row->name;
  info->op = row->op == SDPA_OP_FWD ? "fwd" : "bwd";
  info->device = row->device;
  info->min_arch = row->min_arch;
  info->max_arch = row->max_arch;
  info->dtypes = dtype_list(row->dtypes);
  info->max_head_dim = row->max_head_dim;
  info->block_m = row->block_m;
  info->block_n = row->block_n;
  info->features = feature_text[index];
  return SDPA_OK;
}

static void describe(const sdpa_problem *p, char *buf, size_t n) {
  static const char *layouts[] = {"dense", "varlen", "kv-cache"};
  char feats[256];
  sdpa_feature_names(sdpa_problem_features(p), feats, sizeof feats);
  snprintf(buf, n,
           "problem: %s %s %s b=%lld s_q=%lld s_k=%lld h=%lld h_k=%lld d=%lld d_v=%lld on %s; needs: %s\n",
           p->is_bwd ? "backward" : "forward", layouts[p->layout], sdpa_dtype_string(p->dtype),
           (long long)p->b, (long long)p->s_q, (long long)p->s_k, (long long)p->h, (long long)p->h_k,
           (long long)p->d, (long long)p->d_v, p->device == SDPA_DEVICE_CUDA ? "CUDA" : "CPU", feats);
}

/* Appends formatted text to buf (n bytes, NUL-terminated, truncating); *used
 * becomes n when something did not fit. */
static void append(char *buf, size_t n, size_t *used, const char *fmt, ...) SDPA_PRINTF(4, 5);
static void append(char *buf, size_t n, size_t *used, const char *fmt, ...) {
  if (*used + 1 >= n) {
    *used = n;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *used, n - *used, fmt, ap);
  va_end(ap);
  if (w > 0) *used = *used + (size_t)w < n ? *used + (size_t)w : n;
}

/* A cut explanation says so at its end (instead of stopping mid-word). */
static void mark_truncated(char *buf, size_t n, size_t used) {
  static const char note[] = "\n... (truncated: a larger buffer holds the rest)\n";
  if (used < n || n < sizeof note) return;
  memcpy(buf + n - sizeof note, note, sizeof note);
}

static sdpa_status explain(const sdpa_problem *p, sdpa_op op, char *buf, size_t n) {
  SDPA_CHECK(buf != NULL && n > 0, SDPA_ERR_INVALID_ARGUMENT,
             "buf = %p, buf_size = %zu: expected a writable buffer of at least 1 byte", (void *)buf, n);
  const sdpa_kernel_row *chosen = NULL;
  sdpa_status st = sdpa_dispatch(p, op, &chosen);
  char problem[512];
  size_t used = 0;
  buf[0] = '\0';
  if (chosen)
    append(buf, n, &used, "selected: %s\n", chosen->name);
  else
    append(buf, n, &used, "selected: none (%s)\n", sdpa_last_error());
  describe(p, problem, sizeof problem);
  append(buf, n, &used, "%s", problem);
  int arch = 0;
#ifdef SDPA_HAVE_CUDA
  if (p->device == SDPA_DEVICE_CUDA) arch = sdpa_cuda_arch();
#endif
  for (int i = 0; i < sdpa_registry_count(); ++i) {
    const sdpa_kernel_row *row = sdpa_registry_row(i);
    char why[256];
    if (row->op != op) continue;
    const char *no = sdpa_row_refusal(row, p, arch, why, sizeof why);
    const char *note = !no && why[0] ? why : NULL; /* a row that runs p through another */
    if (row == chosen)
      append(buf, n, &used, "  %-28s selected%s%s\n", row->name, note ? ": " : "", note ? note : "");
    else if (no)
      append(buf, n, &used, "  %-28s no: %s\n", row->name, why);
    else
      append(buf, n, &used, "  %-28s could run%s%s; an earlier row is preferred\n", row->name,
             note ? ": " : "", note ? note : "");
  }
  mark_truncated(buf, n, used);
  return st;
}

/* How an explain call starts: the buffer is emptied before validation, so a
 * refused descriptor leaves "" there, not the caller's stale bytes (sdpa.h:
 * always NUL-terminated). */
static void explain_begin(char *buf, size_t n) {
  sdpa_clear_error();
  if (buf && n > 0) buf[0] = '\0';
}

sdpa_status sdpa_explain_fwd(const sdpa_fwd_desc *desc, char *buf, size_t buf_size) {
  sdpa_problem p;
  explain_begin(buf, buf_size);
  SDPA_TRY(sdpa_validate_fwd(desc, &p));
  return explain(&p, SDPA_OP_FWD, buf, buf_size);
}

sdpa_status sdpa_explain_bwd(const sdpa_bwd_desc *desc, char *buf, size_t buf_size) {
  sdpa_problem p;
  explain_begin(buf, buf_size);
  SDPA_TRY(sdpa_validate_bwd(desc, &p));
  return explain(&p, SDPA_OP_BWD, buf, buf_size);
}
