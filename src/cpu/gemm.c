/*
 * gemm.c - sdpa_cpu_gemm: cblas_sgemm from OpenBLAS when the build found it,
 * else a plain-C loop nest ordered so the innermost loop is contiguous in C
 * and B.
 *
 * Why the pthreads build pinned to one thread, not the serial build: the
 * backend calls sgemm from all its threads at once. Debian's serial OpenBLAS
 * is built with USE_THREAD=0 and no USE_LOCKING, and its buffer pool then
 * races: it returns wrong, run-to-run different results (OpenBLAS issues
 * #1755, #2126). The pthreads build locks its pool; with its thread count
 * set to 1 every call runs on the caller's thread.
 */
#include "gemm.h"

#ifdef SDPA_HAVE_CBLAS
#include <cblas.h>
#include <pthread.h>

static pthread_once_t single_thread_once = PTHREAD_ONCE_INIT;

/* Process-wide: OpenBLAS has no per-call thread count in 0.3.21. */
static void openblas_single_thread(void) { openblas_set_num_threads(1); }

void sdpa_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (m <= 0 || n <= 0) return;
  pthread_once(&single_thread_once, openblas_single_thread);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *sdpa_cpu_gemm_impl(void) { return "openblas (1 thread a call)"; }

#else

void sdpa_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  for (int i = 0; i < m; ++i) {
    float *ci = c + (long)i * ldc;
    if (beta == 0.0f) {
      for (int j = 0; j < n; ++j) ci[j] = 0.0f;
    } else if (beta != 1.0f) {
      for (int j = 0; j < n; ++j) ci[j] *= beta;
    }
    if (!trans_b) {
      /* C[i, :] += alpha * A[i, p] * B[p, :]: contiguous inner loop */
      for (int p = 0; p < k; ++p) {
        float aip = alpha * (trans_a ? a[(long)p * lda + i] : a[(long)i * lda + p]);
        const float *bp = b + (long)p * ldb;
        for (int j = 0; j < n; ++j) ci[j] += aip * bp[j];
      }
    } else {
      /* C[i, j] += alpha * dot(A[i, :], B[j, :]) */
      for (int j = 0; j < n; ++j) {
        const float *bj = b + (long)j * ldb;
        float acc = 0.0f;
        if (!trans_a) {
          const float *ai = a + (long)i * lda;
          for (int p = 0; p < k; ++p) acc += ai[p] * bj[p];
        } else {
          for (int p = 0; p < k; ++p) acc += a[(long)p * lda + i] * bj[p];
        }
        ci[j] += alpha * acc;
      }
    }
  }
}

const char *sdpa_cpu_gemm_impl(void) { return "plain-c"; }

#endif
