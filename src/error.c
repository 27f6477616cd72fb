/*
 * error.c - the thread-local last-error message and the status names.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

sdpa_status sdpa_fail(sdpa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

void sdpa_clear_error(void) { last_error[0] = '\0'; }

const char *sdpa_last_error(void) { return last_error; }

const char *sdpa_status_string(sdpa_status status) {
  switch (status) {
  case SDPA_OK: return "SDPA_OK";
  case SDPA_ERR_INVALID_ARGUMENT: return "SDPA_ERR_INVALID_ARGUMENT";
  case SDPA_ERR_NOT_SUPPORTED: return "SDPA_ERR_NOT_SUPPORTED";
  case SDPA_ERR_OUT_OF_MEMORY: return "SDPA_ERR_OUT_OF_MEMORY";
  case SDPA_ERR_CUDA: return "SDPA_ERR_CUDA";
  case SDPA_ERR_INTERNAL: return "SDPA_ERR_INTERNAL";
  }
  return "SDPA_ERR_UNKNOWN";
}

const char *sdpa_dtype_string(sdpa_dtype dtype) {
  switch (dtype) {
  case SDPA_DTYPE_F32: return "f32";
  case SDPA_DTYPE_F16: return "f16";
  case SDPA_DTYPE_BF16: return "bf16";
  case SDPA_DTYPE_I32: return "i32";
  }
  return "unknown";
}

int sdpa_version(void) { return SDPA_VERSION_NUMBER; }
