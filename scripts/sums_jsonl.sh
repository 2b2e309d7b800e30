#!/usr/bin/env bash
# sums_jsonl.sh N SEED: N synthetic instruction examples on standard output, one JSON object a
# line, for fine-tuning with a masked loss: the prompt names two numbers below 100 in digits,
# the completion is their sum in English words.
#   {"prompt": "Add 23 and 45.\nAnswer:", "completion": " sixty-eight"}
# The numbers come from MINSTD seeded with SEED (not awk's rand), so the same N and SEED give the
# same file with any awk.
set -euo pipefail
[ $# -eq 2 ] && [[ $1 =~ ^[0-9]+$ ]] && [[ $2 =~ ^[0-9]+$ ]] ||
  { echo "usage: sums_jsonl.sh N SEED" >&2; exit 2; }
awk -v n="$1" -v seed="$2" '
function next_below(k) {  # MINSTD: x <- 48271 x mod (2^31 - 1); every product exact in a double
  state = (48271 * state) % 2147483647
  return int(state / 2147483647 * k)
}
function words(x,   t, u) {
  if (x >= 100) return "one hundred" (x > 100 ? " and " words(x - 100) : "")
  if (x < 20) return small[x]
  t = int(x / 10); u = x % 10
  return tens[t] (u ? "-" small[u] : "")
}
BEGIN {
  split("one two three four five six seven eight nine ten eleven twelve thirteen fourteen " \
        "fifteen sixteen seventeen eighteen nineteen", s, " ")
  small[0] = "zero"
  for (i = 1; i <= 19; i++) small[i] = s[i]
  split("x twenty thirty forty fifty sixty seventy eighty ninety", tt, " ")
  for (i = 2; i <= 9; i++) tens[i] = tt[i]
  state = seed % 2147483646 + 1
  for (e = 0; e < n; e++) {
    a = next_below(100); b = next_below(100)
    printf "{\"prompt\": \"Add %d and %d.\\nAnswer:\", \"completion\": \" %s\"}\n", a, b, words(a + b)
  }
}'
