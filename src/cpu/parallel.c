/*
 * parallel.c - sdpa_cpu_parallel_for over pthreads with a shared atomic item
 * counter (dynamic scheduling). The calling thread works too, as tid 0.
 */
#define _POSIX_C_SOURCE 200809L
#include "parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct pool_job {
  sdpa_cpu_task fn;
  void *ctx;
  int64_t n;
  atomic_llong next;
} pool_job;

typedef struct pool_worker {
  pool_job *job;
  int tid;
} pool_worker;

static void drain(pool_job *job, int tid) {
  for (;;) {
    int64_t i = atomic_fetch_add(&job->next, 1);
    if (i >= job->n) return;
    job->fn(job->ctx, i, tid);
  }
}

static void *worker_main(void *arg) {
  pool_worker *w = (pool_worker *)arg;
  drain(w->job, w->tid);
  return NULL;
}

int sdpa_cpu_resolve_threads(int requested) {
  if (requested > 0) return requested;
  const char *env = getenv("SDPA_NUM_THREADS");
  if (env) {
    int n = atoi(env);
    if (n > 0) return n;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (int)cores : 1;
}

sdpa_status sdpa_cpu_parallel_for(int nthreads, int64_t n, sdpa_cpu_task fn, void *ctx) {
  pool_job job;
  job.fn = fn;
  job.ctx = ctx;
  job.n = n;
  atomic_init(&job.next, 0);
  if (nthreads > n) nthreads = (int)n;
  if (nthreads <= 1) {
    drain(&job, 0);
    return SDPA_OK;
  }
  pthread_t *threads = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)nthreads);
  pool_worker *workers = (pool_worker *)malloc(sizeof(pool_worker) * (size_t)nthreads);
  int started = 0;
  if (threads && workers) {
    for (int t = 1; t < nthreads; ++t) {
      workers[t].job = &job;
      workers[t].tid = t;
      if (pthread_create(&threads[t], NULL, worker_main, &workers[t]) != 0) break;
      ++started;
    }
  }
  drain(&job, 0);
  for (int t = 1; t <= started; ++t) pthread_join(threads[t], NULL);
  free(threads);
  free(workers);
  return SDPA_OK;
}
