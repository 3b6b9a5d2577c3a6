#!/usr/bin/env bash
# kernels.sh TEST_BINARY [--kernels K1,K2,..|others:N|all] [--filter F] [--json OUT]
# The portability matrix (notes/design.md, "Bits or a tolerance"; notes/benchmarks.md,
# "Portability"): the same Criterion tests run once per OpenBLAS kernel, each forced with
# OPENBLAS_CORETYPE, so one machine shows the bits another CPU's BLAS gives — OpenBLAS picks its
# GEMM kernel, and with it the order of a dot product's sum, by CPU and by matrix shape.
#   --kernels  the kernels, comma-separated (default: all that this CPU can execute); `others:N`
#              picks N of them that are not this machine's own, the most different first
#              (.ci/run's smoke); a kernel this CPU cannot execute (its instructions are missing
#              from /proc/cpuinfo) is listed as skipped, with the reason, never run.
#   --filter   Criterion's filter (default: the suites that compare across GEMM shapes, $SMOKE)
#   --json     writes {kernel: {passed, failed, seconds, summary}} with _meta (CPU, date, filter)
# One line per kernel, then the table; exit 1 when any kernel failed a test, or (before any runs)
# when a pattern of the filter matches no test of the binary (its --list), naming the pattern.
set -u
bin=${1:?usage: kernels.sh TEST_BINARY [--kernels K1,K2|others:N|all] [--filter F] [--json OUT]}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The checks that compare results across GEMM shapes (TP slices, pipeline micro-batches, another
# rank count, the pasted outputs): where another CPU's BLAS could change the last bits.
SMOKE='@(ch06_tp/ops_*|common_exercises/@(right_alternatives_are_done|tp_verdicts_*)|common_universal/*|common_docs/*|ch07_pipeline/equals_one_rank_*|ch10_context/cp_equals_one_rank|ch10_sp/sp_equals_tp_and_one_rank|ch10_ulysses/*|ch09_cluster/checkpoint_*|ch12_moe/@(ep_equals_one_rank|tp_inside_ep_equals_one_rank|tp_sp_inside_ep_equals_one_rank|global_aux_loss_any_layout))'
kernels=all filter=$SMOKE json=
while [ $# -gt 0 ]; do
  case "$1" in
    --kernels) kernels=${2:?--kernels needs a value}; shift 2 ;;
    --filter) filter=${2:?--filter needs a value}; shift 2 ;;
    --json) json=${2:?--json needs a path}; shift 2 ;;
    *) echo "kernels.sh: unknown argument '$1' (allowed: --kernels, --filter, --json)" >&2; exit 2 ;;
  esac
done

ALL=(Prescott Nehalem Sandybridge Haswell Zen SkylakeX Cooperlake)
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
# what each kernel executes, beyond the previous one's (OpenBLAS's kernel/x86_64 sources)
needs() {
  case "$1" in
    # (pni is how /proc/cpuinfo names SSE3)
    Prescott) echo pni ;; Nehalem) echo "pni ssse3 sse4_2" ;; Sandybridge) echo "sse4_2 avx" ;;
    Haswell|Zen) echo "avx avx2 fma" ;; SkylakeX) echo "avx2 fma avx512f avx512bw avx512vl avx512dq" ;;
    Cooperlake) echo "avx512f avx512bw avx512vl avx512_bf16" ;; *) echo "unknown-kernel" ;;
  esac
}
can_run() { local f; for f in $(needs "$1"); do case "$flags" in *" $f "*) ;; *) echo "$f"; return 1 ;; esac; done; return 0; }
own=$(python3 - <<'EOF' 2>/dev/null
import ctypes
for name in ("libopenblas.so.0", "libopenblas.so"):
    try:
        lib = ctypes.CDLL(name)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        print(lib.openblas_get_corename().decode())
        break
    except OSError:
        pass
EOF
)
own=${own:-unknown}

case "$kernels" in
  all) list=("${ALL[@]}") ;;
  others:*)
    n=${kernels#others:}
    [[ "$n" =~ ^[1-7]$ ]] || { echo "kernels.sh: --kernels others:N needs N from 1 to 7, not '$n'" >&2; exit 2; }
    # the most different from the machine's first: the oldest SSE kernel, then an AVX2 one
    list=()
    for k in Prescott Haswell Sandybridge Zen Nehalem SkylakeX Cooperlake; do
      [ "${k,,}" = "${own,,}" ] && continue
      can_run "$k" >/dev/null || continue
      [ ${#list[@]} -lt "$n" ] && list+=("$k")
    done ;;
  *) IFS=, read -r -a list <<<"$kernels"
     for k in "${list[@]}"; do
       [ "$(needs "$k")" != unknown-kernel ] || { echo "kernels.sh: --kernels: unknown kernel '$k' (allowed: ${ALL[*]})" >&2; exit 2; }
     done ;;
esac

# Every pattern of the filter (each alternative of its @(...) groups, spelled out) must name a test
# of the binary (its --list): a renamed test would leave its pattern matching nothing, and Criterion's
# "0 of 0" would read as ok. Exit 1 naming each such pattern, before any kernel runs.
listing=$("$bin" --list 2>&1) || { echo "kernels.sh: $bin --list failed:" >&2; echo "$listing" >&2; exit 2; }
empty=$(printf '%s\n' "$listing" | python3 -c '
import re, sys

def alternatives(s, i):  # s[i] is just after "(": the alternatives up to the matching ")", and its index
    alts, cur, depth = [], "", 0
    while i < len(s):
        ch = s[i]
        if ch == "(":
            depth += 1
        elif ch == ")" and depth == 0:
            return alts + [cur], i
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            alts, cur = alts + [cur], ""
            i += 1
            continue
        cur += ch
        i += 1
    sys.exit("kernels.sh: unbalanced ( in the filter " + s)

def expand(s):  # every leaf pattern: each @(a|b) group replaced by each of its alternatives
    m = s.find("@(")
    if m < 0:
        return [s]
    alts, end = alternatives(s, m + 2)
    return [leaf for a in alts for leaf in expand(s[:m] + a + s[end + 1:])]

def regex(p):  # Criterion glob: * and ? as in a shell, ?(..) *(..) +(..) as extglob
    out, i = "", 0
    while i < len(p):
        ch = p[i]
        if ch in "?*+" and p[i + 1:i + 2] == "(":
            alts, end = alternatives(p, i + 2)
            out += "(?:" + "|".join(regex(a) for a in alts) + ")" + ch
            i = end + 1
            continue
        out += ".*" if ch == "*" else "." if ch == "?" else re.escape(ch)
        i += 1
    return out

tests, suite = [], None
for line in sys.stdin:
    m = re.match(r"^(\S+): \d+ tests?$", line.strip())
    if m:
        suite = m.group(1)
    elif suite and re.match(r"^[├└]── ", line):
        tests.append(suite + "/" + line.split("── ", 1)[1].strip())
for leaf in expand(sys.argv[1]):
    if "!(" in leaf:  # a negation names no test of its own
        continue
    if not any(re.fullmatch(regex(leaf), t) for t in tests):
        print(leaf)
' "$filter") || exit 2
if [ -n "$empty" ]; then
  while read -r leaf; do
    echo "kernels.sh: the filter's pattern '$leaf' matches no test of $bin (renamed? see its --list)" >&2
  done <<<"$empty"
  exit 1
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(for f in avx512f avx2 avx sse4_2; do case "$flags" in *" $f "*) echo "$f"; break ;; esac; done)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "portability matrix: $(nproc) cores, $cpu; OpenBLAS's own kernel here: $own"
echo "filter: $filter"
rows=() failed=0 jrows=
for k in "${list[@]}"; do
  if ! miss=$(can_run "$k"); then
    rows+=("$(printf '%-12s %-8s %s' "$k" skipped "this CPU lacks $miss")")
    jrows+="${jrows:+,}\"$k\": {\"skipped\": \"this CPU lacks $miss\"}"
    continue
  fi
  echo "== OPENBLAS_CORETYPE=$k"
  t0=$(date +%s)
  out=$(OPENBLAS_CORETYPE=$k ZL_TEST_VERBOSE=1 bash "$root/common/scripts/run_tests.sh" "$bin" "$filter" 2>&1)
  rc=$?
  t1=$(date +%s)
  # a failing test's lines in full; of the passing tests, the lines that state a measured gap
  echo "$out" | awk '/^\[RUN \]/ { n = 0; next }
    /^\[----\]/ { buf[++n] = $0; next }
    /^\[PASS\]/ { for (i = 1; i <= n; i++) if (buf[i] ~ /largest/) print "  " buf[i]; n = 0; next }
    /^\[(FAIL|ERR )/ { for (i = 1; i <= n; i++) print "  " buf[i]; print "  " $0; n = 0; next }'
  # the largest gap as a fraction of its own tolerance (each line: "largest ...: GAP (tolerance TOL)")
  gap=$(echo "$out" | grep -a -o -E 'largest[^:]*: [0-9.eE+-]+ \(tolerance [0-9.eE+-]+\)' |
        sed -E 's/.*: ([0-9.eE+-]+) \(tolerance ([0-9.eE+-]+)\)/\1 \2/' | awk '{ f = $1 / $2; if (f > m) m = f } END { if (NR) printf "%.3g", m }')
  summary=$(echo "$out" | grep -a 'Synthesis' | tail -1 | sed 's/.*Synthesis: //')
  p=$(echo "$summary" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p'); f=$(echo "$summary" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
  c=$(echo "$summary" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
  [ "$rc" = 0 ] || failed=1
  fails=$(echo "$out" | sed -n 's/^\[FAIL\] \([^:]*::[^:]*\):.*/"\1"/p' | paste -sd, -)
  rows+=("$(printf '%-12s %-8s %s passed, %s failed, %s crashed, %d s; largest gap %s of its tolerance' "$k" "$([ "$rc" = 0 ] && echo ok || echo FAILED)" "${p:-?}" "${f:-?}" "${c:-?}" $((t1 - t0)) "${gap:-?}")")
  jrows+="${jrows:+,}\"$k\": {\"rc\": $rc, \"passed\": ${p:-null}, \"failed\": ${f:-null}, \"crashed\": ${c:-null}, \"seconds\": $((t1 - t0)), \"largest_gap_over_tolerance\": ${gap:-null}, \"failed_tests\": [${fails}]}"
done
echo
printf '%-12s %-8s %s\n' kernel result detail
for r in "${rows[@]}"; do echo "$r"; done
if [ -n "$json" ]; then
  mkdir -p "$(dirname "$json")"
  f_esc=$(printf '%s' "$filter" | sed 's/\\/\\\\/g; s/"/\\"/g')
  printf '{"_meta": {"cpu": "%s", "widest_isa": "%s", "cores": %d, "own_kernel": "%s", "date": "%s", "load_before": "%s", "load_after": "%s", "commit": "%s", "filter": "%s", "command": "make test-kernels"},\n %s}\n' \
    "$cpu" "$isa" "$(nproc)" "$own" "$(date -u +%Y-%m-%dT%H:%MZ)" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$f_esc" "$jrows" >"$json"
  echo "kernels.sh: wrote $json"
fi
exit $failed
