/* goodput.c — Young's checkpoint interval and the expected goodput (goodput.h): a failure rate, a
 * checkpoint's cost and a restart's cost turned into how often to save and what fraction of the
 * time is training. */
#include "goodput.h" // goodput_t, goodput_calc
#include "args.h"    // arg_spec_t, args_parse, args_error, args_given
#include <math.h>    // sqrt
#include <stdio.h>   // fprintf

goodput_t goodput_calc(double mtbf_s, double ckpt_s, double restart_s, double interval_s) {
  goodput_t g = {.interval_s = interval_s > 0 ? interval_s : sqrt(2.0 * ckpt_s * mtbf_s)};
  g.save_frac = g.interval_s > 0 ? ckpt_s / g.interval_s : 0;
  g.redo_frac = g.interval_s / (2.0 * mtbf_s);
  g.restart_frac = restart_s / mtbf_s;
  g.goodput = 1.0 - g.save_frac - g.redo_frac - g.restart_frac;
  if (g.goodput < 0) g.goodput = 0;
  return g;
}

/* The value a flag was given with, or "" (for its error line). */
static const char *given(int argc, char **argv, const char *flag) {
  const char *v = args_given(argc, argv, flag);
  return v ? v : "";
}

int goodput_main(int argc, char **argv, FILE *out) {
  int on = 0, interruptions = 0;
  double mtbf_h = 0, days = 0, ckpt_s = -1, restart_s = -1, interval_s = 0;
  const arg_spec_t specs[] = {
      {"--goodput", ARG_FLAG, &on, 0, 0, NULL, "this calculator (not the memory table)"},
      {"--mtbf-h", ARG_DOUBLE, &mtbf_h, 1e-6, 1e9, NULL, "mean time between failures M of the job, hours"},
      {"--window-days", ARG_DOUBLE, &days, 1e-6, 1e6, NULL,
       "instead of --mtbf-h: days observed (M = 24 D / F)"},
      {"--interruptions", ARG_INT, &interruptions, 1, 1 << 30, NULL, "with --window-days: failures F seen"},
      {"--ckpt-s", ARG_DOUBLE, &ckpt_s, 0, 1e9, NULL, "a checkpoint's cost (delta): seconds training stalls"},
      {"--restart-s", ARG_DOUBLE, &restart_s, 0, 1e9, NULL, "a restart's cost R: relaunch, restore (s)"},
      {"--interval-s", ARG_DOUBLE, &interval_s, 1e-6, 1e12, NULL,
       "checkpoint every this many seconds of work (default: Young's sqrt(2 delta M))"},
  };
  int rc = args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]), "ch00_memory --goodput",
                      "Young's checkpoint interval and the expected goodput (notes/14-fault-tolerance.md)");
  if (rc) return rc == 1 ? 0 : rc;
  if ((mtbf_h > 0) == (days > 0))
    return args_error("--mtbf-h", given(argc, argv, "--mtbf-h"),
                      "give it, or --window-days D with --interruptions F (one of the two)");
  if ((days > 0) != (interruptions > 0))
    return args_error("--window-days", given(argc, argv, "--window-days"),
                      "and --interruptions F go together");
  if (ckpt_s < 0) return args_error("--ckpt-s", "", "needed: a checkpoint's cost in seconds, >= 0");
  if (restart_s < 0) return args_error("--restart-s", "", "needed: a restart's cost in seconds, >= 0");
  double m_s = mtbf_h > 0 ? mtbf_h * 3600.0 : days * 86400.0 / interruptions;
  goodput_t g = goodput_calc(m_s, ckpt_s, restart_s, interval_s);
  if (days > 0)
    fprintf(out, "MTBF M = %.3f h (%g days / %d interruptions)", m_s / 3600.0, days, interruptions);
  else fprintf(out, "MTBF M = %.3f h", m_s / 3600.0);
  fprintf(out, ", checkpoint cost δ = %g s, restart cost R = %g s\n", ckpt_s, restart_s);
  fprintf(out, "%s = %.1f s (%.1f min): a checkpoint every %.1f s of work\n",
          interval_s > 0 ? "interval τ (asked)" : "Young's interval τ = √(2δM)", g.interval_s,
          g.interval_s / 60.0, g.interval_s);
  fprintf(out, "expected goodput 1 − δ/τ − (τ/2 + R)/M = %.2f%%", 100.0 * g.goodput);
  fprintf(out, ": %.2f%% saving, %.2f%% redone, %.2f%% restarting\n", 100.0 * g.save_frac,
          100.0 * g.redo_frac, 100.0 * g.restart_frac);
  if (g.interval_s + ckpt_s + restart_s > 0.5 * m_s)
    fprintf(out, "(τ + δ + R is over half of M: the first-order model overstates the goodput here)\n");
  return 0;
}
