/*
 * test_cpu_bwd.c - the backward's case table (tests/common/bwd_cases.c) on the
 * CPU backend: every case whose mask has ON_CPU, against the double-precision
 * oracle (ref_bwd, exact and lowp), atol scaled by max(1, max |ref|) per
 * tensor (gradients are not O(1)); plus bitwise run-to-run determinism over
 * several thread counts where a case lists them.
 *
 *   test_cpu_bwd          the table
 *   test_cpu_bwd --list   the cases, one line each, nothing run
 */
#include "common/bwd_cases.h"

int main(int argc, char **argv) {
  test_rng rng;
  test_rng_init(&rng, test_seed());
  const case_env env = case_env_init(argc, argv, ON_CPU, ON_CPU, &rng);
  bwd_cases_run(&env, NULL);
  return env.list ? 0 : test_summary();
}
