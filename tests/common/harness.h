/*
 * harness.h - what every C test shares: a seeded RNG (the seed is printed, and
 * SDPA_TEST_SEED=<n> replays it), host tensors that own their memory and start
 * poisoned (NaN), checks against the double-precision oracle with the
 * tolerance rule of docs/design.md §7 (and its atol for lse and for
 * gradients), and pass/fail counting that ends in the summary line
 * "N passed, N failed".
 *
 * Tolerance (as flash_attn's tests): for an output o with oracle r and
 * "storage-dtype math" oracle l (ref_* with lowp = 1),
 *     max |o - r| <= 2 * max |l - r| + atol(dtype)
 * checked per tensor, every element; NaN never passes (a NaN or an element
 * still holding the poison fails).
 */
#ifndef SDPA_TEST_HARNESS_H
#define SDPA_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "sdpa.h"

/* ---- random numbers (xoshiro256**) ---------------------------------------- */
typedef struct test_rng {
  uint64_t s[4];
} test_rng;

/* The run's seed: $SDPA_TEST_SEED or a fresh one from the clock; printed once. */
uint64_t test_seed(void);
void test_rng_init(test_rng *r, uint64_t seed);
uint64_t test_rng_u64(test_rng *r);
double test_rng_uniform(test_rng *r);                     /* [0, 1) */
double test_rng_normal(test_rng *r);                      /* N(0, 1) */
int64_t test_rng_int(test_rng *r, int64_t lo, int64_t hi); /* inclusive */

/* ---- host tensors ---------------------------------------------------------- */
/* Contiguous tensor, malloc'd, poisoned. Free with test_free. */
sdpa_tensor test_alloc(sdpa_dtype dtype, int rank, const int64_t *shape);
/* Same, but each dimension except the last gets `pad` extra elements of stride
 * (a non-contiguous view into a larger buffer, padding poisoned too). */
sdpa_tensor test_alloc_padded(sdpa_dtype dtype, int rank, const int64_t *shape, int64_t pad);
void test_free(sdpa_tensor *t);
int64_t test_numel(const sdpa_tensor *t);
/* Element offset (in elements) of the logical row-major index `flat`. */
int64_t test_offset(const sdpa_tensor *t, int64_t flat);
void test_fill_normal(sdpa_tensor *t, test_rng *r, double stddev);
void test_fill_uniform(sdpa_tensor *t, test_rng *r, double lo, double hi);
void test_poison(sdpa_tensor *t); /* NaN for floats, 0x7f7f7f7f for int32 */
double test_get(const sdpa_tensor *t, int64_t flat);  /* logical element as double */
void test_set(sdpa_tensor *t, int64_t flat, double x); /* rounds to the dtype */

/* ---- checks ------------------------------------------------------------------ */
/* Absolute term of the tolerance for outputs of this dtype. */
double test_atol(sdpa_dtype dtype);
/* Compares every logical element of got with ref (contiguous, same logical
 * shape) under the rule above (lowp may be NULL: bound = atol). Prints the
 * first mismatches with their coordinates (at most ten) and the max error.
 * Returns 1 on pass, 0 on fail; counts the result. */
int test_check(const char *what, const sdpa_tensor *got, const double *ref, const double *lowp,
               double atol);
/* max |x[e]| over the finite x[e] (0 if none). */
double test_max_abs(const double *x, int64_t n);
/* atol for an lse checked against the oracle's lse[0..n):
 * 2e-6 * max(1, test_max_abs(lse, n)) + 1e-5. */
double test_lse_atol(const double *lse, int64_t n);
/* test_check labelled "<cname> <what>", atol test_atol(got's dtype) scaled by
 * max(1, max |ref|) (a gradient's size grows with the problem). */
int test_check_grad(const char *cname, const char *what, const sdpa_tensor *got, const double *ref,
                    const double *lowp);
/* Exact equality of two tensors' bytes over their logical elements. */
int test_check_equal(const char *what, const sdpa_tensor *a, const sdpa_tensor *b);

/* ---- counting ------------------------------------------------------------------ */
/* Counts one result; on failure prints "FAIL <file>:<line>: <message>". */
int test_expect_(int ok, const char *file, int line, const char *fmt, ...);
#define TEST_EXPECT(cond, ...) test_expect_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Expect status st from a call and a last-error message containing each of the
 * given NUL-terminated substrings (a NULL-terminated list). */
int test_expect_error_(sdpa_status got, sdpa_status want, const char *file, int line,
                       const char *const *needles);
#define TEST_EXPECT_ERROR(call, want, ...)                                             \
  do {                                                                                \
    const char *const test_needles_[] = {__VA_ARGS__, NULL};                          \
    test_expect_error_((call), (want), __FILE__, __LINE__, test_needles_);            \
  } while (0)
/* Prints "N passed, N failed" and returns the process exit code (0 if none failed). */
int test_summary(void);

#endif /* SDPA_TEST_HARNESS_H */
