/*
 * test_fwd_items.c - the Hopper forward's work-item walk
 * (src/cuda/fwd/fwd_sm90_items.h), on the host: over every block of a
 * launch, each item runs exactly once; in pairs each block runs a heavy
 * query block and then its mirror, pair after pair. Exhaustive over small
 * query-block counts, head-batch counts and grids up to past the items.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/fwd/fwd_sm90_items.h"

static int failures;

static void check(int ok, const char *what, int a, int b, int c, int d) {
  if (!ok && failures++ < 20) printf("FAIL %s (%d %d %d %d)\n", what, a, b, c, d);
}

static void walk(int pairs, int m, int hb, int grid) {
  const int items = m * hb;
  int *seen = calloc((size_t)items, sizeof *seen);
  for (int x = 0; x < grid; ++x) {
    int prev = -1, n = 0;
    for (int w = fwd_item_first(pairs, m, items, x); w >= 0;
         w = fwd_item_next(pairs, m, items, grid, w)) {
      check(w < items, "item out of range", pairs, m, hb, w);
      if (w >= items || ++n > items) break;
      ++seen[w];
      if (pairs) {
        const int r = w % m, pr = prev < 0 ? -1 : prev % m;
        /* a mirror follows its heavy block; a heavy block starts a pair */
        if (r >= (m + 1) / 2)
          check(prev >= 0 && prev / m == w / m && pr == m - 1 - r, "mirror without its pair", m,
                hb, grid, w);
        else
          check(prev < 0 || pr >= (m + 1) / 2 || 2 * pr == m - 1, "pair cut short", m, hb, grid,
                w);
      }
      prev = w;
    }
  }
  for (int w = 0; w < items; ++w)
    check(seen[w] == 1, "item not run exactly once", pairs, m, grid, w);
  free(seen);
}

int main(void) {
  for (int pairs = 0; pairs < 2; ++pairs)
    for (int m = 1; m <= 9; ++m)
      for (int hb = 1; hb <= 7; ++hb) {
        const int units = pairs ? fwd_item_pairs(m, m * hb) : m * hb;
        for (int grid = 1; grid <= units; ++grid) walk(pairs, m, hb, grid);
      }
  /* near 2^31 - 1 items: the next item's index is compared before it is added */
  const int big = 0x7fffffff - 5;
  check(fwd_item_next(0, 1, big, 132, big - 3) == -1, "overflow past the items", 0, 0, 0, 0);
  /* pairs there: a heavy block's mirror, and the end after the last pair */
  const int m7 = 7, items7 = 0x7fffffff / 7 * 7, last = items7 - m7; /* the last head-batch */
  check(fwd_item_next(1, m7, items7, 132, last + 2) == last + 4, "mirror near 2^31", 0, 0, 0, 0);
  check(fwd_item_next(1, m7, items7, 132, last + 4) == -1, "last pair near 2^31", 0, 0, 0, 0);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok   fwd items: every item once, pairs in order\n");
  return 0;
}
