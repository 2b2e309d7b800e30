// ProfilingKernels: the profile and flush(); the entries themselves are generated in
// profiling_kernels.h.
#include "runtime/profiling_kernels.h"

#include "runtime/status.h"

namespace zt {

void OpProfile::add(const std::string& name, double seconds) {
  OpTime& t = ops_[name];
  t.seconds += seconds;
  ++t.calls;
}

double OpProfile::total_seconds() const {
  double total = 0.0;
  for (const auto& [name, t] : ops_) total += t.seconds;
  return total;
}

void ProfilingKernels::flush() {
  if (!timer_) return;
  const std::vector<double> seconds = timer_->collect();
  ZT_ASSERT(seconds.size() == span_names_.size(),
            "ProfilingKernels::flush: {} spans timed, {} calls made", seconds.size(),
            span_names_.size());
  for (size_t i = 0; i < seconds.size(); ++i)
    if (span_names_[i]) profile_.add(span_names_[i], seconds[i]);
  span_names_.clear();
}

}  // namespace zt
