/*
 * launch.c - launch.h with fork, an anonymous shared mapping (the unique id,
 * a process-shared barrier, the caller's area) and a polling waitpid that
 * enforces the deadline.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS; kill, nanosleep, pthread barriers (POSIX) */

#include "launch.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sdpa_ring.h"

typedef struct launch_head {
  pthread_barrier_t barrier;
  atomic_int id_ready; /* 1: id holds rank 0's unique id; -1: rank 0 could not make one */
  atomic_int gpus;     /* the probe's count; -1: no NCCL */
  char id[128];
} launch_head;

#define HEAD_BYTES ((sizeof(launch_head) + 255) & ~(size_t)255)

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

void dist_barrier(dist_ctx *c) { pthread_barrier_wait((pthread_barrier_t *)c->barrier); }

static int child(launch_head *h, int rank, int world, void *shared, int (*fn)(dist_ctx *, void *),
                 void *arg, int timeout_s) {
  if (cudaSetDevice(rank) != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d) failed\n", rank, rank);
    return 1;
  }
  if (rank == 0) {
    const sdpa_status st = sdpa_ring_unique_id(h->id, sizeof h->id);
    if (st != SDPA_OK) fprintf(stderr, "rank 0: sdpa_ring_unique_id: %s\n", sdpa_last_error());
    atomic_store(&h->id_ready, st == SDPA_OK ? 1 : -1);
    if (st != SDPA_OK) return 1;
  } else {
    for (long waited = 0; atomic_load(&h->id_ready) == 0; waited += 10) {
      if (waited > 1000L * timeout_s) return 1;
      pause_ms(10);
    }
    if (atomic_load(&h->id_ready) < 0) return 1;
  }
  dist_ctx c = {rank, world, NULL, shared, &h->barrier};
  if (sdpa_ring_comm_init(&c.comm, world, h->id, sizeof h->id, rank) != SDPA_OK) {
    fprintf(stderr, "rank %d: sdpa_ring_comm_init: %s\n", rank, sdpa_last_error());
    return 1;
  }
  const int rc = fn(&c, arg);
  sdpa_ring_comm_destroy(c.comm);
  return rc;
}

/* Waits for the children; ends them all on a failure or the deadline. */
static int reap(pid_t *pids, int n, int timeout_s) {
  int left = n, failed = 0;
  for (long waited = 0; left > 0; waited += 50) {
    for (int i = 0; i < n; ++i) {
      int status = 0;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      pids[i] = 0;
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!failed)
          fprintf(stderr, "rank %d %s %d: ending the others\n", i,
                  WIFEXITED(status) ? "exited with" : "died of signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        failed = 1;
      }
    }
    if (left > 0 && !failed && waited > 1000L * timeout_s) {
      fprintf(stderr, "the ranks ran past %d s: ending them\n", timeout_s);
      failed = 1;
    }
    if (failed)
      for (int i = 0; i < n; ++i)
        if (pids[i] > 0) kill(pids[i], SIGKILL);
    if (left > 0) pause_ms(50);
  }
  return failed;
}

int dist_launch(int world, size_t shared_bytes, int timeout_s, int (*fn)(dist_ctx *, void *),
                void *arg) {
  char *map = mmap(NULL, HEAD_BYTES + shared_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  launch_head *h = (launch_head *)map;
  memset(h, 0, sizeof *h);
  atomic_init(&h->id_ready, 0);
  atomic_init(&h->gpus, 0);
  fflush(stdout);
  pid_t probe = fork();
  if (probe == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    atomic_store(&h->gpus, sdpa_ring_available() ? n : -1);
    _exit(0);
  }
  int status = 0;
  waitpid(probe, &status, 0);
  const int gpus = atomic_load(&h->gpus);
  if (gpus < 0 || gpus < world) {
    if (gpus < 0)
      printf("skipped: NCCL could not be loaded, or this libsdpa has no ring\n");
    else
      printf("skipped: %d ranks need %d GPUs, %d visible\n", world, world, gpus);
    munmap(map, HEAD_BYTES + shared_bytes);
    return 77;
  }
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&h->barrier, &ba, (unsigned)world);
  pthread_barrierattr_destroy(&ba);
  pid_t pids[64];
  for (int r = 0; r < world && r < 64; ++r) {
    fflush(stdout);
    pids[r] = fork();
    if (pids[r] == 0) {
      const int rc = child(h, r, world, map + HEAD_BYTES, fn, arg, timeout_s);
      fflush(stdout);
      _exit(rc);
    }
  }
  const int failed = reap(pids, world, timeout_s);
  pthread_barrier_destroy(&h->barrier);
  munmap(map, HEAD_BYTES + shared_bytes);
  return failed ? 1 : 0;
}
