/*
 * gemm.h - the CPU backend's tile product: C = alpha * op(A) @ op(B) + beta * C,
 * row-major fp32. Through OpenBLAS's cblas_sgemm, one thread a call, when the
 * build found it (SDPA_HAVE_CBLAS), else a plain-C loop nest. The backend
 * parallelizes over (batch, head, query block) itself and calls this from
 * every worker at once (see gemm.c for why that needs the locking build).
 */
#ifndef SDPA_CPU_GEMM_H
#define SDPA_CPU_GEMM_H

/* op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides. */
void sdpa_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Name of the implementation in use. */
const char *sdpa_cpu_gemm_impl(void);

#endif /* SDPA_CPU_GEMM_H */
