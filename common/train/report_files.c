/* report_files.c — the run's output paths checked before step 0 (report_check_outputs); the
 * writing itself is common/base/outfile.c. */
#include "report.h"  // report_check_outputs
#include "args.h"    // args_error
#include "outfile.h" // outfile_problem

int report_check_outputs(const train_cfg_t *cfg) {
  const struct { const char *flag, *path; int is_dir;
  } outs[] = {{"--json", cfg->json, 0},
              {"--trace", cfg->trace, 0},
              {"--save-params", cfg->save_params, 0},
              {"--alloc-trace", cfg->alloc_trace, 0},
              {"--ckpt", cfg->ckpt, 1}};
  char why[4200];
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
    if (outs[i].path && outfile_problem(outs[i].path, outs[i].is_dir, why, sizeof why))
      return args_error(outs[i].flag, outs[i].path, "%s", why);
  return 0;
}

