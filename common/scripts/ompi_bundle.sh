#!/usr/bin/env bash
# ompi_bundle.sh fetch|env DIR — a relocatable Open MPI for a GPU machine that has none and no
# package registry in reach (common/scripts/gpu_session.sh; notes/gpu.md).
#   fetch DIR   here, where Debian's registry answers: download Open MPI's runtime packages (and
#               this script) into DIR (~17 MB of .deb files; keep DIR out of git: .ompi/ is ignored)
#   env DIR     there: unpack them under DIR/root once, then print the exports that put its
#               mpirun, mpicc and libmpi first:  eval "$(bash DIR/ompi_bundle.sh env DIR)"
set -euo pipefail
PKGS="openmpi-bin libopenmpi3 openmpi-common libopenmpi-dev libpmix2 libevent-core-2.1-7
libevent-pthreads-2.1-7 libhwloc15 libhwloc-plugins libfabric1 libucx0 libibverbs1 librdmacm1
libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libnuma1 libmunge2 libpciaccess0
libxnvctrl0 ocl-icd-libopencl1 libxml2 libicu72"
mode=${1:-}
dir=${2:-}
if [ -z "$mode" ] || [ -z "$dir" ]; then echo "usage: $0 fetch|env DIR" >&2; exit 2; fi
case "$mode" in
  fetch)
    mkdir -p "$dir"
    cp "$0" "$dir/ompi_bundle.sh"
    (cd "$dir" && apt-get download $PKGS >/dev/null)
    echo "ompi_bundle: $(ls "$dir"/*.deb | wc -l) packages in $dir" >&2 ;;
  env)
    dir=$(cd "$dir" && pwd)
    root="$dir/root"
    if [ ! -d "$root/usr/bin" ]; then
      mkdir -p "$root"
      for deb in "$dir"/*.deb; do dpkg -x "$deb" "$root"; done
      ln -sf orterun "$root/usr/bin/mpirun"
      ln -sf orterun "$root/usr/bin/mpiexec"
      ln -sf mpicc.openmpi "$root/usr/bin/mpicc"
    fi
    lib="$root/usr/lib/x86_64-linux-gnu"
    echo "export OPAL_PREFIX='$root/usr'"
    echo "export PATH='$root/usr/bin':\"\$PATH\""
    echo "export LD_LIBRARY_PATH='$lib/openmpi/lib:$lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" ;; # lent machines run as root
  *) echo "usage: $0 fetch|env DIR" >&2; exit 2 ;;
esac
