"""verdicts_check.py — what `make exercise` says, checked without building anything (run by
tests/unit/test_verdicts.c, suite common_verdicts; common/scripts/exercises.py):
  decoded     the comm layer's decoded MPI error is the verdict's reason, not a generic line;
  order       each chapter's most specific test first: ulysses' transpose-with-positions before the
              round trip's flat indices, chapter 07's pure schedule tests before any MPI launch;
  return      an error at the closing brace of a body's function (a missing return) is that body's.
Prints 'ok NAME' per check, or 'FAIL NAME: why' and exits 1."""
import argparse, fnmatch, os, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "common", "scripts"))
import exercises as ex  # noqa: E402

fails = []


def check(name, cond, why):
    print(f"ok {name}" if cond else f"FAIL {name}: {why}")
    if not cond:
        fails.append(name)


def decoded():
    line = ("rank 1: comm_group_async (stage 0 -> 1 act): the receive from rank 0 (comm_send/comm_recv's tag 1) "
            "was posted for 6 element(s), but rank 0 sent 8 (MPI_ERR_TRUNCATE): ...")
    log = f"[----] test_pipeline.c:40: Assertion Failed\n[----]   program exited 1:\n[----]   {line}\n"
    state, reason, _ = ex.failure_kind(log, "ch07_pipeline::equals_one_rank_1f1b")
    check("decoded_truncate", reason == line, f"reason {reason!r}")
    line = ("rank 0: comm_wait: handle 1 was not issued by this communicator (2 ranks, 0 handle(s) issued so far)"
            "; comm_recv_async (x) returned handle 1 on another communicator (2 ranks) — ...")
    state, reason, _ = ex.failure_kind(f"[----]   {line}\n", "ch07_pipeline::x")
    check("decoded_wrong_comm", reason == line, f"reason {reason!r}")


def order():
    def first(ch, tests):
        return ex.ordered_tests(tests, ch)
    o = first("10", ["ch10_ulysses/transpose_round_trip", "ch10_ulysses/a2a_attention_bitwise"])
    check("order_ulysses", o[0] == "ch10_ulysses/a2a_attention_bitwise", f"order {o}")
    o = first("07", ["ch07_pipeline/equals_one_rank_1f1b", "ch07_sched/checker_names_the_mistake",
                     "ch07_pipeline/schedules_are_valid_zero_bubble", "ch07_sched/formulas_come_from_the_simulator",
                     "ch07_pipeline/split_is_balanced"])
    pure = [t for t in o if t.startswith("ch07_sched/") or "schedules_are_valid" in t]
    check("order_ch07_pure_first", o[:len(pure)] == pure, f"order {o}")


def missing_return():
    d = tempfile.mkdtemp(prefix="zl_verdicts.")
    text = ("int f(int x) {\n"                          # 1
            "  // BEGIN EXERCISE fx_f notes/01-collectives.md\n"  # 2
            "  x += 1;\n"                               # 3
            "  // END EXERCISE\n"                       # 4
            "}\n"                                       # 5: the compiler's line for a missing return
            "\n"
            "int g(void) { return 0; }\n")              # 7: another function
    with open(os.path.join(d, "fx.c"), "w") as f:
        f.write(text)
    a = argparse.Namespace(dst=d)
    check("return_at_brace", ex.owner_around({}, a, "fx.c", 5) == "fx_f", "line 5 not blamed on fx_f")
    check("return_elsewhere", ex.owner_around({}, a, "fx.c", 7) is None, "line 7 blamed on a body")


decoded()
order()
missing_return()
sys.exit(1 if fails else 0)
