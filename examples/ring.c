/*
 * ring.c - context parallelism with sdpa_ring_fwd: one process a GPU on one
 * host, a causal sequence split zigzag across them, NCCL's unique id handed
 * from rank 0 to the others through a file. Each rank checks its rows
 * against single-GPU sdpa on the whole sequence.
 *
 *   example_ring [nranks [seqlen]]          (default: 2 ranks, 8192 rows)
 *   cc ring.c -lsdpa -lnccl -lcudart -lm -o example_ring
 *
 * The parent only forks (CUDA must not be initialised before a fork) and
 * waits. Across hosts the same handshake works through a shared filesystem,
 * or any channel that carries the 128 bytes of the id.
 */
#define _POSIX_C_SOURCE 200809L

#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sdpa.h"
#include "sdpa_ring.h"

enum { B = 1, H = 8, HK = 2, D = 128 };

static uint16_t to_bf16(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The same pseudo-random global tensor on every rank. */
static uint16_t *global_tensor(int64_t n, uint64_t seed) {
  uint16_t *x = malloc(sizeof *x * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = to_bf16((float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f);
  }
  return x;
}

/* Rank 0 writes the id beside its final name and renames it: readers never
 * see half an id. */
static int share_id(const char *path, int rank, ncclUniqueId *id) {
  if (rank == 0) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0) return -1;
    return rename(tmp, path);
  }
  for (int tries = 0; tries < 6000; ++tries) { /* up to a minute */
    FILE *f = fopen(path, "rb");
    if (f) {
      const size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

#define CHECK_SDPA(call)                                                                  \
  do {                                                                                    \
    sdpa_status st_ = (call);                                                             \
    if (st_ != SDPA_OK) {                                                                 \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, sdpa_status_string(st_),      \
              sdpa_last_error());                                                         \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

static int run_rank(int rank, int nranks, int64_t seqlen, const char *id_path) {
  cudaSetDevice(rank);
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (share_id(id_path, rank, &id) != 0) {
    fprintf(stderr, "rank %d: could not share the NCCL id through %s\n", rank, id_path);
    return 1;
  }
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 1;

  /* the whole sequence on every rank (a real job would load only its rows) */
  const int64_t nq = (int64_t)B * seqlen * H * D, nk = (int64_t)B * seqlen * HK * D;
  uint16_t *q = global_tensor(nq, 1), *k = global_tensor(nk, 2), *v = global_tensor(nk, 3);

  /* this rank's rows: chunks rank and 2n-1-rank of 2n (sdpa_ring_shard) */
  int64_t start[2], len[2];
  int parts;
  CHECK_SDPA(sdpa_ring_shard(seqlen, nranks, SDPA_RING_ZIGZAG, rank, start, len, &parts));
  const int64_t s_local = len[0] + (parts > 1 ? len[1] : 0);
  const size_t qrow = (size_t)H * D * 2, krow = (size_t)HK * D * 2;
  void *dq, *dk, *dv, *dout, *dqf, *dkf, *dvf, *doutf;
  cudaMalloc(&dq, (size_t)s_local * qrow);
  cudaMalloc(&dk, (size_t)s_local * krow);
  cudaMalloc(&dv, (size_t)s_local * krow);
  cudaMalloc(&dout, (size_t)s_local * qrow);
  for (int64_t p = 0, at = 0; p < parts; at += len[p], ++p) {
    cudaMemcpy((char *)dq + at * qrow, (const char *)q + start[p] * qrow, len[p] * qrow,
               cudaMemcpyHostToDevice);
    cudaMemcpy((char *)dk + at * krow, (const char *)k + start[p] * krow, len[p] * krow,
               cudaMemcpyHostToDevice);
    cudaMemcpy((char *)dv + at * krow, (const char *)v + start[p] * krow, len[p] * krow,
               cudaMemcpyHostToDevice);
  }

  const int64_t ql[4] = {B, s_local, H, D}, kl[4] = {B, s_local, HK, D};
  sdpa_ring_fwd_desc r;
  sdpa_ring_fwd_init(&r); /* CUDA, zigzag, the peers' agreement checked */
  r.attn.q = sdpa_tensor_contiguous(dq, SDPA_DTYPE_BF16, 4, ql);
  r.attn.k = sdpa_tensor_contiguous(dk, SDPA_DTYPE_BF16, 4, kl);
  r.attn.v = sdpa_tensor_contiguous(dv, SDPA_DTYPE_BF16, 4, kl);
  r.attn.causal = 1;
  r.ring.nccl_comm = comm;
  r.ring.rank = rank;
  r.ring.world_size = nranks;
  r.ring.seqlen = seqlen;
  r.out = sdpa_tensor_contiguous(dout, SDPA_DTYPE_BF16, 4, ql);
  CHECK_SDPA(sdpa_ring_fwd(&r));

  /* the same attention on this GPU alone, over the whole sequence */
  const int64_t qf[4] = {B, seqlen, H, D}, kf[4] = {B, seqlen, HK, D};
  cudaMalloc(&dqf, (size_t)nq * 2);
  cudaMalloc(&dkf, (size_t)nk * 2);
  cudaMalloc(&dvf, (size_t)nk * 2);
  cudaMalloc(&doutf, (size_t)nq * 2);
  cudaMemcpy(dqf, q, (size_t)nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dkf, k, (size_t)nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dvf, v, (size_t)nk * 2, cudaMemcpyHostToDevice);
  sdpa_fwd_desc f;
  sdpa_fwd_init(&f);
  f.attn.device = SDPA_DEVICE_CUDA;
  f.attn.q = sdpa_tensor_contiguous(dqf, SDPA_DTYPE_BF16, 4, qf);
  f.attn.k = sdpa_tensor_contiguous(dkf, SDPA_DTYPE_BF16, 4, kf);
  f.attn.v = sdpa_tensor_contiguous(dvf, SDPA_DTYPE_BF16, 4, kf);
  f.attn.causal = 1;
  f.out = sdpa_tensor_contiguous(doutf, SDPA_DTYPE_BF16, 4, qf);
  CHECK_SDPA(sdpa_fwd(&f));

  uint16_t *ring_out = malloc((size_t)s_local * qrow), *full_out = malloc((size_t)nq * 2);
  cudaMemcpy(ring_out, dout, (size_t)s_local * qrow, cudaMemcpyDeviceToHost);
  cudaMemcpy(full_out, doutf, (size_t)nq * 2, cudaMemcpyDeviceToHost);
  double worst = 0.0;
  for (int64_t p = 0, at = 0; p < parts; at += len[p], ++p)
    for (int64_t e = 0; e < len[p] * H * D; ++e) {
      const double a = from_bf16(ring_out[at * H * D + e]);
      const double b = from_bf16(full_out[start[p] * H * D + e]);
      const double d = fabs(a - b);
      if (!(d <= worst)) worst = d;
    }
  const int ok = worst <= 2e-2; /* a few bf16 roundings of values below 1 */
  printf("rank %d: rows [%lld, %lld) and [%lld, %lld): max |ring - single GPU| = %.3g%s\n", rank,
         (long long)start[0], (long long)(start[0] + len[0]), (long long)start[1],
         (long long)(start[1] + len[1]), worst, ok ? "" : "  FAIL");
  ncclCommDestroy(comm);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  const int64_t seqlen = argc > 2 ? atoll(argv[2]) : 8192;
  if (nranks < 1 || nranks > 64 || seqlen < 1) {
    fprintf(stderr, "usage: %s [nranks (1..64) [seqlen]]\n", argv[0]);
    return 2;
  }
  /* the GPUs, counted in a child: the parent stays without CUDA */
  pid_t probe = fork();
  if (probe == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess ? (n < 100 ? n : 100) : 0);
  }
  int status = 0;
  waitpid(probe, &status, 0);
  const int gpus = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  if (gpus < nranks) {
    printf("skipped: %d ranks need %d GPUs, %d visible\n", nranks, nranks, gpus);
    return 77;
  }
  char id_path[256];
  snprintf(id_path, sizeof id_path, "/tmp/sdpa-ring-%ld.id", (long)getpid());
  pid_t pids[64];
  for (int r = 0; r < nranks; ++r) {
    fflush(stdout);
    pids[r] = fork();
    if (pids[r] == 0) {
      const int rc = run_rank(r, nranks, seqlen, id_path);
      fflush(stdout);
      _exit(rc);
    }
  }
  int worst = 0;
  for (int r = 0; r < nranks; ++r) {
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) worst = 1;
  }
  remove(id_path);
  return worst;
}
