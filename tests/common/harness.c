/*
 * harness.c - the shared C test harness declared in harness.h: the seeded
 * xoshiro256** generator, poisoned host tensors of any strides, the
 * oracle comparison with the tolerance rule of docs/design.md §7, and the
 * pass/fail counters behind "N passed, N failed".
 */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/dtype.h"

static int test_passed_count;
static int test_failed_count;

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t test_seed(void) {
  static int have_seed;
  static uint64_t seed;
  if (have_seed) return seed;
  const char *env = getenv("SDPA_TEST_SEED");
  if (env && *env) {
    seed = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    seed = splitmix64(&x) % 1000000000000ull; /* short enough to retype */
  }
  have_seed = 1;
  printf("seed = %llu (replay: SDPA_TEST_SEED=%llu)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  fflush(stdout);
  return seed;
}

void test_rng_init(test_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; ++i) r->s[i] = splitmix64(&x);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t test_rng_u64(test_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl64(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

double test_rng_uniform(test_rng *r) { return (double)(test_rng_u64(r) >> 11) * 0x1p-53; }

double test_rng_normal(test_rng *r) {
  /* Box-Muller; u1 in (0, 1] so the log is finite */
  double u1 = 1.0 - test_rng_uniform(r);
  double u2 = test_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t test_rng_int(test_rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  uint64_t range = (uint64_t)hi - (uint64_t)lo + 1u; /* 0 means all 2^64 values */
  if (range == 0) return (int64_t)test_rng_u64(r);
  /* rejection sampling: no modulo bias */
  uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do {
    x = test_rng_u64(r);
  } while (x >= limit);
  return (int64_t)((uint64_t)lo + x % range);
}

/* ---- host tensors -------------------------------------------------------------- */

int64_t test_numel(const sdpa_tensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; ++k) n *= t->shape[k];
  return n;
}

/* Elements between the first and one past the last addressable element. */
static int64_t test_span(const sdpa_tensor *t) {
  if (test_numel(t) == 0) return 0;
  int64_t last = 0;
  for (int k = 0; k < t->rank; ++k) last += (t->shape[k] - 1) * t->stride[k];
  return last + 1;
}

static sdpa_tensor test_alloc_strided(sdpa_dtype dtype, int rank, const int64_t *shape,
                                      int64_t pad) {
  sdpa_tensor t;
  memset(&t, 0, sizeof t);
  if (rank < 0 || rank > SDPA_MAX_RANK) {
    fprintf(stderr, "test_alloc: rank %d out of range\n", rank);
    abort();
  }
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    t.shape[k] = shape[k];
    t.stride[k] = stride;
    stride = stride * shape[k] + pad;
  }
  if (rank > 0) t.stride[rank - 1] = 1;
  size_t bytes = (size_t)test_span(&t) * sdpa_dtype_size(dtype);
  t.data = malloc(bytes ? bytes : 1);
  if (!t.data) {
    fprintf(stderr, "test_alloc: out of memory (%zu bytes)\n", bytes);
    abort();
  }
  test_poison(&t);
  return t;
}

sdpa_tensor test_alloc(sdpa_dtype dtype, int rank, const int64_t *shape) {
  return test_alloc_strided(dtype, rank, shape, 0);
}

sdpa_tensor test_alloc_padded(sdpa_dtype dtype, int rank, const int64_t *shape, int64_t pad) {
  return test_alloc_strided(dtype, rank, shape, pad);
}

void test_free(sdpa_tensor *t) {
  if (!t) return;
  free(t->data);
  t->data = NULL;
}

int64_t test_offset(const sdpa_tensor *t, int64_t flat) {
  int64_t off = 0;
  for (int k = t->rank - 1; k >= 0; --k) {
    int64_t n = t->shape[k];
    off += (flat % n) * t->stride[k];
    flat /= n;
  }
  return off;
}

/* Poisons every addressable element, padding included. */
void test_poison(sdpa_tensor *t) {
  int64_t n = test_span(t);
  for (int64_t e = 0; e < n; ++e) {
    switch (t->dtype) {
    case SDPA_DTYPE_F32: {
      uint32_t u = 0x7fc00000u;
      memcpy((float *)t->data + e, &u, 4);
      break;
    }
    case SDPA_DTYPE_F16: ((uint16_t *)t->data)[e] = 0x7e00u; break;
    case SDPA_DTYPE_BF16: ((uint16_t *)t->data)[e] = 0x7fc0u; break;
    case SDPA_DTYPE_I32: ((int32_t *)t->data)[e] = 0x7f7f7f7f; break;
    }
  }
}

double test_get(const sdpa_tensor *t, int64_t flat) {
  int64_t off = test_offset(t, flat);
  if (t->dtype == SDPA_DTYPE_I32) return (double)((const int32_t *)t->data)[off];
  return (double)sdpa_load(t->data, t->dtype, off);
}

void test_set(sdpa_tensor *t, int64_t flat, double x) {
  int64_t off = test_offset(t, flat);
  if (t->dtype == SDPA_DTYPE_I32)
    ((int32_t *)t->data)[off] = (int32_t)x;
  else
    sdpa_store(t->data, t->dtype, off, (float)x);
}

void test_fill_normal(sdpa_tensor *t, test_rng *r, double stddev) {
  int64_t n = test_numel(t);
  for (int64_t e = 0; e < n; ++e) test_set(t, e, stddev * test_rng_normal(r));
}

void test_fill_uniform(sdpa_tensor *t, test_rng *r, double lo, double hi) {
  int64_t n = test_numel(t);
  for (int64_t e = 0; e < n; ++e) test_set(t, e, lo + (hi - lo) * test_rng_uniform(r));
}

/* ---- checks ---------------------------------------------------------------------- */

/*
 * The absolute term covers what the lowp oracle does not model: the error of an
 * O(1) output that is already within a rounding of the exact value.
 *  - f16: 1e-3 ~ one ulp at 1 (2^-10 = 9.8e-4): the final rounding of the
 *    output plus fp32 accumulation noise.
 *  - bf16: 4e-3 ~ half an ulp at 1 (2^-8 = 3.9e-3): bf16 carries 8 bits, so
 *    one output rounding alone can cost this much.
 *  - f32: lowp equals the exact oracle for f32 storage, so this term is the
 *    whole budget: fp32 accumulation over long rows in another order, exp2f
 *    with log2(e) folded into the scale, and the online-softmax rescaling,
 *    for O(1) outputs; ~100 ulps at 1.
 */
double test_atol(sdpa_dtype dtype) {
  switch (dtype) {
  case SDPA_DTYPE_F16: return 1e-3;
  case SDPA_DTYPE_BF16: return 4e-3;
  default: return 1e-5;
  }
}

static void test_print_coords(const sdpa_tensor *t, int64_t flat) {
  int64_t idx[SDPA_MAX_RANK];
  for (int k = t->rank - 1; k >= 0; --k) {
    idx[k] = flat % t->shape[k];
    flat /= t->shape[k];
  }
  printf("[");
  for (int k = 0; k < t->rank; ++k) printf(k ? ", %lld" : "%lld", (long long)idx[k]);
  printf("]");
}

/* |a - b| where equal infinities count as 0 and a NaN as +inf */
static double test_err(double a, double b) {
  if (isnan(a) || isnan(b)) return INFINITY;
  if (a == b) return 0.0; /* also equal infinities */
  return fabs(a - b);
}

static int test_is_poison(const sdpa_tensor *t, int64_t flat) {
  if (t->dtype != SDPA_DTYPE_I32) return 0; /* float poison is NaN, caught as NaN */
  return ((const int32_t *)t->data)[test_offset(t, flat)] == 0x7f7f7f7f;
}

int test_check(const char *what, const sdpa_tensor *got, const double *ref, const double *lowp,
               double atol) {
  int64_t n = test_numel(got);
  double lowp_err = 0.0;
  if (lowp)
    for (int64_t e = 0; e < n; ++e) {
      double x = test_err(lowp[e], ref[e]);
      if (x > lowp_err) lowp_err = x;
    }
  double bound = 2.0 * lowp_err + atol;
  double max_err = -1.0;
  int64_t max_at = 0, bad = 0;
  for (int64_t e = 0; e < n; ++e) {
    double g = test_get(got, e);
    double err = test_err(g, ref[e]);
    int poison = test_is_poison(got, e);
    int fail = poison || isnan(g) || isnan(ref[e]) || !(err <= bound);
    if (err > max_err) {
      max_err = err;
      max_at = e;
    }
    if (!fail) continue;
    if (bad < 10) {
      printf("  %s ", what);
      test_print_coords(got, e);
      printf(": got %.9g, ref %.9g, err %.3g > bound %.3g%s\n", g, ref[e], err, bound,
             poison ? " (poison: never written)" : "");
    }
    ++bad;
  }
  if (bad) {
    printf("FAIL %s: %lld of %lld elements outside the bound %.3g (2 * lowp err %.3g + atol %.3g); "
           "max err %.3g at ",
           what, (long long)bad, (long long)n, bound, lowp_err, atol, max_err);
    test_print_coords(got, max_at);
    printf("\n");
    ++test_failed_count;
    return 0;
  }
  printf("ok   %s: max err %.3g <= bound %.3g\n", what, max_err < 0 ? 0.0 : max_err, bound);
  ++test_passed_count;
  return 1;
}

double test_max_abs(const double *x, int64_t n) {
  double m = 0.0;
  for (int64_t e = 0; e < n; ++e)
    if (isfinite(x[e]) && fabs(x[e]) > m) m = fabs(x[e]);
  return m;
}

/* lse is O(log s_k) + O(max score), not O(1): its atol is fp32's relative
 * rounding of that magnitude, never less than at 1. */
double test_lse_atol(const double *lse, int64_t n) {
  const double m = test_max_abs(lse, n);
  return 2e-6 * (m > 1.0 ? m : 1.0) + 1e-5;
}

/* Gradients are not O(1): the dtype's atol scales with max(1, max |ref|). */
int test_check_grad(const char *cname, const char *what, const sdpa_tensor *got, const double *ref,
                    const double *lowp) {
  char label[200];
  snprintf(label, sizeof label, "%s %s", cname, what);
  const double m = test_max_abs(ref, test_numel(got));
  return test_check(label, got, ref, lowp, test_atol(got->dtype) * (m > 1.0 ? m : 1.0));
}

int test_check_equal(const char *what, const sdpa_tensor *a, const sdpa_tensor *b) {
  int same_shape = a->dtype == b->dtype && a->rank == b->rank;
  for (int k = 0; same_shape && k < a->rank; ++k) same_shape = a->shape[k] == b->shape[k];
  if (!same_shape) {
    printf("FAIL %s: tensors differ in dtype, rank or shape\n", what);
    ++test_failed_count;
    return 0;
  }
  size_t es = sdpa_dtype_size(a->dtype);
  int64_t n = test_numel(a), bad = 0;
  for (int64_t e = 0; e < n; ++e) {
    const char *pa = (const char *)a->data + test_offset(a, e) * (int64_t)es;
    const char *pb = (const char *)b->data + test_offset(b, e) * (int64_t)es;
    if (memcmp(pa, pb, es) == 0) continue;
    if (bad < 10) {
      printf("  %s ", what);
      test_print_coords(a, e);
      printf(": %.9g != %.9g\n", test_get(a, e), test_get(b, e));
    }
    ++bad;
  }
  if (bad) {
    printf("FAIL %s: %lld of %lld elements differ\n", what, (long long)bad, (long long)n);
    ++test_failed_count;
    return 0;
  }
  printf("ok   %s: bitwise equal\n", what);
  ++test_passed_count;
  return 1;
}

/* ---- counting ---------------------------------------------------------------------- */

int test_expect_(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    ++test_passed_count;
    return 1;
  }
  ++test_failed_count;
  printf("FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  return 0;
}

int test_expect_error_(sdpa_status got, sdpa_status want, const char *file, int line,
                       const char *const *needles) {
  const char *msg = sdpa_last_error();
  int ok = got == want;
  for (const char *const *n = needles; ok && *n; ++n) ok = strstr(msg, *n) != NULL;
  if (ok) {
    ++test_passed_count;
    return 1;
  }
  ++test_failed_count;
  printf("FAIL %s:%d: status %s (want %s), message \"%s\"", file, line, sdpa_status_string(got),
         sdpa_status_string(want), msg);
  if (got == want) {
    printf(" lacks");
    for (const char *const *n = needles; *n; ++n)
      if (!strstr(msg, *n)) printf(" \"%s\"", *n);
  }
  printf("\n");
  return 0;
}

int test_summary(void) {
  printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
  fflush(stdout);
  return test_failed_count ? 1 : 0;
}
