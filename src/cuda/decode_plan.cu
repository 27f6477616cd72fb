/*
 * decode_plan.cu - the host side of the split-KV decoding forward, shared by
 * every decode instance (decode_body.cuh): how many key splits a problem
 * gets, how much workspace the partial results need, and the launch
 * sequence on the caller's stream: KV append (kv_append.cu), the attention
 * kernel, and with more than one split the exact combine (merge.cu).
 * Nothing here synchronizes with the device, so the sequence can be captured
 * in a CUDA graph; without a caller workspace the partials live in a
 * stream-ordered allocation (cudaMallocAsync / cudaFreeAsync).
 */
#include <cuda_runtime.h>

#include "../error.h"
#include "decode_common.cuh"

/* A split should give each warp at least this many key tiles of 16: fewer and
 * the pipeline's fill (3 stages) and the partial row write dominate. */
#define SDPA_DECODE_MIN_TILES_PER_WARP 4

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t decode_m_blocks(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  return ceil_div((p->h / p->h_k) * p->s_q, sh->block_m);
}

/*
 * Split count (FlashAttention-2's wave-efficiency rule, with our occupancy):
 * the grid has base = b * h_k * m_blocks blocks before splitting; with
 * slots = SMs * blocks_per_sm resident at once, a grid of base * s blocks
 * runs in base * s / slots waves, and the last wave is partly idle. Take
 * the smallest s whose efficiency waves / ceil(waves) is within 85% of the
 * best s up to SDPA_DECODE_MAX_SPLITS, and no more splits than leave each
 * warp SDPA_DECODE_MIN_TILES_PER_WARP tiles. A grid that already fills 80%
 * of the slots is not split. The key count is the capacity p->s_k (the
 * cache's true lengths live on the device and are not read here), so a
 * cache much larger than its contents gets more, emptier splits: slower,
 * never wrong.
 */
int sdpa_decode_num_splits(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  if (p->num_splits > 0)
    return p->num_splits < SDPA_DECODE_MAX_FORCED ? p->num_splits : SDPA_DECODE_MAX_FORCED;
  const int64_t base = p->b * p->h_k * decode_m_blocks(p, sh);
  const int64_t slots = (int64_t)sdpa_cuda_sm_count() * (sh->blocks_per_sm > 0 ? sh->blocks_per_sm : 1);
  if (base <= 0 || slots <= 0 || (double)base >= 0.8 * (double)slots) return 1;
  const int64_t tiles = ceil_div(p->s_k, SDPA_DECODE_TILE);
  int64_t max_s = tiles / ((int64_t)SDPA_DECODE_MIN_TILES_PER_WARP * sh->warps);
  if (max_s > SDPA_DECODE_MAX_SPLITS) max_s = SDPA_DECODE_MAX_SPLITS;
  if (max_s <= 1) return 1;
  double eff[SDPA_DECODE_MAX_SPLITS + 1], best = 0.0;
  for (int64_t s = 1; s <= max_s; ++s) {
    const double waves = (double)(base * s) / (double)slots;
    eff[s] = waves / (double)ceil_div(base * s, slots);
    if (eff[s] > best) best = eff[s];
  }
  for (int64_t s = 1; s <= max_s; ++s)
    if (eff[s] >= 0.85 * best) return (int)s;
  return 1;
}

/* Partials: out [splits, b, s_q, h, hd] fp32, then lse [splits, b, s_q, h],
 * each 256-byte aligned. None when unsplit. */
static size_t part_out_bytes(const sdpa_problem *p, const sdpa_decode_shape *sh, int splits) {
  return ((size_t)splits * (size_t)(p->b * p->s_q * p->h) * (size_t)sh->hd * 4 + 255) & ~(size_t)255;
}

static size_t workspace_bytes(const sdpa_problem *p, const sdpa_decode_shape *sh, int splits) {
  if (splits <= 1 || p->b == 0 || p->h == 0 || p->s_q == 0) return 0;
  return part_out_bytes(p, sh, splits) +
         (((size_t)splits * (size_t)(p->b * p->s_q * p->h) * 4 + 255) & ~(size_t)255);
}

size_t sdpa_decode_workspace(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  return workspace_bytes(p, sh, sdpa_decode_num_splits(p, sh));
}

sdpa_status sdpa_decode_execute(const sdpa_problem *p, const sdpa_decode_shape *sh,
                                sdpa_decode_launch_fn launch) {
  cudaStream_t stream = (cudaStream_t)p->stream;
  if (p->layout == SDPA_LAYOUT_CACHE && p->s_new > 0) SDPA_TRY(sdpa_cuda_kv_append(p));
  if (p->b == 0 || p->h == 0 || p->s_q == 0) return SDPA_OK;

  const int64_t group = p->h / p->h_k, rows = group * p->s_q;
  const int64_t m_blocks = decode_m_blocks(p, sh);
  const int splits = sdpa_decode_num_splits(p, sh);
  const int64_t grid = (int64_t)splits * m_blocks * p->b * p->h_k;
  if (rows > 0x7fffffff || grid > 0x7fffffff || p->s_k > 0x7fffffff)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "%s: %lld packed query rows (h / h_k * s_q), %lld blocks (splits %d x query "
                     "blocks %lld x b %lld x h_k %lld): expected each < 2^31",
                     sh->name, (long long)rows, (long long)grid, splits, (long long)m_blocks,
                     (long long)p->b, (long long)p->h_k);

  sdpa_decode_params prm;
  prm.p = *p;
  prm.group = (int)group;
  prm.rows = (int)rows;
  prm.m_blocks = (int)m_blocks;
  prm.splits = splits;
  prm.has_softcap = p->softcap > 0.f;
  prm.score_mul = prm.has_softcap ? 2.f * 1.4426950408889634f * p->scale / p->softcap
                                  : p->scale * 1.4426950408889634f;
  prm.softcap_post = prm.has_softcap ? p->softcap * 1.4426950408889634f : 0.f;
  prm.part_out = NULL;
  prm.part_lse = NULL;

  const size_t need = workspace_bytes(p, sh, splits);
  void *ws = NULL;
  int owned = 0;
  if (need > 0) {
    if (p->workspace) {
      if (p->workspace_size < need)
        return sdpa_fail(SDPA_ERR_INVALID_ARGUMENT,
                         "workspace_size = %zu: expected >= %zu bytes for %s with %d key splits "
                         "(ask sdpa_fwd_workspace_size)",
                         p->workspace_size, need, sh->name, splits);
      ws = p->workspace;
    } else {
      cudaError_t e = cudaMallocAsync(&ws, need, stream);
      if (e != cudaSuccess)
        return sdpa_fail(e == cudaErrorMemoryAllocation ? SDPA_ERR_OUT_OF_MEMORY : SDPA_ERR_CUDA,
                         "%s: cudaMallocAsync(%zu bytes of split-KV workspace) failed: %s",
                         sh->name, need, cudaGetErrorString(e));
      owned = 1;
    }
    prm.part_out = (float *)ws;
    prm.part_lse = (float *)((char *)ws + part_out_bytes(p, sh, splits));
  }

  sdpa_status st = launch(&prm, (unsigned)grid, stream);
  if (st == SDPA_OK && splits > 1) {
    const int64_t hd = sh->hd, rows_h = p->s_q * p->h;
    sdpa_merge_args a;
    a.n = splits;
    a.nb = p->b;
    a.ni = p->s_q;
    a.nh = p->h;
    a.d = p->d_v;
    a.parts = prm.part_out;
    a.parts_dtype = SDPA_DTYPE_F32;
    a.p_sn = p->b * rows_h * hd;
    a.p_sb = rows_h * hd;
    a.p_si = p->h * hd;
    a.p_sh = hd;
    a.lse_parts = prm.part_lse;
    a.l_sn = p->b * rows_h;
    a.l_sb = rows_h;
    a.l_si = p->h;
    a.l_sh = 1;
    a.out = p->out;
    a.out_dtype = p->dtype;
    a.o_sb = p->o_st.sb;
    a.o_si = p->o_st.ss;
    a.o_sh = p->o_st.sh;
    a.lse = p->lse;
    a.lo_sb = p->lse_sb;
    a.lo_si = p->lse_ss;
    a.lo_sh = p->lse_sh;
    st = sdpa_cuda_merge_launch(&a, stream, sh->name);
  }
  if (owned) {
    cudaError_t e = cudaFreeAsync(ws, stream);
    if (e != cudaSuccess && st == SDPA_OK)
      st = sdpa_fail(SDPA_ERR_CUDA, "%s: cudaFreeAsync of the split-KV workspace failed: %s",
                     sh->name, cudaGetErrorString(e));
  }
  return st;
}
