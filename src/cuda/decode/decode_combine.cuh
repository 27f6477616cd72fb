/*
 * decode_combine.cuh - the combine of a split-KV decoding call: one
 * instance's second kernel (a fragment of decode_body.cuh and
 * fwd_sm90_split_o_body.cuh, which give it PART_COLS, the floats of a partial
 * row, and the dtype; no include guard: one instance a translation unit).
 * It merges the splits' partial (out, lse) of each query row exactly:
 *   lse = log2 sum_k 2^lse_k,  out = sum_k 2^(lse_k - lse) out_k,
 * with the attention kernel's conventions for the partials (base-2 lse,
 * -inf for a split that saw no key, so its weight is 0 with no test), and
 * writes out and the natural-log lse (+inf for a row that saw no key).
 *
 * Launched as the attention kernel's programmatic dependent on sm_90: its
 * blocks are resident and their addresses worked out before the partials
 * exist (griddep_wait). After the wait a block of 128 threads (96 at 192
 * columns) merges one row: thread (slice, c) owns columns 4c .. 4c + 3 of the
 * parts k = slice,
 * slice + SLICES, ..., issues all its loads of a round together and merges
 * them online; the slices meet in shared memory. Its own kernel, not
 * merge.cu's general one: knowing the partials' layout and base-2 lse keeps
 * the work after the wait short, which a decoding step's latency shows.
 */

enum {
  CB_C4 = PART_COLS / 4,        /* 4-column groups of a partial row */
  CB_SLICES = 128 / CB_C4,      /* parts are dealt to this many slices (2 at 192 columns) */
  CB_THREADS = CB_SLICES * CB_C4, /* 128 but at 192 columns (96) */
  CB_ROUND = 8                  /* parts a thread loads at once */
};
static_assert(CB_SLICES >= 1, "a row's column groups fit a block");

extern "C" __global__ void __launch_bounds__(CB_THREADS)
    SDPA_PASTE(SDPA_KERNEL_NAME, _combine)(const __grid_constant__ sdpa_decode_params prm) {
  __shared__ float4 s_acc[CB_SLICES][CB_C4];
  __shared__ float s_m[CB_SLICES], s_s[CB_SLICES];
  const sdpa_problem *p = &prm.p;
  const int tid = threadIdx.x, slice = tid / CB_C4, c4 = tid % CB_C4;
  const int n = (int)prm.splits.d, d = (int)p->d_v;
  const int64_t per_split = p->b * p->s_q * p->h; /* partial rows a split */
  const int64_t r = blockIdx.x;                   /* row (b, i, hh) of [b, s_q, h] */
  const int hh = (int)(r % p->h), i = (int)(r / p->h % p->s_q), b = (int)(r / p->h / p->s_q);
  const int cols = c4 * 4 < d; /* columns past d were never written */
  const float *xp = prm.part_out + (slice * per_split + r) * PART_COLS + c4 * 4;
  const float *lp = prm.part_lse + slice * per_split + r;
  const int64_t x_step = CB_SLICES * per_split * PART_COLS, l_step = CB_SLICES * per_split;
  griddep_wait(); /* the partials are the attention kernel's output */

  float m = -INFINITY, s = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k0 = slice; k0 < n; k0 += CB_SLICES * CB_ROUND) {
    float4 x[CB_ROUND];
    float l[CB_ROUND];
#pragma unroll
    for (int q = 0; q < CB_ROUND; ++q) {
      const int ok = k0 + q * CB_SLICES < n;
      x[q] = ok && cols ? *(const float4 *)(xp + q * x_step) : make_float4(0.f, 0.f, 0.f, 0.f);
      l[q] = ok ? lp[q * l_step] : -INFINITY;
    }
    xp += CB_ROUND * x_step;
    lp += CB_ROUND * l_step;
    float mx = m;
#pragma unroll
    for (int q = 0; q < CB_ROUND; ++q) mx = fmaxf(mx, l[q]);
    const float mu = mx == -INFINITY ? 0.f : mx; /* nothing seen yet: every weight 0 */
    const float corr = fast_exp2(m - mu);
    merge_rescale(&s, &acc, corr);
#pragma unroll
    for (int q = 0; q < CB_ROUND; ++q) merge_add(&s, &acc, fast_exp2(l[q] - mu), x[q]);
    m = mx;
  }
  if (CB_SLICES > 1) {
    sdpa_merge_publish(&s_m[slice], &s_s[slice], &s_acc[slice][c4], c4 == 0, m, s, acc);
    __syncthreads();
    if (slice != 0) return; /* no barrier below */
    sdpa_merge_slices(CB_SLICES, s_m, s_s, &s_acc[0][c4], CB_C4, 1, &m, &s, &acc);
  }
  const float inv = s > 0.f ? 1.f / s : 0.f;
  const float v[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
  uint16_t *dst = (uint16_t *)p->out + sdpa_q_offset(p, p->o_st, b, i, hh) + c4 * 4;
  if (c4 * 4 + 4 <= d) { /* out rows are 16-byte aligned (the decode rows' condition) */
    *(uint2 *)dst = make_uint2(SDPA_PACK(v[0], v[1]), SDPA_PACK(v[2], v[3]));
  } else if (cols) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (c4 * 4 + e < d) sdpa_store_f(dst, p->dtype, e, v[e]);
  }
  if (p->lse && c4 == 0)
    p->lse[sdpa_lse_offset(p, b, i, hh)] = s > 0.f ? (m + log2f(s)) * SDPA_LN2 : INFINITY;
}

/* The combine, as the attention kernel's programmatic dependent where its
 * code holds the wait (sdpa_cuda_waits_for_grid), plainly elsewhere. */
static sdpa_status SDPA_PASTE(SDPA_KERNEL_NAME, _launch_combine)(const sdpa_decode_params *prm,
                                                                unsigned grid, cudaStream_t stream) {
  static unsigned char waits[SDPA_MAX_DEVICES]; /* per device: sdpa_cuda_waits_for_grid's answer */
  return sdpa_decode_launch_combine((const void *)SDPA_PASTE(SDPA_KERNEL_NAME, _combine),
                                    (int)CB_THREADS, waits, prm, grid, stream,
                                    SDPA_STR(SDPA_KERNEL_NAME));
}
