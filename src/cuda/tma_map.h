/*
 * tma_map.h - tensor maps for the copy engine (cp.async.bulk.tensor) of
 * the Hopper rows: a [outer, rows, heads, d] tensor of 16-bit elements as
 * the 4-d map {d, rows, heads, outer}, boxes of 64 columns, 128-byte
 * swizzle (what ptx_wgmma.cuh's descriptors read), zeros outside. Made by
 * the driver's cuTensorMapEncodeTiled, looked up once through the runtime
 * so that the library links no libcuda.
 */
#ifndef SDPA_TMA_MAP_H
#define SDPA_TMA_MAP_H

#include <stdint.h>

#include <cuda.h>

#include "problem.h"

/* 1 when *m maps base (strides st in elements; extents d, rows, heads,
 * outer) in boxes of 64 columns x box_rows rows; 0 when the driver has no
 * encoder or refuses the strides or base (16-byte aligned, below 2^40
 * bytes, expected). */
extern "C" int sdpa_tma_map_bshd(CUtensorMap *m, const void *base, sdpa_dtype dt, int64_t d,
                                 int64_t rows, int64_t heads, int64_t outer, sdpa_bshd st,
                                 int box_rows);

#endif /* SDPA_TMA_MAP_H */
