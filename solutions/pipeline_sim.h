/* pipeline_sim.h — how long a schedule's step takes, and so its bubble, from the stages' lists and
 * the cost of each operation (notes/07-pipeline.md, 07c): the simulator, and the closed forms of
 * the bubble that chapter 07 prints beside its measurement. Pure C like pipeline_sched.h
 * (pipeline_sim.c); the page of common/explorer/ draws its timeline.
 *
 * Per stage s, cost[s]: f, b, w = one micro-batch's forward, input-gradient backward and
 * weight-gradient backward through ALL the stage's units (with v chunks each chunk operation costs
 * 1/v of it; a schedule without a split runs B as b + w). c: the time a message takes between two
 * stages. Each stage runs its list in order; an operation starts when the stage is free and its
 * input is there: F k of chunk c when F k of chunk c−1 ended (+ c on another stage), B k when B k
 * of chunk c+1 ended (+ c) — the last chunk's once its own F k ended —, W k when its B k ended.
 * The closed forms (Qi et al., 2023; sail-sg's efficiency.py asserts the same), M micro-batches,
 * equal stages: bubble time (step − M(f + b + w)) = 1F1B (P−1)(f+b+w) (c = 0); ZB-H1 (P−1)(f+b−w)
 * (c = 0); ZB-H2 (P−1)(f+b+2c−2w) (M >= 2P, its span). */
#ifndef ZL_PIPELINE_SIM_H
#define ZL_PIPELINE_SIM_H
#include "pipeline_sched.h" // pp_schedule_t, pp_op_t

typedef struct pp_cost {
  double f, b, w;
} pp_cost_t;

typedef struct pp_sim {
  double makespan; /* the step: from 0 (stage 0's first F) to the last operation's end */
  double span;     /* the longest stage window: a stage's first operation's start to its last one's end
                    * (ZB-H2's measure: with post-validation the next step's forwards begin while this
                    * one drains, the parallelogram of the paper's Figure 4) */
  double busy;     /* mean over the stages of their compute per step */
  double bubble;   /* 1 − busy / step, step = the makespan (span for ZB-H2): the paper's bubble rate */
  double bubble_makespan; /* 1 − busy / makespan: what one step of a loop that waits at its end shows */
} pp_sim_t;

/* Simulate one step of `sched` (its pp_schedule_ops lists) with per-stage costs cost[0..P) and
 * message time c. Returns 0, or −1 when the lists cannot run (bad arguments or a deadlock). */
int pp_simulate(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double c, pp_sim_t *out);
/* The same for given lists (ops[s][0..n[s]), split as in pp_check_lists: pipeline_check.h). */
int pp_simulate_lists(int P, int M, int v, int split, pp_op_t *const *ops, const int *n,
                      const pp_cost_t *cost, double c, pp_sim_t *out);
/* pp_simulate_lists that also writes when each operation starts, at[s][i] for ops[s][i] (its end:
 * + its cost, as above): the timeline the explorer page draws (common/explorer/). at: P arrays of
 * n[s]. */
int pp_simulate_timeline(int P, int M, int v, int split, pp_op_t *const *ops, const int *n,
                         const pp_cost_t *cost, double c, double *const *at, pp_sim_t *out);

/* pp_simulate_timeline with DualPipe's F&B (and each stage's busy time out): fb[s][i] as
 * pp_schedule_fb writes it (NULL: none), an F&B running its operations as one from when all their
 * inputs are here, for fb_cost (per stage, as cost: each chunk's 1/v of it; 0: the sum of its
 * operations', no overlap gained); split may carry PP_LIST_V (the chunks in a V) or PP_LIST_DUAL
 * (DualPipe's two V's: pipeline_sched.h; M counts both directions' micro-batches); at and busy_s
 * (busy_s[s]: stage s's compute per step) may be NULL. */
int pp_simulate_fb(int P, int M, int v, int split, pp_op_t *const *ops, const int *n, char *const *fb,
                   const pp_cost_t *cost, double fb_cost, double c, double *const *at, double *busy_s,
                   pp_sim_t *out);
/* pp_simulate with an F&B's cost (dualpipev's; 0: F + B + W) and each stage's busy time (NULL: not
 * wanted). dualpipev takes v = 1 or 2 (it has 2 chunks) and M >= 2P. */
int pp_simulate_sched(pp_schedule_t sched, int P, int M, int v, const pp_cost_t *cost, double fb_cost,
                      double c, double *busy_s, pp_sim_t *out);

/* The idle fraction of the idealized pipeline, from the simulator (equal stages, no message cost;
 * the backward 2× the forward, split B = W for the zero-bubble ones): naive (P−1)/P; gpipe and
 * 1f1b (P−1)/(M+P−1) (whatever the backward's cost); interleaved (P−1)/(v·M+P−1); zb-h1
 * (P−1)/(3M+P−1) once M >= P; zb-h2 0 once M >= 2P − 1 (its step measured from the stage's first
 * operation, as the paper's: pp_sim_t.span). Smaller M: what the simulator says. */
double pp_bubble_formula(pp_schedule_t sched, int P, int M, int v);

/* The same for stages that are not equal, t[s] = stage s's busy time per step (any unit): the
 * simulator with each stage's forward a third of its t[s] and its backward two thirds (split: B and
 * W a third each). The slowest stage paces the steady state: with it last, step = M·t_max +
 * (Σt − t_max)/v per micro-batch time t = t[s]/M (the closed form chapter 07 printed first);
 * with an earlier one slowest, a little less. Equal t[s] give pp_bubble_formula. */
double pp_bubble_stages(pp_schedule_t sched, int P, int M, int v, const double *t);
#endif
