/*
 * fwd_names.cuh - the names every forward body (fwd_sm80_body.cuh,
 * fwd_sm90_body.cuh, fwd_sm90_split_o_body.cuh, fwd_tf32_body.cuh,
 * decode_body.cuh) makes from its row: SDPA_FWD_IS_BF16 (1 for a BF16 row,
 * 0 otherwise, usable in #if and as a literal); for the 16-bit rows
 * SDPA_PACK (two fp32 to a packed pair of the dtype) and SDPA_TY (the
 * dtype's suffix in ptx_wgmma.cuh's names); and the kernel / run names
 * token-pasted from SDPA_KERNEL_NAME. fwd_names_undef.cuh #undef's them at
 * the bottom of the body. No include guard: one body per translation unit.
 */
#include "cuda/paste.cuh"
#define SDPA_DT_IS_BF16_BF16 1
#define SDPA_DT_IS_BF16_F16 0
#define SDPA_DT_IS_BF16_F32 0
#define SDPA_FWD_IS_BF16 SDPA_PASTE(SDPA_DT_IS_BF16_, SDPA_DTYPE)
#define SDPA_DT_PACK_BF16 pack_bf16x2
#define SDPA_DT_PACK_F16 pack_f16x2
#define SDPA_PACK SDPA_PASTE(SDPA_DT_PACK_, SDPA_DTYPE)
#define SDPA_DT_TY_BF16 bf16
#define SDPA_DT_TY_F16 f16
#define SDPA_TY SDPA_PASTE(SDPA_DT_TY_, SDPA_DTYPE)
#define SDPA_KERNEL SDPA_PASTE(SDPA_KERNEL_NAME, _kernel)
#define SDPA_KERNEL_DROP SDPA_PASTE(SDPA_KERNEL_NAME, _drop_kernel)
#define SDPA_KERNEL_BIAS SDPA_PASTE(SDPA_KERNEL_NAME, _bias_kernel)
#define SDPA_RUN SDPA_PASTE(SDPA_KERNEL_NAME, _run)
