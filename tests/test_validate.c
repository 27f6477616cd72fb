/*
 * test_validate.c - every validation rule of src/validate.c: build a valid
 * small descriptor (dense, varlen, contiguous cache, paged cache, backward,
 * merge), break one thing, and check the status and that the message names the
 * argument and its value. Valid descriptors are checked to pass and to fill the
 * normalized problem as documented in src/problem.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "common/harness.h"

#define INV SDPA_ERR_INVALID_ARGUMENT
#define UNSUP SDPA_ERR_NOT_SUPPORTED

/* ---- a bump allocator over static pools (validation never reads floats) ---- */

static _Alignas(64) float fpool[1 << 16];
static int64_t fused;
static int32_t ipool[1 << 12];
static int64_t iused;

static void pool_reset(void) {
  fused = 0;
  iused = 0;
}

static sdpa_tensor tns(sdpa_dtype dt, int rank, ...) {
  int64_t shape[SDPA_MAX_RANK] = {0};
  int64_t n = 1;
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; ++i) {
    shape[i] = va_arg(ap, int64_t);
    n *= shape[i];
  }
  va_end(ap);
  void *data;
  if (dt == SDPA_DTYPE_I32) {
    data = ipool + iused;
    iused += n + 4;
  } else {
    data = fpool + fused;
    fused += n + 16; /* 64-byte aligned, f32-sized slots for every dtype */
  }
  return sdpa_tensor_contiguous(data, dt, rank, shape);
}

/* int32 [n] with the given values */
static sdpa_tensor ivec(int n, ...) {
  sdpa_tensor t = tns(SDPA_DTYPE_I32, 1, (int64_t)n);
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; ++i) ((int32_t *)t.data)[i] = va_arg(ap, int);
  va_end(ap);
  return t;
}

#define L(x) ((int64_t)(x))
enum { B = 2, SQ = 3, SK = 5, H = 4, HK = 2, D = 8, DV = 6 };
static const sdpa_dtype DT = SDPA_DTYPE_F16;

/* ---- valid descriptors ----------------------------------------------------------- */

static void attn_dense(sdpa_attn *a) {
  a->num_threads = 1;
  a->q = tns(DT, 4, L(B), L(SQ), L(H), L(D));
  a->k = tns(DT, 4, L(B), L(SK), L(HK), L(D));
  a->v = tns(DT, 4, L(B), L(SK), L(HK), L(DV));
}

static sdpa_fwd_desc fwd_dense(void) {
  sdpa_fwd_desc d;
  pool_reset();
  sdpa_fwd_init(&d);
  attn_dense(&d.attn);
  d.out = tns(DT, 4, L(B), L(SQ), L(H), L(DV));
  d.lse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(SQ));
  return d;
}

/* q lengths {2, 3}, k lengths {4, 1} */
static void attn_varlen(sdpa_attn *a) {
  a->num_threads = 1;
  a->q = tns(DT, 3, L(5), L(H), L(D));
  a->k = tns(DT, 3, L(5), L(HK), L(D));
  a->v = tns(DT, 3, L(5), L(HK), L(DV));
  a->cu_seqlens_q = ivec(3, 0, 2, 5);
  a->cu_seqlens_k = ivec(3, 0, 4, 5);
}

static sdpa_fwd_desc fwd_varlen(void) {
  sdpa_fwd_desc d;
  pool_reset();
  sdpa_fwd_init(&d);
  attn_varlen(&d.attn);
  d.out = tns(DT, 3, L(5), L(H), L(DV));
  d.lse = tns(SDPA_DTYPE_F32, 2, L(H), L(5));
  return d;
}

/* contiguous cache [3, 32, HK, D], cache_seqlens {5, 7}, append s_new = 2 */
static sdpa_fwd_desc fwd_cache(void) {
  sdpa_fwd_desc d;
  pool_reset();
  sdpa_fwd_init(&d);
  d.attn.num_threads = 1;
  d.attn.q = tns(DT, 4, L(B), L(1), L(H), L(D));
  d.attn.k = tns(DT, 4, L(3), L(32), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(3), L(32), L(HK), L(DV));
  d.out = tns(DT, 4, L(B), L(1), L(H), L(DV));
  d.lse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(1));
  d.cache_seqlens = ivec(2, 5, 7);
  d.k_new = tns(DT, 4, L(B), L(2), L(HK), L(D));
  d.v_new = tns(DT, 4, L(B), L(2), L(HK), L(DV));
  d.rotary_cos = tns(SDPA_DTYPE_F32, 2, L(16), L(2));
  d.rotary_sin = tns(SDPA_DTYPE_F32, 2, L(16), L(2));
  return d;
}

/* paged cache [4 blocks, 16, HK, D], block_table [2, 2], cache_seqlens {17, 3} */
static sdpa_fwd_desc fwd_paged(void) {
  sdpa_fwd_desc d;
  pool_reset();
  sdpa_fwd_init(&d);
  d.attn.num_threads = 1;
  d.attn.q = tns(DT, 4, L(B), L(1), L(H), L(D));
  d.attn.k = tns(DT, 4, L(4), L(16), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(4), L(16), L(HK), L(DV));
  d.out = tns(DT, 4, L(B), L(1), L(H), L(DV));
  d.cache_seqlens = ivec(2, 17, 3);
  d.block_table = tns(SDPA_DTYPE_I32, 2, L(2), L(2));
  int32_t *bt = (int32_t *)d.block_table.data;
  bt[0] = 3;
  bt[1] = 1;
  bt[2] = 0;
  bt[3] = -7; /* unused: sequence 1 needs one block */
  return d;
}

static sdpa_bwd_desc bwd_dense(void) {
  sdpa_bwd_desc d;
  pool_reset();
  sdpa_bwd_init(&d);
  attn_dense(&d.attn);
  d.out = tns(DT, 4, L(B), L(SQ), L(H), L(DV));
  d.dout = tns(DT, 4, L(B), L(SQ), L(H), L(DV));
  d.lse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(SQ));
  d.dq = tns(DT, 4, L(B), L(SQ), L(H), L(D));
  d.dk = tns(DT, 4, L(B), L(SK), L(HK), L(D));
  d.dv = tns(DT, 4, L(B), L(SK), L(HK), L(DV));
  return d;
}

static sdpa_bwd_desc bwd_varlen(void) {
  sdpa_bwd_desc d;
  pool_reset();
  sdpa_bwd_init(&d);
  attn_varlen(&d.attn);
  d.out = tns(DT, 3, L(5), L(H), L(DV));
  d.dout = tns(DT, 3, L(5), L(H), L(DV));
  d.lse = tns(SDPA_DTYPE_F32, 2, L(H), L(5));
  d.dq = tns(DT, 3, L(5), L(H), L(D));
  d.dk = tns(DT, 3, L(5), L(HK), L(D));
  d.dv = tns(DT, 3, L(5), L(HK), L(DV));
  return d;
}

static sdpa_merge_desc merge_desc(void) {
  sdpa_merge_desc d;
  pool_reset();
  sdpa_merge_init(&d);
  d.out_parts = tns(SDPA_DTYPE_F32, 4, L(3), L(5), L(H), L(D));
  d.lse_parts = tns(SDPA_DTYPE_F32, 3, L(3), L(5), L(H));
  d.out = tns(SDPA_DTYPE_BF16, 3, L(5), L(H), L(D));
  d.lse = tns(SDPA_DTYPE_F32, 2, L(5), L(H));
  return d;
}

#define FWD_ERR(d, st, ...) TEST_EXPECT_ERROR(sdpa_fwd(&(d)), st, __VA_ARGS__)
#define BWD_ERR(d, st, ...) TEST_EXPECT_ERROR(sdpa_bwd(&(d)), st, __VA_ARGS__)
#define MERGE_ERR(d, st, ...) TEST_EXPECT_ERROR(sdpa_merge_states(&(d)), st, __VA_ARGS__)

/* ---- valid descriptors pass and fill the problem ---------------------------------------- */

static void test_valid(void) {
  sdpa_problem p;
  sdpa_fwd_desc d = fwd_dense();
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "dense fwd: %s", sdpa_last_error());
  TEST_EXPECT(p.layout == SDPA_LAYOUT_DENSE && p.b == B && p.s_q == SQ && p.s_k == SK &&
                  p.h == H && p.h_k == HK && p.d == D && p.d_v == DV && p.dtype == DT,
              "dense dims");
  TEST_EXPECT(p.q_st.sb == SQ * H * D && p.q_st.ss == H * D && p.q_st.sh == D, "q strides");
  TEST_EXPECT(p.lse_sb == H * SQ && p.lse_sh == SQ && p.lse_ss == 1, "dense lse strides");
  TEST_EXPECT(fabsf(p.scale - 1.0f / sqrtf((float)D)) < 1e-7f, "default scale %g", p.scale);
  TEST_EXPECT(p.window_left == -1 && p.window_right == -1, "no window");
  TEST_EXPECT(p.num_threads == 1 && p.total_q == B * SQ && p.total_k == B * SK, "threads, totals");

  /* causal folds into window_right = 0 and keeps window_left; huge windows unbound */
  d.attn.causal = 1;
  d.attn.window_left = 2;
  d.attn.window_right = 7;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.window_left == 2 && p.window_right == 0,
              "causal fold (%lld, %lld)", (long long)p.window_left, (long long)p.window_right);
  d.attn.causal = 0;
  d.attn.window_left = INT64_MAX;
  d.attn.window_right = INT64_C(1) << 40;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.window_left == -1 && p.window_right == -1,
              "huge windows fold to -1");

  /* dropout constants, explicit scale */
  d = fwd_dense();
  d.attn.dropout_p = 0.25f;
  d.attn.dropout_offset = 0xffffffffu;
  d.attn.scale = 0.5f;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.drop_threshold == 64 &&
                  fabsf(p.drop_scale - 4.0f / 3.0f) < 1e-6f && p.offset == 0xffffffffu &&
                  p.scale == 0.5f,
              "dropout constants %u %g", p.drop_threshold, p.drop_scale);
  /* round(p * 256) rounds halves up (5/512 -> 3, 1/512 -> 1), as the oracle
   * does (the call before the check: argument order is unspecified) */
  d.attn.dropout_p = 5.0f / 512.0f;
  sdpa_status st = sdpa_validate_fwd(&d, &p);
  TEST_EXPECT(st == SDPA_OK && p.drop_threshold == 3, "dropout p = 5/512: threshold %u, expected 3",
              p.drop_threshold);
  d.attn.dropout_p = 1.0f / 512.0f;
  st = sdpa_validate_fwd(&d, &p);
  TEST_EXPECT(st == SDPA_OK && p.drop_threshold == 1, "dropout p = 1/512: threshold %u, expected 1",
              p.drop_threshold);

  /* bias with broadcast dims: strides 0; probs strides; alibi [h] and [b, h] */
  d = fwd_dense();
  d.attn.bias = tns(DT, 4, L(1), L(H), L(1), L(SK));
  d.probs = tns(SDPA_DTYPE_F32, 4, L(B), L(H), L(SQ), L(SK));
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 1, L(H));
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "bias/probs/alibi: %s", sdpa_last_error());
  TEST_EXPECT(p.bias_sb == 0 && p.bias_sh == SK && p.bias_sq == 0 && p.bias_sk == 1,
              "bias broadcast strides");
  TEST_EXPECT(p.probs_sb == H * SQ * SK && p.probs_sh == SQ * SK && p.probs_sq == SK &&
                  p.probs_dtype == SDPA_DTYPE_F32,
              "probs strides");
  TEST_EXPECT(p.alibi_sb == 0 && p.alibi_sh == 1, "alibi [h] strides");
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 2, L(B), L(H));
  d.probs.dtype = DT;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.alibi_sb == H && p.alibi_sh == 1,
              "alibi [b, h]");
  /* larger struct_size (a newer caller) is accepted */
  d.struct_size = sizeof d + 64;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "larger struct_size");

  /* varlen: b from cu_seqlens, max_seqlen computed on CPU, lse [h, total_q] */
  d = fwd_varlen();
  d.attn.seqused_k = ivec(2, 3, 0);
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "varlen fwd: %s", sdpa_last_error());
  TEST_EXPECT(p.layout == SDPA_LAYOUT_VARLEN && p.b == 2 && p.s_q == 3 && p.s_k == 4 &&
                  p.total_q == 5 && p.total_k == 5 && p.q_st.sb == 0 && p.q_st.ss == H * D,
              "varlen dims");
  TEST_EXPECT(p.lse_sb == 0 && p.lse_sh == 5 && p.lse_ss == 1, "varlen lse strides");
  d.attn.max_seqlen_q = 10;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.s_q == 10, "given max_seqlen kept");
  d.attn.device = SDPA_DEVICE_CUDA;
  d.attn.max_seqlen_k = 4;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.device == SDPA_DEVICE_CUDA,
              "varlen on CUDA with max_seqlen: %s", sdpa_last_error());

  /* contiguous cache: s_k = capacity, append and rotary */
  d = fwd_cache();
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "cache fwd: %s", sdpa_last_error());
  TEST_EXPECT(p.layout == SDPA_LAYOUT_CACHE && p.s_k == 32 && p.s_new == 2 && p.page_size == 0 &&
                  p.num_blocks == 3 && p.rotary_dim == 4 && p.rot_rows == 16 && p.rot_stride == 2,
              "cache fields");
  d.cache_batch_idx = ivec(2, 2, 0);
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.cache_batch_idx != NULL,
              "cache_batch_idx: %s", sdpa_last_error());

  /* paged cache */
  d = fwd_paged();
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "paged fwd: %s", sdpa_last_error());
  TEST_EXPECT(p.page_size == 16 && p.max_blocks == 2 && p.num_blocks == 4 && p.s_k == 32 &&
                  p.bt_stride == 2,
              "paged fields");

  /* backward with bias and a reduced dbias */
  sdpa_bwd_desc bd = bwd_dense();
  bd.attn.bias = tns(DT, 4, L(B), L(1), L(SQ), L(SK));
  bd.dbias = tns(DT, 4, L(1), L(H), L(SQ), L(SK));
  TEST_EXPECT(sdpa_validate_bwd(&bd, &p) == SDPA_OK, "dense bwd: %s", sdpa_last_error());
  TEST_EXPECT(p.is_bwd && p.dbias_nb == 1 && p.dbias_nh == H && p.dbias_nq == SQ &&
                  p.dbias_sb == 0 && p.dbias_sh == SQ * SK && p.dbias_sq == SK && p.bias_sh == 0,
              "dbias extents");
  bd = bwd_varlen();
  TEST_EXPECT(sdpa_validate_bwd(&bd, &p) == SDPA_OK && p.layout == SDPA_LAYOUT_VARLEN,
              "varlen bwd: %s", sdpa_last_error());

  /* merge, with lse_parts [n, h, t] through strides */
  sdpa_merge_problem m;
  sdpa_merge_desc md = merge_desc();
  md.lse_parts.stride[1] = 1;
  md.lse_parts.stride[2] = 5;
  TEST_EXPECT(sdpa_validate_merge(&md, &m) == SDPA_OK, "merge: %s", sdpa_last_error());
  TEST_EXPECT(m.n == 3 && m.t == 5 && m.h == H && m.d == D && m.lp_st == 1 && m.lp_sh == 5 &&
                  m.o_st == H * D && m.l_st == H && m.out_dtype == SDPA_DTYPE_BF16,
              "merge fields");
}

/* ---- descriptor-level rules ------------------------------------------------------ */

static void test_desc(void) {
  TEST_EXPECT_ERROR(sdpa_fwd(NULL), INV, "desc = NULL");
  TEST_EXPECT_ERROR(sdpa_bwd(NULL), INV, "desc = NULL");
  TEST_EXPECT_ERROR(sdpa_merge_states(NULL), INV, "desc = NULL");
  sdpa_fwd_desc d = fwd_dense();
  d.struct_size = 0;
  FWD_ERR(d, INV, "struct_size = 0", "sdpa_fwd_init");
  d.struct_size = sizeof d - 8;
  FWD_ERR(d, INV, "struct_size", "sdpa_fwd_init");
  sdpa_bwd_desc bd = bwd_dense();
  bd.struct_size = 16;
  BWD_ERR(bd, INV, "struct_size = 16", "sdpa_bwd_init");
  sdpa_merge_desc md = merge_desc();
  md.struct_size = 0;
  MERGE_ERR(md, INV, "struct_size = 0", "sdpa_merge_init");

  d = fwd_dense();
  d.attn.device = (sdpa_device)7;
  FWD_ERR(d, INV, "attn.device = 7");
  d = fwd_dense();
  d.attn.num_threads = -2;
  FWD_ERR(d, INV, "attn.num_threads = -2");
  d = fwd_dense();
  d.attn.reserved[5] = 3;
  FWD_ERR(d, INV, "attn.reserved[5] = 3");
  d = fwd_dense();
  d.num_splits = -1;
  FWD_ERR(d, INV, "num_splits = -1");
  d = fwd_dense();
  d.workspace_size = 128;
  FWD_ERR(d, INV, "workspace = NULL", "128");
  d = fwd_dense(); /* a workspace of 0 bytes: the query's answer for this problem, valid */
  d.workspace = fpool;
  sdpa_problem p;
  TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK && p.workspace == fpool && p.workspace_size == 0,
              "a workspace with workspace_size = 0 refused: %s", sdpa_last_error());
  bd = bwd_dense();
  bd.workspace_size = 64;
  BWD_ERR(bd, INV, "workspace = NULL", "64");
}

/* ---- scalars --------------------------------------------------------------------- */

static void test_scalars(void) {
  sdpa_fwd_desc d = fwd_dense();
  d.attn.causal = 2;
  FWD_ERR(d, INV, "attn.causal = 2");
  d = fwd_dense();
  d.attn.align = (sdpa_mask_align)5;
  FWD_ERR(d, INV, "attn.align = 5");
  d = fwd_dense();
  d.attn.window_left = -2;
  FWD_ERR(d, INV, "attn.window_left = -2");
  d = fwd_dense();
  d.attn.window_right = -5;
  FWD_ERR(d, INV, "attn.window_right = -5");
  d = fwd_dense();
  d.attn.dropout_p = 1.0f;
  FWD_ERR(d, INV, "attn.dropout_p = 1");
  d.attn.dropout_p = -0.125f;
  FWD_ERR(d, INV, "attn.dropout_p = -0.125");
  d.attn.dropout_p = NAN;
  FWD_ERR(d, INV, "attn.dropout_p = nan");
  d = fwd_dense();
  d.attn.dropout_offset = UINT64_C(1) << 32;
  FWD_ERR(d, INV, "attn.dropout_offset = 4294967296");
  d = fwd_dense();
  d.attn.scale = INFINITY;
  FWD_ERR(d, INV, "attn.scale = inf");
  d.attn.scale = NAN;
  FWD_ERR(d, INV, "attn.scale = nan");
  d = fwd_dense();
  d.attn.softcap = -1.0f;
  FWD_ERR(d, INV, "attn.softcap = -1");
  d.attn.softcap = NAN;
  FWD_ERR(d, INV, "attn.softcap = nan");
  d = fwd_dense();
  d.rotary_interleaved = 3;
  FWD_ERR(d, INV, "rotary_interleaved = 3");
  sdpa_bwd_desc bd = bwd_dense();
  bd.deterministic = 9;
  BWD_ERR(bd, INV, "deterministic = 9");
  bd = bwd_dense();
  bd.attn.window_left = -3;
  BWD_ERR(bd, INV, "attn.window_left = -3");

  /* a window side of at least the longest length (SK = 5) never restricts: unbounded */
  sdpa_problem p;
  sdpa_fwd_desc w = fwd_dense();
  w.attn.window_left = SK;
  w.attn.window_right = INT64_C(1) << 40;
  TEST_EXPECT(sdpa_validate_fwd(&w, &p) == SDPA_OK && p.window_left == -1 && p.window_right == -1,
              "windows (5, 2^40) over lengths (3, 5): folded to (%lld, %lld), want (-1, -1)",
              (long long)p.window_left, (long long)p.window_right);
  w.attn.window_left = SK - 1;
  TEST_EXPECT(sdpa_validate_fwd(&w, &p) == SDPA_OK && p.window_left == SK - 1,
              "window_left 4 over lengths (3, 5) restricts: kept, got %lld",
              (long long)p.window_left);
}

/* ---- tensor structure: data, rank, dtype, shapes, strides, overflow ------------------ */

static void test_tensors(void) {
  sdpa_fwd_desc d = fwd_dense();
  d.attn.q.data = NULL;
  FWD_ERR(d, INV, "attn.q.data = NULL");
  d = fwd_dense();
  d.attn.k.data = NULL;
  FWD_ERR(d, INV, "attn.k.data = NULL");
  d = fwd_dense();
  d.attn.v.data = NULL;
  FWD_ERR(d, INV, "attn.v.data = NULL");
  d = fwd_dense();
  d.out.data = NULL;
  FWD_ERR(d, INV, "out.data = NULL");

  /* an empty tensor needs no storage and may have any strides: no keys */
  d = fwd_dense();
  d.attn.k.shape[1] = d.attn.v.shape[1] = 0;
  d.attn.k.data = d.attn.v.data = NULL;
  d.attn.k.stride[3] = d.attn.v.stride[3] = 0;
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "no keys with NULL k / v: %s", sdpa_last_error());
  d.attn.q.shape[1] = d.out.shape[1] = d.lse.shape[2] = 0; /* and no queries */
  d.attn.q.data = d.out.data = d.lse.data = NULL;
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "no queries, no keys, NULL tensors: %s",
              sdpa_last_error());
  d = fwd_dense();
  d.attn.k.data = NULL; /* a non-empty tensor still needs its data */
  d.attn.k.shape[1] = d.attn.v.shape[1] = 0;
  d.attn.k.shape[1] = 1;
  FWD_ERR(d, INV, "attn.k.data = NULL");

  d = fwd_dense();
  d.attn.q.rank = 3;
  FWD_ERR(d, INV, "attn.q.rank = 3", "cu_seqlens_q");
  d = fwd_dense();
  d.attn.q.rank = 5;
  FWD_ERR(d, INV, "attn.q.rank = 5");
  d = fwd_dense();
  d.attn.k.rank = 2;
  FWD_ERR(d, INV, "attn.k.rank = 2");
  d = fwd_dense();
  d.out.rank = 3;
  FWD_ERR(d, INV, "out.rank = 3");
  d = fwd_dense();
  d.lse.rank = 2;
  FWD_ERR(d, INV, "lse.rank = 2");

  /* dtypes */
  d = fwd_dense();
  d.attn.q.dtype = SDPA_DTYPE_I32;
  FWD_ERR(d, INV, "attn.q.dtype = i32");
  d = fwd_dense();
  d.attn.q.dtype = (sdpa_dtype)9;
  FWD_ERR(d, INV, "attn.q.dtype = 9");
  d = fwd_dense();
  d.attn.k.dtype = SDPA_DTYPE_BF16;
  FWD_ERR(d, INV, "attn.k.dtype = bf16", "f16");
  d = fwd_dense();
  d.attn.v.dtype = SDPA_DTYPE_F32;
  FWD_ERR(d, INV, "attn.v.dtype = f32");
  d = fwd_dense();
  d.out.dtype = SDPA_DTYPE_F32;
  FWD_ERR(d, INV, "out.dtype = f32");
  d = fwd_dense();
  d.lse.dtype = SDPA_DTYPE_F16;
  FWD_ERR(d, INV, "lse.dtype = f16", "f32");

  /* shapes */
  d = fwd_dense();
  d.attn.k.shape[0] = 3;
  FWD_ERR(d, INV, "attn.k.shape[0] = 3", "b = 2");
  d = fwd_dense();
  d.attn.k.shape[2] = 3;
  FWD_ERR(d, INV, "attn.k.shape[2] = 3", "h_k dividing h = 4");
  d = fwd_dense();
  d.attn.k.shape[2] = 0;
  FWD_ERR(d, INV, "attn.k.shape[2] = 0");
  d = fwd_dense();
  d.attn.k.shape[3] = 7;
  FWD_ERR(d, INV, "attn.k.shape[3] = 7", "d = 8");
  d = fwd_dense();
  d.attn.v.shape[1] = 4;
  FWD_ERR(d, INV, "attn.v.shape[1] = 4", "5");
  d = fwd_dense();
  d.attn.v.shape[2] = 1;
  FWD_ERR(d, INV, "attn.v.shape[2] = 1");
  d = fwd_dense();
  d.attn.q.shape[3] = 0;
  d.attn.k.shape[3] = 0;
  FWD_ERR(d, INV, "attn.q.shape[3] = 0", "d >= 1");
  d = fwd_dense();
  d.attn.v.shape[3] = 0;
  FWD_ERR(d, INV, "attn.v.shape[3] = 0", "d_v >= 1");
  d = fwd_dense();
  d.attn.q.shape[2] = 0;
  FWD_ERR(d, INV, "attn.q.shape[2] = 0", "h >= 1");
  d = fwd_dense();
  d.attn.q.shape[1] = -1;
  FWD_ERR(d, INV, "attn.q.shape[1] = -1");
  d = fwd_dense();
  d.attn.q.shape[1] = INT64_C(1) << 31;
  d.attn.q.stride[0] = 0;
  FWD_ERR(d, UNSUP, "attn.q.shape[1] = 2147483648");
  d = fwd_dense();
  d.out.shape[3] = D;
  FWD_ERR(d, INV, "out.shape[3] = 8", "d_v = 6");
  d = fwd_dense();
  d.out.shape[1] = 4;
  FWD_ERR(d, INV, "out.shape[1] = 4", "s_q = 3");
  d = fwd_dense();
  d.lse.shape[1] = 2;
  FWD_ERR(d, INV, "lse.shape[1] = 2", "h = 4");
  d = fwd_dense();
  d.lse.shape[2] = 5;
  FWD_ERR(d, INV, "lse.shape[2] = 5", "s_q = 3");

  /* strides */
  d = fwd_dense();
  d.attn.q.stride[3] = 2;
  FWD_ERR(d, INV, "attn.q.stride[3] = 2", "contiguous");
  d = fwd_dense();
  d.attn.k.stride[1] = -8;
  FWD_ERR(d, INV, "attn.k.stride[1] = -8");
  d = fwd_dense();
  d.out.stride[1] = 0;
  FWD_ERR(d, INV, "out.stride[1] = 0", "output");
  d = fwd_dense();
  d.lse.stride[0] = 0;
  FWD_ERR(d, INV, "lse.stride[0] = 0");
  d = fwd_dense(); /* broadcast input is fine, and last-dim stride is free at extent 1 */
  d.attn.k.stride[0] = 0;
  d.lse.shape[2] = 1;
  d.attn.q.shape[1] = 1;
  d.out.shape[1] = 1;
  d.lse.stride[2] = 77;
  {
    sdpa_problem p;
    TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "broadcast k: %s", sdpa_last_error());
  }
  d = fwd_dense();
  d.attn.q.stride[0] = INT64_C(1) << 62;
  FWD_ERR(d, INV, "attn.q.shape[0] = 2", "attn.q.stride[0] = 4611686018427387904", "int64");
  d = fwd_dense();
  d.attn.k.stride[0] = INT64_MAX / 4;
  d.attn.k.stride[1] = INT64_MAX / 4;
  FWD_ERR(d, INV, "attn.k", "int64");
  d = fwd_dense();
  d.attn.v.stride[2] = INT64_C(1) << 61; /* f16: * 2 bytes * 2 heads overflows the byte size */
  FWD_ERR(d, INV, "attn.v", "int64");
  d = fwd_dense();
  d.attn.q.data = (char *)fpool + 1;
  FWD_ERR(d, INV, "attn.q.data", "alignment to 2 bytes");
  d = fwd_dense();
  d.attn.q.data = (void *)(UINTPTR_MAX - 63);
  FWD_ERR(d, INV, "attn.q.data", "address space");
}

/* ---- score modifiers ------------------------------------------------------------------ */

static void test_modifiers(void) {
  sdpa_fwd_desc d = fwd_dense();
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 1, L(3));
  FWD_ERR(d, INV, "attn.alibi_slopes.shape[0] = 3", "h = 4");
  d = fwd_dense();
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F16, 1, L(H));
  FWD_ERR(d, INV, "attn.alibi_slopes.dtype = f16");
  d = fwd_dense();
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(1));
  FWD_ERR(d, INV, "attn.alibi_slopes.rank = 3");
  d = fwd_dense();
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 2, L(3), L(H));
  FWD_ERR(d, INV, "attn.alibi_slopes.shape[0] = 3", "b = 2");

  d = fwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(3), L(SQ), L(SK));
  FWD_ERR(d, INV, "attn.bias.shape[1] = 3", "h = 4", "or 1");
  d = fwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(H), L(SQ), L(1));
  FWD_ERR(d, INV, "attn.bias.shape[3] = 1", "s_k = 5");
  d = fwd_dense();
  d.attn.bias = tns(SDPA_DTYPE_F32, 4, L(B), L(H), L(SQ), L(SK));
  FWD_ERR(d, INV, "attn.bias.dtype = f32", "f16");
  d = fwd_dense();
  d.attn.bias = tns(DT, 3, L(H), L(SQ), L(SK));
  FWD_ERR(d, INV, "attn.bias.rank = 3");
  d = fwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  d.attn.bias.stride[3] = 0;
  FWD_ERR(d, INV, "attn.bias.stride[3] = 0");
  d = fwd_varlen();
  d.attn.bias = tns(DT, 4, L(1), L(H), L(1), L(5));
  FWD_ERR(d, UNSUP, "attn.bias", "varlen");
  d = fwd_cache();
  d.attn.bias = tns(DT, 4, L(1), L(H), L(1), L(32));
  FWD_ERR(d, UNSUP, "attn.bias", "KV cache");

  d = fwd_dense();
  d.probs = tns(SDPA_DTYPE_I32, 4, L(B), L(H), L(SQ), L(SK));
  FWD_ERR(d, INV, "probs.dtype = i32");
  d = fwd_dense();
  d.probs = tns(SDPA_DTYPE_BF16, 4, L(B), L(H), L(SQ), L(SK));
  FWD_ERR(d, INV, "probs.dtype = bf16");
  d = fwd_dense();
  d.probs = tns(SDPA_DTYPE_F32, 4, L(B), L(H), L(SK), L(SK));
  FWD_ERR(d, INV, "probs.shape[2] = 5", "s_q = 3");
  d = fwd_dense();
  d.probs = tns(SDPA_DTYPE_F32, 4, L(B), L(H), L(SQ), L(SK));
  d.probs.stride[0] = 0;
  FWD_ERR(d, INV, "probs.stride[0] = 0");
  d = fwd_varlen(); /* [b, h, max_seqlen_q, max_seqlen_k] */
  d.probs = tns(SDPA_DTYPE_F32, 4, L(2), L(H), L(3), L(4));
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "varlen probs: %s", sdpa_last_error());
  d = fwd_varlen();
  d.probs = tns(SDPA_DTYPE_F32, 4, L(2), L(H), L(3), L(5));
  FWD_ERR(d, INV, "probs.shape[3] = 5", "s_k = 4");
  d = fwd_paged();
  d.probs = tns(SDPA_DTYPE_F32, 4, L(2), L(H), L(1), L(32));
  FWD_ERR(d, UNSUP, "probs", "KV-cache");

  d = fwd_dense();
  d.attn.dropout_p = 0.5f;
  d.attn.q.shape[0] = (1 << 30) + 1;
  d.attn.q.stride[0] = 0;
  d.attn.k.shape[0] = (1 << 30) + 1;
  d.attn.k.stride[0] = 0;
  d.attn.v.shape[0] = (1 << 30) + 1;
  d.attn.v.stride[0] = 0;
  d.out.shape[0] = (1 << 30) + 1; /* stride b is SQ*H*DV: offsets fit */
  d.lse.data = NULL;
  FWD_ERR(d, UNSUP, "b * h = 4294967300", "Philox");
}

/* ---- varlen ------------------------------------------------------------------------- */

static void test_varlen(void) {
  sdpa_fwd_desc d = fwd_varlen();
  d.attn.cu_seqlens_k.data = NULL;
  FWD_ERR(d, INV, "attn.cu_seqlens_k.data = NULL");
  d = fwd_dense();
  d.attn.cu_seqlens_k = ivec(3, 0, 5, 10);
  FWD_ERR(d, INV, "attn.cu_seqlens_k given without attn.cu_seqlens_q");
  d = fwd_dense();
  d.attn.max_seqlen_q = 4;
  FWD_ERR(d, INV, "attn.max_seqlen_q = 4", "without attn.cu_seqlens_q");
  d = fwd_dense();
  d.attn.seqused_k = ivec(2, 1, 1);
  FWD_ERR(d, UNSUP, "attn.seqused_k", "varlen");
  d = fwd_varlen();
  d.attn.q = tns(DT, 4, L(1), L(5), L(H), L(D));
  FWD_ERR(d, INV, "attn.q.rank = 4", "expected 3");
  d = fwd_varlen();
  d.attn.cu_seqlens_q.dtype = SDPA_DTYPE_F32;
  FWD_ERR(d, INV, "attn.cu_seqlens_q.dtype = f32", "i32");
  d = fwd_varlen();
  d.attn.cu_seqlens_q.shape[0] = 0;
  FWD_ERR(d, INV, "attn.cu_seqlens_q.shape[0] = 0");
  d = fwd_varlen();
  d.attn.cu_seqlens_k = ivec(4, 0, 1, 4, 5);
  FWD_ERR(d, INV, "attn.cu_seqlens_k.shape[0] = 4", "3");
  d = fwd_varlen();
  d.attn.cu_seqlens_q.stride[0] = 2;
  FWD_ERR(d, INV, "attn.cu_seqlens_q.stride[0] = 2");
  d = fwd_varlen();
  d.attn.cu_seqlens_q = ivec(3, 1, 2, 5);
  FWD_ERR(d, INV, "attn.cu_seqlens_q[0] = 1", "expected 0");
  d = fwd_varlen();
  d.attn.cu_seqlens_q = ivec(3, 0, 9, 5);
  FWD_ERR(d, INV, "attn.cu_seqlens_q[2] = 5 < attn.cu_seqlens_q[1] = 9", "non-decreasing");
  d = fwd_varlen();
  d.attn.cu_seqlens_k = ivec(3, 0, 4, 6);
  FWD_ERR(d, INV, "attn.cu_seqlens_k[2] = 6", "attn.k", "5");
  d = fwd_varlen();
  d.attn.cu_seqlens_q = ivec(3, 0, 2, 4); /* one row of padding after the last sequence: allowed */
  {
    sdpa_problem p;
    TEST_EXPECT(sdpa_validate_fwd(&d, &p) == SDPA_OK, "padded varlen q: %s", sdpa_last_error());
  }
  d = fwd_varlen();
  d.attn.max_seqlen_q = 2;
  FWD_ERR(d, INV, "attn.cu_seqlens_q[2] - attn.cu_seqlens_q[1] = 3", "attn.max_seqlen_q = 2");
  d = fwd_varlen();
  d.attn.max_seqlen_k = -1;
  FWD_ERR(d, INV, "attn.max_seqlen_k = -1");
  d = fwd_varlen();
  d.attn.device = SDPA_DEVICE_CUDA;
  d.attn.max_seqlen_k = 4;
  FWD_ERR(d, INV, "attn.max_seqlen_q = 0", "SDPA_DEVICE_CUDA");
  d = fwd_varlen();
  d.attn.seqused_k = ivec(2, 5, 1);
  FWD_ERR(d, INV, "attn.seqused_k[0] = 5", "[0, 4]");
  d = fwd_varlen();
  d.attn.seqused_k = ivec(2, 1, -1);
  FWD_ERR(d, INV, "attn.seqused_k[1] = -1");
  d = fwd_varlen();
  d.attn.seqused_k = ivec(3, 1, 1, 1);
  FWD_ERR(d, INV, "attn.seqused_k.shape[0] = 3");
  d = fwd_varlen();
  d.lse = tns(SDPA_DTYPE_F32, 2, L(5), L(H));
  FWD_ERR(d, INV, "lse.shape[0] = 5", "h = 4");
  d = fwd_varlen();
  d.lse = tns(SDPA_DTYPE_F32, 3, L(2), L(H), L(3));
  FWD_ERR(d, INV, "lse.rank = 3", "[h, total_q]");
  d = fwd_varlen();
  d.out = tns(DT, 3, L(4), L(H), L(DV));
  FWD_ERR(d, INV, "out.shape[0] = 4", "total_q = 5");
  d = fwd_varlen();
  d.attn.alibi_slopes = tns(SDPA_DTYPE_F32, 2, L(3), L(H));
  FWD_ERR(d, INV, "attn.alibi_slopes.shape[0] = 3", "b = 2");
}

/* ---- KV cache ----------------------------------------------------------------------- */

static void test_cache(void) {
  sdpa_fwd_desc d = fwd_cache();
  d.cache_seqlens = ivec(3, 1, 1, 1);
  FWD_ERR(d, INV, "cache_seqlens.shape[0] = 3", "2");
  d = fwd_cache();
  d.cache_seqlens.dtype = SDPA_DTYPE_F32;
  FWD_ERR(d, INV, "cache_seqlens.dtype = f32");
  d = fwd_cache();
  d.cache_seqlens = ivec(2, -1, 3);
  FWD_ERR(d, INV, "cache_seqlens[0] = -1");
  d = fwd_cache();
  d.cache_seqlens = ivec(2, 5, 31);
  FWD_ERR(d, INV, "cache_seqlens[1] = 31", "s_new (2)", "capacity 32");
  d = fwd_cache();
  d.attn.q = tns(DT, 3, L(B), L(H), L(D));
  FWD_ERR(d, INV, "attn.q.rank = 3");
  d = fwd_cache();
  d.attn.k = tns(DT, 3, L(3), L(32), L(D));
  FWD_ERR(d, INV, "attn.k.rank = 3");
  d = fwd_cache();
  d.attn.cu_seqlens_q = ivec(3, 0, 1, 2);
  FWD_ERR(d, UNSUP, "attn.cu_seqlens_q", "cache_seqlens");
  d = fwd_cache();
  d.k_new.data = NULL;
  d.v_new.data = NULL;
  d.attn.k.shape[0] = 1;
  d.attn.v.shape[0] = 1;
  FWD_ERR(d, INV, "attn.k.shape[0] = 1", "b = 2", "cache_batch_idx");
  d = fwd_cache();
  d.cache_batch_idx = ivec(2, 0, 3);
  FWD_ERR(d, INV, "cache_batch_idx[1] = 3", "[0, 3)");
  d = fwd_cache();
  d.cache_batch_idx = ivec(2, -1, 0);
  FWD_ERR(d, INV, "cache_batch_idx[0] = -1");
  d = fwd_cache();
  d.cache_batch_idx = ivec(1, 0);
  FWD_ERR(d, INV, "cache_batch_idx.shape[0] = 1");

  /* append */
  d = fwd_cache();
  d.v_new.data = NULL;
  FWD_ERR(d, INV, "v_new.data = NULL", "k_new");
  d = fwd_cache();
  d.k_new.data = NULL;
  FWD_ERR(d, INV, "k_new.data = NULL", "v_new");
  d = fwd_cache();
  d.k_new.shape[2] = H;
  FWD_ERR(d, INV, "k_new.shape[2] = 4", "h_k = 2");
  d = fwd_cache();
  d.v_new.shape[1] = 3;
  FWD_ERR(d, INV, "v_new.shape[1] = 3", "s_new = 2");
  d = fwd_cache();
  d.v_new.shape[3] = D;
  FWD_ERR(d, INV, "v_new.shape[3] = 8", "d_v = 6");
  d = fwd_cache();
  d.k_new.dtype = SDPA_DTYPE_BF16;
  FWD_ERR(d, INV, "k_new.dtype = bf16");
  d = fwd_cache(); /* the cache is written by the append: no broadcast */
  d.attn.k.stride[0] = 0;
  FWD_ERR(d, INV, "attn.k.stride[0] = 0", "output");

  /* fields without cache_seqlens */
  d = fwd_cache();
  d.cache_seqlens.data = NULL;
  d.attn.k = tns(DT, 4, L(B), L(32), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(B), L(32), L(HK), L(DV));
  FWD_ERR(d, UNSUP, "k_new given without cache_seqlens");
  d.k_new.data = NULL;
  d.v_new.data = NULL;
  FWD_ERR(d, UNSUP, "rotary_cos given without cache_seqlens");
  d = fwd_dense();
  d.block_table = tns(SDPA_DTYPE_I32, 2, L(B), L(2));
  FWD_ERR(d, UNSUP, "block_table given without cache_seqlens");
  d = fwd_dense();
  d.cache_batch_idx = ivec(2, 0, 1);
  FWD_ERR(d, UNSUP, "cache_batch_idx given without cache_seqlens");
  d = fwd_varlen();
  d.cache_leftpad = ivec(2, 0, 1);
  FWD_ERR(d, UNSUP, "cache_leftpad given without cache_seqlens");

  /* cache_leftpad: int32 [b], each in [0, cache_seqlens[b]], contiguous caches */
  d = fwd_cache();
  d.cache_leftpad = ivec(2, 5, 0);
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "cache_leftpad: %s", sdpa_last_error());
  d = fwd_cache();
  d.cache_leftpad = ivec(2, 1, 8);
  FWD_ERR(d, INV, "cache_leftpad[1] = 8", "cache_seqlens[1] = 7");
  d = fwd_cache();
  d.cache_leftpad = ivec(2, -1, 0);
  FWD_ERR(d, INV, "cache_leftpad[0] = -1");
  d = fwd_cache();
  d.cache_leftpad = ivec(3, 0, 0, 0);
  FWD_ERR(d, INV, "cache_leftpad.shape[0] = 3");
  d = fwd_paged();
  d.cache_leftpad = ivec(2, 0, 0);
  FWD_ERR(d, UNSUP, "cache_leftpad given with block_table");

  /* paged varlen: pages [4, 16, HK, D], q lengths {2, 3}, key lengths {17, 3} */
  d = fwd_varlen();
  d.attn.k = tns(DT, 4, L(4), L(16), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(4), L(16), L(HK), L(DV));
  d.attn.cu_seqlens_k = ivec(3, 0, 17, 20);
  d.block_table = tns(SDPA_DTYPE_I32, 2, L(2), L(2));
  int32_t *bt = (int32_t *)d.block_table.data;
  bt[0] = 3, bt[1] = 1, bt[2] = 0, bt[3] = -7; /* bt[3] unused: 3 keys need one page */
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "paged varlen: %s", sdpa_last_error());
  bt[1] = 4;
  FWD_ERR(d, INV, "block_table[0][1] = 4", "[0, 4)");
  bt[1] = 1;
  d.attn.cu_seqlens_k = ivec(3, 0, 33, 36);
  FWD_ERR(d, INV, "attn.cu_seqlens_k[1] - attn.cu_seqlens_k[0] = 33", "= 32");
  d.attn.cu_seqlens_k = ivec(3, 0, 17, 20);
  d.attn.k = tns(DT, 3, L(64), L(HK), L(D));
  FWD_ERR(d, INV, "attn.k.rank = 3", "paged k");
  /* pages of one row: block_table is a table of rows (any page size for varlen) */
  d.attn.k = tns(DT, 4, L(64), L(1), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(64), L(1), L(HK), L(DV));
  d.block_table = tns(SDPA_DTYPE_I32, 2, L(2), L(17));
  for (int j = 0; j < 34; ++j) ((int32_t *)d.block_table.data)[j] = (j * 7) % 64;
  TEST_EXPECT(sdpa_fwd(&d) == SDPA_OK, "paged varlen, pages of 1 row: %s", sdpa_last_error());
  d = fwd_paged(); /* a cache's pages stay multiples of 16 (decoding tiles) */
  d.attn.k = tns(DT, 4, L(8), L(8), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(8), L(8), L(HK), L(DV));
  FWD_ERR(d, INV, "attn.k.shape[1] = 8", "multiple of 16");

  /* rotary */
  d = fwd_cache();
  d.rotary_sin.data = NULL;
  FWD_ERR(d, INV, "rotary_sin.data = NULL", "rotary_cos");
  d = fwd_cache();
  d.rotary_cos.dtype = SDPA_DTYPE_F16;
  FWD_ERR(d, INV, "rotary_cos.dtype = f16");
  d = fwd_cache();
  d.rotary_sin = tns(SDPA_DTYPE_F32, 2, L(16), L(3));
  FWD_ERR(d, INV, "rotary_sin.shape[1] = 3", "rotary_cos.shape[1]");
  d = fwd_cache();
  d.rotary_cos = tns(SDPA_DTYPE_F32, 2, L(16), L(5));
  d.rotary_sin = tns(SDPA_DTYPE_F32, 2, L(16), L(5));
  FWD_ERR(d, INV, "rotary_cos.shape[1] = 5", "d = 8");
  d = fwd_cache();
  d.rotary_cos = tns(SDPA_DTYPE_F32, 2, L(8), L(2));
  d.rotary_sin = tns(SDPA_DTYPE_F32, 2, L(8), L(2));
  FWD_ERR(d, INV, "rotary_cos.shape[0] = 8", ">= 9");
  d = fwd_cache();
  d.rotary_sin.stride[0] = 3;
  FWD_ERR(d, UNSUP, "rotary_sin.stride[0] = 3");

  /* paged */
  d = fwd_paged();
  d.block_table.dtype = SDPA_DTYPE_F32;
  FWD_ERR(d, INV, "block_table.dtype = f32");
  d = fwd_paged();
  d.block_table.rank = 1;
  FWD_ERR(d, INV, "block_table.rank = 1");
  d = fwd_paged();
  d.block_table.shape[0] = 3;
  FWD_ERR(d, INV, "block_table.shape[0] = 3", "b = 2");
  d = fwd_paged();
  ((int32_t *)d.block_table.data)[1] = 4;
  FWD_ERR(d, INV, "block_table[0][1] = 4", "[0, 4)");
  d = fwd_paged();
  ((int32_t *)d.block_table.data)[2] = -1;
  FWD_ERR(d, INV, "block_table[1][0] = -1");
  d = fwd_paged();
  d.attn.k = tns(DT, 4, L(4), L(8), L(HK), L(D));
  d.attn.v = tns(DT, 4, L(4), L(8), L(HK), L(DV));
  FWD_ERR(d, INV, "attn.k.shape[1] = 8", "multiple of 16");
  d = fwd_paged();
  d.cache_seqlens = ivec(2, 33, 0);
  FWD_ERR(d, INV, "cache_seqlens[0] = 33", "capacity 32", "block_table.shape[1] * page_size");
  d = fwd_paged();
  d.cache_batch_idx = ivec(2, 0, 1);
  FWD_ERR(d, UNSUP, "cache_batch_idx", "block_table");
  d = fwd_paged();
  d.attn.seqused_k = ivec(2, 1, 1);
  FWD_ERR(d, UNSUP, "attn.seqused_k");
  d = fwd_paged();
  d.lse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(2));
  FWD_ERR(d, INV, "lse.shape[2] = 2", "s_q = 1");
}

/* ---- backward ----------------------------------------------------------------------- */

static void test_bwd(void) {
  sdpa_bwd_desc d = bwd_dense();
  d.lse.data = NULL;
  BWD_ERR(d, INV, "lse.data = NULL", "required");
  d = bwd_dense(); /* dlse: lse's shape, f32 */
  d.dlse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(SQ));
  TEST_EXPECT(sdpa_bwd(&d) == SDPA_OK, "dlse: %s", sdpa_last_error());
  d.dlse = tns(SDPA_DTYPE_F32, 3, L(B), L(H), L(SQ + 1));
  BWD_ERR(d, INV, "dlse.shape[2] = 4", "s_q = 3");
  d.dlse = tns(DT, 3, L(B), L(H), L(SQ));
  BWD_ERR(d, INV, "dlse.dtype", "f32");
  d = bwd_dense();
  d.out.data = NULL;
  BWD_ERR(d, INV, "out.data = NULL");
  d = bwd_dense();
  d.dout.data = NULL;
  BWD_ERR(d, INV, "dout.data = NULL");
  d = bwd_dense();
  d.dq.data = NULL;
  BWD_ERR(d, INV, "dq.data = NULL");
  d = bwd_dense();
  d.dk.data = NULL;
  BWD_ERR(d, INV, "dk.data = NULL");
  d = bwd_dense();
  d.dv.data = NULL;
  BWD_ERR(d, INV, "dv.data = NULL");
  d = bwd_dense();
  d.dout.shape[3] = D;
  BWD_ERR(d, INV, "dout.shape[3] = 8", "d_v = 6");
  d = bwd_dense();
  d.dq.shape[3] = DV;
  BWD_ERR(d, INV, "dq.shape[3] = 6", "d = 8");
  d = bwd_dense();
  d.dk.shape[1] = 4;
  BWD_ERR(d, INV, "dk.shape[1] = 4", "attn.k.shape[1]");
  d = bwd_dense();
  d.dv.shape[2] = H;
  BWD_ERR(d, INV, "dv.shape[2] = 4", "attn.v.shape[2]");
  d = bwd_dense();
  d.dq.dtype = SDPA_DTYPE_F32;
  BWD_ERR(d, INV, "dq.dtype = f32");
  d = bwd_dense();
  d.dout.dtype = SDPA_DTYPE_BF16;
  BWD_ERR(d, INV, "dout.dtype = bf16");
  d = bwd_dense();
  d.lse.dtype = SDPA_DTYPE_F16;
  BWD_ERR(d, INV, "lse.dtype = f16");
  d = bwd_dense();
  d.dk.stride[1] = 0;
  BWD_ERR(d, INV, "dk.stride[1] = 0", "output");
  d = bwd_dense();
  d.dq.stride[3] = 3;
  BWD_ERR(d, INV, "dq.stride[3] = 3");
  d = bwd_dense(); /* inputs may broadcast */
  d.dout.stride[1] = 0;
  {
    sdpa_problem p;
    TEST_EXPECT(sdpa_validate_bwd(&d, &p) == SDPA_OK, "broadcast dout: %s", sdpa_last_error());
  }

  d = bwd_dense();
  d.dbias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  BWD_ERR(d, INV, "dbias given without attn.bias");
  d = bwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  d.dbias = tns(DT, 4, L(B), L(2), L(SQ), L(SK));
  BWD_ERR(d, INV, "dbias.shape[1] = 2", "h = 4");
  d = bwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  d.dbias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  d.dbias.stride[0] = 0;
  BWD_ERR(d, INV, "dbias.stride[0] = 0");
  d = bwd_dense();
  d.attn.bias = tns(DT, 4, L(B), L(H), L(SQ), L(SK));
  d.dbias = tns(SDPA_DTYPE_F32, 4, L(B), L(H), L(SQ), L(SK));
  BWD_ERR(d, INV, "dbias.dtype = f32");

  d = bwd_varlen();
  d.lse = tns(SDPA_DTYPE_F32, 2, L(H), L(4));
  BWD_ERR(d, INV, "lse.shape[1] = 4", "total_q = 5");
  d = bwd_varlen();
  d.attn.cu_seqlens_k = ivec(3, 0, 6, 5);
  BWD_ERR(d, INV, "attn.cu_seqlens_k[2] = 5 < attn.cu_seqlens_k[1] = 6");
  d = bwd_varlen();
  d.dk = tns(DT, 3, L(4), L(HK), L(D));
  BWD_ERR(d, INV, "dk.shape[0] = 4", "5");
  d = bwd_varlen();
  d.attn.bias = tns(DT, 4, L(1), L(H), L(1), L(5));
  BWD_ERR(d, UNSUP, "attn.bias", "varlen");
}

/* ---- merge_states ---------------------------------------------------------------------- */

static void test_merge(void) {
  sdpa_merge_desc d = merge_desc();
  d.device = (sdpa_device)3;
  MERGE_ERR(d, INV, "device = 3");
  d = merge_desc();
  d.out_parts.data = NULL;
  MERGE_ERR(d, INV, "out_parts.data = NULL");
  d = merge_desc();
  d.out_parts.rank = 3;
  MERGE_ERR(d, INV, "out_parts.rank = 3");
  d = merge_desc();
  d.out_parts.dtype = SDPA_DTYPE_I32;
  MERGE_ERR(d, INV, "out_parts.dtype = i32");
  d = merge_desc();
  d.lse_parts.dtype = SDPA_DTYPE_BF16;
  MERGE_ERR(d, INV, "lse_parts.dtype = bf16", "f32");
  d = merge_desc();
  d.lse_parts.shape[1] = 4;
  MERGE_ERR(d, INV, "lse_parts.shape[1] = 4", "t = 5");
  d = merge_desc();
  d.lse_parts.data = NULL;
  MERGE_ERR(d, INV, "lse_parts.data = NULL");
  d = merge_desc();
  d.out.shape[2] = 7;
  MERGE_ERR(d, INV, "out.shape[2] = 7", "d = 8");
  d = merge_desc();
  d.out.dtype = SDPA_DTYPE_I32;
  MERGE_ERR(d, INV, "out.dtype = i32");
  d = merge_desc();
  d.out.stride[0] = 0;
  MERGE_ERR(d, INV, "out.stride[0] = 0");
  d = merge_desc();
  d.out_parts.stride[3] = 2;
  MERGE_ERR(d, INV, "out_parts.stride[3] = 2");
  d = merge_desc();
  d.lse.shape[1] = 3;
  MERGE_ERR(d, INV, "lse.shape[1] = 3", "h = 4");
  d = merge_desc();
  d.lse.dtype = SDPA_DTYPE_F16;
  MERGE_ERR(d, INV, "lse.dtype = f16");
  d = merge_desc();
  d.lse.stride[1] = 0;
  MERGE_ERR(d, INV, "lse.stride[1] = 0");
  d = merge_desc();
  d.out_parts.stride[0] = INT64_MAX / 2;
  MERGE_ERR(d, INV, "out_parts", "int64");
}

/* sdpa_explain_*: a valid descriptor gets the selection and the rows; a
 * refused one leaves an empty string (the buffer poisoned first), not stale
 * text; no buffer is an error naming buf. */
static void test_explain(void) {
  char buf[4096];
  sdpa_fwd_desc d = fwd_dense();
  memset(buf, 'x', sizeof buf);
  sdpa_status st = sdpa_explain_fwd(&d, buf, sizeof buf);
  TEST_EXPECT(st == SDPA_OK && strncmp(buf, "selected: ", 10) == 0 && memchr(buf, 0, sizeof buf),
              "explain_fwd of a valid descriptor: status %d, text '%.60s'", (int)st, buf);
  d.attn.dropout_p = 1.5f;
  memset(buf, 'x', sizeof buf);
  st = sdpa_explain_fwd(&d, buf, sizeof buf);
  TEST_EXPECT(st == SDPA_ERR_INVALID_ARGUMENT && buf[0] == '\0',
              "explain_fwd of a refused descriptor: status %d, buf[0] = 0x%02x", (int)st,
              (unsigned)(unsigned char)buf[0]);
  sdpa_bwd_desc bd = bwd_dense();
  bd.attn.dropout_p = -1.0f;
  memset(buf, 'x', sizeof buf);
  st = sdpa_explain_bwd(&bd, buf, sizeof buf);
  TEST_EXPECT(st == SDPA_ERR_INVALID_ARGUMENT && buf[0] == '\0',
              "explain_bwd of a refused descriptor: status %d, buf[0] = 0x%02x", (int)st,
              (unsigned)(unsigned char)buf[0]);
  d = fwd_dense();
  TEST_EXPECT_ERROR(sdpa_explain_fwd(&d, NULL, 0), SDPA_ERR_INVALID_ARGUMENT, "buf");
  /* a buffer too small for the text: it ends saying it was cut */
  char small[96];
  st = sdpa_explain_fwd(&d, small, sizeof small);
  TEST_EXPECT(st == SDPA_OK && strstr(small, "(truncated: a larger buffer holds the rest)\n") &&
                  strlen(small) == sizeof small - 1,
              "explain into 96 bytes: status %d, text '%s'", (int)st, small);
}

int main(void) {
  test_valid();
  test_explain();
  test_desc();
  test_scalars();
  test_tensors();
  test_modifiers();
  test_varlen();
  test_cache();
  test_bwd();
  test_merge();
  return test_summary();
}
