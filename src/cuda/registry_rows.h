/*
 * registry_rows.h - the CUDA registry rows, one per row of kernels.def (or of
 * the generated, filtered copy when SDPA_KERNELS is set). Include it inside
 * an initializer, after kernels.h:
 *
 *   #include "cuda/kernels.h"
 *   static const sdpa_kernel_row cuda_rows[] = {
 *   #include "cuda/registry_rows.h"
 *   };
 */
#define SDPA_DT_F16_ SDPA_DT_F16
#define SDPA_DT_BF16_ SDPA_DT_BF16
#define SDPA_DT_F32_ SDPA_DT_F32
#define SDPA_FWD_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                          \
  {#name, SDPA_OP_FWD, SDPA_DEVICE_CUDA, 80, SDPA_CUDA_MAX_ARCH, SDPA_DT_##dtype##_, hdim,    \
   hdim_min, bm, bn, SDPA_FWD_SM80_FEATURES, name##_run, NULL, 0},
/* Hopper forward rows: sm_90 only (wgmma is sm_90a's), and only in a build
 * that compiled them */
#ifdef SDPA_HAVE_SM90A
#define SDPA_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                         \
  {#name, SDPA_OP_FWD, SDPA_DEVICE_CUDA, 90, 90, SDPA_DT_##dtype##_, hdim, hdim_min, bm, bn,  \
   SDPA_FWD_SM90_FEATURES, name##_run, NULL, 0},
#else
#define SDPA_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)
#endif
/* backward rows: run and workspace functions */
#define SDPA_BWD_ROW_(name, dtype, hdim_min, hdim, bm, bn, features)                         \
  {#name, SDPA_OP_BWD, SDPA_DEVICE_CUDA, 80, SDPA_CUDA_MAX_ARCH, SDPA_DT_##dtype##_, hdim,    \
   hdim_min, bm, bn, features, name##_run, name##_workspace, 0},
#define SDPA_BWD_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                          \
  SDPA_BWD_ROW_(name, dtype, hdim_min, hdim, bm, bn, SDPA_BWD_SM80_FEATURES)
#define SDPA_BWD_TF32_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                     \
  SDPA_BWD_ROW_(name, dtype, hdim_min, hdim, bm, bn, SDPA_BWD_TF32_FEATURES)
/* Hopper backward rows: sm_90 only, and only in a build that compiled them */
#ifdef SDPA_HAVE_SM90A
#define SDPA_BWD_SM90_ROW_(name, dtype, hdim_min, hdim, bm, bn, features, required)          \
  {#name, SDPA_OP_BWD, SDPA_DEVICE_CUDA, 90, 90, SDPA_DT_##dtype##_, hdim, hdim_min, bm, bn,  \
   features, name##_run, name##_workspace, required},
#define SDPA_BWD_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                     \
  SDPA_BWD_SM90_ROW_(name, dtype, hdim_min, hdim, bm, bn, SDPA_BWD_SM90_FEATURES, 0)
/* the bias rows take only problems with a bias (the plain rows above take the rest) */
#define SDPA_BWD_SM90_BIAS_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                \
  SDPA_BWD_SM90_ROW_(name, dtype, hdim_min, hdim, bm, bn, SDPA_BWD_SM90_BIAS_FEATURES,      \
                     SDPA_FEAT_BIAS)
#else
#define SDPA_BWD_SM90_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)
#define SDPA_BWD_SM90_BIAS_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)
#endif
/* decoding rows: run and workspace functions */
#define SDPA_DECODE_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                       \
  {#name, SDPA_OP_FWD, SDPA_DEVICE_CUDA, 80, SDPA_CUDA_MAX_ARCH, SDPA_DT_##dtype##_, hdim,    \
   hdim_min, bm, bn, SDPA_DECODE_FEATURES, name##_run, name##_workspace, 0},
/* fp32 tensor-core rows: run function only */
#define SDPA_TF32_KERNEL(name, dtype, hdim_min, hdim, bm, bn, warps)                         \
  {#name, SDPA_OP_FWD, SDPA_DEVICE_CUDA, 80, SDPA_CUDA_MAX_ARCH, SDPA_DT_##dtype##_, hdim,    \
   hdim_min, bm, bn, SDPA_FWD_TF32_FEATURES, name##_run, NULL, 0},
/* SIMT rows: every arch from sm_75, every dtype and head dim */
#define SDPA_SIMT_KERNEL(name, op)                                                           \
  {#name, SDPA_OP_##op, SDPA_DEVICE_CUDA, 75, 0, SDPA_DT_F32 | SDPA_DT_F16 | SDPA_DT_BF16, 0, 0, \
   16, 32, SDPA_SIMT_##op##_FEATURES, name##_run, name##_workspace, 0},
#ifdef SDPA_KERNEL_FILTER
#include "sdpa_cuda_kernels.def"
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
#undef SDPA_BWD_ROW_
#undef SDPA_DT_F16_
#undef SDPA_DT_BF16_
#undef SDPA_DT_F32_
