/*
 * test_cpu_fwd.c - the forward's case table (tests/common/fwd_cases.c) on
 * the CPU backend: every case whose mask has ON_CPU, against the fp64
 * oracle; plus the CPU's automatic split count.
 *
 *   test_cpu_fwd           the table
 *   test_cpu_fwd --list    the cases, one line each, nothing run
 */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "common/fwd_cases.h"

int main(int argc, char **argv) {
  test_rng rng;
  test_rng_init(&rng, test_seed());
  const case_env env = case_env_init(argc, argv, ON_CPU, ON_CPU, &rng);
  fwd_cases_run(&env, NULL);
  if (env.list) return 0;

  /* automatic split count */
  sdpa_problem p;
  memset(&p, 0, sizeof p);
  p.b = 1;
  p.h = 4;
  p.s_q = 1;
  p.s_k = 8192;
  p.num_threads = 16;
  int n = sdpa_cpu_num_splits(&p);
  TEST_EXPECT(n > 1, "decode b1 h4 s_k 8192 on 16 threads should split, got %d", n);
  p.b = 8;
  p.h = 16;
  p.s_q = 2048;
  TEST_EXPECT(sdpa_cpu_num_splits(&p) == 1, "b8 h16 s2048 should not split");
  p.num_splits = 7;
  TEST_EXPECT(sdpa_cpu_num_splits(&p) == 7, "num_splits 7 must be honoured");
  return test_summary();
}
