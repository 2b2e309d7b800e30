#!/usr/bin/env bash
# zt-bench train on gpt2-tiny, fp32 and the two mixed rows, 3 steps with --profile: the JSON has
# one row each; the model-state bytes (parameters, gradients, optimizer) are the same in every
# row, the mixed rows' parameters half of fp32's and their workspace a few MiB; the first losses
# agree; each row's paired ratio is the median and quartiles of its step over the fp32 row's of
# the same round, recomputed here from step_ms; the memory planner's activation peak is the
# tracker's; the profile's entries add up to within 10% of the mean step; every 16-bit product
# is on its fastest measured GEMM path.
# Usage: bench_train.sh BIN_DIR SOURCE_DIR
set -u
bin=$1
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/zt-bench" train --model gpt2-tiny --precision fp32,bf16,fp16 --steps 3 --warmup 1 \
  --profile --json "$out/bench.json" > "$out/log" 2>&1 ||
  { cat "$out/log"; echo "FAIL: zt-bench train exited $?"; exit 1; }
cat "$out/log"
grep -q "step over the fp32 row's step of the same round" "$out/log" ||
  { echo "FAIL: no paired-ratio line"; exit 1; }
python3 - "$out/bench.json" <<'PY'
import json, math, sys
j = json.load(open(sys.argv[1]))
rows = {r["precision"]: r for r in j["rows"]}
assert [r["precision"] for r in j["rows"]] == ["fp32", "bf16", "fp16"], list(rows)
assert j["startup_peak_gflops"] > 0, j["startup_peak_gflops"]
fp32 = rows["fp32"]
def state(r):
    p = r["peak_bytes"]
    return p["params"] + p["grads"] + p["optimizer"]
for name, r in rows.items():
    assert len(r["step_ms"]) == 3 and min(r["step_ms"]) > 0, (name, r["step_ms"])
    assert len(r["losses"]) == 4 and all(math.isfinite(x) for x in r["losses"]), (name, r["losses"])
    assert r["peak_gflops"] > 0 and r["fraction_of_peak"] > 0, (name, r["peak_gflops"])
    assert state(r) == state(fp32), (name, state(r), state(fp32))
    # The memory planner's replay of the same step counts the tracker's activation peak.
    assert r["planned_activation_bytes"] == r["peak_bytes"]["activations"], (
        name, r["planned_activation_bytes"], r["peak_bytes"]["activations"])
    assert abs(r["losses"][0] - fp32["losses"][0]) <= 0.01 * fp32["losses"][0], (name, r["losses"])
    ratios = sorted(a / b for a, b in zip(r["step_ms"], fp32["step_ms"]))
    q = lambda f: ratios[int(f * (len(ratios) - 1) + 0.5)]
    got = r["paired_ratio_to_first_row"]
    for key, f in (("median", 0.5), ("q1", 0.25), ("q3", 0.75)):
        assert abs(got[key] - q(f)) <= 1e-9 * q(f), (name, key, got, ratios)
    prof = r["profile"]
    share = prof["sum_ms_per_step"] / prof["mean_step_ms"]
    assert 0.9 <= share <= 1.001, (name, "profile rows add up to", share, "of the step")
for name in ("bf16", "fp16"):
    p = rows[name]["peak_bytes"]
    assert 2 * p["params"] == fp32["peak_bytes"]["params"], (name, p["params"])
    assert 0 < p["workspace"] <= 16 << 20, (name, p["workspace"])
assert rows["fp32"]["paired_ratio_to_first_row"] == {"median": 1.0, "q1": 1.0, "q3": 1.0}
# The 16-bit rows' GEMM paths: every product kind of both dtypes, each on its fastest measured
# candidate, beside an sgemm rate; the table's text names the same paths.
paths = j["gemm_paths"]
assert {(e["key"].split()[0], e["key"].split()[-1]) for e in paths} == {
    (p, d) for p in ("fwd", "dinp", "dw") for d in ("bf16/bf16", "fp16/fp16")}, paths
for e in paths:
    assert e["gflops"][e["path"]] == max(e["gflops"].values()), e
    assert "native" not in e["gflops"] or e["key"].endswith("bf16/bf16"), e
    assert e["sgemm_gflops"] > 0, e
    assert f'{e["key"]}={e["path"]}' in j["gemm_paths_table"].split(";"), e
print("rows fp32, bf16, fp16: model-state bytes", state(fp32), "in each; mixed workspace",
      rows["bf16"]["peak_bytes"]["workspace"], "bytes; paired ratios",
      {n: round(rows[n]["paired_ratio_to_first_row"]["median"], 3) for n in ("bf16", "fp16")})
PY
