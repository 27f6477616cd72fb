/*
 * bwd_names.cuh - the names of one backward instance's kernels and host
 * functions, token-pasted from SDPA_KERNEL_NAME (the row's name): the
 * pre / post kernels, the four main kernels (features x deterministic), the
 * run and workspace functions. Included near the top of each backward body
 * (bwd_sm80_body.cuh, bwd_tf32_body.cuh); bwd_launch.cuh, included at the
 * bottom, defines what these name and #undef's them. No include guard: each
 * instance translation unit includes one body once.
 */
#include "cuda/paste.cuh"
#define SDPA_KPRE SDPA_PASTE(SDPA_KERNEL_NAME, _pre)
#define SDPA_KMAIN SDPA_PASTE(SDPA_KERNEL_NAME, _kernel)
#define SDPA_KFEAT SDPA_PASTE(SDPA_KERNEL_NAME, _feat_kernel)
#define SDPA_KMAIN_DET SDPA_PASTE(SDPA_KERNEL_NAME, _det_kernel)
#define SDPA_KFEAT_DET SDPA_PASTE(SDPA_KERNEL_NAME, _feat_det_kernel)
#define SDPA_KPOST SDPA_PASTE(SDPA_KERNEL_NAME, _post)
#define SDPA_RUN SDPA_PASTE(SDPA_KERNEL_NAME, _run)
#define SDPA_WS SDPA_PASTE(SDPA_KERNEL_NAME, _workspace)
#define SDPA_BWD_KERNELS SDPA_PASTE(SDPA_KERNEL_NAME, _kernels)
#ifndef SDPA_BWD_BIAS
#define SDPA_BWD_BIAS 0 /* 1 in a bias row (the _bias and bwd_sm90_bias families) */
#endif
