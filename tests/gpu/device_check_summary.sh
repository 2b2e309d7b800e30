# The results of tests/gpu/device_check.sh, which sources this file (so do not run it): the two
# functions that write what the device tool brings back, on the script's globals (out, logs,
# dry, gpu, driver, driver_cuda, B, T, budget, t0, only, preflight_limit, all_checks, limit,
# failed, and the rows names, values, verdicts, secs that its note() appends).
# shellcheck shell=bash

# write_summary: summary.json and summary.txt, each written whole under a temporary name and
# renamed, so a kill mid-write leaves the previous one; the table is printed.
write_summary() {
  local i sep=""
  {
    printf '{\n  "mode": %s,\n  "gpu": %s,\n  "driver": %s,\n  "driver_cuda": %s,\n' \
      "$(json_str "$([ $dry -eq 1 ] && echo dry-run || echo gpu)")" "$(json_str "$gpu")" \
      "$(json_str "$driver")" "$(json_str "$driver_cuda")"
    printf '  "batch": %s,\n  "seq_len": %s,\n  "budget_s": %s,\n  "elapsed_s": %s,\n' \
      "$B" "$T" "$budget" "$((SECONDS - t0))"
    printf '  "only": %s,\n  "preflight_limit_s": %s,\n  "limits_s": {' "$(json_str "$only")" "$preflight_limit"
    for i in $all_checks; do printf '%s"%s": %s' "$sep" "$i" "${limit[$i]}"; sep=", "; done
    sep=""
    printf '},\n  "failed": %s,\n  "checks": [' "$failed"
    for i in "${!names[@]}"; do
      printf '%s\n    {"name": %s, "value": %s, "verdict": %s, "seconds": %s}' "$sep" \
        "$(json_str "${names[$i]}")" "$(json_str "${values[$i]}")" \
        "$(json_str "${verdicts[$i]}")" "${secs[$i]}"
      sep=","
    done
    printf '\n  ]\n}\n'
  } > "$out/summary.json.tmp" && mv -f "$out/summary.json.tmp" "$out/summary.json"
  {
    echo "device_check$([ $dry -eq 1 ] && echo ' --dry-run (CPU back end)') on $gpu" \
      "(driver $driver, CUDA $driver_cuda), B=$B T=$T, $((SECONDS - t0)) s of $budget s" \
      "$([ -n "$only" ] && echo "(--only $only)")"
    printf '%-38s %-72s %-12s %s\n' check result verdict seconds
    for i in "${!names[@]}"; do
      printf '%-38s %-72s %-12s %s\n' "${names[$i]}" "${values[$i]}" "${verdicts[$i]}" "${secs[$i]}"
    done
  } > "$out/summary.txt.tmp" && mv -f "$out/summary.txt.tmp" "$out/summary.txt"
  cat "$out/summary.txt"
}
# pack_logs: every file under the logs directory below 8 MiB, as $OUT/logs.tar.gz
pack_logs() {
  (cd "$logs" && find . -type f -size -8M -print0 |
     tar --null -czf "$out/logs.tar.gz.tmp" -T - 2> /dev/null) &&
    mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}
