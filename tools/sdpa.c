/*
 * sdpa.c - main of the `sdpa` command-line tool: dispatches to the
 * subcommands (run, explain, kernels), prints the top-level usage and the
 * version, and holds the small helpers every subcommand shares.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_library_error(const char *cmd, const char *what, sdpa_status st) {
  const char *msg = sdpa_last_error();
  fprintf(stderr, "sdpa %s: %s failed: %s%s%s\n", cmd, what, sdpa_status_string(st),
          msg && *msg ? ": " : "", msg ? msg : "");
  return CLI_FAIL;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_usage_main(FILE *f) {
  fprintf(f,
          "usage: sdpa <command> [flags]\n"
          "\n"
          "Fused scaled-dot-product attention: run one problem, check it against the\n"
          "double-precision oracle, time it, and inspect the kernel registry.\n"
          "\n"
          "commands:\n"
          "  run       build one attention problem from flags, run it, time it, check it\n"
          "  explain   print which kernel a problem gets and why not the others\n"
          "  kernels   print the kernel registry\n"
          "\n"
          "  sdpa <command> --help   flags of a command\n"
          "  sdpa --version          library and tool version\n"
          "\n"
          "exit codes: 0 ok, 1 library error or failed check, 2 bad flags\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    cli_usage_main(stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    if (!strcmp(cmd, "help") && argc > 2) { /* sdpa help run == sdpa run --help */
      char *help[] = {"--help"};
      if (!strcmp(argv[2], "run")) return cli_cmd_run(1, help) == CLI_HELP ? 0 : CLI_USAGE;
      if (!strcmp(argv[2], "explain")) return cli_cmd_explain(1, help) == CLI_HELP ? 0 : CLI_USAGE;
      if (!strcmp(argv[2], "kernels")) return cli_cmd_kernels(1, help) == CLI_HELP ? 0 : CLI_USAGE;
      fprintf(stderr, "sdpa: unknown command '%s' (see sdpa --help)\n", argv[2]);
      return CLI_USAGE;
    }
    cli_usage_main(stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
    int v = sdpa_version();
    printf("sdpa %d.%d.%d (library %d.%d.%d, CUDA backend %s)\n", SDPA_VERSION_MAJOR,
           SDPA_VERSION_MINOR, SDPA_VERSION_PATCH, v / 10000, v / 100 % 100, v % 100,
#ifdef SDPA_HAVE_CUDA
           sdpa_cuda_available() ? "built, device visible" : "built, no device visible"
#else
           "not built"
#endif
    );
    return CLI_OK;
  }
  int rc;
  if (!strcmp(cmd, "run"))
    rc = cli_cmd_run(argc - 2, argv + 2);
  else if (!strcmp(cmd, "explain"))
    rc = cli_cmd_explain(argc - 2, argv + 2);
  else if (!strcmp(cmd, "kernels"))
    rc = cli_cmd_kernels(argc - 2, argv + 2);
  else {
    if (cmd[0] == '-')
      fprintf(stderr, "sdpa: unknown flag %s (see sdpa --help)\n", cmd);
    else
      fprintf(stderr, "sdpa: unknown command '%s' (see sdpa --help)\n", cmd);
    return CLI_USAGE;
  }
  return rc == CLI_HELP ? CLI_OK : rc;
}
