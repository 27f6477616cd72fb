/*
 * kernels.h - declarations of the CUDA kernels' run functions, one per row of
 * kernels.def (or of the generated, filtered copy when SDPA_KERNELS is set),
 * and the feature set of the sm80 forward rows. Plain C; safe to include from
 * registry.c (C11) and from the .cu files.
 */
#ifndef SDPA_CUDA_KERNELS_H
#define SDPA_CUDA_KERNELS_H

#include "registry.h"

/* Mma.sync runs on every arch >= 8.0, and the compute_80 PTX in the library
 * JIT-compiles forward: no upper bound (0 = unbounded in registry.c). */
#define SDPA_CUDA_MAX_ARCH 0

/* What every sm80 forward row supports (the rest: d_v != d, KV cache,
 * forced split-KV, rows or bases not 16-byte aligned, are refused; a bias
 * with rows not 16-byte aligned or s_k % 8 != 0 runs in the row's full
 * kernel). */
#define SDPA_FWD_SM80_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP |            \
   SDPA_FEAT_DROPOUT | SDPA_FEAT_PROBS | SDPA_FEAT_GQA | SDPA_FEAT_SEQUSED |            \
   SDPA_FEAT_BIAS)

/* What the Hopper forward rows support (src/cuda/fwd/fwd_sm90_body.cuh; the
 * rest go to the sm80 rows after them). */
#define SDPA_FWD_SM90_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP | SDPA_FEAT_GQA | \
   SDPA_FEAT_SEQUSED | SDPA_FEAT_DROPOUT)

/* What every sm80 backward row supports (the rest:
 * d_v != d, unaligned rows, a dbias summed over a broadcast dim, are
 * refused). A bias of any strides and a full dbias run in the row's bias
 * kernel. */
#define SDPA_BWD_SM80_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP |            \
   SDPA_FEAT_DROPOUT | SDPA_FEAT_GQA | SDPA_FEAT_SEQUSED | SDPA_FEAT_BIAS | SDPA_FEAT_DBIAS)

/* What the Hopper backward rows support (src/cuda/bwd/bwd_sm90_body.cuh; a
 * bias / dbias goes to the Hopper bias rows after them), and the Hopper bias
 * rows: the same plus a bias of any strides with a full dbias (d = 256 with
 * a bias: the sm80 rows). */
#define SDPA_BWD_SM90_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP |            \
   SDPA_FEAT_DROPOUT | SDPA_FEAT_GQA | SDPA_FEAT_SEQUSED)
#define SDPA_BWD_SM90_BIAS_FEATURES (SDPA_BWD_SM90_FEATURES | SDPA_FEAT_BIAS | SDPA_FEAT_DBIAS)

/* What every decoding row supports (src/cuda/decode/; the rest: varlen,
 * seqused_k, bias, dropout, probs, d_v != d, unaligned rows, are refused).
 * Dense problems reach these rows only with forced splits. */
#define SDPA_DECODE_FEATURES                                                             \
  (SDPA_FEAT_CACHE | SDPA_FEAT_PAGED | SDPA_FEAT_APPEND | SDPA_FEAT_ROTARY |             \
   SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP | SDPA_FEAT_GQA | SDPA_FEAT_SPLITKV)

/* What the fp32 tensor-core rows support (src/cuda/fwd/fwd_tf32_body.cuh;
 * the rest: bias, dropout, probs, KV cache, forced split-KV, d_v != d,
 * unaligned rows, are refused: fwd_simt runs them). */
#define SDPA_FWD_TF32_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP |            \
   SDPA_FEAT_GQA | SDPA_FEAT_SEQUSED)

/* What the fp32 tensor-core backward rows support
 * (src/cuda/bwd/bwd_tf32_body.cuh; the rest: dropout, bias / dbias, d_v != d,
 * unaligned rows, are refused: bwd_simt runs them). */
#define SDPA_BWD_TF32_FEATURES                                                           \
  (SDPA_FEAT_VARLEN | SDPA_FEAT_MASK | SDPA_FEAT_ALIBI | SDPA_FEAT_SOFTCAP |            \
   SDPA_FEAT_GQA | SDPA_FEAT_SEQUSED)

/* What the SIMT rows support (src/cuda/simt/simt_*.cu). */
#define SDPA_SIMT_FWD_FEATURES (SDPA_FEAT_ALL & ~(unsigned)SDPA_FEAT_SPLITKV)
#define SDPA_SIMT_BWD_FEATURES                                                           \
  (SDPA_FEAT_ALL & ~(unsigned)(SDPA_FEAT_CACHE | SDPA_FEAT_PAGED | SDPA_FEAT_APPEND |    \
                               SDPA_FEAT_ROTARY | SDPA_FEAT_PROBS | SDPA_FEAT_SPLITKV))

#ifdef __cplusplus
extern "C" {
#endif

#define SDPA_FWD_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps) \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps) \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_BWD_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)               \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);     \
  size_t name##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_BWD_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)          \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);     \
  size_t name##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_BWD_SM90_BIAS_KERNEL SDPA_BWD_SM90_KERNEL
#define SDPA_DECODE_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)            \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);     \
  size_t name##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_TF32_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps) \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_BWD_TF32_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)          \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);     \
  size_t name##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row);
#define SDPA_SIMT_KERNEL(name, op)                                                \
  sdpa_status name##_run(const sdpa_problem *p, const sdpa_kernel_row *row);     \
  size_t name##_workspace(const sdpa_problem *p, const sdpa_kernel_row *row);
#ifdef SDPA_KERNEL_FILTER
#include "sdpa_cuda_kernels.def" /* generated by CMake: the rows matching SDPA_KERNELS */
#else
#include "cuda/kernels.def"
#endif
#undef SDPA_FWD_KERNEL
#undef SDPA_SM90_KERNEL
#undef SDPA_BWD_KERNEL
#undef SDPA_BWD_SM90_KERNEL
#undef SDPA_BWD_SM90_BIAS_KERNEL
#undef SDPA_SIMT_KERNEL
#undef SDPA_DECODE_KERNEL
#undef SDPA_TF32_KERNEL
#undef SDPA_BWD_TF32_KERNEL

#ifdef __cplusplus
}
#endif

#endif /* SDPA_CUDA_KERNELS_H */
