# Two simulated nodes for the e2e scripts (two_nodes.sh, partition.sh, restart_two_nodes.sh): two
# namespaces joined by a veth pair are the two hosts of a hostfile (by their addresses); mpirun
# runs in the first, and Open MPI's remote-launch agent (plm_rsh_agent) enters the second
# namespace with `ip netns exec` where it would ssh. Between the namespaces only TCP exists (each
# has its own loopback and the veth end); within one, Open MPI's shared-memory transport. Each
# namespace also gets its own host name and /dev/shm (UTS and mount namespaces), as a second
# machine would.
# Source it after setting `tmp` (an empty directory, mode 755); it exits 77 naming why without
# root, `ip`, namespaces or a veth pair, and sets:
#   ns_a ns_b veth_a veth_b net host_a host_b  the namespaces, interfaces, subnet and addresses
#   $tmp/node NAME NAMESPACE COMMAND-LINE       runs a shell command line on a node
#   $tmp/hosts                                  "host_a slots=2" and "host_b slots=2"
#   OMPI_MCA_plm_rsh_agent, OMPI_MCA_oob_tcp_if_include, OMPI_MCA_btl_tcp_if_include (exported)
# and netns_nodes_cleanup, which deletes both namespaces (call it from the script's EXIT trap).
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe

tag=$$
ns_a="zt2n${tag}a" ns_b="zt2n${tag}b"
veth_a="ztv${tag}a" veth_b="ztv${tag}b"
net="10.213.$((tag % 250)).0"
prefix=${net%.0}
host_a="$prefix.1" host_b="$prefix.2"

netns_nodes_cleanup() {
  ip netns del "$ns_a" 2> /dev/null
  ip netns del "$ns_b" 2> /dev/null
}
[ "$(id -u)" -eq 0 ] || { echo "skip: network namespaces need root (this runs as uid $(id -u))"; exit 77; }
command -v ip > /dev/null || { echo "skip: no ip command (iproute2)"; exit 77; }

why=$(ip netns add "$ns_a" 2>&1) || { echo "skip: cannot create a network namespace: $why"; exit 77; }
why=$(ip netns add "$ns_b" 2>&1) || { echo "skip: cannot create a second network namespace: $why"; exit 77; }
why=$( { ip link add "$veth_a" type veth peer name "$veth_b" &&
         ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b"; } 2>&1) ||
  { echo "skip: cannot join the namespaces with a veth pair: $why"; exit 77; }
ip -n "$ns_a" addr add "$host_a/24" dev "$veth_a" && ip -n "$ns_b" addr add "$host_b/24" dev "$veth_b" &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
  ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up ||
  { echo "FAIL: cannot configure the veth pair"; exit 1; }
echo "hosts: $host_a (namespace $ns_a) and $host_b (namespace $ns_b), joined by $veth_a-$veth_b"

# A host: a namespace with its own host name and its own /dev/shm (Open MPI names its
# shared-memory files by host name).   node HOSTNAME NAMESPACE COMMAND-LINE
cat > "$tmp/node" <<'NODE'
#!/bin/sh
name=$1 ns=$2; shift 2
exec ip netns exec "$ns" unshare --uts --mount --propagation private /bin/sh -c \
  'hostname "$1" && mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm && shift && exec /bin/sh -c "$*"' \
  node "$name" "$@"
NODE
# Open MPI's remote-launch agent: called as "AGENT [OPTIONS] HOST COMMAND..." where it would
# call ssh; runs COMMAND (a shell command line) on HOST.
cat > "$tmp/netns_agent" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
  $host_a) exec "$tmp/node" zt-node-a "$ns_a" "\$@" ;;
  $host_b) exec "$tmp/node" zt-node-b "$ns_b" "\$@" ;;
  *) echo "netns_agent: unknown host \$host" >&2; exit 1 ;;
esac
AGENT
chmod +x "$tmp/node" "$tmp/netns_agent"
why=$("$tmp/node" zt-node-a "$ns_a" true 2>&1) ||
  { echo "skip: cannot give a namespace its own host name and /dev/shm: $why"; exit 77; }
printf '%s slots=2\n%s slots=2\n' "$host_a" "$host_b" > "$tmp/hosts"
export OMPI_MCA_plm_rsh_agent="$tmp/netns_agent"
# Open MPI's daemons and the TCP transport use the veth addresses (not each namespace's lo).
export OMPI_MCA_oob_tcp_if_include="$net/24" OMPI_MCA_btl_tcp_if_include="$net/24"
