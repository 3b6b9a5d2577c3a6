#!/usr/bin/env bash
# cluster_agent.sh HOST COMMAND... — Open MPI's remote agent for emulated nodes (in place of ssh;
# zlrun --nodes passes it as --mca plm_rsh_agent). mpirun calls it with the address of a node of
# `cluster.sh up` and the command that starts its daemon (orted); the agent runs that command in
# the node's network namespace, in a new UTS namespace with the node's own hostname (Open MPI
# tells nodes apart by hostname), and points Open MPI's shared-memory transport at the node's own
# directory (two nodes sharing /dev/shm names would collide). Like ssh, it hands the command to
# a shell. The cluster: $ZL_CLUSTER (default zl), its state in /run/zerolab-cluster/NAME/nodes.
set -u
host=${1:?usage: cluster_agent.sh HOST COMMAND...}; shift
nodes=/run/zerolab-cluster/${ZL_CLUSTER:-zl}/nodes
[ -f "$nodes" ] || { echo "cluster_agent.sh: cluster ${ZL_CLUSTER:-zl} is not up ($nodes missing)" >&2; exit 1; }
read -r _ ns _ shm < <(awk -v h="$host" '$3 == h || $2 == h' "$nodes")
[ -n "${ns:-}" ] || { echo "cluster_agent.sh: $host is not a node of cluster ${ZL_CLUSTER:-zl} ($nodes)" >&2; exit 1; }
export OMPI_MCA_btl_vader_backing_directory=$shm ZL_NODE_NAME=$ns
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1" && shift && exec sh -c "$*"' agent "$ns" "$@"
