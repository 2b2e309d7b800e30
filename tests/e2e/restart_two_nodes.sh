#!/usr/bin/env bash
# zt-run --max-restarts 2 --hostfile on two simulated nodes (lib/netns_nodes.bash): 4 ranks of
# gpt2-tiny (seq_len 32, micro-batch 8, global batch 32) at ZeRO stage 2, a checkpoint every 5
# steps, zt.comm_timeout_s 20. At step 12 the link to the second node goes down. Then:
#   - zt-run says once "restart 1/2 after mpirun lost its daemon on node <second> ...: from step
#     10 on host <first> (2 ranks, gradient_accumulation_steps 2)", relaunches there alone, and the
#     job finishes (exit 0);
#   - metrics.jsonl holds that restart's row (from_step 10, the first host, world_size 2,
#     gradient_accumulation_steps 2);
#   - the losses of steps 11-20 equal, as text, those of a run resumed by hand from the step-10
#     checkpoint on 2 ranks with gradient_accumulation_steps 2.
# Usage: restart_two_nodes.sh BIN_DIR SOURCE_DIR. Skips (77) as two_nodes.sh does.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
export OMP_NUM_THREADS=1

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

cd "$src"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
job=(--config configs/gpt2-tiny.json --set zt.seq_len=32 --set zt.steps=20 --set zt.eval_every=0
     --set scheduler.params.total_num_steps=20 --set zero_optimization.stage=2
     --set 'zt.checkpoint={"every_n_steps": 5}' --set zt.comm_timeout_s=20)
losses_after() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' -v s="$2" '$2 > s'; }
quote() { printf '%q ' "$@"; }
out=$tmp/job
"$tmp/node" zt-node-a "$ns_a" "exec $(quote "$bin/zt-run" --max-restarts 2 -np 4 --cpu \
  --hostfile "$tmp/hosts" -- "$bin/zt-train" "${job[@]}" --set zt.output_dir="$out")" \
  > "$tmp/stdout" 2> "$tmp/stderr" &
launcher=$!
for _ in $(seq 1 1200); do
  rows=$(grep -c '"loss"' "$out/metrics.jsonl" 2> /dev/null || true)
  [ "${rows:-0}" -ge 12 ] && break
  kill -0 "$launcher" 2> /dev/null || break
  sleep 0.1
done
[ "${rows:-0}" -ge 12 ] || { echo "FAIL: the job did not reach step 12:"; tail -5 "$tmp/stderr"; exit 1; }
ip -n "$ns_b" link set "$veth_b" down || { echo "FAIL: cannot take $veth_b down"; exit 1; }
t0=$(date +%s.%N)
echo "after step $rows: link down ($veth_b in $ns_b)"
timeout 600 tail --pid="$launcher" -f /dev/null
wait "$launcher"
rc=$?
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "exit $rc, $took s after the link went down; zt-run's lines:"
grep '^zt-run: ' "$tmp/stderr" | sed 's/^/    /'
restart=$(grep '"event":"restart"' "$out/metrics.jsonl")
echo "    metrics.jsonl: $restart"

[ "$rc" -eq 0 ] || { fail "exit $rc (want 0 after the restart)"; grep -v '^\s*$' "$tmp/stderr" | tail -30 | sed 's/^/    /'; }
[ "$(grep -c '^zt-run: restart ' "$tmp/stderr")" -eq 1 ] || fail "not one restart line"
grep -Eq "^zt-run: restart 1/2 after mpirun lost its daemon on node ${host_b//./\\.} \(exit [0-9]+\): from step 10 on host ${host_a//./\\.} \(2 ranks, gradient_accumulation_steps 2\)$" "$tmp/stderr" ||
  fail "no restart line naming the lost host, step 10, the first host, 2 ranks and accumulation 2"
grep -q "^zt-run: mpirun -np 2 --hostfile $out/restart1.hosts .*--resume --set train_batch_size=32 --set train_micro_batch_size_per_gpu=8 --set gradient_accumulation_steps=2$" "$tmp/stderr" ||
  fail "the relaunch is not 2 ranks on the remaining host, resumed, with accumulation 2"
[ "$(grep -c '"event":"restart"' "$out/metrics.jsonl")" -eq 1 ] || fail "not one restart row in metrics.jsonl"
grep -q "\"from_step\":10,\"hosts\":\[\"$host_a\"\],\"world_size\":2,\"gradient_accumulation_steps\":2}" <<< "$restart" ||
  fail "the restart row does not say step 10, the first host, 2 ranks, accumulation 2"

# The same checkpoint resumed by hand on 2 ranks (one machine) with twice the accumulation.
"$bin/zt-run" -np 2 --cpu -- "$bin/zt-train" "${job[@]}" --set gradient_accumulation_steps=2 \
  --set zt.output_dir="$tmp/by_hand" --resume "$out/checkpoints/step10" \
  > "$tmp/by_hand.out" 2> "$tmp/by_hand.err" || { fail "the run resumed by hand:"; tail -5 "$tmp/by_hand.err"; }
auto=$(losses_after "$out/metrics.jsonl" 10) by_hand=$(losses_after "$tmp/by_hand/metrics.jsonl" 10)
if [ -n "$auto" ] && [ "$auto" = "$by_hand" ] && [ "$(wc -l <<< "$auto")" -eq 10 ]; then
  echo "ok: steps 11-20 after the restart equal the run resumed by hand: $(tail -1 <<< "$auto")"
else
  fail "steps 11-20 differ from the run resumed by hand:"; diff <(echo "$by_hand") <(echo "$auto") | head -12
fi
[ "$failed" -eq 0 ] && echo "ok: lost the second node at step 12, restarted from step 10 on the first alone and finished"
exit "$failed"
