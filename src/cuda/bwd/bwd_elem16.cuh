/*
 * bwd_elem16.cuh - what the 16-bit backward bodies (bwd_sm80_body.cuh,
 * bwd_sm90_body.cuh) share about their element type: SDPA_BWD_IS_BF16 (1
 * for a BF16 row, 0 for F16), SDPA_PACK / SDPA_TO_F32 (two fp32 to a packed
 * pair, one 16-bit value to fp32), SDPA_TY (the dtype's suffix in
 * ptx_wgmma.cuh's names), SDPA_BIAS_KIND (bwd_p_ds's bias literal),
 * SDPA_BELEM, the element I/O of bwd_launch.cuh's pre / post kernels
 * (bwd_ld8, bwd_ld1, bwd_st8), and the stores of a gradient row's packed
 * column pairs (bwd_st_pair: dK, dV, dQ).
 * Included once per instance, after bwd_names.cuh; bwd_elem16_undef.cuh
 * #undef's its macros. No include guard: one body per translation unit.
 */
#define SDPA_BDT_IS_BF16_BF16 1
#define SDPA_BDT_IS_BF16_F16 0
#define SDPA_BWD_IS_BF16 SDPA_PASTE(SDPA_BDT_IS_BF16_, SDPA_DTYPE)

#if SDPA_BWD_IS_BF16
#define SDPA_PACK pack_bf16x2
#define SDPA_TY bf16
#define SDPA_TO_F32 bwd_bf16_to_f32
#define SDPA_BIAS_KIND 2 /* bwd_p_ds's bias literal: the bias is bf16 */
#else
#define SDPA_PACK pack_f16x2
#define SDPA_TY f16
#define SDPA_TO_F32 bwd_f16_to_f32
#define SDPA_BIAS_KIND 1 /* fp16 */
#endif
#define SDPA_BELEM uint16_t

__device__ __forceinline__ void bwd_ld8(const uint16_t *x, float *f) {
  const uint4 v = *(const uint4 *)x;
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) f[2 * k] = SDPA_TO_F32(w[k]), f[2 * k + 1] = SDPA_TO_F32(w[k] >> 16);
}

__device__ __forceinline__ float bwd_ld1(const uint16_t *x, int k) { return SDPA_TO_F32(x[k]); }

__device__ __forceinline__ void bwd_st8(uint16_t *x, const float *f, int n) {
  store_chunk16(x, make_uint4(SDPA_PACK(f[0], f[1]), SDPA_PACK(f[2], f[3]), SDPA_PACK(f[4], f[5]),
                              SDPA_PACK(f[6], f[7])),
                n);
}

/* Columns c, c + 1 (c even) of a 16-bit row, from a packed pair, clipped to
 * the head dim d: one 32-bit store, or the low half alone at c = d - 1. */
__device__ __forceinline__ void bwd_st_pair(uint16_t *row, int c, int d, uint32_t v) {
  if (c + 1 < d)
    *(uint32_t *)(row + c) = v;
  else if (c < d)
    row[c] = (uint16_t)v;
}

/* Key row j of dK (times dk_scale) and dV from a warp's accumulators in the
 * m16n8 layout (row g + 8 hf of the warp's 16; dK's columns colk + 8 dt + 2 t,
 * + 1 for dt < ntk, dV's from colv for dt < ntv; ntk, ntv literals), clipped
 * to the head dims; nothing for j >= fk (the sequence's full key length: rows
 * past seqused_k get their zeros). */
__device__ __forceinline__ void bwd_store_kv_row(const sdpa_bwd_params *prm, int b, int hk,
                                                 int j, int fk, float (*dk)[4], float (*dv)[4],
                                                 const int ntk, int colk, const int ntv, int colv,
                                                 int hf, int t) {
  const sdpa_problem *p = &prm->p;
  if (j >= fk) return;
  const int d = (int)p->d;
  uint16_t *dkr = (uint16_t *)p->dk + sdpa_kv_offset_seq(p, p->dk_st, b, j, hk);
  uint16_t *dvr = (uint16_t *)p->dv + sdpa_kv_offset_seq(p, p->dv_st, b, j, hk);
#pragma unroll
  for (int dt = 0; dt < (ntk > ntv ? ntk : ntv); ++dt) {
    if (dt < ntk)
      bwd_st_pair(dkr, colk + dt * 8 + 2 * t, d,
                  SDPA_PACK(dk[dt][2 * hf] * prm->dk_scale, dk[dt][2 * hf + 1] * prm->dk_scale));
    if (dt < ntv)
      bwd_st_pair(dvr, colv + dt * 8 + 2 * t, (int)p->d_v,
                  SDPA_PACK(dv[dt][2 * hf], dv[dt][2 * hf + 1]));
  }
}
