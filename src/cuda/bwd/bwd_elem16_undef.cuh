/* bwd_elem16_undef.cuh - #undef's bwd_elem16.cuh's macros (include at the
 * bottom of a 16-bit backward body). */
#undef SDPA_BDT_IS_BF16_BF16
#undef SDPA_BDT_IS_BF16_F16
#undef SDPA_BWD_IS_BF16
#undef SDPA_PACK
#undef SDPA_TY
#undef SDPA_TO_F32
#undef SDPA_BIAS_KIND
#undef SDPA_BELEM
