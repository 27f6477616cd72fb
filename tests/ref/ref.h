/*
 * ref.h - the double-precision oracle: a plain, obviously-correct
 * implementation of the contract in include/sdpa.h (docs/design.md §2),
 * written separately from the CPU backend (it shares no code with src/ beyond
 * the sdpa_problem struct that describes the inputs, and has its own Philox).
 *
 * Inputs are read from the problem's pointers in their storage dtype and
 * converted to double. Outputs are dense, contiguous double arrays:
 *   out   [b, s_q, h, d_v]   (varlen: [total_q, h, d_v])
 *   lse   [b, h, s_q]        (varlen: [h, total_q]); +inf for empty rows
 *   probs [b, h, s_q, s_k]   dense only; may be NULL
 *   dq [b, s_q, h, d], dk [b, s_k, h_k, d], dv [b, s_k, h_k, d_v]
 *        (varlen: [total_q, h, d], [total_k, h_k, d], [total_k, h_k, d_v])
 *   dbias [b, h, s_q, s_k] full (not reduced over broadcast dims); may be NULL
 * KV cache problems (forward only) read the cache as it is *before* the append:
 * keys at positions >= cache_seqlens[b] come from k_new / v_new (rotated).
 *
 * lowp = 1 models "PyTorch-style math in the storage dtype" for tolerances:
 * the probabilities are rounded to the storage dtype before P@V (and dS before
 * dQ/dK in the backward), and outputs are rounded to the storage dtype.
 * Returns 0 on success, -1 on allocation failure.
 */
#ifndef SDPA_REF_H
#define SDPA_REF_H

#include "../../src/problem.h"

int ref_fwd(const sdpa_problem *p, int lowp, double *out, double *lse, double *probs);
int ref_bwd(const sdpa_problem *p, int lowp, const double *dout, double *dq, double *dk,
            double *dv, double *dbias);

/* Philox4x32-10, written independently of src/common/philox.h. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* 1 if element (batch, head, i, j) is dropped under the contract. */
int ref_dropped(const sdpa_problem *p, int64_t batch, int64_t head, int64_t i, int64_t j);

#endif /* SDPA_REF_H */
