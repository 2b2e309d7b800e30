# Helpers of tests/gpu/device_check.sh, which sources this file (so do not run it): the
# self-contained ones, each working only on its arguments, its input and the files it is given.
#   json_str, why, what_failed, version_ge   JSON strings, exit codes, failure lines, versions
#   bench_field, bench_losses, metrics_losses, falling, max_rel_diff, gtest_counts,
#   attention_path                           our JSON and logs (python through device_check.sh's
#                                            py, without the bundle's libraries)
# shellcheck shell=bash

# json_str S: S as a JSON string (tabs and newlines as spaces, other control characters dropped)
json_str() {
  local s
  s=$(printf '%s' "$1" | tr '\t\n\r' '   ' | tr -d '\000-\037')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# why CODE: an exit code in words
why() {
  case $1 in
    0) echo "exit 0" ;;
    124 | 137) echo "timed out (the check's limit, min(own, budget left))" ;;
    *) echo "exit $1" ;;
  esac
}

# what_failed LOG...: each log's first line from one of our tools ("zt-train: rank 0: ..."), else
# its last line that is not mpirun's rule
what_failed() {
  local f line
  for f in "$@"; do
    line=$(grep -m 1 '^zt-[a-z]*: ' "$f" 2> /dev/null)
    [ -n "$line" ] || line=$(grep -v '^ *$\|^-----' "$f" 2> /dev/null | tail -n 1)
    printf '%s: %s; ' "$(basename "$f")" "$line"
  done
}

# version_ge A B: A >= B, as major.minor
version_ge() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, "."); split(b, y, ".");
    exit !((x[1] + 0 > y[1] + 0) || (x[1] + 0 == y[1] + 0 && x[2] + 0 >= y[2] + 0)) }'
}

# ---- over our JSON and logs (python without the bundle) ------------------------------------------
# bench_field FILE KEY: rows[0][KEY] of a zt-bench train --json file; peak_activation_bytes
# falls back to the CPU layout's peak_bytes.activations.
bench_field() {
  py - "$1" "$2" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
k = sys.argv[2]
if k == "peak_activation_bytes" and k not in r:
    print(r["peak_bytes"]["activations"])
elif k == "mfu" and k not in r:
    print(r["fraction_of_peak"])   # CPU: the measured fp32 FMA peak stands in for the GPU's
else:
    print(r[k])
PY
}
# bench_losses FILE: the losses, one a line
bench_losses() { py -c 'import json,sys; [print(repr(x)) for x in json.load(open(sys.argv[1]))["rows"][0]["losses"]]' "$1"; }
# metrics_losses DIR: the training losses of a zt-train run, one a line
metrics_losses() { grep -o '"loss":[-0-9.eE+naif]*' "$1/metrics.jsonl" 2> /dev/null | cut -d: -f2; }
# falling: stdin's numbers are all finite and the last is below the first -> "ok", else a reason
falling() {
  py -c '
import math, sys
v = [float(x) for x in sys.stdin.read().split()]
if len(v) < 2: print("fewer than 2 losses")
elif not all(math.isfinite(x) for x in v): print("a loss is not finite")
elif not v[-1] < v[0]: print("loss did not fall: %.4f -> %.4f" % (v[0], v[-1]))
else: print("ok")'
}
# max_rel_diff FILE_A FILE_B [N]: the largest |a - b| / |b| over the first N lines (all when N is
# absent); "nan" when the files differ in length or are empty
max_rel_diff() {
  paste <(head -n "${3:-1000000}" "$1") <(head -n "${3:-1000000}" "$2") |
    awk 'NF != 2 {bad = 1} {d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d}
         END {if (bad || NR == 0) print "nan"; else printf "%.2e", m}'
}
# gtest_counts LOG: "passed failed skipped" from GoogleTest's closing summary
gtest_counts() {
  local p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$1" | tail -n 1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -n 1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$1" | tail -n 1)
  echo "${p:-0} ${f:-0} ${s:-0}"
}

# attention_path LOG NONE: the path a run's attention took, from the line CudnnAttention prints
# once per shape ("zt: attention B=.. hd=.. bf16: cuDNN 91400 fused SDPA", or "...: reference
# path (why)"): the text after the shape; NONE when the log has no such line
attention_path() {
  local line
  line=$(grep -m 1 '^zt: attention ' "$1" 2> /dev/null)
  if [ -z "$line" ]; then echo "$2"; else echo "${line#zt: attention *: }"; fi
}
