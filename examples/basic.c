/*
 * basic.c - the smallest complete use of libsdpa: causal attention with
 * grouped-query heads on the CPU backend, then the same call's explanation.
 * Copy this file to start; switch attn.device to SDPA_DEVICE_CUDA (with device
 * pointers) to run on the GPU.
 *
 *   cc basic.c -lsdpa -lm -o basic     (or: find_package(sdpa) / pkg-config sdpa)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sdpa.h"

int main(void) {
  enum { B = 2, S = 128, H = 8, HK = 2, D = 64 };
  int64_t q_shape[4] = {B, S, H, D}, kv_shape[4] = {B, S, HK, D}, lse_shape[3] = {B, H, S};
  float *q = malloc(sizeof(float) * B * S * H * D);
  float *k = malloc(sizeof(float) * B * S * HK * D);
  float *v = malloc(sizeof(float) * B * S * HK * D);
  float *out = malloc(sizeof(float) * B * S * H * D);
  float *lse = malloc(sizeof(float) * B * H * S);
  if (!q || !k || !v || !out || !lse) return 1;
  srand(1);
  for (int i = 0; i < B * S * H * D; ++i) q[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < B * S * HK * D; ++i) {
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
  }

  sdpa_fwd_desc desc;
  sdpa_fwd_init(&desc); /* sets struct_size and every default */
  desc.attn.device = SDPA_DEVICE_CPU;
  desc.attn.q = sdpa_tensor_contiguous(q, SDPA_DTYPE_F32, 4, q_shape);
  desc.attn.k = sdpa_tensor_contiguous(k, SDPA_DTYPE_F32, 4, kv_shape);
  desc.attn.v = sdpa_tensor_contiguous(v, SDPA_DTYPE_F32, 4, kv_shape);
  desc.attn.causal = 1;
  desc.out = sdpa_tensor_contiguous(out, SDPA_DTYPE_F32, 4, q_shape);
  desc.lse = sdpa_tensor_contiguous(lse, SDPA_DTYPE_F32, 3, lse_shape);

  sdpa_status st = sdpa_fwd(&desc);
  if (st != SDPA_OK) {
    fprintf(stderr, "sdpa_fwd: %s: %s\n", sdpa_status_string(st), sdpa_last_error());
    return 1;
  }
  /* Row 0 of a causal problem sees only key 0: out equals v[0] exactly. */
  printf("out[0,0,0,:4] = %.4f %.4f %.4f %.4f (v[0,0,0,:4] = %.4f %.4f %.4f %.4f)\n", out[0], out[1],
         out[2], out[3], v[0], v[1], v[2], v[3]);
  printf("lse[0,0,1] = %.4f\n", lse[1]);

  char why[16384]; /* the whole registry's reasons; a shorter buffer ends "(truncated ...)" */
  sdpa_explain_fwd(&desc, why, sizeof why);
  printf("%s", why);

  /* A mistake is reported, not crashed on: */
  desc.attn.k.shape[2] = 3; /* 8 query heads cannot share 3 kv heads */
  st = sdpa_fwd(&desc);
  printf("with h_k = 3: %s: %s\n", sdpa_status_string(st), sdpa_last_error());

  int ok = fabsf(out[0] - v[0]) < 1e-6f && st == SDPA_ERR_INVALID_ARGUMENT;
  free(q);
  free(k);
  free(v);
  free(out);
  free(lse);
  return ok ? 0 : 1;
}
