/* exercise.h — what an unfinished exercise calls.
 *
 * In solutions/, an exercise body is marked:
 *     void ring_all_gather(...) {
 *       // BEGIN EXERCISE ring_all_gather notes/01-collectives.md
 *       // HINT: at step s, pass chunk (r - s) mod N to rank r+1.
 *       ...the real code...
 *       // END EXERCISE
 *     }
 * `make exercises` writes exercises/ with each marked body replaced by its HINT lines and
 *     zl_exercise_todo("ring_all_gather", "notes/01-collectives.md");
 * so an unfinished exercise stops the job loudly, and every test that needs it fails. */
#ifndef ZL_EXERCISE_H
#define ZL_EXERCISE_H
/* Print `exercise not done: <name> — see <notes>` (rank 0, or every rank before MPI) and end
 * the job with exit code 3. */
_Noreturn void zl_exercise_todo(const char *name, const char *notes);
#endif
