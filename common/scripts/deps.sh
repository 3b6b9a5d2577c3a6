#!/usr/bin/env bash
# deps.sh — make sure what zerolab builds and runs with is installed (`make demo` and `make test`
# run it first; `make deps` alone). Debian 12 / Ubuntu: checks the packages with dpkg and installs
# the missing ones with apt-get, as root or through passwordless sudo; otherwise prints the exact
# command to run and exits 1. Quiet when all is there: one line "deps: ok ...". Before it installs
# anything it says so, with the packages and the command ("deps: installing ... with apt-get").
#   ZL_SKIP_DEPS=1   skip the check (you installed the libraries another way: modules, spack ...)
#   ZL_DEPS_INSTALL=0  check only: print the command to run and exit 1, never install
# CUDA and NCCL are optional and never installed here: the build uses them when it finds them
# (make doctor says what it found; notes/gpu.md).
#   deps.sh --explorer   the optional part: emscripten and chromium, for make explorer (the page) and
#                        make explorer-check (it in a browser); never needed by make build or make test.
#                        Debian 12: about 270 MB downloaded, 1.3 GB on disk, 2-5 minutes (118 packages).
set -u

# what the build needs (compiler, make, MPI, Criterion, OpenBLAS, pkg-config), the plots need,
# and the GPT's default text (--model gpt --data: /usr/share/games/fortunes/cookie, from fortunes)
PKGS=(make gcc libc6-dev pkg-config openmpi-bin libopenmpi-dev libcriterion-dev libopenblas-dev
      python3 python3-matplotlib fortunes)

EXPLORER=0
APT_OPTS=(--no-install-recommends)
if [ "${1:-}" = --explorer ]; then
  EXPLORER=1
  PKGS=(emscripten chromium)
  APT_OPTS=() # what was measured above (with the recommended packages)
  echo "deps: the explorer's optional part (emscripten, chromium): about 270 MB to download, 1.3 GB on disk"
fi

if [ "${ZL_SKIP_DEPS:-0}" = 1 ]; then
  echo "deps: skipped (ZL_SKIP_DEPS=1)"
  exit 0
fi

# the python that plots (same rule as the Makefile's PLOT_PYTHON): PATH's python3 when it has
# matplotlib, else Debian's /usr/bin/python3 (a pyenv/conda python3 on PATH often lacks it)
plot_python() {
  local p
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' 2>/dev/null; then command -v "$p"; return 0; fi
  done
  return 1
}

if ! command -v dpkg-query >/dev/null 2>&1; then
  # not Debian/Ubuntu: check the tools themselves and say what is missing
  miss=()
  if [ "$EXPLORER" = 1 ]; then
    command -v emcc >/dev/null || miss+=("emscripten (emcc)")
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null || miss+=("Chromium (chromium)")
    [ ${#miss[@]} -eq 0 ] || { printf 'deps: not Debian/Ubuntu (no dpkg); missing: %s\n' "${miss[*]}" >&2; exit 1; }
    echo "deps: ok (the explorer's: emcc and chromium found on PATH)"
    exit 0
  fi
  command -v make >/dev/null || miss+=(make)
  command -v mpicc >/dev/null || miss+=("Open MPI (mpicc)")
  command -v mpirun >/dev/null || miss+=("Open MPI (mpirun)")
  command -v pkg-config >/dev/null || miss+=(pkg-config)
  pkg-config --exists criterion 2>/dev/null || miss+=("Criterion (pkg-config criterion)")
  pkg-config --exists openblas 2>/dev/null || [ -e /usr/include/cblas.h ] || miss+=("OpenBLAS (cblas.h)")
  command -v python3 >/dev/null || miss+=(python3)
  note=""
  plot_python >/dev/null || note="; no python with matplotlib: make demo and make plots draw no figures"
  if [ ${#miss[@]} -gt 0 ]; then
    echo "deps: not a Debian/Ubuntu system (no dpkg), and these are missing:" >&2
    printf '  %s\n' "${miss[@]}" >&2
    echo "deps: install them with your package manager (or set ZL_SKIP_DEPS=1 to skip this check)" >&2
    exit 1
  fi
  echo "deps: ok (no dpkg; tools found on PATH; plots with $(plot_python || echo none)$note)"
  exit 0
fi

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ] && [ "$EXPLORER" = 1 ]; then
  echo "deps: ok (the explorer's: $(emcc --version 2>/dev/null | head -1), $(chromium --version 2>/dev/null))"
  exit 0
fi
if [ ${#missing[@]} -eq 0 ]; then
  mpi=$(mpirun --version 2>/dev/null | head -1 | sed 's/.*(Open MPI) /Open MPI /')
  pp=$(plot_python || echo "none (no python with matplotlib)")
  echo "deps: ok (${#PKGS[@]} packages: ${mpi:-mpirun ?}, criterion $(pkg-config --modversion criterion 2>/dev/null || echo ?), plots with $pp)"
  exit 0
fi

echo "deps: missing ${missing[*]}"
cmd="apt-get install -y ${APT_OPTS[*]:+${APT_OPTS[*]} }${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if [ "${ZL_DEPS_INSTALL:-1}" = 0 ]; then
  echo "deps: ZL_DEPS_INSTALL=0: not installing; run:" >&2
  echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive $cmd" >&2
  exit 1
elif [ "$(id -u)" = 0 ]; then
  run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  run=(sudo -n env DEBIAN_FRONTEND=noninteractive)
else
  echo "deps: not root and no passwordless sudo; install them with:" >&2
  echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive $cmd" >&2
  echo "deps: then run the make command again (or set ZL_SKIP_DEPS=1 if you have them another way)" >&2
  exit 1
fi
echo "deps: installing ${#missing[@]} missing package(s) with apt-get (this changes the system; ZL_DEPS_INSTALL=0 only prints the command, ZL_SKIP_DEPS=1 skips the check):"
echo "deps: ${run[*]:+${run[*]} }apt-get update && $cmd"
"${run[@]}" apt-get update -qq </dev/null || { echo "deps: apt-get update failed" >&2; exit 1; }
# shellcheck disable=SC2086
"${run[@]}" apt-get install -y -qq "${APT_OPTS[@]}" "${missing[@]}" </dev/null ||
  { echo "deps: apt-get install failed (see above); run it yourself: sudo $cmd" >&2; exit 1; }
still=()
for p in "${missing[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
  [ "$st" = "install ok installed" ] || still+=("$p")
done
[ ${#still[@]} -eq 0 ] || { echo "deps: still missing after apt-get: ${still[*]}" >&2; exit 1; }
echo "deps: installed ${missing[*]}; plots with $(plot_python || echo 'none')"
