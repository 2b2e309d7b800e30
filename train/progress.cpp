// Progress (progress.h).
#include "train/progress.h"

#include <cmath>

#include <fmt/format.h>

namespace zt {

void Progress::step_done(int64_t step, double seconds) {
  ends_.emplace_back(step, seconds);
  if (ends_.size() > static_cast<size_t>(kWindow) + 1) ends_.pop_front();
}

std::optional<double> Progress::seconds_left() const {
  if (ends_.size() < 2) return std::nullopt;
  const auto& [first_step, first_end] = ends_.front();
  const auto& [step, end] = ends_.back();
  if (step <= first_step) return std::nullopt;
  const double per_step = (end - first_end) / static_cast<double>(step - first_step);
  return per_step * static_cast<double>(std::max<int64_t>(0, last_step_ - step));
}

std::string Progress::left() const {
  const std::optional<double> s = seconds_left();
  return s ? format_duration(*s) : std::string();
}

std::string format_duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace zt
