#!/usr/bin/env bash
# Two nodes, simulated on this machine: two network namespaces joined by a veth pair are the two
# hosts of a hostfile (by their addresses); mpirun runs in the first, and Open MPI's remote-launch
# agent (plm_rsh_agent) enters the second namespace with `ip netns exec` where it would ssh.
# Between the namespaces only TCP exists (each has its own loopback and the veth end); within one,
# Open MPI's shared-memory transport. Four ranks of zt-train are started by `zt-run --hostfile`:
#   - Open MPI places ranks 0,1 in the first namespace and 2,3 in the second (each rank's
#     namespace and OMPI_COMM_WORLD_LOCAL_RANK/LOCAL_SIZE read from /proc), and ZeroTrain's
#     process group agrees: rank 0's start-up line lists ranks 0 and 1 as this machine's, and
#     zt-train --dry-run plans "4 ranks on 2 nodes" (world / ranks on rank 0's machine);
#   - stages 0-3 on two nodes save the same bits as 4 ranks on one node (gpt2-tiny, 3 steps);
#   - zt-bench scale --hostfile on two nodes (stages 0 and 3, 4 ranks) reports the bytes that
#     crossed between them per step (internode_bytes_per_step > 0) for every point.
# Usage: two_nodes.sh BIN_DIR SOURCE_DIR. Skips (77), naming why, without root, without `ip`, or
# where a network namespace or a veth pair cannot be created; also without mpirun or the corpus.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1

tmp=$(mktemp -d)
chmod 755 "$tmp"
cleanup() {
  for pid in $(pgrep -f "zt.output_dir=$tmp/" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null; done
  netns_nodes_cleanup
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib/netns_nodes.bash"

cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
job=(--config configs/gpt2-tiny.json --set zt.seq_len=32 --set zt.steps=3 --set zt.eval_every=0
     --set scheduler.params.total_num_steps=3)
quote() { printf '%q ' "$@"; }
# The job, started on the first host (mpirun there: its ranks are local, the second host's go
# through the agent).
two_nodes() {
  "$tmp/node" zt-node-a "$ns_a" \
    "exec $(quote "$bin/zt-run" -np 4 --cpu --hostfile "$tmp/hosts" -- "$bin/zt-train" "$@")"
}

# ---- placement -----------------------------------------------------------------------------
two_nodes "${job[@]}" --dry-run > "$tmp/plan.out" 2> "$tmp/plan.err" ||
  { fail "zt-train --dry-run on two nodes:"; sed 's/^/    /' "$tmp/plan.err"; exit 1; }
grep -q '| 4 ranks on 2 nodes |' "$tmp/plan.out" && echo "zt-train --dry-run: $(head -1 "$tmp/plan.out")" ||
  fail "the plan does not say 4 ranks on 2 nodes: $(head -3 "$tmp/plan.out")"
grep -m1 '^zt-run: ' "$tmp/plan.err"

# A longer job, to look at its processes while it trains.
# (Started without the shell function so that $! is the job: the node script, ip, unshare and
# the shells exec one another, then zt-run, which execs mpirun.)
"$tmp/node" zt-node-a "$ns_a" "exec $(quote "$bin/zt-run" -np 4 --cpu --hostfile "$tmp/hosts" -- \
  "$bin/zt-train" "${job[@]}" --set zt.steps=400 --set scheduler.params.total_num_steps=400 \
  --set zt.output_dir="$tmp/placement")" > "$tmp/placement.out" 2> "$tmp/placement.err" &
launcher=$!
for _ in $(seq 1 600); do
  rows=$(grep -c '"loss"' "$tmp/placement/metrics.jsonl" 2> /dev/null || true)
  [ "${rows:-0}" -ge 2 ] && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.2
done
placement=""
for pid in $(pgrep -f "zt.output_dir=$tmp/placement"); do
  env_of() { tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | sed -n "s/^$1=//p"; }
  rank=$(env_of OMPI_COMM_WORLD_RANK)
  [ -n "$rank" ] || continue
  placement+="rank $rank: $(nsenter -t "$pid" -u hostname) in $(ip netns identify "$pid") local $(env_of OMPI_COMM_WORLD_LOCAL_RANK)/$(env_of OMPI_COMM_WORLD_LOCAL_SIZE)"$'\n'
done
placement=$(sort <<< "$placement" | sed '/^$/d')
kill -TERM "$launcher" 2> /dev/null
wait "$launcher" 2> /dev/null
echo "placement while training:"; sed 's/^/    /' <<< "$placement"
want="rank 0: zt-node-a in $ns_a local 0/2
rank 1: zt-node-a in $ns_a local 1/2
rank 2: zt-node-b in $ns_b local 0/2
rank 3: zt-node-b in $ns_b local 1/2"
[ "$placement" = "$want" ] || fail "ranks are not two per namespace in order"
line=$(grep -m1 'ranks on this machine' "$tmp/placement.out")
echo "rank 0's start-up line: $line"
grep -Eq 'ranks on this machine: 2 .*rank 0: .*, rank 1: [^,]*$' <<< "$line" ||
  fail "rank 0's machine does not hold exactly ranks 0 and 1"
# No rank used shared memory across the namespaces: vader (shared memory) only within one;
# TCP between them is the only path (the namespaces share no interface).
[ "$failed" -eq 0 ] || exit 1

# ---- bits: stages 0-3 on two nodes against 4 ranks on one ------------------------------------
one_node() { "$bin/zt-run" -np 4 --cpu -- "$bin/zt-train" "$@"; }
run() {  # where name stage: trains; $tmp/name.loss holds its last step's loss
  local where=$1 name=$2 stage=$3
  "$where" "${job[@]}" --set zero_optimization.stage="$stage" --set zt.output_dir="$tmp/$name" \
    --set zt.save_weights="$tmp/$name.safetensors" > "$tmp/$name.out" 2> "$tmp/$name.err" ||
    { fail "$name did not train:"; sed 's/^/    /' "$tmp/$name.err" | tail -5; return 1; }
  grep -o '"step":3,"loss":[^,]*' "$tmp/$name/metrics.jsonl" > "$tmp/$name.loss"
}
run one_node one_s0 0 || exit 1
echo "one node, 4 ranks, stage 0: $(cat "$tmp/one_s0.loss")"
for stage in 0 1 2 3; do
  run two_nodes "two_s$stage" "$stage" || continue
  if cmp -s "$tmp/one_s0.safetensors" "$tmp/two_s$stage.safetensors"; then
    echo "two nodes, stage $stage: $(cat "$tmp/two_s$stage.loss"); weights bitwise those of one node"
  else
    fail "two nodes, stage $stage: weights differ from one node's stage 0 ($(cat "$tmp/two_s$stage.loss"))"
  fi
done

# ---- zt-bench scale on two nodes: the bytes that cross between them -------------------------
# zt-bench runs in the first host like mpirun above; its zt-run inherits the agent and the
# interface settings from this environment. Every point must report inter-node traffic (each
# node's interface tx counters, read by its first local rank) next to the engine's bytes.
"$tmp/node" zt-node-a "$ns_a" "exec $(quote "$bin/zt-bench" scale --hostfile "$tmp/hosts" --ranks 4 \
  --stages 0,3 --steps 3 --warmup 1 --seq-len 32 --out "$tmp/scale")" > "$tmp/scale.out" 2> "$tmp/scale.err" ||
  { fail "zt-bench scale on two nodes:"; sed 's/^/    /' "$tmp/scale.err" | tail -5; }
if [ -f "$tmp/scale/scale.json" ]; then
  python3 - "$tmp/scale/scale.json" <<'PY' || fail "zt-bench scale: a point without inter-node bytes"
import json, sys
ok = True
for p in json.load(open(sys.argv[1]))["points"]:
    inter, comm = p.get("internode_bytes_per_step"), p.get("comm_bytes_per_step", {}).get("total")
    print(f"zt-bench scale, two nodes, stage {p['stage']}, {p['ranks']} ranks: {p['status']}; "
          f"comm {comm} bytes/step (engine, rank 0), inter-node {inter} bytes/step (interfaces' tx)")
    ok = ok and p["status"] == "ok" and inter is not None and inter > 0
sys.exit(0 if ok else 1)
PY
fi
[ "$failed" -eq 0 ] && echo "two nodes: placement right; stages 0-3 bitwise one node's; zt-bench scale sees inter-node bytes"
exit "$failed"
