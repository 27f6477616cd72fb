/*
 * sdpa.h - fused scaled-dot-product attention with a C ABI.
 *
 * This header is the whole public API and its documentation. One library,
 * two backends (CPU and CUDA) behind the same calls:
 *
 *   sdpa_fwd()            forward: dense, varlen (cu_seqlens), KV cache
 *                         (contiguous or paged, with in-call append and rotary),
 *                         split-KV, every score modifier, dropout, lse.
 *   sdpa_bwd()            backward: dq, dk, dv (summed over a GQA group), dbias.
 *   sdpa_merge_states()   merge partial (out, lse) pairs exactly (split-KV,
 *                         ring / context-parallel attention).
 *   sdpa_explain_*()      which kernel a problem gets, and why not the others.
 *
 * Conventions
 * - Every call returns an sdpa_status. On failure, sdpa_last_error() returns a
 *   sentence (thread-local, valid until the next failing call on the thread)
 *   that names the argument, its value and what was expected. The library never
 *   prints, exits or aborts.
 * - Descriptors are plain structs. Always initialise them with sdpa_fwd_init()
 *   / sdpa_bwd_init() / sdpa_merge_init(): these set struct_size (the ABI guard:
 *   new fields are only appended, and the library reads only struct_size bytes)
 *   and every default. An absent optional tensor is one whose data is NULL.
 * - Tensors are {data, dtype, rank, shape[], stride[]}; strides are in elements
 *   and the last dimension must have stride 1. Pointers point to host memory for
 *   SDPA_DEVICE_CPU and to device memory for SDPA_DEVICE_CUDA.
 * - Semantics (shared by every backend and kernel; "the contract"):
 *     s_ij = scale * q_i . k_j                  (scale 0 means 1/sqrt(d))
 *     softcap c > 0:  s = c * tanh(s / c)
 *     s += bias[b, h, i, j]                     (additive, any strides, -inf ok)
 *     s -= alibi_slope[h] * |i + s_k - s_q - j|
 *     mask: off = s_k - s_q (bottom-right) or 0 (top-left); window (l, r), -1
 *           unbounded, keeps i + off - l <= j <= i + off + r; causal = (-1, 0)
 *     p_ij = exp(s_ij - lse_i),  lse_i = log(sum_j exp(s_ij)) (natural log)
 *     dropout p: element dropped as defined at SDPA dropout below, kept ones
 *           scaled by 1/(1-p)
 *     out_i = sum_j p_ij v_j
 *   A row with no visible key gives out = 0 and lse = +inf, never NaN.
 *   s_q, s_k are per-sequence lengths (per batch entry for varlen / cache).
 *
 * Dropout (bit-exact across backends, kernels, tilings):
 *   Philox4x32-10, key = (seed & 0xffffffff, seed >> 32),
 *   counter = (j / 16, i, batch * h + head, offset) with i, j indices inside
 *   the sequence. The 128-bit output x0..x3 holds sixteen 8-bit uniforms:
 *   field f is (x[f/4] >> (8 * (f % 4))) & 0xff. Element j uses field j % 16
 *   and is dropped iff that field < round(p * 256): the drop probability is p
 *   rounded to a multiple of 1/256 (FlashAttention-2's 8-bit fields; the kept
 *   ones are still scaled by 1/(1-p), as there), e.g. 26/256 = 0.1016 for
 *   p = 0.1; round() takes halves up, and p < 1/512 drops nothing (the kept
 *   values are still scaled). One Philox call serves 16 elements.
 */
#ifndef SDPA_H
#define SDPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SDPA_VERSION_MAJOR 0
#define SDPA_VERSION_MINOR 1
#define SDPA_VERSION_PATCH 0
#define SDPA_VERSION_NUMBER \
  (SDPA_VERSION_MAJOR * 10000 + SDPA_VERSION_MINOR * 100 + SDPA_VERSION_PATCH)

#if defined(_WIN32)
#define SDPA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define SDPA_API __attribute__((visibility("default")))
#else
#define SDPA_API
#endif

/* ---- status -------------------------------------------------------------- */

/* Values never change; new codes are only appended. */
typedef enum sdpa_status {
  SDPA_OK = 0,
  SDPA_ERR_INVALID_ARGUMENT = 1, /* the call is wrong: fix the argument named */
  SDPA_ERR_NOT_SUPPORTED = 2,    /* valid, but no kernel of this device covers it */
  SDPA_ERR_OUT_OF_MEMORY = 3,    /* host or device allocation failed */
  SDPA_ERR_CUDA = 4,             /* a CUDA runtime call failed (message says which) */
  SDPA_ERR_INTERNAL = 5          /* a bug in sdpa: please report the message */
} sdpa_status;

/* Static name of a status ("SDPA_OK", ...). Never NULL. */
SDPA_API const char *sdpa_status_string(sdpa_status status);
/* The message of the last failing call on this thread ("" if none). */
SDPA_API const char *sdpa_last_error(void);
/* SDPA_VERSION_NUMBER of the library actually loaded. */
SDPA_API int sdpa_version(void);
/* 1 if this build contains the CUDA backend and a CUDA device is visible. */
SDPA_API int sdpa_cuda_available(void);

/* ---- tensors ------------------------------------------------------------- */

typedef enum sdpa_dtype {
  SDPA_DTYPE_F32 = 0,
  SDPA_DTYPE_F16 = 1,
  SDPA_DTYPE_BF16 = 2,
  SDPA_DTYPE_I32 = 3 /* indices: cu_seqlens, block_table, ... */
} sdpa_dtype;

SDPA_API const char *sdpa_dtype_string(sdpa_dtype dtype);

typedef enum sdpa_device {
  SDPA_DEVICE_CPU = 0,
  SDPA_DEVICE_CUDA = 1
} sdpa_device;

#define SDPA_MAX_RANK 5

typedef struct sdpa_tensor {
  void *data;                     /* NULL = absent (for optional tensors) */
  sdpa_dtype dtype;
  int rank;
  int64_t shape[SDPA_MAX_RANK];
  int64_t stride[SDPA_MAX_RANK];  /* in elements; last dim must be 1 (if > 1 long) */
} sdpa_tensor;

/* A contiguous (row-major) tensor view. rank <= SDPA_MAX_RANK. */
SDPA_API sdpa_tensor sdpa_tensor_contiguous(void *data, sdpa_dtype dtype, int rank,
                                            const int64_t *shape);

/* ---- the attention problem (shared by forward and backward) -------------- */

typedef enum sdpa_mask_align {
  SDPA_ALIGN_BOTTOM_RIGHT = 0, /* off = s_k - s_q: FlashAttention >= 2.1 causal */
  SDPA_ALIGN_TOP_LEFT = 1      /* off = 0: torch's is_causal */
} sdpa_mask_align;

/*
 * Layouts (the layout is read from which tensors are given):
 *   dense:   q [b, s_q, h, d], k [b, s_k, h_k, d], v [b, s_k, h_k, d_v]
 *   varlen:  cu_seqlens_q given: q [total_q, h, d], k [total_k, h_k, d],
 *            v [total_k, h_k, d_v]; cu_seqlens_q/k int32 [b+1] prefix sums;
 *            max_seqlen_q/k bound the per-sequence lengths. cu_seqlens[b]
 *            may be below total (padding rows at the end, as flash_attn
 *            allows): no output is written to those rows.
 *   cache:   forward only, see sdpa_fwd_desc.
 * h % h_k == 0: query head i reads kv head i / (h / h_k).
 */
typedef struct sdpa_attn {
  sdpa_device device;
  void *stream;       /* CUDA: a cudaStream_t (NULL = default stream). CPU: ignored */
  int num_threads;    /* CPU: worker threads; 0 = $SDPA_NUM_THREADS or all cores. With
                         OpenBLAS the first CPU call sets OpenBLAS's own thread count
                         to 1, process-wide (0.3.21 has no per-call count) */

  sdpa_tensor q, k, v;

  /* varlen */
  sdpa_tensor cu_seqlens_q; /* int32 [b+1] */
  sdpa_tensor cu_seqlens_k; /* int32 [b+1] */
  sdpa_tensor seqused_k;    /* int32 [b], optional: keys used per sequence (<= length) */
  int64_t max_seqlen_q;     /* varlen: max over sequences (0 = compute on CPU device) */
  int64_t max_seqlen_k;

  /* score modifiers */
  float scale;              /* 0 = 1/sqrt(d) */
  float softcap;            /* 0 = off; > 0 applies c * tanh(s / c) */
  sdpa_tensor alibi_slopes; /* f32 [h] or [b, h], optional */
  sdpa_tensor bias;         /* [b|1, h|1, s_q|1, s_k] in the input dtype, any strides,
                               stride 0 = broadcast; dense layout only */
  int causal;               /* 1 = window (-1, 0) */
  sdpa_mask_align align;    /* where the causal diagonal / window is anchored */
  int64_t window_left;      /* -1 = unbounded */
  int64_t window_right;     /* -1 = unbounded */

  /* dropout */
  float dropout_p;          /* in [0, 1) */
  uint64_t dropout_seed;
  uint64_t dropout_offset;  /* < 2^32 (a Philox counter word) */

  const char *kernel;       /* force a kernel by registry name (NULL = dispatch) */
  int64_t reserved[8];      /* keep zero: room to grow without moving fields */
} sdpa_attn;

/* ---- forward ------------------------------------------------------------- */

typedef struct sdpa_fwd_desc {
  size_t struct_size;       /* set by sdpa_fwd_init */
  sdpa_attn attn;

  sdpa_tensor out;          /* [b, s_q, h, d_v] (varlen: [total_q, h, d_v]), input dtype */
  sdpa_tensor lse;          /* optional f32 [b, h, s_q] (varlen: [h, total_q]) */
  sdpa_tensor probs;        /* optional, testing aid: [b, h, s_q, s_k] (varlen: [b, h,
                               max_seqlen_q, max_seqlen_k], entries past a sequence's
                               lengths left as they are; not with a KV cache)
                               f32 or input dtype; p_ij post-softmax (before the
                               1/(1-p) scaling), dropped entries negated, masked 0 */

  /* KV cache (decoding). Enabled by cache_seqlens. q [b, s_q, h, d] dense;
   * k/v are the cache: [b_cache, s_cache, h_k, d] or, with block_table, paged
   * [num_blocks, page_size, h_k, d] (page_size % 16 == 0). Sequence b attends
   * to cache rows cache_leftpad[b] (0 without it) .. cache_seqlens[b] + s_new
   * - 1; the mask, alibi and dropout index those keys from 0.
   * block_table also serves the varlen layout (paged varlen, forward only):
   * with attn.cu_seqlens_q / _k and no cache_seqlens, k / v are paged
   * [num_blocks, page_size, h_k, d] (any page size; 1 makes block_table a
   * table of rows) and sequence b's keys 0 .. cu_seqlens_k[b+1] -
   * cu_seqlens_k[b] - 1 are read through block_table[b]. */
  sdpa_tensor cache_seqlens;   /* int32 [b]: tokens already in the cache */
  sdpa_tensor block_table;     /* int32 [b, max_blocks], optional */
  sdpa_tensor cache_batch_idx; /* int32 [b], optional (contiguous cache only) */
  sdpa_tensor k_new;           /* [b, s_new, h_k, d], optional: written to the cache */
  sdpa_tensor v_new;           /* [b, s_new, h_k, d_v], together with k_new */
  sdpa_tensor rotary_cos;      /* f32 [s_max, rotary_dim/2], optional */
  sdpa_tensor rotary_sin;      /* f32 [s_max, rotary_dim/2] */
  int rotary_interleaved;      /* 1: pairs (2i, 2i+1) (GPT-J); 0: (i, i + rd/2) (NeoX).
                                  k_new row i is rotated at cache position
                                  cache_seqlens[b] + i; q row i at cache_seqlens[b] + i
                                  when causal or windowed, else every q row at
                                  cache_seqlens[b] (flash_attn's rule: unmasked
                                  queries share one position). Positions are cache
                                  rows: cache_leftpad does not shift them. */

  int num_splits;           /* split-KV: 0 = automatic, 1 = no split, n = force n */

  void *workspace;          /* optional; see sdpa_fwd_workspace_size. NULL: the
                               library allocates stream-ordered on attn.stream,
                               from its own pool of the device, which keeps up
                               to 64 MB reserved between calls (inside a graph
                               capture: the graph's memory nodes); given,
                               workspace_size (0 allowed) must cover the
                               query's answer. A call refused for its arguments
                               writes nothing, the KV cache append included. */
  size_t workspace_size;

  sdpa_tensor cache_leftpad;   /* int32 [b], optional (contiguous cache only): the
                                  first cache row of sequence b, <= cache_seqlens[b];
                                  rows before it are not attended to */
} sdpa_fwd_desc;

SDPA_API void sdpa_fwd_init(sdpa_fwd_desc *desc);
SDPA_API sdpa_status sdpa_fwd(const sdpa_fwd_desc *desc);
SDPA_API sdpa_status sdpa_fwd_workspace_size(const sdpa_fwd_desc *desc, size_t *bytes);

/* ---- backward ------------------------------------------------------------ */

typedef struct sdpa_bwd_desc {
  size_t struct_size;       /* set by sdpa_bwd_init */
  sdpa_attn attn;           /* exactly as given to the forward */

  sdpa_tensor out;          /* the forward's output */
  sdpa_tensor lse;          /* the forward's lse (required) */
  sdpa_tensor dout;         /* same shape as out */
  sdpa_tensor dq;           /* same shape as q */
  sdpa_tensor dk;           /* same shape as k (summed over the heads of a group) */
  sdpa_tensor dv;           /* same shape as v */
  sdpa_tensor dbias;        /* optional, [b|1, h|1, s_q|1, s_k]: gradient of bias,
                               summed over every dimension of size 1 */
  int deterministic;        /* 1: bitwise reproducible run to run */

  void *workspace;          /* optional; see sdpa_bwd_workspace_size: as in
                               sdpa_fwd_desc (NULL: allocated on attn.stream;
                               given, workspace_size, 0 allowed, must cover
                               the query's answer) */
  size_t workspace_size;

  sdpa_tensor dlse;         /* optional f32, the shape of lse: the gradient of the
                               forward's lse when lse feeds the loss (it adds
                               dlse_i * p_ij to the score gradient; a merge of
                               partial results needs it) */
} sdpa_bwd_desc;

SDPA_API void sdpa_bwd_init(sdpa_bwd_desc *desc);
SDPA_API sdpa_status sdpa_bwd(const sdpa_bwd_desc *desc);
SDPA_API sdpa_status sdpa_bwd_workspace_size(const sdpa_bwd_desc *desc, size_t *bytes);

/* ---- merge_states -------------------------------------------------------- */

/*
 * Merges n partial attention results over disjoint key sets:
 *   lse = log(sum_n exp(lse_n)),  out = sum_n exp(lse_n - lse) * out_n.
 * Parts with lse = +inf (no visible key) count as empty; if every part is empty
 * the result is out = 0, lse = +inf. Any strides (last dim contiguous).
 */
typedef struct sdpa_merge_desc {
  size_t struct_size;       /* set by sdpa_merge_init */
  sdpa_device device;
  void *stream;
  sdpa_tensor out_parts;    /* [n, t, h, d] f32/f16/bf16 */
  sdpa_tensor lse_parts;    /* f32 [n, t, h] (any strides: [n, h, t] via strides) */
  sdpa_tensor out;          /* [t, h, d] any float dtype */
  sdpa_tensor lse;          /* optional f32 [t, h] */
} sdpa_merge_desc;

SDPA_API void sdpa_merge_init(sdpa_merge_desc *desc);
SDPA_API sdpa_status sdpa_merge_states(const sdpa_merge_desc *desc);

/* ---- registry and dispatch ----------------------------------------------- */

typedef struct sdpa_kernel_info {
  const char *name;       /* unique, e.g. "cpu_fwd" */
  const char *op;         /* "fwd" or "bwd" */
  sdpa_device device;
  int min_arch, max_arch; /* CUDA compute capability x10 (0 for CPU) */
  const char *dtypes;     /* e.g. "f16,bf16" */
  int max_head_dim;       /* 0 = unbounded */
  int block_m, block_n;   /* tile sizes (0 where not tiled) */
  const char *features;   /* comma-separated feature list */
} sdpa_kernel_info;

/* Number of registry rows in this build, and row i (in preference order). */
SDPA_API int sdpa_kernel_count(void);
SDPA_API sdpa_status sdpa_kernel_get(int index, sdpa_kernel_info *info);

/* Writes (NUL-terminated, truncated to buf_size) which kernel the descriptor
 * would run and, for every other kernel of the op, why not; a cut text ends
 * with a line saying so (16 KB holds every row of a full build). Validates
 * first: a refused descriptor leaves "" in buf (any buf with buf_size >= 1). */
SDPA_API sdpa_status sdpa_explain_fwd(const sdpa_fwd_desc *desc, char *buf, size_t buf_size);
SDPA_API sdpa_status sdpa_explain_bwd(const sdpa_bwd_desc *desc, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_H */
