/* test_docs.c — the outputs pasted in the notes/ pages still come out of the programs: every fenced
 * block whose first line starts with `$ ` is run by common/scripts/check_notes.py and compared
 * line by line (timings and paths masked; whole numbers — bytes, counts — exact; numbers with
 * decimals — losses — within 1e-4 relative, the bound check_notes.py states: another CPU's BLAS
 * kernel moves a loss ~1e-6). Notes: notes/tour.md
 * ("Checked outputs"). Suite common_docs. Refresh the pages after a deliberate change with
 * `python3 common/scripts/check_notes.py --update` and review the diff. */
#include "zl_test.h" // zl_run, Criterion
#include <stdarg.h>   // va_list: write_page's format arguments

/* Writes the printf-formatted text to path (a page or a JSON for the checker), asserting it could. */
static void write_page(const char *path, const char *fmt, ...) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "cannot write %s", path);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

/* Every checked run of every page, against the binaries of this build. */
Test(common_docs, pasted_outputs_match_the_programs, .timeout = 240 * ZL_SLOW) {
  char *out = NULL;
  int rc = zl_run(0, 200, &out, "python3 common/scripts/check_notes.py --bin %s", ZL_BIN);
  cr_assert_eq(rc, 0, "check_notes.py --bin %s exited %d (0: every page's `$ ` output matches; "
               "refresh with --update after a deliberate change):\n%s", ZL_BIN, rc, out);
  cr_expect(strstr(out, "0 mismatch(es)") != NULL, "no summary line in:\n%s", out);
  const char *gap = strstr(out, "largest relative gap");
  if (gap) { /* the widest accepted number, for make test-kernels */
    const char *eol = strchr(gap, '\n');
    cr_log_info("%.*s", eol ? (int)(eol - gap) : (int)strlen(gap), gap);
  }
  free(out);
}

/* The checker can fail: a page whose pasted DDP total is 57.0 GB instead of 56.0 exits 1 and
 * names the page line; the same page with the real number passes. */
Test(common_docs, a_wrong_number_fails_the_check, .timeout = 60) {
  const char *good = "DDP (0)        14.0       14.0       28.0       56.0     1.0x";
  const char *bad = "DDP (0)        14.0       14.0       28.0       57.0     1.0x";
  const char *lines[2] = {good, bad};
  const int want_rc[2] = {0, 1};
  for (int k = 0; k < 2; k++) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/zl_docs_%d_%d.md", (int)getpid(), k);
    write_page(path, "# a page\n\n```\n$ build/bin/ch00_memory --params 7B --k 4 --stage 0\n"
                     "in GB (1e9 bytes) per rank\n%s         27.6   (2+2+K)Ψ = 8Ψ\n```\n", lines[k]);
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "python3 common/scripts/check_notes.py --bin %s %s", ZL_BIN, path);
    cr_expect_eq(rc, want_rc[k], "check_notes.py on %s (DDP total %s): exit %d, expected %d:\n%s",
                 path, k ? "57.0, wrong" : "56.0, right", rc, want_rc[k], out);
    if (k == 1) {
      char where[160];
      snprintf(where, sizeof where, "%s:4: $ build/bin/ch00_memory", path);
      cr_expect(strstr(out, where) && strstr(out, "57.0"), "the failure should name %s and the line "
                "with 57.0:\n%s", where, out);
    }
    free(out);
    remove(path);
  }
}

/* The tolerance is a number's, not a line's: a pasted 56.004 for the real 56.0 (7e-5 relative) passes, 56.01
 * (1.8e-4) fails, and so does any change of the text around the numbers. */
Test(common_docs, numbers_compare_within_the_stated_tolerance, .timeout = 60) {
  const char *totals[3] = {"56.004", "56.01", "56.0 "};
  const char *tail[3] = {"(2+2+K)Ψ = 8Ψ", "(2+2+K)Ψ = 8Ψ", "(2+2+K)Ψ is 8Ψ"};
  const int want_rc[3] = {0, 1, 1};
  for (int k = 0; k < 3; k++) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/zl_docs_%d_tol%d.md", (int)getpid(), k);
    write_page(path,
               "# a page\n\n```\n$ build/bin/ch00_memory --params 7B --k 4 --stage 0\n"
               "in GB (1e9 bytes) per rank\nDDP (0)        14.0       14.0       28.0       %s     1.0x      "
               "   27.6   %s\n```\n",
               totals[k], tail[k]);
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "python3 common/scripts/check_notes.py --bin %s %s", ZL_BIN, path);
    cr_expect_eq(rc, want_rc[k], "check_notes.py on %s (DDP total %s, %s): exit %d, expected %d:\n%s", path,
                 totals[k], tail[k], rc, want_rc[k], out);
    free(out);
    remove(path);
  }
}

/* A measured number quoted in a page carries `<!-- data: FILE EXPR -->`; the checker recomputes
 * EXPR from the JSON and compares it at the page's precision. 1.35 (= 51.11 / 37.73 rounded) passes,
 * 1.61 fails naming the page line, the quoted number and the JSON's; a missing key fails too. */
Test(common_docs, a_wrong_measured_number_fails_the_check, .timeout = 60) {
  char json[128];
  snprintf(json, sizeof json, "/tmp/zl_docs_%d_data.json", (int)getpid());
  write_page(json, "{\"step_ms\": {\"np2\": {\"ddp\": 37.73, \"zero3\": 51.11}}, \"saved\": [-11.24]}\n");
  const char *quoted[3] = {"**1.35×**", "**1.61×**", "1.35×"};
  const char *expr[3] = {"step_ms.np2.zero3 / step_ms.np2.ddp", "step_ms.np2.zero3 / step_ms.np2.ddp",
                         "step_ms.np2.zero4 / step_ms.np2.ddp"};
  const int want_rc[3] = {0, 1, 1};
  for (int k = 0; k < 3; k++) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/zl_docs_%d_n%d.md", (int)getpid(), k);
    write_page(path, "# a page\n\nprefetch lost −11.24 ms<!-- data: %s saved.0 -->; ZeRO-3 took\n"
                     "%s<!-- data: %s %s --> DDP's step.\n", strrchr(json, '/') + 1, quoted[k],
               strrchr(json, '/') + 1, expr[k]);
    char *out = NULL;
    int rc = zl_run(0, 30, &out, "python3 common/scripts/check_notes.py --numbers %s", path);
    cr_expect_eq(rc, want_rc[k], "check_notes.py --numbers on %s (%s, %s): exit %d, expected %d:\n%s",
                 path, quoted[k], expr[k], rc, want_rc[k], out);
    if (k > 0) {
      char where[160];
      snprintf(where, sizeof where, "%s:4:", path);
      cr_expect(strstr(out, where) != NULL, "the failure should name %s:\n%s", where, out);
      cr_expect(k != 1 || (strstr(out, "quoted 1.61") && strstr(out, "= 1.35")),
                "the failure should give the quoted 1.61 and the JSON's 1.35:\n%s", out);
      cr_expect(k != 2 || strstr(out, "zero4"), "the failure should name the missing key:\n%s", out);
    }
    free(out);
    remove(path);
  }
  remove(json);
}

/* A measured number quoted under a sibling's label fails, though the number is right for its key
 * (common/scripts/notes_labels.py): chapter 10's "Ulysses 1.50, the hybrid 3.00" (comm.6, comm.7 of
 * bench_long.json) with the two names swapped in a copy of the page, and benchmarks.md's C = 4 Ulysses
 * row renamed the hybrid, each fail naming the line and the sibling; the copies as they are pass. */
Test(common_docs, a_number_under_a_swapped_label_fails_the_check, .timeout = 60) {
  const char *page[2] = {"notes/10-long-sequences.md", "notes/benchmarks.md"};
  const char *swap[2] = {"s/Ulysses 1\\.50</@@1.50</; s/the hybrid 3\\.00</Ulysses 3.00</; s/@@/the hybrid /",
                         "s/^| Ulysses (a2a) | 4 |/| hybrid (a2a 2 x ring 2) | 4 |/"};
  const char *swapped[2] = {"the hybrid 1.50<", "| hybrid (a2a 2 x ring 2) | 4 | 1572864<"};
  const char *said[2] = {"name 'hybrid', a sibling of comm.6.sent_bytes_per_step",
                         "name 'hybrid', a sibling of comm.6.sent_bytes_per_step"};
  for (int p = 0; p < 2; p++) {
    for (int k = 0; k < 2; k++) {
      char path[128];
      snprintf(path, sizeof path, "notes/.zl_docs_%d_swap%d%d.md", (int)getpid(), p, k);
      int rc = zl_run(0, 10, NULL, "cp %s %s", page[p], path);
      cr_assert_eq(rc, 0, "cannot copy %s to %s", page[p], path);
      if (k) {
        char *grep = NULL;
        zl_run(0, 10, &grep, "sed -i '%s' %s && grep -cF '%s' %s", swap[p], path, swapped[p], path);
        cr_assert(grep && atoi(grep) == 1, "the swap '%s' no longer matches %s (the sentence changed? "
                  "update this test):\n%s", swap[p], page[p], grep ? grep : "");
        free(grep);
      }
      char *out = NULL;
      rc = zl_run(0, 30, &out, "python3 common/scripts/check_notes.py --numbers %s", path);
      cr_expect_eq(rc, k, "check_notes.py --numbers on %s (%s): exit %d, expected %d:\n%s", path,
                   k ? "labels swapped" : "as committed", rc, k, out);
      cr_expect(k == 0 || strstr(out, said[p]), "the failure should say '%s':\n%s", said[p], out);
      free(out);
      remove(path);
    }
  }
}

/* A link to a page that exists but a heading that does not (06 has "Meeting 06a" and "06b", not
 * "06c") fails with the page line; the same link to #meeting-06b passes. */
Test(common_docs, a_broken_link_fails_the_check, .timeout = 30) {
  const char *anchor[2] = {"meeting-06b", "meeting-06c"};
  for (int k = 0; k < 2; k++) {
    char path[128];
    snprintf(path, sizeof path, "notes/.zl_docs_%d_l%d.md", (int)getpid(), k);
    write_page(path, "# a page\n\nRead [the second meeting](06-tensor-parallel.md#%s) next.\n", anchor[k]);
    char *out = NULL;
    int rc = zl_run(0, 20, &out, "python3 common/scripts/check_notes.py --numbers %s", path);
    cr_expect_eq(rc, k, "check_notes.py --numbers on a link to #%s: exit %d, expected %d:\n%s", anchor[k], rc,
                 k, out);
    char where[160];
    snprintf(where, sizeof where, "%.100s:3: link 06-tensor-parallel.md#meeting-06c", path);
    cr_expect(k == 0 || strstr(out, where), "the failure should name %s:\n%s", where, out);
    free(out);
    remove(path);
  }
}

/* A code reference names a file that exists and a symbol it holds: `loop_ops.c:trainer_loss`
 * passes; a symbol that moved away, or a path from before common/ had layer folders, fails. */
Test(common_docs, a_stale_code_reference_fails_the_check, .timeout = 30) {
  const char *ref[3] = {"common/train/loop_ops.c:trainer_loss", "loop_ops.c:report_finish", "common/train.c"};
  const char *said[3] = {"", "`loop_ops.c:report_finish`: common/train/loop_ops.c holds no report_finish",
                         "`common/train.c`: no such file"};
  for (int k = 0; k < 3; k++) {
    char path[128];
    snprintf(path, sizeof path, "notes/.zl_docs_%d_c%d.md", (int)getpid(), k);
    write_page(path, "# a page\n\nThe loss gradient is `%s`.\n", ref[k]);
    char *out = NULL;
    int rc = zl_run(0, 20, &out, "python3 common/scripts/check_notes.py --numbers %s", path);
    cr_expect_eq(rc, k ? 1 : 0, "check_notes.py --numbers on `%s`: exit %d, expected %d:\n%s", ref[k], rc,
                 k ? 1 : 0, out);
    cr_expect(strstr(out, said[k]), "the output should say %s:\n%s", said[k], out);
    free(out);
    remove(path);
  }
}

/* The checks that run no program (common/scripts/notes_claims.py), on a tree of two chapters made
 * here: with chapter 08 missing from the reading plan and a "--dpu" flag in the sources while
 * notes/08-offload.md says the delayed parameter update is not built, the check fails naming
 * both; with 08 in the plan and no such flag, it passes. */
Test(common_docs, a_chapter_missing_from_the_plan_or_a_built_claim_fails, .timeout = 30) {
  const int want_rc[2] = {1, 0};
  for (int k = 0; k < 2; k++) {
    char root[128], path[256];
    snprintf(root, sizeof root, "/tmp/zl_docs_%d_tree%d", (int)getpid(), k);
    const char *dirs[] = {"",       "/chapters", "/chapters/01_ring", "/chapters/08_offload",
                          "/notes", "/solutions"};
    for (int d = 0; d < 6; d++) {
      snprintf(path, sizeof path, "%s%s", root, dirs[d]);
      mkdir(path, 0755);
    }
    snprintf(path, sizeof path, "%s/chapters/01_ring/main.c", root);
    write_page(path, "int main(void) { return 0; }\n");
    snprintf(path, sizeof path, "%s/chapters/08_offload/main.c", root);
    write_page(path, "int main(void) { return 0; }\n");
    snprintf(path, sizeof path, "%s/solutions/offload.c", root);
    write_page(path, "%s\n",
               k == 0 ? "static const char *flag = \"--dpu\"; /* the update, one step late */" : "");
    snprintf(path, sizeof path, "%s/notes/01-ring.md", root);
    write_page(path, "# 01 ring\n\nA ring.\n");
    snprintf(path, sizeof path, "%s/notes/08-offload.md", root);
    write_page(path, "# 08 offload\n\n- **Delayed parameter update** (the paper's DPU, not built here).\n");
    snprintf(path, sizeof path, "%s/README.md", root);
    write_page(path, "# x\n\n## Chapters\n\n| ch | program | notes |\n|---|---|---|\n"
                     "| 01 | `ch01_ring` | [notes/01-ring.md](notes/01-ring.md) |\n"
                     "| 08 | `ch08_offload` | [notes/08-offload.md](notes/08-offload.md) |\n");
    snprintf(path, sizeof path, "%s/notes/README.md", root);
    write_page(path, "# notes\n\n## A reading plan\n\n| week | read | reading | run |\n|---|---|---|---|\n"
                     "| 1 | [01-ring](01-ring.md) | 0 min | `make run CH=01` |\n%s",
               k == 0 ? "" : "| 2 | [08-offload](08-offload.md) | 0 min | `make run CH=08` |\n");
    char *out = NULL;
    int rc = zl_run(0, 20, &out, "python3 common/scripts/notes_claims.py --root %s", root);
    cr_expect_eq(rc, want_rc[k], "notes_claims.py --root %s: exit %d, expected %d:\n%s", root, rc, want_rc[k],
                 out);
    if (k == 0) {
      cr_expect(strstr(out, "the reading plan has no week for notes/08-offload.md") != NULL,
                "the failure should name the page missing from the plan:\n%s", out);
      cr_expect(strstr(out, "notes/08-offload.md:3:") && strstr(out, "flag --dpu exists"),
                "the failure should name the 'not built' line and the flag that exists:\n%s", out);
    }
    free(out);
    zl_run(0, 10, NULL, "rm -rf %s", root);
  }
}

/* The plan's pace (common/scripts/notes_claims.py, check_pace and check_papers), on a tree of one
 * chapter made here: a week that assigns three papers and whose page asks ten questions (an
 * eleventh, "(code)", is the full track's and not counted), one of the papers missing from the
 * notes' reading list, fails naming all three; two papers, nine questions and a complete list pass. */
Test(common_docs, a_week_over_two_papers_or_nine_questions_fails, .timeout = 30) {
  for (int k = 0; k < 2; k++) {
    char root[128], path[256];
    snprintf(root, sizeof root, "/tmp/zl_docs_%d_pace%d", (int)getpid(), k);
    const char *dirs[] = {"", "/chapters", "/chapters/01_ring", "/notes"};
    for (int d = 0; d < 4; d++) {
      snprintf(path, sizeof path, "%s%s", root, dirs[d]);
      mkdir(path, 0755);
    }
    snprintf(path, sizeof path, "%s/chapters/01_ring/main.c", root);
    write_page(path, "int main(void) { return 0; }\n");
    char questions[1024] = "## Questions\n\n";
    for (int q = 1; q <= (k ? 9 : 10); q++)
      snprintf(questions + strlen(questions), sizeof questions - strlen(questions), "%d. Why %d?\n", q, q);
    strcat(questions, "11. (code) Which line?\n");
    snprintf(path, sizeof path, "%s/notes/01-ring.md", root);
    write_page(path, "# 01 ring\n\nA ring.\n\n%s", questions);
    snprintf(path, sizeof path, "%s/README.md", root);
    write_page(path, "# x\n\n## Chapters\n\n| ch | program | notes |\n|---|---|---|\n"
                     "| 01 | `ch01_ring` | [notes/01-ring.md](notes/01-ring.md) |\n");
    snprintf(path, sizeof path, "%s/notes/README.md", root);
    write_page(path, "# notes\n\n## A reading plan\n\n| week | read | reading | run |\n|---|---|---|---|\n"
                     "| 1 | [01-ring](01-ring.md); [A](https://arxiv.org/abs/1111.00001), "
                     "[B](https://arxiv.org/abs/1111.00002)%s | 0 min | `make run CH=01` |\n\n"
                     "## Reading list\n\n- A (arXiv:1111.00001).\n%s",
               k ? "" : ", [C](https://arxiv.org/abs/1111.00003)", k ? "- B (arXiv:1111.00002).\n" : "");
    char *out = NULL;
    int rc = zl_run(0, 20, &out, "python3 common/scripts/notes_claims.py --root %s", root);
    cr_expect_eq(rc, k ? 0 : 1, "notes_claims.py --root %s: exit %d, expected %d:\n%s", root, rc, k ? 0 : 1,
                 out);
    if (k == 0) {
      cr_expect(strstr(out, "week 1 assigns 3 papers") != NULL, "the failure should name 3 papers:\n%s", out);
      cr_expect(strstr(out, "ask 10 questions") != NULL, "the failure should count 10 questions:\n%s", out);
      cr_expect(strstr(out, "reading list lacks https://arxiv.org/abs/1111.00002") != NULL,
                "the failure should name the paper missing from the reading list:\n%s", out);
    }
    free(out);
    zl_run(0, 10, NULL, "rm -rf %s", root);
  }
}
