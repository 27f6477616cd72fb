/*
 * row_undef.cuh - #undef's the fields a kernel instance defines from its row
 * of kernels.def (SDPA_KERNEL_NAME, SDPA_DTYPE, SDPA_HDIM, SDPA_BLOCK_M,
 * SDPA_BLOCK_N, SDPA_WARPS, and a sibling row's SDPA_BASE_KERNEL_NAME: the
 * generated instance files, CMakeLists.txt).
 * Every kernel body includes it last, after #undef-ing its own macros, so
 * the list of row fields is written once. No include guard: it acts where
 * it is included.
 */
#undef SDPA_KERNEL_NAME
#undef SDPA_DTYPE
#undef SDPA_HDIM
#undef SDPA_BLOCK_M
#undef SDPA_BLOCK_N
#undef SDPA_WARPS
#undef SDPA_BASE_KERNEL_NAME
