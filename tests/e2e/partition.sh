#!/usr/bin/env bash
# A network partition ends the job, on both machines, within a bound. Two simulated nodes
# (lib/netns_nodes.bash), 4 ranks of gpt2-tiny at ZeRO stage 3 launched by zt-run --hostfile,
# zt.comm_timeout_s 20; once the job trains, the link between the machines breaks:
#   down   (default) the second node's end of the veth pair goes down;
#   netem  every packet is dropped both ways while the link stays up (partition_netem.sh): by
#          tc netem's 100% loss where the kernel has sch_netem, else by nftables rules that
#          drop every packet in and out of both veth ends (the same silence: nothing reaches the
#          other side, nothing says the link is gone).
# Then mpirun and every rank on both machines must be gone within comm_timeout_s + 30 s, the
# exit non-zero, stderr with one line naming the collective that timed out and one naming the
# lost host, and no process left in either namespace (Open MPI's daemon included).
# Usage: partition.sh BIN_DIR SOURCE_DIR [down|netem]. Skips (77) as two_nodes.sh does, and for
# netem with neither tc's sch_netem nor nftables (nft) in a network namespace.
set -u
bin=$1 src=$2 mode=${3:-down}
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1
timeout_s=20 bound_s=50

tmp=$(mktemp -d)
chmod 755 "$tmp"
cleanup() {
  for pid in $(pgrep -f "zt.output_dir=$tmp/" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
  for ns in "${ns_a:-}" "${ns_b:-}"; do
    [ -n "$ns" ] && for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
  done
  netns_nodes_cleanup
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib/netns_nodes.bash"
# The packet-loss tool: tc netem, else nftables (a table per namespace whose input and output
# chains accept now and drop the veth end's packets from the partition on).
loss=""
if [ "$mode" = netem ]; then
  if command -v tc > /dev/null && netem_why=$(tc -n "$ns_a" qdisc add dev "$veth_a" root netem loss 0% 2>&1); then
    tc -n "$ns_b" qdisc add dev "$veth_b" root netem loss 0% || { echo "FAIL: netem on $veth_b"; exit 1; }
    loss=netem
  elif command -v nft > /dev/null && nft_why=$(ip netns exec "$ns_a" nft add table inet zt_loss 2>&1); then
    for ns in "$ns_a" "$ns_b"; do
      ip netns exec "$ns" nft add table inet zt_loss &&
        for hook in input output; do
          ip netns exec "$ns" nft add chain inet zt_loss "$hook" "{ type filter hook $hook priority 0; policy accept; }"
        done || { echo "FAIL: nftables in $ns"; exit 1; }
    done
    loss=nftables
  else
    echo "skip: no way to drop packets here: tc netem (${netem_why:-no tc command}), nftables (${nft_why:-no nft command})"
    exit 77
  fi
fi

cd "$src"
quote() { printf '%q ' "$@"; }
out=$tmp/run
"$tmp/node" zt-node-a "$ns_a" "exec $(quote "$bin/zt-run" -np 4 --cpu --hostfile "$tmp/hosts" -- \
  "$bin/zt-train" --config configs/gpt2-tiny.json --set zt.seq_len=32 --set zt.steps=2000 \
  --set zt.eval_every=0 --set scheduler.params.total_num_steps=2000 \
  --set zero_optimization.stage=3 --set zt.comm_timeout_s=$timeout_s --set zt.output_dir="$out")" \
  > "$tmp/stdout" 2> "$tmp/stderr" &
launcher=$!
for _ in $(seq 1 600); do
  rows=$(grep -c '"loss"' "$out/metrics.jsonl" 2> /dev/null || true)
  [ "${rows:-0}" -ge 3 ] && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.2
done
[ "${rows:-0}" -ge 3 ] || { echo "FAIL: the job did not train:"; tail -5 "$tmp/stderr"; exit 1; }
echo "training on two nodes: $(ip netns pids "$ns_a" | wc -l) processes in $ns_a, $(ip netns pids "$ns_b" | wc -l) in $ns_b"

t0=$(date +%s.%N)
if [ "$loss" = netem ]; then
  tc -n "$ns_a" qdisc change dev "$veth_a" root netem loss 100% &&
    tc -n "$ns_b" qdisc change dev "$veth_b" root netem loss 100% || { echo "FAIL: netem loss 100%"; exit 1; }
  echo "after step $rows: 100% packet loss both ways (tc netem)"
elif [ "$loss" = nftables ]; then
  # Only the veth end, as netem's qdisc: each node's own loopback traffic flows on.
  for pair in "$ns_a $veth_a" "$ns_b $veth_b"; do
    set -- $pair
    ip netns exec "$1" nft add rule inet zt_loss input iifname "$2" drop &&
      ip netns exec "$1" nft add rule inet zt_loss output oifname "$2" drop ||
      { echo "FAIL: nftables drop on $2 in $1"; exit 1; }
  done
  echo "after step $rows: 100% packet loss both ways (nftables drop on both nodes, the link up)"
else
  ip -n "$ns_b" link set "$veth_b" down || { echo "FAIL: cannot take $veth_b down"; exit 1; }
  echo "after step $rows: link down ($veth_b in $ns_b)"
fi
# Every process of both machines must end: mpirun, zt-train and Open MPI's daemon (orted).
end=""
for _ in $(seq 1 $((bound_s * 5 + 50))); do
  left=$(cat <(ip netns pids "$ns_a") <(ip netns pids "$ns_b") | wc -l)
  if [ "$left" -eq 0 ] && [ -z "$end" ]; then end=$(date +%s.%N); break; fi
  sleep 0.2
done
[ -n "$end" ] || end=$(date +%s.%N)
leftovers=""
for ns in "$ns_a" "$ns_b"; do
  for p in $(ip netns pids "$ns"); do
    leftovers+="    $ns: $(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | cut -c1-100)"$'\n'
    kill -KILL "$p" 2> /dev/null
  done
done
wait "$launcher"
rc=$?
took=$(awk -v a="$t0" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "exit $rc, every process of both nodes gone $took s after the partition; stderr:"
grep -v '^\s*$' "$tmp/stderr" | sed 's/^/    /' | head -40

failed=0
fail() { echo "FAIL: $*"; failed=1; }
[ "$rc" -ne 0 ] || fail "exit code 0"
awk -v t="$took" -v b=$((timeout_s + 30)) 'BEGIN { exit !(t <= b) }' || fail "took $took s, more than zt.comm_timeout_s + 30 = $((timeout_s + 30)) s"
[ -z "$leftovers" ] || { fail "left running $took s after the partition (now killed):"; printf '%s' "$leftovers"; }
# The collective: the watchdog's line (past zt.comm_timeout_s), or the line of a rank that was
# waiting in it when mpirun's SIGTERM came (mpirun lost the node first: docs/failure.md).
grep -Eq '^zt-train: rank [0-9]+: .* (did not complete within zt.comm_timeout_s = 20 s|was waiting when SIGTERM came and has not completed)' "$tmp/stderr" ||
  fail "no line naming the collective that timed out"
grep -Eq "Remote daemon: .* on node ${host_b//./\\.}\$" "$tmp/stderr" ||
  fail "no line naming the lost host $host_b"
[ "$failed" -eq 0 ] && echo "ok: partition ($mode) ended the job on both nodes in $took s, exit $rc"
exit "$failed"
