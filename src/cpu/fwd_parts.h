/*
 * fwd_parts.h - the pieces of the CPU forward that live in their own files:
 * the KV-cache append with rotary (kvappend.c) and the exact merge of partial
 * (out, lse) rows (merge.c, also behind sdpa_cpu_merge and the split-KV
 * combine in fwd.c).
 */
#ifndef SDPA_CPU_FWD_PARTS_H
#define SDPA_CPU_FWD_PARTS_H

#include <stdint.h>

#include "../problem.h"

/* Rotary embedding of one fp32 row at position pos, in place (elements
 * [0, p->rotary_dim); the rest is untouched), rounded to the storage dtype:
 * a rotated row is what the cache stores, and the rotated q as the GPU's
 * fragments and FlashAttention hold it. Requires p->rotary_dim > 0. */
void sdpa_cpu_rotary_row(const sdpa_problem *p, float *x, int64_t pos);

/* Writes k_new / v_new (k_new rotated when rotary is on) into the cache at
 * rows cache_seqlens[b] + i. Requires p->layout == SDPA_LAYOUT_CACHE. */
sdpa_status sdpa_cpu_kv_append(const sdpa_problem *p);

/* Merges n partial rows of d fp32 values (part k at parts + k * part_stride,
 * its lse at lse[k * lse_stride]; lse = +inf marks an empty part, never read)
 * into out[0..d) and returns the merged lse (+inf and out = 0 if all empty). */
float sdpa_cpu_merge_row(int64_t n, const float *lse, int64_t lse_stride, const float *parts,
                         int64_t part_stride, int64_t d, float *out);

/* fp32 row <-> storage dtype (n elements, contiguous) */
void sdpa_cpu_load_row(const void *src, sdpa_dtype t, int64_t n, float *dst);
void sdpa_cpu_store_row(void *dst, sdpa_dtype t, int64_t n, const float *src);

#endif /* SDPA_CPU_FWD_PARTS_H */
