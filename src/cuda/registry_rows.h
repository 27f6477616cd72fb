/*
 * registry_rows.h - the CUDA registry rows: every SDPA_KERNEL row of
 * kernels.def (or of its generated, filtered copy when SDPA_KERNELS is set),
 * with its family's fields. Include it inside an initializer, after
 * kernels.h:
 *
 *   #include "cuda/kernels.h"
 *   static const sdpa_kernel_row rows[] = {
 *   #include "cuda/registry_rows.h"
 *   };
 */
#define SDPA_DT_F16_ SDPA_DT_F16
#define SDPA_DT_BF16_ SDPA_DT_BF16
#define SDPA_DT_F32_ SDPA_DT_F32
#define SDPA_DT_ALL_ (SDPA_DT_F32 | SDPA_DT_F16 | SDPA_DT_BF16)
#define SDPA_NEEDS_ANY(...) __VA_ARGS__
#ifdef SDPA_HAVE_SM90A
#define SDPA_NEEDS_SM90A(...) __VA_ARGS__
#else
#define SDPA_NEEDS_SM90A(...) /* wgmma rows exist only in a build for sm_90a */
#endif
#define SDPA_FN_NONE(name, suffix) NULL
#define SDPA_FN_OWN(name, suffix) name##suffix
#define SDPA_FAMILY(body, define, sibling, needs, op, min_arch, max_arch, features, required,    \
                    refuse, workspace)                                                           \
  needs, op, min_arch, max_arch, features, required, refuse, workspace
#define SDPA_ROW_(name, dtype, hdim_min, hdim, bm, bn, needs, op, min_arch, max_arch, features,   \
                  required, refuse, workspace)                                                   \
  SDPA_NEEDS_##needs({#name, SDPA_OP_##op, SDPA_DEVICE_CUDA, min_arch, max_arch,                 \
                      SDPA_DT_##dtype##_, hdim, hdim_min, bm, bn, features, name##_run,          \
                      SDPA_FN_##workspace(name, _workspace), required,                           \
                      SDPA_FN_##refuse(name, _refuse)},)
#define SDPA_ROW_EXPAND_(...) SDPA_ROW_(__VA_ARGS__)
#define SDPA_KERNEL(family, name, dtype, hdim_min, hdim, bm, bn, warps)                        \
  SDPA_ROW_EXPAND_(name, dtype, hdim_min, hdim, bm, bn, SDPA_FAMILY_##family)
#ifdef SDPA_KERNEL_FILTER
#include "sdpa_cuda_kernels.def"
#else
#include "cuda/kernels.def"
#endif
#undef SDPA_KERNEL
#undef SDPA_ROW_EXPAND_
#undef SDPA_ROW_
#undef SDPA_FAMILY
#undef SDPA_FN_OWN
#undef SDPA_FN_NONE
#undef SDPA_NEEDS_SM90A
#undef SDPA_NEEDS_ANY
#undef SDPA_DT_ALL_
#undef SDPA_DT_F32_
#undef SDPA_DT_BF16_
#undef SDPA_DT_F16_
