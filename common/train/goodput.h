/* goodput.h — how often to checkpoint, and what failures leave of the time: Young's interval
 * τ = √(2δM) and the expected goodput from the mean time between failures M, a checkpoint's cost δ
 * and a restart's cost R (ch00_memory --goodput; notes/14-fault-tolerance.md).
 *
 *   |─ τ work ─|δ|─ τ work ─|δ|─ τ/2 ─✗ R |─ τ/2 again ─|δ| ...
 *   per second of work: δ/τ saving, and 1/M failures each costing R + τ/2 (half an interval redone)
 *
 * First order (δ, R, τ << M): goodput = 1 − δ/τ − (τ/2 + R)/M; its best τ is Young's
 * √(2δM), where the saving and the redone work cost the same, √(δ/(2M)) each. */
#ifndef ZL_GOODPUT_H
#define ZL_GOODPUT_H
#include <stdio.h> // FILE

typedef struct goodput {
  double interval_s;   /* τ: Young's √(2δM), or the interval asked for */
  double save_frac;    /* δ/τ: time spent saving */
  double redo_frac;    /* τ/(2M): work lost at a failure and done again */
  double restart_frac; /* R/M: relaunching and restoring */
  double goodput;      /* 1 − the three (0 when they exceed 1: the first-order model has broken down) */
} goodput_t;

/* The numbers for MTBF mtbf_s, checkpoint cost ckpt_s, restart cost restart_s (seconds, mtbf_s > 0)
 * at interval_s (0: Young's). */
goodput_t goodput_calc(double mtbf_s, double ckpt_s, double restart_s, double interval_s);
/* ch00_memory --goodput with argv: parses --mtbf-h or --window-days with --interruptions, --ckpt-s,
 * --restart-s, --interval-s; prints the interval and the goodput to out. Returns the exit code
 * (a bad flag: its line on stderr, 2). */
int goodput_main(int argc, char **argv, FILE *out);
#endif
