/*
 * error.h - how the library reports failure: every internal function that can
 * fail returns an sdpa_status; sdpa_fail() records a formatted sentence in the
 * thread-local last-error buffer (read by sdpa_last_error()) and returns the
 * status, so a check is one line. The library never prints or aborts.
 */
#ifndef SDPA_ERROR_H
#define SDPA_ERROR_H

#include "sdpa.h"

#if defined(__GNUC__)
#define SDPA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SDPA_PRINTF(a, b)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Records the message and returns st. */
sdpa_status sdpa_fail(sdpa_status st, const char *fmt, ...) SDPA_PRINTF(2, 3);
/* Clears the message (start of a successful call). */
void sdpa_clear_error(void);

#ifdef __cplusplus
}
#endif

/* Return st with a message unless cond holds. */
#define SDPA_CHECK(cond, st, ...)         \
  do {                                    \
    if (!(cond)) return sdpa_fail((st), __VA_ARGS__); \
  } while (0)

/* Propagate a failing status (the callee already wrote the message). */
#define SDPA_TRY(call)                    \
  do {                                    \
    sdpa_status sdpa_try_st_ = (call);    \
    if (sdpa_try_st_ != SDPA_OK) return sdpa_try_st_; \
  } while (0)

#endif /* SDPA_ERROR_H */
