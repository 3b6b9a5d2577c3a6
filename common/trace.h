/* trace.h — a Chrome-trace timeline (open the JSON in Perfetto or chrome://tracing).
 * One process per rank (pid = rank), two rows: compute (tid 0) and communication (tid 1).
 * Events are recorded in memory (thread-safe: the comm thread writes the comm row) and
 * gathered to rank 0 by trace_write. Disabled (all calls no-ops) when path is NULL. */
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
/* Begin/end pairs on the compute row of the calling thread (nestable, 32 deep). */
void trace_begin(const char *name);
void trace_end(const char *args_json);
/* Gather every rank's events to rank 0 and write one JSON file (atomic: temp file + rename). */
void trace_write(struct comm *c);
/* Events recorded on this rank so far (for tests and the overlap measurement). */
typedef struct trace_ev { double t0, t1; int row; char name[48]; char args[96]; } trace_ev_t;
const trace_ev_t *trace_events(int *n);
void trace_clear(void);
#endif
