/*
 * fwd_sm90_items.h - which work items a block of the Hopper forward runs,
 * and in what order (fwd_sm90_body.cuh's walk; the host test checks it).
 * Items are (query block counted from the last, head, batch), query block
 * fastest: item w is query block m - 1 - w % m of head-batch w / m.
 *
 * Plain: block x takes items x, x + grid, ... (persistent where the grid is
 * smaller than the items). Pairs (causal): pair q of head-batch q / np, np =
 * ceil(m / 2), is its heavy block r = q % np (query block m - 1 - r), then
 * the light mirror m - 1 - r (query block r) unless r is the middle block;
 * block x takes pairs x, x + grid, ... (the host makes the grid smaller
 * than the pairs only where they cost the same: sdpa_fwd_sm90_grid). Pairs
 * of one head run side by side, sharing its K and V in L2. Usable from C
 * and CUDA C.
 */
#ifndef SDPA_FWD_SM90_ITEMS_H
#define SDPA_FWD_SM90_ITEMS_H

#include "problem.h" /* SDPA_HD */

/* The pairs of `items` items (m query blocks a head-batch). */
SDPA_HD int fwd_item_pairs(int m, int items) { return (m + 1) / 2 * (items / m); }

/* The first item of block x, -1 when it has none. */
SDPA_HD int fwd_item_first(int pairs, int m, int items, int x) {
  if (!pairs) return x < items ? x : -1;
  const int np = (m + 1) / 2;
  return x < fwd_item_pairs(m, items) ? x / np * m + x % np : -1;
}

/* The item after w in a block of a `grid`-block launch, -1 after its last.
 * (Compared before adding: w + grid may pass 2^31 - 1.) */
SDPA_HD int fwd_item_next(int pairs, int m, int items, int grid, int w) {
  if (!pairs) return w < items - grid ? w + grid : -1;
  const int np = (m + 1) / 2, r = w % m;
  if (r < np && 2 * r < m - 1) return w + (m - 1 - 2 * r); /* the heavy block's mirror */
  const int q = w / m * np + (r < np ? r : m - 1 - r);  /* this pair */
  return q < fwd_item_pairs(m, items) - grid ? fwd_item_first(1, m, items, q + grid) : -1;
}

#endif /* SDPA_FWD_SM90_ITEMS_H */
