// header_ring_cxx.cpp - sdpa_ring.h compiles as C++ and its calls link
// (with C linkage) from a C++ program; nothing here needs a GPU.
#include "sdpa_ring.h"

#include <cstdio>

int main() {
  sdpa_ring_fwd_desc d;
  sdpa_ring_fwd_init(&d);
  int64_t start[2], len[2];
  int parts = 0;
  const sdpa_status st = sdpa_ring_shard(100, 4, SDPA_RING_ZIGZAG, 1, start, len, &parts);
  const bool ok = d.struct_size == sizeof d && st == SDPA_OK && parts == 2 && start[0] == 13 &&
                  len[0] == 13 && start[1] == 76 && len[1] == 12;
  std::printf("%s\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
