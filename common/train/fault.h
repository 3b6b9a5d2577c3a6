/* fault.h — fault injection, a testing aid for the reliability paths (notes/reliability.md).
 *   --fault RANK:STEP:KIND   rank RANK fails at the start of step STEP (counted from 0):
 *     exit   the process exits (code 1) without MPI_Finalize, as a crashed trainer would
 *     abort  abort(): SIGABRT, as a failed assert would
 *     kill   SIGKILL to itself, as the kernel's OOM killer would
 *     hang   sleeps for ever inside the step: the other ranks' collective deadline
 *            (--timeout-s) must fire, name the collective and take the job down
 *     nan    the gradient of the rank's output in that step (the loss's gradient on the last
 *            stage, the one a pipeline stage receives elsewhere) gets a NaN, micro-batch 0, so
 *            its local gradients are non-finite in any model, MLP or GPT, dense or MoE
 *            (exercises --nonfinite abort|skip, and fp16's overflow skip)
 *     ckpt   the rank exits in the middle of the checkpoint save that follows step STEP,
 *            after writing its shard and before the manifest (exercises atomic saves)
 *     overflow the rank's own gradients (its shard, under ZeRO) read as inf in that step's
 *            overflow check, as if they alone had overflowed fp16 (exercises the loss scaler's
 *            combined check: every rank must skip the step)
 *     node   the rank's whole node is lost: the in-memory snapshots of every rank on it are
 *            removed (ckpt_mem_lose_node, --ckpt-mem-every), then SIGKILL as kill
 * Before failing, the rank prints `rank R: injected fault <kind> at step S` to stderr. */
#ifndef ZL_FAULT_H
#define ZL_FAULT_H
#include <stddef.h> // size_t

typedef enum {
  FAULT_NONE = 0,
  FAULT_EXIT,
  FAULT_ABORT,
  FAULT_KILL,
  FAULT_HANG,
  FAULT_NAN,
  FAULT_CKPT,
  FAULT_OVERFLOW,
  FAULT_NODE
} fault_kind_t;
typedef struct fault {
  int rank, step;
  fault_kind_t kind;
} fault_t;

/* Parse "RANK:STEP:KIND" into f; world and steps bound RANK and STEP. Returns 0, or 1 after
 * writing what is allowed into why (for args_error). */
int fault_parse(const char *spec, int world, int steps, fault_t *f, char *why, size_t nwhy);
const char *fault_kind_name(fault_kind_t k);
/* The run's armed fault (spec as above, NULL or "" for none: kind FAULT_NONE); parse errors die.
 * The trainer keeps it (t->fault) and hands it to the calls below (NULL: none armed). */
fault_t fault_arm(const char *spec, int world, int steps);
/* At the start of step `step`: fails here when the armed fault f is exit/abort/kill/hang for this
 * rank and step; returns otherwise. */
void fault_at_step(const fault_t *f, int rank, int step);
/* The nan kind: 1 (after the announcement) when f is nan for this rank and step; the caller writes
 * the NaN (loop_ops.c: into the gradient of the rank's output). */
int fault_nan(const fault_t *f, int rank, int step);
/* The overflow kind: 1 when f is armed for this step and for this rank, or for any rank when `shared`
 * (where every rank holds the same reduced gradients, DDP, all of them ask so: they skip alike). Only
 * the armed rank announces it, naming itself. */
int fault_overflow(const fault_t *f, int rank, int shared, int step);
/* The ckpt kind: exits here (mid-save) when f is armed for this rank and step. */
void fault_in_save(const fault_t *f, int rank, int step);

/* Out-of-memory pre-flight (CPU runs): the model states of the strategy's formula (strategy_t.formula: this
 * rank's units only, a pipeline stage's) plus one micro-batch of activations of its chunks,
 * times the ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE), against the host's MemAvailable.
 * Too much: dies with `out of memory on rank R: ... need X MiB ...` before allocating, instead
 * of letting the kernel's OOM killer end the job half-way with a SIGKILL. */
struct trainer;
void fault_check_host_memory(const struct trainer *t);
#endif
