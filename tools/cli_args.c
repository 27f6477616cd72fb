/*
 * cli_args.c - the flags of `sdpa run` and `sdpa explain`: one table of
 * flags (name, short name, argument, help) drives both the parser and the
 * usage text, so the two never disagree. Defaults that depend on the device
 * (a bigger problem on CUDA) are resolved after parsing.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef enum flag_id {
  F_BATCH, F_SEQLEN, F_SEQLEN_Q, F_SEQLEN_K, F_HEADS, F_KV_HEADS, F_HEAD_DIM, F_HEAD_DIM_V,
  F_DTYPE, F_CAUSAL, F_NO_CAUSAL, F_ALIGN, F_WINDOW, F_SOFTCAP, F_ALIBI, F_BIAS, F_DROPOUT,
  F_SEED, F_VARLEN, F_CACHE, F_PAGED, F_NEW_KV, F_ROTARY, F_SPLITS, F_THREADS, F_ITERS,
  F_DEVICE, F_KERNEL, F_BWD, F_NO_CHECK, F_HELP
} flag_id;

typedef struct flag_def {
  flag_id id;
  const char *name, *short_name, *arg, *help;
  int run_only; /* timing / checking flags: not shown by `sdpa explain` */
} flag_def;

static const flag_def flags[] = {
  {F_BATCH, "--batch", "-b", "N", "batch size (default 2; 4 on CUDA)", 0},
  {F_SEQLEN, "--seqlen", "-s", "N", "query and key length (default 1024; 4096 on CUDA; with --cache: queries)", 0},
  {F_SEQLEN_Q, "--seqlen-q", NULL, "N", "query length (with --cache: new queries, default 1)", 0},
  {F_SEQLEN_K, "--seqlen-k", NULL, "N", "key length (not with --cache)", 0},
  {F_HEADS, "--heads", NULL, "N", "query heads (default 16)", 0},
  {F_KV_HEADS, "--kv-heads", NULL, "N", "key/value heads, divides --heads (default: --heads)", 0},
  {F_HEAD_DIM, "--head-dim", "-d", "N", "head dimension of q and k (default 128)", 0},
  {F_HEAD_DIM_V, "--head-dim-v", NULL, "N", "head dimension of v (default: --head-dim)", 0},
  {F_DTYPE, "--dtype", NULL, "T", "f32 | f16 | bf16 (default bf16)", 0},
  {F_CAUSAL, "--causal", NULL, NULL, "causal mask (the default unless --window or --no-causal)", 0},
  {F_NO_CAUSAL, "--no-causal", NULL, NULL, "no mask", 0},
  {F_ALIGN, "--align", NULL, "A", "bottom-right | top-left: where the mask is anchored (default bottom-right)", 0},
  {F_WINDOW, "--window", NULL, "L,R", "sliding window, -1 = unbounded side (with --causal: both apply)", 0},
  {F_SOFTCAP, "--softcap", NULL, "C", "softcap: s = C * tanh(s / C)", 0},
  {F_ALIBI, "--alibi", NULL, NULL, "ALiBi with the standard slopes 2^(-8(i+1)/h)", 0},
  {F_BIAS, "--bias", NULL, NULL, "random additive bias [b, h, s_q, s_k] (dense layout)", 0},
  {F_DROPOUT, "--dropout", NULL, "P", "dropout probability in [0, 1)", 0},
  {F_SEED, "--seed", NULL, "N", "seed of the random inputs and of dropout (default 1)", 0},
  {F_VARLEN, "--varlen", NULL, NULL, "random length per sequence (with --cache: random cache fill)", 0},
  {F_CACHE, "--cache", NULL, "N", "KV-cache decoding: N tokens already cached, --seqlen-q new queries", 0},
  {F_PAGED, "--paged", NULL, "PAGE", "paged KV cache with PAGE tokens per block (a multiple of 16)", 0},
  {F_NEW_KV, "--new-kv", NULL, "S", "append S new tokens to the cache in the call", 0},
  {F_ROTARY, "--rotary", NULL, "R", "interleaved | half: rotary embedding of q and the new keys", 0},
  {F_SPLITS, "--splits", NULL, "N", "split-KV count (0 = automatic)", 0},
  {F_THREADS, "--threads", NULL, "N", "CPU worker threads (0 = $SDPA_NUM_THREADS or all cores)", 0},
  {F_ITERS, "--iters", NULL, "N", "timed iterations (default 10; 20 on CUDA)", 1},
  {F_DEVICE, "--device", NULL, "D", "cpu | cuda | auto (default auto: CUDA when available)", 0},
  {F_KERNEL, "--kernel", NULL, "NAME", "force a registry kernel (see sdpa kernels)", 0},
  {F_BWD, "--bwd", NULL, NULL, "also the backward pass", 0},
  {F_NO_CHECK, "--no-check", NULL, NULL, "skip the check against the double-precision oracle", 1},
  {F_HELP, "--help", "-h", NULL, "this text", 0},
};
#define NFLAGS ((int)(sizeof flags / sizeof flags[0]))

void cli_usage_problem(FILE *f, const char *cmd) {
  int run = !strcmp(cmd, "run");
  if (run)
    fprintf(f,
            "usage: sdpa run [flags]\n"
            "\n"
            "Builds one attention problem from the flags with random inputs (the seed is\n"
            "printed), runs a warm-up and --iters timed calls (median; TFLOP/s counted as\n"
            "2*(d+d_v) per (query, key) pair the mask keeps, times b*h), then checks the\n"
            "outputs against the double-precision oracle: 2 x the error of storage-dtype\n"
            "math + atol, NaN\n"
            "never passes; large problems check a random subset of (batch, kv-head)\n"
            "slices (and of a huge slice its last query rows), said in the output.\n"
            "With no flags: b=2 s=1024 h=16 d=128 bf16 causal on the CPU, b=4 s=4096 on\n"
            "CUDA. Exit code 0 on pass, 1 on a failed check or a library error, 2 on bad\n"
            "flags.\n\nflags:\n");
  else
    fprintf(f,
            "usage: sdpa explain [flags]\n"
            "\n"
            "Prints which kernel the problem described by the flags (the same as those of\n"
            "sdpa run) would get, and for every other kernel why not; with --bwd the\n"
            "backward's decision too.\n\nflags:\n");
  for (int i = 0; i < NFLAGS; ++i) {
    const flag_def *fd = &flags[i];
    if (fd->run_only && !run) continue;
    char left[64];
    snprintf(left, sizeof left, "%s%s%s%s%s", fd->short_name ? fd->short_name : "",
             fd->short_name ? ", " : "    ", fd->name, fd->arg ? " " : "", fd->arg ? fd->arg : "");
    fprintf(f, "  %-24s %s\n", left, fd->help);
  }
  if (run)
    fprintf(f, "\nexamples:\n"
               "  sdpa run --dtype f16 -b 4 -s 2048 --heads 32 --kv-heads 8\n"
               "  sdpa run --cache 8192 --seqlen-q 1 --paged 16 --new-kv 1 --rotary half\n"
               "  sdpa run --varlen --window 256,0 --bwd --device cpu\n");
}

/* ---- value parsers: 0 on success ------------------------------------------------ */

static int parse_i64(const char *s, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) return -1;
  *out = v;
  return 0;
}

static int parse_int(const char *s, int lo, int *out) {
  int64_t v;
  if (parse_i64(s, lo, &v) || v > 0x7fffffff) return -1;
  *out = (int)v;
  return 0;
}

static int parse_float(const char *s, float *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return -1;
  *out = (float)v;
  return 0;
}

static int parse_window(const char *s, int64_t *l, int64_t *r) {
  const char *comma = strchr(s, ',');
  if (!comma) return -1;
  char left[32];
  size_t n = (size_t)(comma - s);
  if (n == 0 || n >= sizeof left) return -1;
  memcpy(left, s, n);
  left[n] = '\0';
  return parse_i64(left, -1, l) || parse_i64(comma + 1, -1, r) ? -1 : 0;
}

static int parse_dtype(const char *s, sdpa_dtype *t) {
  if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) *t = SDPA_DTYPE_F32;
  else if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) *t = SDPA_DTYPE_F16;
  else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *t = SDPA_DTYPE_BF16;
  else return -1;
  return 0;
}

/* ---- the parser ----------------------------------------------------------------------- */

static int set_flag(const flag_def *fd, const char *val, cli_opts *o) {
  switch (fd->id) {
  case F_BATCH: return parse_i64(val, 1, &o->b);
  case F_SEQLEN:
    if (parse_i64(val, 1, &o->s_q)) return -1;
    o->s_k = o->s_q;
    return 0;
  case F_SEQLEN_Q: return parse_i64(val, 1, &o->s_q);
  case F_SEQLEN_K: o->seqlen_k_given = 1; return parse_i64(val, 1, &o->s_k);
  case F_HEADS: return parse_i64(val, 1, &o->h);
  case F_KV_HEADS: return parse_i64(val, 1, &o->h_k);
  case F_HEAD_DIM: return parse_i64(val, 1, &o->d);
  case F_HEAD_DIM_V: return parse_i64(val, 1, &o->d_v);
  case F_DTYPE: return parse_dtype(val, &o->dtype);
  case F_CAUSAL: o->causal = 1; return 0;
  case F_NO_CAUSAL: o->causal = 0; return 0;
  case F_ALIGN:
    if (!strcmp(val, "bottom-right")) o->align = SDPA_ALIGN_BOTTOM_RIGHT;
    else if (!strcmp(val, "top-left")) o->align = SDPA_ALIGN_TOP_LEFT;
    else return -1;
    return 0;
  case F_WINDOW:
    o->window = 1;
    return parse_window(val, &o->window_left, &o->window_right);
  case F_SOFTCAP: return parse_float(val, &o->softcap) || o->softcap < 0 ? -1 : 0;
  case F_ALIBI: o->alibi = 1; return 0;
  case F_BIAS: o->bias = 1; return 0;
  case F_DROPOUT:
    return parse_float(val, &o->dropout) || o->dropout < 0 || o->dropout >= 1 ? -1 : 0;
  case F_SEED: {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 0);
    if (errno || end == val || *end || val[0] == '-') return -1;
    o->seed = v;
    return 0;
  }
  case F_VARLEN: o->varlen = 1; return 0;
  case F_CACHE: return parse_i64(val, 0, &o->cache);
  case F_PAGED: return parse_i64(val, 1, &o->page);
  case F_NEW_KV: return parse_i64(val, 0, &o->new_kv);
  case F_ROTARY:
    if (!strcmp(val, "interleaved")) o->rotary = CLI_ROTARY_INTERLEAVED;
    else if (!strcmp(val, "half")) o->rotary = CLI_ROTARY_HALF;
    else return -1;
    return 0;
  case F_SPLITS: return parse_int(val, 0, &o->splits);
  case F_THREADS: return parse_int(val, 0, &o->threads);
  case F_ITERS: return parse_int(val, 1, &o->iters);
  case F_DEVICE:
    if (!strcmp(val, "cpu")) o->device = SDPA_DEVICE_CPU;
    else if (!strcmp(val, "cuda") || !strcmp(val, "gpu")) o->device = SDPA_DEVICE_CUDA;
    else if (!strcmp(val, "auto")) o->device = -1;
    else return -1;
    return 0;
  case F_KERNEL: o->kernel = val; return 0;
  case F_BWD: o->bwd = 1; return 0;
  case F_NO_CHECK: o->check = 0; return 0;
  case F_HELP: return 0;
  }
  return -1;
}

static int usage_error(const char *cmd, const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "sdpa %s: ", cmd);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (see sdpa %s --help)\n", cmd);
  return CLI_USAGE;
}

/* Defaults, and the combinations the tool cannot build. */
static int resolve(const char *cmd, cli_opts *o) {
  if (o->device < 0) o->device = sdpa_cuda_available() ? SDPA_DEVICE_CUDA : SDPA_DEVICE_CPU;
  int cuda = o->device == SDPA_DEVICE_CUDA;
  int cache = o->cache >= 0;
  if (!cache && (o->page || o->new_kv || o->rotary)) {
    const char *f = o->page ? "--paged" : o->new_kv ? "--new-kv" : "--rotary";
    return usage_error(cmd, "%s needs --cache%s", f, "");
  }
  if (cache && o->seqlen_k_given)
    return usage_error(cmd, "--seqlen-k does not apply to --cache (keys = --cache + --new-kv)%s%s",
                       "", "");
  if (cache && o->bwd)
    return usage_error(cmd, "--bwd does not apply to --cache (the backward has no KV-cache form)%s%s",
                       "", "");
  if (o->rotary && o->d % 2)
    return usage_error(cmd, "--rotary needs an even --head-dim%s%s", "", "");
  if (!o->b) o->b = cuda ? 4 : 2;
  if (cache) {
    if (!o->s_q) o->s_q = 1;
    o->s_k = o->cache + o->new_kv;
  } else {
    int64_t s = cuda ? 4096 : 1024;
    if (!o->s_q) o->s_q = o->s_k ? o->s_k : s;
    if (!o->s_k) o->s_k = o->s_q;
  }
  if (!o->h) o->h = 16;
  if (!o->h_k) o->h_k = o->h;
  if (!o->d) o->d = 128;
  if (!o->d_v) o->d_v = o->d;
  if (o->causal < 0) o->causal = !o->window;
  if (!o->iters) o->iters = cuda ? 20 : 10;
  return CLI_OK;
}

/* Flags that contradict each other (or a flag given twice): refused, never
 * resolved silently by their order. */
static int contradiction(const char *cmd, const unsigned char seen[NFLAGS]) {
  static const flag_id pairs[][2] = {
      {F_CAUSAL, F_NO_CAUSAL}, {F_SEQLEN, F_SEQLEN_Q}, {F_SEQLEN, F_SEQLEN_K}};
  for (int f = 0; f < NFLAGS; ++f)
    if (seen[f] > 1) return usage_error(cmd, "%s given twice%s", flags[f].name, "");
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; ++k) {
    const flag_def *a = NULL, *b = NULL;
    for (int f = 0; f < NFLAGS; ++f) {
      if (flags[f].id == pairs[k][0] && seen[f]) a = &flags[f];
      if (flags[f].id == pairs[k][1] && seen[f]) b = &flags[f];
    }
    if (a && b)
      return usage_error(cmd, "%s and %s contradict each other: give one (--seqlen sets the query"
                         " and key lengths; --seqlen-q / --seqlen-k set one each)", a->name,
                         b->name);
  }
  return CLI_OK;
}

int cli_parse(const char *cmd, int argc, char **argv, cli_opts *o) {
  memset(o, 0, sizeof *o);
  o->dtype = SDPA_DTYPE_BF16;
  o->causal = -1;
  o->align = SDPA_ALIGN_BOTTOM_RIGHT;
  o->window_left = o->window_right = -1;
  o->seed = 1;
  o->cache = -1;
  o->device = -1;
  o->check = 1;
  int run = !strcmp(cmd, "run");
  unsigned char seen[NFLAGS] = {0};
  for (int i = 0; i < argc; ++i) {
    const char *arg = argv[i];
    const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const flag_def *fd = NULL;
    for (int f = 0; f < NFLAGS && !fd; ++f) {
      if (flags[f].run_only && !run) continue;
      if ((strlen(flags[f].name) == name_len && !strncmp(arg, flags[f].name, name_len)) ||
          (!eq && flags[f].short_name && !strcmp(arg, flags[f].short_name)))
        fd = &flags[f];
    }
    if (!fd) {
      if (arg[0] == '-') return usage_error(cmd, "unknown flag %s%s", arg, "");
      return usage_error(cmd, "unexpected argument '%s'%s", arg, "");
    }
    if (fd->id == F_HELP) {
      cli_usage_problem(stdout, cmd);
      return CLI_HELP;
    }
    const char *val = NULL;
    if (fd->arg) {
      if (eq)
        val = eq + 1;
      else if (i + 1 < argc)
        val = argv[++i];
      else
        return usage_error(cmd, "%s needs a value (%s)", fd->name, fd->arg);
    } else if (eq) {
      return usage_error(cmd, "%s takes no value%s", fd->name, "");
    }
    if (seen[fd - flags] < 2) ++seen[fd - flags];
    if (set_flag(fd, val, o)) {
      char what[160];
      snprintf(what, sizeof what, "%s: %s", fd->arg, fd->help);
      fprintf(stderr, "sdpa %s: bad value '%s' for %s (expected %s)\n", cmd, val, fd->name, what);
      return CLI_USAGE;
    }
  }
  if (contradiction(cmd, seen) != CLI_OK) return CLI_USAGE;
  return resolve(cmd, o);
}

void cli_describe(const cli_opts *o, char *buf, size_t n) {
  size_t k = 0;
#define PUT(...)                                                       \
  do {                                                                 \
    if (k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__);    \
  } while (0)
  PUT("b=%lld s_q=%lld s_k=%lld h=%lld", (long long)o->b, (long long)o->s_q, (long long)o->s_k,
      (long long)o->h);
  if (o->h_k != o->h) PUT(" h_k=%lld", (long long)o->h_k);
  PUT(" d=%lld", (long long)o->d);
  if (o->d_v != o->d) PUT(" d_v=%lld", (long long)o->d_v);
  PUT(" %s", sdpa_dtype_string(o->dtype));
  if (o->varlen) PUT(" varlen");
  if (o->cache >= 0) {
    PUT(" cache=%lld", (long long)o->cache);
    if (o->page) PUT(" paged=%lld", (long long)o->page);
    if (o->new_kv) PUT(" new_kv=%lld", (long long)o->new_kv);
    if (o->rotary) PUT(" rotary=%s", o->rotary == CLI_ROTARY_INTERLEAVED ? "interleaved" : "half");
  }
  if (o->causal) PUT(" causal");
  if (o->window) PUT(" window=(%lld,%lld)", (long long)o->window_left, (long long)o->window_right);
  if ((o->causal || o->window) && o->align == SDPA_ALIGN_TOP_LEFT) PUT(" top-left");
  if (o->softcap > 0) PUT(" softcap=%g", (double)o->softcap);
  if (o->alibi) PUT(" alibi");
  if (o->bias) PUT(" bias");
  if (o->dropout > 0) PUT(" dropout=%g", (double)o->dropout);
  if (o->splits) PUT(" splits=%d", o->splits);
  if (o->kernel) PUT(" kernel=%s", o->kernel);
  PUT(" seed=%llu", (unsigned long long)o->seed);
#undef PUT
}
