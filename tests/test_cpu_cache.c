/*
 * test_cpu_cache.c - the KV-cache decoding table (tests/common/decode_cases.c)
 * on the CPU backend: every case whose mask has ON_CPU, against the fp64
 * oracle, the cache after each append checked (appended rows rotated, every
 * other element untouched), and every split count 2..16 equal to the first
 * call's result where a case sweeps.
 *
 *   test_cpu_cache          the table
 *   test_cpu_cache --list   the cases, one line each, nothing run
 */
#include "common/decode_cases.h"

int main(int argc, char **argv) {
  test_rng rng;
  test_rng_init(&rng, test_seed());
  const case_env env = case_env_init(argc, argv, ON_CPU, ON_CPU, &rng);
  decode_cases_run(&env, NULL, NULL);
  return env.list ? 0 : test_summary();
}
