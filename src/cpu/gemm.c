/*
 * gemm.c - sdpa_cpu_gemm: cblas_sgemm when built with a serial BLAS, else a
 * plain-C loop nest ordered so the innermost loop is contiguous in C and B.
 */
#include "gemm.h"

#ifdef SDPA_HAVE_CBLAS
#include <cblas.h>

void sdpa_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (m <= 0 || n <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *sdpa_cpu_gemm_impl(void) { return "openblas-serial"; }

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
