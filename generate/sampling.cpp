// Greedy choice and temperature / top-k / top-p sampling (sampling.h).
#include "generate/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace zt {

void validate_sampling(const SamplingOptions& o, const std::string& source) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    throw_input(
        fmt::format("{}: temperature must be >= 0 (0: greedy); got {}", source, o.temperature));
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
    throw_input(fmt::format("{}: top_p must be in (0, 1]; got {}", source, o.top_p));
  if (o.top_k < 0)
    throw_input(fmt::format("{}: top_k must be >= 0 (0: all); got {}", source, o.top_k));
}

int32_t argmax_token(std::span<const float> logits) {
  ZT_ASSERT(!logits.empty(), "argmax of no logits");
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t pick_token(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng) {
  if (o.temperature == 0.0f) return argmax_token(logits);
  // Candidates by logit, largest first (ties by index), so the filters keep a prefix.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto larger = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t kept = order.size();
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < kept) {
    kept = static_cast<size_t>(o.top_k);
    std::partial_sort(order.begin(), order.begin() + kept, order.end(), larger);
  } else {
    std::sort(order.begin(), order.end(), larger);
  }
  // Softmax of logits / temperature over the kept candidates, in double.
  std::vector<double> p(kept);
  const double top = logits[order[0]] / static_cast<double>(o.temperature);
  double sum = 0.0;
  for (size_t i = 0; i < kept; ++i)
    sum += p[i] = std::exp(logits[order[i]] / static_cast<double>(o.temperature) - top);
  for (double& x : p) x /= sum;
  if (o.top_p < 1.0f) {  // the fewest largest whose probabilities reach top_p
    double cumulative = 0.0;
    size_t n = 0;
    while (n < kept && cumulative < o.top_p) cumulative += p[n++];
    kept = std::max<size_t>(n, 1);
  }
  std::discrete_distribution<size_t> draw(p.begin(), p.begin() + static_cast<ptrdiff_t>(kept));
  return order[draw(rng)];
}

}  // namespace zt
