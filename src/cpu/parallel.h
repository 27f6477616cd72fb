/*
 * parallel.h - the CPU backend's only threading primitive: run fn(ctx, i, tid)
 * for i in [0, n) on up to nthreads pthreads (tid in [0, nthreads)), items
 * handed out dynamically from an atomic counter so uneven items (causal rows,
 * varlen sequences) balance. Returns after every item ran. No pool and no
 * global state: threads are created per call (cheap next to attention work).
 */
#ifndef SDPA_CPU_PARALLEL_H
#define SDPA_CPU_PARALLEL_H

#include <stdint.h>

#include "sdpa.h"

typedef void (*sdpa_cpu_task)(void *ctx, int64_t item, int tid);

/* Always runs every item: if threads cannot be started, the caller's thread
 * runs the rest. Returns SDPA_OK. */
sdpa_status sdpa_cpu_parallel_for(int nthreads, int64_t n, sdpa_cpu_task fn, void *ctx);

/* Threads to use: requested if > 0, else $SDPA_NUM_THREADS, else the cores. */
int sdpa_cpu_resolve_threads(int requested);

#endif /* SDPA_CPU_PARALLEL_H */
