#!/usr/bin/env bash
# zt-bench offload's step-time section on gpt2-tiny (one step, no I/O section): the JSON has the
# rows without offload and with the optimizer offloaded to the host, the offloaded row's
# parameters are bitwise those of the row without, it holds no optimizer bytes on the device and
# at least the row without offload's on the host, and the NVMe row is reported as not wired.
# Usage: bench_offload_step.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/zt-bench" offload --no-io --model gpt2-tiny --steps 1 --warmup 0 --json "$out/bench.json" \
  > "$out/log" 2>&1 || { cat "$out/log"; echo "FAIL: zt-bench offload exited $?"; exit 1; }
cat "$out/log"
grep -q "bitwise equal to no offload: yes" "$out/log" || { echo "FAIL: no bitwise line"; exit 1; }
python3 - "$out/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert "raw_write_gbps" not in j, "--no-io still ran the I/O section"
step = j["step"]
rows = {r["offload"]: r for r in step["rows"]}
assert sorted(rows) in (["cpu", "none"], ["cpu", "none", "nvme"]), sorted(rows)
none, cpu = rows["none"], rows["cpu"]
for r in step["rows"]:
    assert r["ms"] > 0 and r["optimizer_ms"] > 0 and r["backward_ms"] > 0, r
    assert 0.0 <= r["hidden_share"] <= 1.0, r
assert none["bitwise_equal"] is None and cpu["bitwise_equal"] is True, cpu["bitwise_equal"]
assert none["device_peak_bytes"]["optimizer"] > 0, none["device_peak_bytes"]
assert cpu["device_peak_bytes"]["optimizer"] == 0, cpu["device_peak_bytes"]
assert cpu["host_peak_bytes"]["optimizer"] >= none["device_peak_bytes"]["optimizer"], cpu
assert none["host_peak_bytes"]["total"] == 0, none["host_peak_bytes"]
if "nvme" not in rows:
    assert step["nvme"] == "nvme: not wired into the engine in this build", step["nvme"]
print("step rows", sorted(rows), "cpu: device optimizer bytes 0, host",
      cpu["host_peak_bytes"]["optimizer"], "bitwise equal to no offload")
PY
