/* trace.h — a Chrome-trace timeline (open the JSON in Perfetto or chrome://tracing).
 * One process per rank (pid = rank), two rows: compute (tid 0) and communication (tid 1).
 * Events are recorded in memory (thread-safe: the comm thread writes the comm row) and
 * gathered to rank 0 and written by report_write_trace (common/train). Disabled (all calls no-ops)
 * when path is NULL. Layer: base (includes nothing of zerolab but check.h). */
#ifndef ZL_TRACE_H
#define ZL_TRACE_H
#include <stdint.h> // int64_t

typedef enum { TRACE_COMPUTE = 0, TRACE_COMM = 1 } trace_row_t;
struct comm;

/* Microseconds on a clock shared by all processes of the host (CLOCK_MONOTONIC). */
double trace_now_us(void);
/* Start recording for this rank (path NULL: disabled). */
void trace_init(int rank, const char *path);
int trace_enabled(void);
/* A complete event [t0, t1) on a row; args_json: NULL or the inside of a JSON object
 * (e.g. "\"bucket\":3,\"bytes\":4096"). name and args are copied. */
void trace_event(trace_row_t row, const char *name, double t0_us, double t1_us, const char *args_json);
/* A collective on the comm row: also keeps which communicator ran it and its sequence number
 * there (comm.c: the task's handle). Every rank of a communicator numbers its operations the
 * same way, so (comm, seq) names one collective on all of them: the report finds when the LAST
 * rank joined it (report.c: report_overlap). */
void trace_comm_event(const struct comm *c, int64_t seq, const char *name, double t0_us, double t1_us,
                      const char *args_json);
/* Begin/end pairs on the compute row of the calling thread (nestable, 32 deep). */
void trace_begin(const char *name);
void trace_end(const char *args_json);
/* The spans trace_begin opened and trace_end has not closed: a coroutine (an F&B's backward, loop_fb.c)
 * keeps its own, trace_swap_spans trading the thread's for them at every switch. */
#define TRACE_DEPTH 32
typedef struct trace_stack {
  struct {
    char name[48];
    double t0;
  } at[TRACE_DEPTH];
  int depth;
} trace_stack_t;
void trace_swap_spans(trace_stack_t *other);
/* The --trace path when recording, else NULL. */
const char *trace_path(void);
/* Events recorded on this rank so far (for tests and the overlap measurement). */
typedef struct trace_ev {
  double t0, t1;
  int row;
  char name[48];
  char args[96];
  const void *comm; /* collectives: the communicator (this process's pointer); else NULL */
  int64_t seq;      /* collectives: the operation's number on that communicator; else 0 */
} trace_ev_t;
const trace_ev_t *trace_events(int *n);
void trace_clear(void);
#endif
