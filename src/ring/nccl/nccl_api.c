/*
 * nccl_api.c - loads NCCL once per process: $SDPA_NCCL_LIBRARY if set, else
 * libnccl.so.2 as the loader finds it (an NCCL already in the process, e.g.
 * torch's, is the one found: same soname), else the copy found at build time.
 */
#include "ring/nccl/nccl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#ifndef SDPA_NCCL_BUILD_LIBRARY
#define SDPA_NCCL_BUILD_LIBRARY ""
#endif

static sdpa_nccl_api api;
static int loaded;
static char why[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int resolve(void *h) {
/* memcpy: ISO C has no cast from dlsym's object pointer to a function pointer */
#define SYM(field, name)                                            \
  do {                                                              \
    void *sym_ = dlsym(h, name);                                    \
    if (!sym_) {                                                    \
      snprintf(why, sizeof why, "the library loaded lacks %s", name); \
      return 0;                                                     \
    }                                                               \
    memcpy(&api.field, &sym_, sizeof sym_);                         \
  } while (0)
  SYM(GetErrorString, "ncclGetErrorString");
  SYM(GetVersion, "ncclGetVersion");
  SYM(GetUniqueId, "ncclGetUniqueId");
  SYM(CommInitRank, "ncclCommInitRank");
  SYM(CommDestroy, "ncclCommDestroy");
  SYM(CommCount, "ncclCommCount");
  SYM(CommUserRank, "ncclCommUserRank");
  SYM(CommCuDevice, "ncclCommCuDevice");
  SYM(GroupStart, "ncclGroupStart");
  SYM(GroupEnd, "ncclGroupEnd");
  SYM(Send, "ncclSend");
  SYM(Recv, "ncclRecv");
  SYM(AllGather, "ncclAllGather");
#undef SYM
  return 1;
}

static void load(void) {
  const char *env = getenv("SDPA_NCCL_LIBRARY");
  const char *names[3] = {env && *env ? env : NULL, "libnccl.so.2", SDPA_NCCL_BUILD_LIBRARY};
  char tried[384] = "";
  for (int i = 0; i < 3; ++i) {
    if (!names[i] || !*names[i]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      size_t used = 0;
      while (tried[used]) ++used;
      snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", dlerror());
      if (env && *env) break; /* an explicit choice is not second-guessed */
      continue;
    }
    if (resolve(h)) {
      loaded = 1;
      return;
    }
    dlclose(h);
    return;
  }
  snprintf(why, sizeof why, "dlopen failed: %s", tried);
}

sdpa_status sdpa_nccl(const sdpa_nccl_api **out) {
  pthread_once(&once, load);
  *out = loaded ? &api : NULL;
  if (!loaded)
    return sdpa_fail(SDPA_ERR_NOT_SUPPORTED, "NCCL could not be loaded (%s): install NCCL 2.7 or"
                     " later, or set SDPA_NCCL_LIBRARY to the path of libnccl.so.2", why);
  return SDPA_OK;
}

sdpa_status sdpa_nccl_check(const sdpa_nccl_api *a, ncclResult_t r, const char *call) {
  if (r == ncclSuccess) return SDPA_OK;
  return sdpa_fail(SDPA_ERR_CUDA, "%s failed: %s (NCCL_DEBUG=WARN says more)", call,
                   a->GetErrorString(r));
}
