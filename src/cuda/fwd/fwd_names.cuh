/*
 * fwd_names.cuh - the names every forward body (fwd_sm80_body.cuh,
 * fwd_sm90_body.cuh, fwd_tf32_body.cuh, decode_body.cuh) makes from its
 * row: SDPA_FWD_IS_BF16 (1 for a
 * BF16 row, 0 otherwise, usable in #if and as a literal), and the kernel /
 * run names token-pasted from SDPA_KERNEL_NAME. fwd_names_undef.cuh #undef's them at
 * the bottom of the body. No include guard: one body per translation unit.
 */
#include "cuda/paste.cuh"
#define SDPA_DT_IS_BF16_BF16 1
#define SDPA_DT_IS_BF16_F16 0
#define SDPA_DT_IS_BF16_F32 0
#define SDPA_FWD_IS_BF16 SDPA_PASTE(SDPA_DT_IS_BF16_, SDPA_DTYPE)
#define SDPA_KERNEL SDPA_PASTE(SDPA_KERNEL_NAME, _kernel)
#define SDPA_KERNEL_DROP SDPA_PASTE(SDPA_KERNEL_NAME, _drop_kernel)
#define SDPA_KERNEL_BIAS SDPA_PASTE(SDPA_KERNEL_NAME, _bias_kernel)
#define SDPA_RUN SDPA_PASTE(SDPA_KERNEL_NAME, _run)
