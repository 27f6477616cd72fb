/* fwd_names_undef.cuh - #undef's fwd_names.cuh's macros (include at the
 * bottom of a forward body). */
#undef SDPA_DT_IS_BF16_BF16
#undef SDPA_DT_IS_BF16_F16
#undef SDPA_DT_IS_BF16_F32
#undef SDPA_FWD_IS_BF16
#undef SDPA_DT_PACK_BF16
#undef SDPA_DT_PACK_F16
#undef SDPA_PACK
#undef SDPA_DT_TY_BF16
#undef SDPA_DT_TY_F16
#undef SDPA_TY
#undef SDPA_KERNEL
#undef SDPA_KERNEL_DROP
#undef SDPA_KERNEL_BIAS
#undef SDPA_RUN
