/*
 * cli_kernels.c - `sdpa kernels`: the registry of this build, one row per
 * kernel in preference order (dispatch takes the first row that supports a
 * problem), through the public sdpa_kernel_count / sdpa_kernel_get.
 */
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: sdpa kernels\n"
          "\n"
          "Prints the kernel registry of this build in preference order (dispatch\n"
          "takes the first row that supports a problem): name, op, device, CUDA\n"
          "arch range, dtypes, largest head dim (- = unbounded), tile (block_m x\n"
          "block_n) and the features the kernel supports. See `sdpa explain` for\n"
          "the decision on one problem.\n");
}

int cli_cmd_kernels(int argc, char **argv) {
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return CLI_HELP;
    }
    if (argv[i][0] == '-')
      fprintf(stderr, "sdpa kernels: unknown flag %s (see sdpa kernels --help)\n", argv[i]);
    else
      fprintf(stderr, "sdpa kernels: unexpected argument '%s' (see sdpa kernels --help)\n", argv[i]);
    return CLI_USAGE;
  }
  const int n = sdpa_kernel_count();
  int wname = 4, wdt = 6;
  for (int i = 0; i < n; ++i) {
    sdpa_kernel_info k;
    sdpa_status st = sdpa_kernel_get(i, &k);
    if (st != SDPA_OK) return cli_library_error("kernels", "sdpa_kernel_get", st);
    if ((int)strlen(k.name) > wname) wname = (int)strlen(k.name);
    if ((int)strlen(k.dtypes) > wdt) wdt = (int)strlen(k.dtypes);
  }
  printf("%-*s  %-5s  %-6s  %-11s  %-*s  %-5s  %-9s  %s\n", wname, "name", "op", "device", "arch", wdt,
         "dtypes", "max_d", "tile", "features");
  for (int i = 0; i < n; ++i) {
    sdpa_kernel_info k;
    sdpa_status st = sdpa_kernel_get(i, &k);
    if (st != SDPA_OK) return cli_library_error("kernels", "sdpa_kernel_get", st);
    char arch[32], maxd[16], tile[32];
    if (k.device == SDPA_DEVICE_CPU)
      snprintf(arch, sizeof arch, "-");
    else if (k.max_arch <= 0 || k.max_arch >= 1000)
      snprintf(arch, sizeof arch, "sm%d+", k.min_arch);
    else if (k.min_arch == k.max_arch)
      snprintf(arch, sizeof arch, "sm%d", k.min_arch);
    else
      snprintf(arch, sizeof arch, "sm%d-sm%d", k.min_arch, k.max_arch);
    if (k.max_head_dim > 0)
      snprintf(maxd, sizeof maxd, "%d", k.max_head_dim);
    else
      snprintf(maxd, sizeof maxd, "-");
    if (k.block_m > 0 || k.block_n > 0)
      snprintf(tile, sizeof tile, "%dx%d", k.block_m, k.block_n);
    else
      snprintf(tile, sizeof tile, "-");
    printf("%-*s  %-5s  %-6s  %-11s  %-*s  %-5s  %-9s  %s\n", wname, k.name, k.op,
           k.device == SDPA_DEVICE_CUDA ? "cuda" : "cpu", arch, wdt, k.dtypes, maxd, tile,
           k.features && *k.features ? k.features : "-");
  }
  printf("%d kernel%s\n", n, n == 1 ? "" : "s");
  return CLI_OK;
}
