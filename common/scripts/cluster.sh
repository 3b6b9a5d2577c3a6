#!/usr/bin/env bash
# cluster.sh — emulated nodes on one Linux box (notes/09-nodes.md).
#
#   cluster.sh up K [--link-mbit R] [--ttl S]   K nodes (2..8); links shaped to R Mbit/s each way
#   cluster.sh down                              remove everything `up` made (also the watchdog)
#   cluster.sh status                            the nodes, their addresses, the link; exit 1 if down
#   cluster.sh check                             can nodes be made here? exit 0, or 1 and the reason
#   cluster.sh hosts | link                      the nodes' addresses, one a line | the link's Mbit/s (zlrun)
#   options for every command: --name NAME (default zl, or $ZL_CLUSTER; letters/digits, <= 5)
#                              --subnet A.B.C (default 10.209.9, or $ZL_CLUSTER_SUBNET; a /24)
#
# A node is a network namespace NAME-node<i> with one interface, eth0, at A.B.C.<i+1>/24, plugged
# into a bridge NAME-br in the root namespace (A.B.C.254, where mpirun runs). Both directions of
# every node's link go through a token bucket (tc htb) at R Mbit/s: the node's eth0 (uplink) and
# the bridge port's veth (downlink), TCP's pure ACKs around it (shape(), below); R = 0 leaves
# them unshaped. Ranks on one node share memory
# (Open MPI's vader in the node's own directory /dev/shm/NAME-node<i>, and its own hostname, set
# by cluster_agent.sh when mpirun starts the node's daemon); ranks on two nodes talk TCP through
# the bridge. Nothing is routed out: the /24 is the script's own and traffic only goes to the
# nodes' addresses (and the bridge's, mpirun's end).
#
# `up` is idempotent (the same K: only the link rate and the watchdog change; another K: down,
# then up) and tears down what it made when a step fails. A watchdog (--ttl S, default 7200)
# runs `down` after S seconds so a forgotten cluster does not outlive its use; 0 = none.
# Every command is bounded in time: up/down wait at most 30 s for another up/down of the same
# cluster (a lock), and each step is one ip/tc call.
# State: /run/zerolab-cluster/NAME/ (nodes, link_mbit, subnet, watchdog.pid).
set -u
ME=$(readlink -f "$0")
die() { echo "cluster.sh: $*" >&2; exit 2; }

cmd=${1:-}; [ $# -gt 0 ] && shift
K=; MBIT=0; TTL=7200; NAME=${ZL_CLUSTER:-zl}; SUBNET=${ZL_CLUSTER_SUBNET:-10.209.9}
if [ "$cmd" = up ]; then K=${1:-}; [ $# -gt 0 ] && shift; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --link-mbit) MBIT=${2:-}; shift 2 || die "--link-mbit needs a value";;
    --ttl) TTL=${2:-}; shift 2 || die "--ttl needs a value";;
    --name) NAME=${2:-}; shift 2 || die "--name needs a value";;
    --subnet) SUBNET=${2:-}; shift 2 || die "--subnet needs a value";;
    *) die "unknown argument '$1' (usage: cluster.sh up K [--link-mbit R] [--ttl S] | down | status | check)";;
  esac
done
case "$NAME" in ''|*[!a-z0-9]*) die "--name $NAME: lower-case letters and digits only, 1 to 5 of them";; esac
[ ${#NAME} -le 5 ] || die "--name $NAME: at most 5 characters (interface names are limited to 15)"
echo "$SUBNET" | grep -Eq '^(10|192\.168|172\.(1[6-9]|2[0-9]|3[01]))(\.[0-9]{1,3}){1,2}$' &&
  [ "$(echo "$SUBNET" | tr -cd . | wc -c)" = 2 ] || die "--subnet $SUBNET: the first three numbers of a private /24 (e.g. 10.209.9)"
STATE=/run/zerolab-cluster/$NAME
BR=$NAME-br
ns_of() { echo "$NAME-node$1"; }          # namespace and hostname of node i
veth_of() { echo "$NAME-v$1"; }           # the bridge port (root namespace) of node i
addr_of() { echo "$SUBNET.$(($1 + 1))"; } # node i's address
shm_of() { echo "/dev/shm/$NAME-node$1"; }

# Can namespaces, veths and a UTS namespace be made here? Prints the reason when not.
can_make() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need root or CAP_NET_ADMIN; run as root, as CI does)"; return 1; }
  for t in ip tc unshare; do command -v $t >/dev/null || { echo "$t not found (Debian: apt-get install iproute2 util-linux)"; return 1; }; done
  local probe=$NAME-probe err
  ip netns del "$probe" 2>/dev/null
  err=$(ip netns add "$probe" 2>&1) || { echo "ip netns add failed: $err (no CAP_NET_ADMIN / CAP_SYS_ADMIN in this container?)"; return 1; }
  err=$(ip -n "$probe" link add zlprobe0 type veth peer name zlprobe1 2>&1) ||
    { ip netns del "$probe"; echo "cannot make a veth pair: $err"; return 1; }
  err=$(ip netns exec "$probe" tc qdisc add dev zlprobe0 root handle 1: htb default 20 2>&1 &&
        ip netns exec "$probe" tc class add dev zlprobe0 parent 1: classid 1:20 htb rate 100mbit ceil 100mbit quantum 1514 2>&1 &&
        ip netns exec "$probe" tc filter add dev zlprobe0 parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff flowid 1:20 2>&1) ||
    { ip netns del "$probe"; echo "tc htb/u32 unavailable: $err (kernel modules sch_htb, cls_u32)"; return 1; }
  err=$(ip netns exec "$probe" unshare --uts sh -c 'hostname zlprobe' 2>&1) ||
    { ip netns del "$probe"; echo "unshare --uts failed: $err"; return 1; }
  ip netns del "$probe"
  return 0
}

# The Open MPI daemon of each node is started by cluster_agent.sh; nothing of ours runs in a
# namespace once mpirun is done, so down is: namespaces, bridge, shm dirs, state, watchdog.
do_down() {
  local i
  if [ -f "$STATE/watchdog.pid" ]; then
    local w; w=$(cat "$STATE/watchdog.pid")
    # the watchdog itself ends up here (exec): never signal ourselves
    # (setsid made it a process group of its own: its sleep goes with it)
    if [ -n "$w" ] && [ "$w" != "$$" ] && grep -qs "cluster.sh" "/proc/$w/cmdline"; then kill -- "-$w" 2>/dev/null; fi
  fi
  for i in 0 1 2 3 4 5 6 7; do
    ip netns del "$(ns_of $i)" 2>/dev/null
    ip link del "$(veth_of $i)" 2>/dev/null
    rm -rf "$(shm_of $i)"
  done
  ip link del "$BR" 2>/dev/null
  rm -rf "$STATE"
  return 0
}

start_watchdog() {
  [ "$TTL" = 0 ] && { rm -f "$STATE/watchdog.pid"; return; }
  if [ -f "$STATE/watchdog.pid" ]; then
    local w; w=$(cat "$STATE/watchdog.pid")
    grep -qs "cluster.sh" "/proc/$w/cmdline" && kill -- "-$w" 2>/dev/null
  fi
  # sleep, then become `cluster.sh down` (same pid, so do_down knows not to kill it)
  setsid bash -c "sleep $TTL; exec bash '$ME' down --name $NAME --subnet $SUBNET" </dev/null >/dev/null 2>&1 9>&- &
  echo $! >"$STATE/watchdog.pid"
  echo "$(( $(date +%s) + TTL ))" >"$STATE/expires"
}

# The link of one interface (in namespace $1, or the root namespace when $1 is empty): a token
# bucket at R Mbit/s for the data (tc htb, one class: rate = ceil = R, a bucket of 4 ms at that
# rate, at least 32 KiB, so timer ticks do not cap the rate; the interface's 1000-packet queue),
# and TCP's pure ACKs (IP header of 20 bytes, length < 64, flags = ACK only) in a class of their
# own, unshaped (u32 filter). With one token bucket for everything (tc tbf alone) the ACKs of a
# flow queue behind the other direction's data, and a pair of ranks exchanging both ways (any
# all-reduce between 2 nodes) got 0.54 of 100 Mbit/s; with the ACKs apart, 0.95 (a 16 MiB
# all-reduce between 2 ranks on 2 nodes). A tbf under the htb class measured 0.77: htb over a
# child that holds packets back schedules badly. A real full-duplex link has no shared queue;
# the ACKs' bytes (~2% of the data's) pass unshaped.
shape() {
  local ns=$1 dev=$2 burst=$(( MBIT * 1000000 / 8 / 250 ))
  [ "$burst" -lt 32768 ] && burst=32768
  local run=(); [ -n "$ns" ] && run=(ip netns exec "$ns")
  "${run[@]}" tc qdisc del dev "$dev" root 2>/dev/null || true
  [ "$MBIT" = 0 ] && return 0
  "${run[@]}" tc qdisc add dev "$dev" root handle 1: htb default 20 &&
  "${run[@]}" tc class add dev "$dev" parent 1: classid 1:10 htb rate 10gbit quantum 1514 prio 0 &&
  "${run[@]}" tc class add dev "$dev" parent 1: classid 1:20 htb rate "${MBIT}mbit" ceil "${MBIT}mbit" burst "$burst" \
    quantum 1514 prio 1 &&
  "${run[@]}" tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff \
    match u8 0x05 0x0f at 0 match u16 0x0000 0xffc0 at 2 match u8 0x10 0xff at 33 flowid 1:10
}

do_up() {
  case "$K" in ''|*[!0-9]*) die "up K: K must be a number of nodes, 2 to 8 (got '$K')";; esac
  [ "$K" -ge 2 ] && [ "$K" -le 8 ] || die "up K: K must be 2 to 8 (got $K)"
  case "$MBIT" in ''|*[!0-9]*) die "--link-mbit $MBIT: a whole number of Mbit/s, 0 (unshaped) to 100000";; esac
  [ "$MBIT" -le 100000 ] || die "--link-mbit $MBIT: at most 100000"
  case "$TTL" in ''|*[!0-9]*) die "--ttl $TTL: whole seconds, 0 = no watchdog";; esac
  local why; why=$(can_make) || { echo "cluster.sh: cannot make emulated nodes here: $why" >&2; exit 3; }
  if [ -f "$STATE/nodes" ] && [ "$(wc -l <"$STATE/nodes")" = "$K" ] && [ "$(cat "$STATE/subnet")" = "$SUBNET" ] &&
     ip link show "$BR" >/dev/null 2>&1; then
    local i; for ((i = 0; i < K; i++)); do shape "$(ns_of $i)" eth0 && shape "" "$(veth_of $i)" || { do_down; die "tc failed on node $i"; }; done
    echo "$MBIT" >"$STATE/link_mbit"
    start_watchdog
    echo "cluster $NAME: already up with $K nodes; link now $(rate_text)"
    return 0
  fi
  [ -d "$STATE" ] && do_down
  # the /24 must be free: no route of the host may cover it
  if ip -4 route show to match "$SUBNET.1" | grep -vq '^default'; then
    die "--subnet $SUBNET.0/24 overlaps a network this host already routes (ip route); pick another"
  fi
  trap 'echo "cluster.sh: up failed; removing what was made" >&2; do_down; exit 1' ERR
  set -E
  mkdir -p "$STATE"
  echo "$SUBNET" >"$STATE/subnet"
  ip link add "$BR" type bridge
  ip link set "$BR" up
  ip addr add "$SUBNET.254/24" dev "$BR"
  : >"$STATE/nodes.tmp"
  local i ns
  for ((i = 0; i < K; i++)); do
    ns=$(ns_of $i)
    ip netns add "$ns"
    ip link add "$(veth_of $i)" type veth peer name "$NAME-e$i"
    ip link set "$NAME-e$i" netns "$ns"
    ip -n "$ns" link set "$NAME-e$i" name eth0
    ip -n "$ns" addr add "$(addr_of $i)/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$(veth_of $i)" master "$BR"
    ip link set "$(veth_of $i)" up
    shape "$ns" eth0
    shape "" "$(veth_of $i)"
    mkdir -p "$(shm_of $i)"
    echo "$i $ns $(addr_of $i) $(shm_of $i)" >>"$STATE/nodes.tmp"
  done
  mv "$STATE/nodes.tmp" "$STATE/nodes"
  echo "$MBIT" >"$STATE/link_mbit"
  start_watchdog
  trap - ERR
  set +E
  echo "cluster $NAME: $K nodes up ($(awk '{printf "%s%s=%s", (NR > 1 ? ", " : ""), $2, $3}' "$STATE/nodes")), link $(rate_text)"
}

rate_text() {
  local m; m=$(cat "$STATE/link_mbit" 2>/dev/null || echo 0)
  if [ "$m" = 0 ]; then echo "unshaped (veth, no tc)"; else echo "$m Mbit/s each way (tc htb)"; fi
}

do_status() {
  [ -f "$STATE/nodes" ] || { echo "cluster $NAME: down"; return 1; }
  echo "cluster $NAME: $(wc -l <"$STATE/nodes") nodes, subnet $(cat "$STATE/subnet").0/24, link $(rate_text)"
  local i ns addr shm
  while read -r i ns addr shm; do
    local ok=up; ip netns exec "$ns" ip link show eth0 2>/dev/null | grep -q 'state UP' || ok=DOWN
    echo "  node $i: namespace $ns, address $addr, shared memory $shm, eth0 $ok"
  done <"$STATE/nodes"
  [ -f "$STATE/expires" ] && [ -f "$STATE/watchdog.pid" ] &&
    echo "  watchdog: down in $(( $(cat "$STATE/expires") - $(date +%s) )) s (pid $(cat "$STATE/watchdog.pid"))"
  return 0
}

# up and down of one cluster one at a time (two test runs, a watchdog): wait at most 30 s
if [ "$cmd" = up ] || [ "$cmd" = down ]; then
  if [ "$(id -u)" = 0 ]; then
    mkdir -p /run/zerolab-cluster
    exec 9>"/run/zerolab-cluster/.$NAME.lock"
    flock -w 30 9 || die "$cmd: cluster $NAME is busy (another up/down held its lock for 30 s)"
  fi
fi
case "$cmd" in
  up) do_up;;
  down) [ "$(id -u)" = 0 ] || die "down: not root"; had=0; [ -d "$STATE" ] && had=1; do_down
        # the lock file goes too (an up waiting on it at this instant then holds a lock no one else
        # sees: harmless, the namespaces are made by one up at a time in practice)
        rm -f "/run/zerolab-cluster/.$NAME.lock"
        [ $had = 1 ] && echo "cluster $NAME: down" || echo "cluster $NAME: was not up";;
  status) do_status;;
  check) why=$(can_make) && echo "emulated nodes can be made here" || { echo "$why"; exit 1; };;
  link) [ -f "$STATE/link_mbit" ] || { echo "cluster $NAME is not up" >&2; exit 1; }; cat "$STATE/link_mbit";;
  hosts) [ -f "$STATE/nodes" ] || { echo "cluster $NAME is not up (common/scripts/cluster.sh up K)" >&2; exit 1; }
         awk '{print $3}' "$STATE/nodes";;
  *) echo "usage: cluster.sh up K [--link-mbit R] [--ttl S] | down | status | check  [--name NAME] [--subnet A.B.C]" >&2; exit 2;;
esac
