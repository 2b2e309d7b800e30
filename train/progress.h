// Progress: the time a run has left at its current rate, for the per-step line. The rate is that
// of the last kWindow steps, wall clock between their ends (evaluations and checkpoint saves in
// them included, so the estimate counts what the rest of the run will also do); before two
// steps have ended there is none. Times are given by the caller (seconds on any monotonic
// clock), so tests drive it without waiting.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

namespace zt {

class Progress {
 public:
  static constexpr int kWindow = 20;
  explicit Progress(int64_t last_step) : last_step_(last_step) {}
  // Step `step` ended at `seconds`.
  void step_done(int64_t step, double seconds);
  // Seconds left after the last step_done at the window's rate; nullopt before two steps.
  std::optional<double> seconds_left() const;
  // "1h02m", "3m07s", "12s"; empty before two steps.
  std::string left() const;

 private:
  int64_t last_step_;
  std::deque<std::pair<int64_t, double>> ends_;  // (step, seconds), the window's, oldest first
};

// A duration as the step line prints it: "1h02m" from an hour, "3m07s" from a minute, else "12s".
std::string format_duration(double seconds);

}  // namespace zt
