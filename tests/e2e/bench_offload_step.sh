#!/usr/bin/env bash
# zt-bench offload's step-time section on gpt2-tiny (one step, no I/O section): the JSON has the
# rows without offload, with the optimizer offloaded to the host and to NVMe (swap files in a
# scratch directory); the offloaded rows' parameters are bitwise those of the row without; they
# hold no optimizer bytes on the device; the host tier holds at least the row without offload's,
# and with NVMe the swap files hold what the host tier holds with cpu.
# Usage: bench_offload_step.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/zt-bench" offload --no-io --path "$out" --model gpt2-tiny --steps 1 --warmup 0 --json "$out/bench.json" \
  > "$out/log" 2>&1 || { cat "$out/log"; echo "FAIL: zt-bench offload exited $?"; exit 1; }
cat "$out/log"
grep -q "bitwise equal to no offload: yes" "$out/log" || { echo "FAIL: no bitwise line"; exit 1; }
python3 - "$out/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert "raw_write_gbps" not in j, "--no-io still ran the I/O section"
step = j["step"]
rows = {r["offload"]: r for r in step["rows"]}
assert sorted(rows) == ["cpu", "none", "nvme"], sorted(rows)
none, cpu, nvme = rows["none"], rows["cpu"], rows["nvme"]
for r in step["rows"]:
    assert r["ms"] > 0 and r["optimizer_ms"] > 0 and r["backward_ms"] > 0, r
    assert 0.0 <= r["hidden_share"] <= 1.0, r
assert none["bitwise_equal"] is None and cpu["bitwise_equal"] is True, cpu["bitwise_equal"]
assert none["device_peak_bytes"]["optimizer"] > 0, none["device_peak_bytes"]
assert cpu["device_peak_bytes"]["optimizer"] == 0, cpu["device_peak_bytes"]
assert cpu["host_peak_bytes"]["optimizer"] >= none["device_peak_bytes"]["optimizer"], cpu
assert none["host_peak_bytes"]["total"] == 0, none["host_peak_bytes"]
assert nvme["bitwise_equal"] is True, nvme["bitwise_equal"]
assert nvme["device_peak_bytes"]["optimizer"] == 0 and nvme["host_peak_bytes"]["optimizer"] == 0, nvme
assert nvme["nvme_bytes"] == cpu["host_peak_bytes"]["optimizer"], (nvme["nvme_bytes"], cpu)
print("step rows", sorted(rows), "cpu: device optimizer bytes 0, host",
      cpu["host_peak_bytes"]["optimizer"], "; nvme: in swap files", nvme["nvme_bytes"],
      "; both bitwise equal to no offload")
PY
