/* pipeline_table.h — DeepSeek's table of schedules, reproduced by the simulator: for each of 1F1B,
 * ZB1P (ZB-H1), DualPipe and DualPipeV its bubble, parameters and activations per device from the lists
 * themselves, beside the README's closed forms (notes/07d-dualpipev.md). Pure C like pipeline_sim.h
 * (pipeline_table.c); `ch07_pipeline --simulate` prints it without launching ranks.
 *
 * Costs in DeepSeek's notation, per stage (one chunk of the 2N of a V, or one rank's stage): F a
 * forward, B a FULL backward, W its weights' part, FB an overlapped forward and full backward (0: F
 * + B, no overlap gained). sail-sg's (Qi et al., 07c's) b is B − W. */
#ifndef ZL_PIPELINE_TABLE_H
#define ZL_PIPELINE_TABLE_H
#include "pipeline_sched.h" // pp_schedule_t

typedef struct pp_costs_ds {
  double F, B, W, FB;
} pp_costs_ds_t;

/* The table's DualPipe row (two V's on PP devices, M/2 micro-batches each way: PP_LIST_DUAL), for
 * pp_table_row and the notations: simulated here, not a schedule that trains. */
#define PP_TABLE_DUALPIPE ((pp_schedule_t)PP_NSCHED)

/* One row of the table for `sched` at PP stages (1f1b, zb-h1: PP ranks; dualpipev: PP/2 ranks, PP
 * even; PP_TABLE_DUALPIPE: PP ranks, PP even) and M micro-batches (dualpipev: M >= PP; DualPipe: M
 * even, M >= 2PP). */
typedef struct pp_table_row {
  int devices, stages_per_device;
  double bubble;         /* simulated: the largest stage's idle time (step − its busy time) */
  double bubble_formula; /* DeepSeek's closed form */
  double step;           /* simulated makespan */
  int acts, acts_formula; /* the most micro-batch-stages in flight on a device: from the lists; PP, PP + 1 */
  double *idle;          /* [devices] each device's idle time (owned by the row: pp_table_free) */
} pp_table_row_t;

/* Fill *row; returns 0, or −1 (nothing to free) for a schedule the table does not hold or bad sizes. */
int pp_table_row(pp_schedule_t sched, int PP, int M, pp_costs_ds_t cost, pp_table_row_t *row);
void pp_table_free(pp_table_row_t *row);
/* DeepSeek's and sail-sg's notation of the bubble (static strings; "" for another schedule). */
const char *pp_table_form_ds(pp_schedule_t sched);
const char *pp_table_form_sail(pp_schedule_t sched);

/* ch07_pipeline's --simulate mode: −1 when argv has no --simulate (run the program), else the exit
 * status after printing the run's stages and the table (flags: --schedule S --pp P --micro-batches M
 * --costs F,B,W[,FB]; P is ranks, as in a run: dualpipev's stages are 2P). */
int pp_table_main(int argc, char **argv);
#endif
