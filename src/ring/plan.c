/*
 * plan.c - which rows each rank holds, and which attention calls each step
 * of the ring makes (pure functions: the CPU tests check them against the
 * mask pair by pair).
 */
#include "ring/ring.h"

/* Chunk c of m over S rows: S / m rows, one more for the first S % m. */
static void chunk(int64_t seqlen, int64_t m, int64_t c, int64_t *start, int64_t *len) {
  const int64_t base = seqlen / m, extra = seqlen % m;
  *start = c * base + (c < extra ? c : extra);
  *len = base + (c < extra ? 1 : 0);
}

void sdpa_ring_shard_of(int64_t seqlen, int world, sdpa_ring_layout layout, int rank,
                        sdpa_ring_shard_t *s) {
  const int zig = layout == SDPA_RING_ZIGZAG;
  const int64_t m = zig ? 2 * (int64_t)world : world;
  s->parts = zig ? 2 : 1;
  s->part[0].chunk = rank;
  s->part[1].chunk = m - 1 - rank; /* zigzag: its mirror, after it in global order */
  s->len = 0;
  for (int i = 0; i < 2; ++i) {
    sdpa_ring_part *p = &s->part[i];
    if (i >= s->parts) {
      p->start = p->len = 0;
      p->local = s->len;
      continue;
    }
    chunk(seqlen, m, p->chunk, &p->start, &p->len);
    p->local = s->len;
    s->len += p->len;
  }
}

int64_t sdpa_ring_max_local(int64_t seqlen, int world, sdpa_ring_layout layout) {
  int64_t best = 0;
  for (int r = 0; r < world; ++r) {
    sdpa_ring_shard_t s;
    sdpa_ring_shard_of(seqlen, world, layout, r, &s);
    if (s.len > best) best = s.len;
  }
  return best;
}

int sdpa_ring_plan(const sdpa_ring_shard_t *q, const sdpa_ring_shard_t *k, int own, int causal,
                   sdpa_ring_item items[SDPA_RING_MAX_ITEMS]) {
  if (q->len == 0 || k->len == 0) return 0;
  /* A rank's own rows are in global order locally, so its own block is the
   * local square problem with the local causal mask. */
  if (own) {
    items[0] = (sdpa_ring_item){0, q->len, 0, k->len, causal};
    return 1;
  }
  /* Another rank's chunks are all before or all after each of ours: per
   * query part, the visible key parts are every part (no mask) or those of
   * earlier chunks, a prefix of the block since its parts are in global
   * order; so one key range per query part, with no mask inside. */
  int64_t k0[2] = {0, 0}, k1[2] = {0, 0};
  for (int a = 0; a < q->parts; ++a) {
    const sdpa_ring_part *qa = &q->part[a];
    int first = 1;
    for (int b = 0; b < k->parts; ++b) {
      const sdpa_ring_part *kb = &k->part[b];
      if (kb->len == 0 || (causal && kb->chunk > qa->chunk)) continue;
      if (first) k0[a] = kb->local;
      k1[a] = kb->local + kb->len;
      first = 0;
    }
  }
  int n = 0;
  for (int a = 0; a < q->parts; ++a) {
    const sdpa_ring_part *qa = &q->part[a];
    if (qa->len == 0 || k1[a] == k0[a]) continue;
    /* the second query part sees the same keys: one call over both parts
     * (adjacent locally) */
    if (n == 1 && items[0].k0 == k0[a] && items[0].k_len == k1[a] - k0[a] &&
        items[0].q0 + items[0].q_len == qa->local) {
      items[0].q_len += qa->len;
      continue;
    }
    items[n++] = (sdpa_ring_item){qa->local, qa->len, k0[a], k1[a] - k0[a], 0};
  }
  return n;
}
