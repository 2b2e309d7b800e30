#!/usr/bin/env bash
# zt-bench scale, a tiny sweep (gpt2-tiny, T=32, 3 steps of which 1 untimed; stages 0 and 3 on
# 1 and 2 ranks): the JSON has the 4 points with positive tokens/s; at stage 3 a rank's device
# parameter bytes on 2 ranks are about half of those on 1 (the shard); the engine moves no bytes
# on 1 rank and some on 2; the Markdown table is written, and the PNGs when gnuplot is on PATH.
# Usage: bench_scale.sh BIN_DIR SOURCE_DIR. Skips (77) without mpirun or the corpus.
set -u
bin=$1 src=$2
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
[ -f "$src/data/corpus/train.bin" ] || { echo "skip: no corpus (scripts/fetch_data.sh)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$src"
"$bin/zt-bench" scale --seq-len 32 --steps 3 --warmup 1 --stages 0,3 --ranks 1,2 \
  --out "$out" > "$out/bench.out" 2> "$out/bench.err" ||
  { echo "FAIL: zt-bench scale exited $?:"; sed 's/^/    /' "$out/bench.err"; exit 1; }
sed 's/^/    /' "$out/bench.err"
cat "$out/scale.md"
python3 - "$out/scale.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
points = {(p["stage"], p["ranks"]): p for p in j["points"]}
problems = []
if len(j["points"]) != 4 or set(points) != {(0, 1), (0, 2), (3, 1), (3, 2)}:
    problems.append(f"points are {sorted(points)}, not stages 0,3 x ranks 1,2")
for key, p in points.items():
    if p["status"] != "ok" or not p.get("tokens_per_s", 0) > 0:
        problems.append(f"stage {key[0]}, {key[1]} ranks: {p['status']}, {p.get('note', '')}")
if not problems:
    one, two = (points[3, r]["peak_bytes_max"]["params"] for r in (1, 2))
    print(f"stage 3 device params per rank: {one:.0f} bytes on 1 rank, {two:.0f} on 2 ({two / one:.3f})")
    if not 0.4 < two / one < 0.6:
        problems.append(f"stage 3's params per rank on 2 ranks are {two / one:.3f} of 1 rank's, not about half")
    for key, p in sorted(points.items()):
        total = p["comm_bytes_per_step"]["total"]
        print(f"stage {key[0]}, {key[1]} rank(s): comm {total:.0f} bytes/step, {p['tokens_per_s']:.0f} tok/s")
        if key[1] == 1 and total != 0:
            problems.append(f"stage {key[0]} on 1 rank moved {total} bytes per step")
        if key[1] == 2 and not total > 0:
            problems.append(f"stage {key[0]} on 2 ranks moved no bytes")
for line in problems:
    print("FAIL:", line)
sys.exit(1 if problems else 0)
PY
[ -s "$out/scale.md" ] && grep -q '^| stage | ranks |' "$out/scale.md" || { echo "FAIL: no Markdown table"; exit 1; }
for f in throughput memory; do
  [ -s "$out/$f.gp" ] && [ -s "$out/$f.dat" ] || { echo "FAIL: $f.gp or $f.dat missing"; exit 1; }
  if command -v gnuplot > /dev/null; then
    [ -s "$out/$f.png" ] || { echo "FAIL: gnuplot is on PATH but $f.png was not drawn"; exit 1; }
  fi
done
command -v gnuplot > /dev/null && echo "plots drawn" || echo "gnuplot missing: plots not drawn (as expected)"
echo "zt-bench scale: 4 points, stage 3 sharded, comm bytes right"
