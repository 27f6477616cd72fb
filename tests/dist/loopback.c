/*
 * loopback.c - the in-process transport of loopback.h: per rank and slot a
 * FIFO of messages from the previous rank, one mutex and condition variable
 * for the world, and an all-gather through two alternating tables.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "loopback.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"

typedef struct loop_msg {
  struct loop_msg *next;
  int count;
  size_t bytes[SDPA_RING_MAX_BUFS];
  char *data[SDPA_RING_MAX_BUFS];
} loop_msg;

typedef struct loop_pending {
  int active, count;
  sdpa_ring_buf send[SDPA_RING_MAX_BUFS], recv[SDPA_RING_MAX_BUFS];
  loop_msg *copy; /* late mode: the send buffers as they were at the post */
} loop_pending;

typedef struct loop_rank {
  sdpa_ring_transport t; /* first: the schedule's handle */
  loop_world *w;
  loop_pending pending[SDPA_RING_SLOTS];
} loop_rank;

struct loop_world {
  int n, late;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  loop_msg **head, **tail; /* [rank * SLOTS + slot] */
  loop_rank *ranks;
  /* all-gather: round g fills table[g % 2] */
  long gen;
  int arrived;
  char *table[2];
  size_t table_bytes;
};

static void msg_free(loop_msg *m) {
  if (!m) return;
  for (int i = 0; i < m->count; ++i) free(m->data[i]);
  free(m);
}

static loop_msg *snapshot(const sdpa_ring_buf *b, int count) {
  loop_msg *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->count = count;
  for (int i = 0; i < count; ++i) {
    m->bytes[i] = b[i].bytes;
    m->data[i] = malloc(b[i].bytes ? b[i].bytes : 1);
    if (!m->data[i]) {
      m->count = i;
      msg_free(m);
      return NULL;
    }
    if (b[i].bytes) memcpy(m->data[i], b[i].data, b[i].bytes);
  }
  return m;
}

static void deadline(struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += SDPA_LOOPBACK_TIMEOUT;
}

/* Appends m to the inbox of rank r's slot (locked by the caller). */
static void push(loop_world *w, int r, int slot, loop_msg *m) {
  const int q = r * SDPA_RING_SLOTS + slot;
  m->next = NULL;
  if (w->tail[q])
    w->tail[q]->next = m;
  else
    w->head[q] = m;
  w->tail[q] = m;
  pthread_cond_broadcast(&w->cv);
}

static sdpa_status loop_post(sdpa_ring_transport *t, int slot, const sdpa_ring_buf *send,
                             const sdpa_ring_buf *recv, int count) {
  loop_rank *me = (loop_rank *)t;
  loop_world *w = me->w;
  if (slot < 0 || slot >= SDPA_RING_SLOTS || count < 0 || count > SDPA_RING_MAX_BUFS)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: post(slot %d, %d buffers)", slot, count);
  loop_pending *p = &me->pending[slot];
  if (p->active)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d posted slot %d while its previous"
                     " exchange was in flight", t->rank, slot);
  p->active = 1;
  p->count = count;
  memcpy(p->send, send, sizeof *send * (size_t)count);
  memcpy(p->recv, recv, sizeof *recv * (size_t)count);
  loop_msg *m = snapshot(send, count);
  if (!m) return sdpa_fail(SDPA_ERR_OUT_OF_MEMORY, "loopback: out of host memory");
  /* whatever the receive buffers held is gone: a read before the wait sees NaN */
  for (int i = 0; i < count; ++i)
    if (recv[i].bytes) memset(recv[i].data, 0xff, recv[i].bytes);
  if (w->late) {
    p->copy = m;
    return SDPA_OK;
  }
  pthread_mutex_lock(&w->mu);
  push(w, (t->rank + 1) % w->n, slot, m);
  pthread_mutex_unlock(&w->mu);
  return SDPA_OK;
}

static sdpa_status loop_wait(sdpa_ring_transport *t, int slot) {
  loop_rank *me = (loop_rank *)t;
  loop_world *w = me->w;
  if (slot < 0 || slot >= SDPA_RING_SLOTS)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: wait(slot %d)", slot);
  loop_pending *p = &me->pending[slot];
  if (!p->active)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d waited on slot %d with nothing"
                     " posted", t->rank, slot);
  if (w->late) {
    /* the transfer reads the send buffers now: they must be as posted */
    for (int i = 0; i < p->count; ++i)
      if (p->send[i].bytes && memcmp(p->copy->data[i], p->send[i].data, p->send[i].bytes)) {
        msg_free(p->copy);
        p->copy = NULL;
        p->active = 0;
        return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d changed send buffer %d of slot"
                         " %d while it was in flight", t->rank, i, slot);
      }
    pthread_mutex_lock(&w->mu);
    push(w, (t->rank + 1) % w->n, slot, p->copy);
    pthread_mutex_unlock(&w->mu);
    p->copy = NULL;
  }
  const int q = t->rank * SDPA_RING_SLOTS + slot;
  struct timespec ts;
  deadline(&ts);
  pthread_mutex_lock(&w->mu);
  int rc = 0;
  while (!w->head[q] && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  loop_msg *m = w->head[q];
  if (m) {
    w->head[q] = m->next;
    if (!w->head[q]) w->tail[q] = NULL;
  }
  pthread_mutex_unlock(&w->mu);
  p->active = 0;
  if (!m)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d got nothing on slot %d from rank %d"
                     " in %d s", t->rank, slot, (t->rank - 1 + w->n) % w->n,
                     SDPA_LOOPBACK_TIMEOUT);
  sdpa_status st = SDPA_OK;
  if (m->count != p->count) {
    st = sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d expected %d buffers on slot %d, got %d",
                   t->rank, p->count, slot, m->count);
  } else {
    for (int i = 0; i < m->count && st == SDPA_OK; ++i) {
      if (m->bytes[i] != p->recv[i].bytes)
        st = sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d expected %zu bytes in buffer %d of"
                       " slot %d, got %zu", t->rank, p->recv[i].bytes, i, slot, m->bytes[i]);
      else if (m->bytes[i])
        memcpy(p->recv[i].data, m->data[i], m->bytes[i]);
    }
  }
  msg_free(m);
  return st;
}

static sdpa_status loop_allgather(sdpa_ring_transport *t, const void *mine, void *all,
                                  size_t bytes) {
  loop_world *w = ((loop_rank *)t)->w;
  struct timespec ts;
  deadline(&ts);
  pthread_mutex_lock(&w->mu);
  const long g = w->gen;
  char *tab = w->table[g % 2];
  if (!tab || w->table_bytes != bytes) {
    if (w->arrived != 0 || (tab && w->table_bytes != bytes)) {
      pthread_mutex_unlock(&w->mu);
      return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: all-gathers of different sizes");
    }
    free(w->table[0]);
    free(w->table[1]);
    w->table[0] = malloc(bytes * (size_t)w->n);
    w->table[1] = malloc(bytes * (size_t)w->n);
    w->table_bytes = bytes;
    tab = w->table[g % 2];
  }
  memcpy(tab + bytes * (size_t)t->rank, mine, bytes);
  int rc = 0;
  if (++w->arrived == w->n) {
    w->arrived = 0;
    w->gen++;
    pthread_cond_broadcast(&w->cv);
  } else {
    while (w->gen == g && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  const int done = w->gen != g;
  if (done) memcpy(all, tab, bytes * (size_t)w->n);
  pthread_mutex_unlock(&w->mu);
  if (!done)
    return sdpa_fail(SDPA_ERR_INTERNAL, "loopback: rank %d waited %d s in the all-gather",
                     t->rank, SDPA_LOOPBACK_TIMEOUT);
  return SDPA_OK;
}

loop_world *loop_world_new(int world, int late) {
  loop_world *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->n = world;
  w->late = late;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->head = calloc((size_t)world * SDPA_RING_SLOTS, sizeof *w->head);
  w->tail = calloc((size_t)world * SDPA_RING_SLOTS, sizeof *w->tail);
  w->ranks = calloc((size_t)world, sizeof *w->ranks);
  if (!w->head || !w->tail || !w->ranks) {
    loop_world_free(w);
    return NULL;
  }
  for (int r = 0; r < world; ++r) {
    loop_rank *lr = &w->ranks[r];
    lr->w = w;
    lr->t.rank = r;
    lr->t.world = world;
    lr->t.post = loop_post;
    lr->t.wait = loop_wait;
    lr->t.allgather = loop_allgather;
  }
  return w;
}

sdpa_ring_transport *loop_transport(loop_world *w, int rank) { return &w->ranks[rank].t; }

void loop_world_free(loop_world *w) {
  if (!w) return;
  for (int q = 0; w->head && q < w->n * SDPA_RING_SLOTS; ++q)
    while (w->head[q]) {
      loop_msg *m = w->head[q];
      w->head[q] = m->next;
      msg_free(m);
    }
  for (int r = 0; w->ranks && r < w->n; ++r)
    for (int s = 0; s < SDPA_RING_SLOTS; ++s) msg_free(w->ranks[r].pending[s].copy);
  free(w->head);
  free(w->tail);
  free(w->ranks);
  free(w->table[0]);
  free(w->table[1]);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}
