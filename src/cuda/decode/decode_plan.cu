/*
 * decode_plan.cu - the host side of the split-KV decoding forward, shared by
 * every decode instance (decode_body.cuh, fwd_sm90_split_o_body.cuh): how many key splits a problem
 * gets, how much workspace the partial results need, and the launch
 * sequence on the caller's stream: KV append (kv_append.cu), the attention
 * kernel, and with more than one split the instance's combine
 * (decode_combine.cuh).
 * Nothing here synchronizes with the device, so the sequence can be captured
 * in a CUDA graph; without a caller workspace the partials live in a
 * stream-ordered allocation (sdpa_cuda_ws_acquire / sdpa_cuda_ws_release).
 */
#include <string.h>

#include <cuda_runtime.h>

#include "error.h"
#include "cuda/decode/decode_common.cuh"

/* A split gives each warp at least this many key tiles of 16: the tiles its
 * cp.async ring has in flight at once in the prologue (STAGES - 1 = 2 in the
 * d <= 128 rows; 1 in a _lean row and at d 256), so a short split still
 * issues all of its loads together. (A split-O block counts its key tile of
 * 64 or 32 as four or two warps' tiles: at least two tiles a split, its
 * first two stages.) */
#define SDPA_DECODE_MIN_TILES_PER_WARP 2
/* A block's fixed cost in tile-times: its first load's latency (Q and the
 * first tiles, in flight together) and the final merge of its warps. */
#define SDPA_DECODE_BLOCK_COST_TILES 2
/* Among split counts whose cost is within this factor of the least, take
 * the smallest (fewer partial rows to write and combine). */
#define SDPA_DECODE_COST_SLACK 1.02

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t decode_m_blocks(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  return ceil_div((p->h / p->h_k) * p->s_q, sh->block_m);
}

/* (batch, kv head, query block) groups: the grid's blocks before splitting */
static int64_t decode_groups(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  return p->b * p->h_k * decode_m_blocks(p, sh);
}

/*
 * Split count: a pure function of the problem's shape, the instance and the
 * device's SM count. The grid has base = b * h_k * m_blocks blocks before
 * splitting; slots = SMs * blocks_per_sm of them are resident at once. With
 * s splits a block's warps each stream tpw(s) = ceil(ceil(tiles / s) / warps)
 * tiles, and the grid runs in waves(s) = ceil(base * s / slots) rounds, so
 *
 *   cost(s) = waves(s) * (tpw(s) + SDPA_DECODE_BLOCK_COST_TILES)
 *
 * tile-times of one warp. Each warp keeps a fixed number of tiles in flight,
 * so a block streams at a fixed rate until the memory system saturates: a
 * grid that leaves slots empty, or a last wave that is mostly empty, is
 * slower by about that fraction, and more, shorter splits fill them. The
 * smallest s within SDPA_DECODE_COST_SLACK of the least cost wins, over
 * 1 <= s <= SDPA_DECODE_MAX_SPLITS with at least
 * SDPA_DECODE_MIN_TILES_PER_WARP tiles a warp (FlashAttention-2's wave
 * efficiency rule leaves slots empty at batch 1). Examples on 132 SMs x 2 blocks, 4 warps,
 * h_k = 8, s_q = 1: b = 1 -> 32 splits (256 blocks) from s_k = 4096 up;
 * b = 8 -> 4; b >= 32 -> 1. The key count is the capacity p->s_k (the
 * cache's true lengths live on the device and are not read here), so a
 * cache much larger than its contents gets more, emptier splits: slower,
 * never wrong.
 */
int sdpa_decode_num_splits(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  if (p->num_splits > 0)
    return p->num_splits < SDPA_DECODE_MAX_FORCED ? p->num_splits : SDPA_DECODE_MAX_FORCED;
  const int64_t base = decode_groups(p, sh);
  const int64_t slots = (int64_t)sdpa_cuda_sm_count() * (sh->blocks_per_sm > 0 ? sh->blocks_per_sm : 1);
  if (base <= 0 || slots <= 0 || sh->warps <= 0) return 1;
  const int64_t tiles = ceil_div(p->s_k, SDPA_DECODE_TILE);
  int64_t max_s = tiles / ((int64_t)SDPA_DECODE_MIN_TILES_PER_WARP * sh->warps);
  if (max_s > SDPA_DECODE_MAX_SPLITS) max_s = SDPA_DECODE_MAX_SPLITS;
  if (max_s <= 1) return 1;
  double cost[SDPA_DECODE_MAX_SPLITS + 1], best = 0.0;
  for (int64_t s = 1; s <= max_s; ++s) {
    const int64_t tpw = ceil_div(ceil_div(tiles, s), sh->warps);
    cost[s] = (double)ceil_div(base * s, slots) * (double)(tpw + SDPA_DECODE_BLOCK_COST_TILES);
    if (s == 1 || cost[s] < best) best = cost[s];
  }
  for (int64_t s = 1; s <= max_s; ++s)
    if (cost[s] <= SDPA_DECODE_COST_SLACK * best) return (int)s;
  return 1;
}

/*
 * The _wide row (twice the row's warps a block: 8, one block an SM at d 128;
 * where its 196 KB of shared memory fit, so not on sm_80: decode_body.cuh)
 * takes short problems on small grids when the split count is the
 * planner's (num_splits = 0; a forced count names the row's own plan): at
 * most one (batch, kv head, query block) group for every
 * SDPA_DECODE_WIDE_SMS SMs, and keys so few that the row's plan is capped
 * by them, each warp left with SDPA_DECODE_MIN_TILES_PER_WARP tiles. There
 * the same warps an SM come in half the splits, half the partials and half
 * the combine's parts. (Calls that must agree bitwise, as a paged and a
 * contiguous cache of one problem, force one split count: never the _wide
 * row, whose warps split the keys differently; their capacities s_k, which
 * the planner reads, differ. Pages of 16 go to the _lean row, which
 * computes what the row does.) Elsewhere the wide blocks
 * do not pay.
 */
#define SDPA_DECODE_WIDE_SMS 8

int sdpa_decode_wants_wide(const sdpa_problem *p, const sdpa_decode_shape *sh) {
  if (p->num_splits > 0) return 0;
  const int64_t groups = decode_groups(p, sh);
  if (groups <= 0 || groups * SDPA_DECODE_WIDE_SMS > (int64_t)sdpa_cuda_sm_count()) return 0;
  const int64_t cap = ceil_div(p->s_k, SDPA_DECODE_TILE) /
                      ((int64_t)SDPA_DECODE_MIN_TILES_PER_WARP * sh->warps);
  return cap > 1 && sdpa_decode_num_splits(p, sh) >= cap;
}

/*
 * The _lean row (a d 128 sibling with a two-stage ring: three blocks an SM on
 * sm_90, where the row fits two; decode_body.cuh) runs the row's calls on
 * caches paged in pages of one tile. Its split count: the row's where the
 * row's grid fits in one round of lean blocks (the third block an SM is then
 * spare occupancy, the partition the same); past that 0, the lean planner's
 * own (sdpa_decode_num_splits at three blocks an SM). Only pages of one
 * tile gain (a lookup a tile to hide); larger pages and contiguous caches
 * stay with the row, and past one round of lean blocks the row's count
 * loses.
 */
int sdpa_decode_lean_splits(const sdpa_problem *p, const sdpa_decode_shape *sh, int lean_bps) {
  const int splits = sdpa_decode_num_splits(p, sh);
  const int64_t grid = splits * decode_groups(p, sh);
  return grid <= (int64_t)lean_bps * sdpa_cuda_sm_count() ? splits : 0;
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

sdpa_status sdpa_decode_launch_combine(const void *kernel, int threads, unsigned char *waits,
                                       const sdpa_decode_params *prm, unsigned grid,
                                       cudaStream_t stream, const char *name) {
  cudaLaunchConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = sdpa_cuda_waits_for_grid(kernel, waits);
  void *args[1] = {(void *)prm};
  cudaError_t e = cudaLaunchKernelExC(&cfg, kernel, args);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess)
    return sdpa_fail(SDPA_ERR_CUDA, "%s: combine kernel launch failed: %s", name,
                     cudaGetErrorString(e));
  return SDPA_OK;
}

sdpa_status sdpa_decode_execute(const sdpa_problem *p, const sdpa_decode_shape *sh,
                                sdpa_decode_launch_fn launch, sdpa_decode_launch_fn combine) {
  cudaStream_t stream = (cudaStream_t)p->stream;
  /* The append writes the caller's cache, so it runs after every check and
   * the workspace below: a call that fails leaves the cache as it was.
   * Without k_new (s_new = 0) the append does nothing. */
  if (p->b == 0 || p->h == 0 || p->s_q == 0) return sdpa_cuda_kv_append(p);

  const int64_t group = p->h / p->h_k, rows = group * p->s_q;
  const int64_t m_blocks = decode_m_blocks(p, sh);
  const int splits = sdpa_decode_num_splits(p, sh);
  const int64_t grid = splits * decode_groups(p, sh);
  /* the combine's grid: one block a query row (b * s_q * h) */
  const int64_t out_rows = splits > 1 ? p->b * p->s_q * p->h : 0;
  if (rows > 0x7fffffff || grid > 0x7fffffff || out_rows > 0x7fffffff)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED,
                     "%s: %lld packed query rows (h / h_k * s_q), %lld blocks (splits %d x query "
                     "blocks %lld x b %lld x h_k %lld), %lld rows to combine (b * s_q * h): "
                     "expected each < 2^31 (num_splits = 1 needs no combine)",
                     sh->name, (long long)rows, (long long)grid, splits, (long long)m_blocks,
                     (long long)p->b, (long long)p->h_k, (long long)out_rows);
  sdpa_decode_params prm;
  prm.p = *p;
  prm.rows = (int)rows;
  prm.has_softcap = p->softcap > 0.f;
  sdpa_score_consts(p, &prm.score_mul, &prm.softcap_post);
  /* q rows are 16-byte aligned here (the decode rows refuse unaligned
     problems), so unrotated q loads whole 16-byte chunks */
  prm.q_vec = p->rotary_dim == 0;
  prm.splits = sdpa_fastdiv_make((uint32_t)splits);
  prm.m_blocks = sdpa_fastdiv_make((uint32_t)m_blocks);
  prm.h_k = sdpa_fastdiv_make((uint32_t)p->h_k);
  prm.group = sdpa_fastdiv_make((uint32_t)group);
  prm.part_out = NULL;
  prm.part_lse = NULL;

  const size_t need = workspace_bytes(p, sh, splits);
  void *ws = NULL;
  int owned = 0;
  if (need > 0) {
    SDPA_TRY(sdpa_cuda_ws_acquire(p, need, 16, sh->name, "sdpa_fwd_workspace_size", &ws, &owned));
    prm.part_out = (float *)ws;
    prm.part_lse = (float *)((char *)ws + part_out_bytes(p, sh, splits));
  }

  sdpa_status st = sdpa_cuda_kv_append(p);
  if (st == SDPA_OK) st = launch(&prm, (unsigned)grid, stream);
  if (st == SDPA_OK && splits > 1) st = combine(&prm, (unsigned)out_rows, stream);
  st = sdpa_cuda_ws_release(p, ws, owned, st, sh->name);
  return st;
}
