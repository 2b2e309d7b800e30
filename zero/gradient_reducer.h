// GradientReducer: the reductions of one pass's unit gradients. Units are added as backward
// completes them; they launch in buckets of about reduce_bucket_size elements, and before a
// bucket launches the one before it is finished (wait, then ParamGroup::finish_reduce), so at
// most two buckets of full unit gradients are alive when gradients are sharded. With
// overlap_comm a launched bucket reduces on the communication thread while backward goes on;
// without it each reduction is finished as soon as it is launched. Owns the open bucket and the
// handles in flight; allocates nothing itself.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "comm/comm_queue.h"
#include "runtime/kernels.h"
#include "zero/param_group.h"

namespace zt {

class GradientReducer {
 public:
  GradientReducer(CommQueue& queue, Kernels& kernels, int64_t bucket_elements, bool overlap)
      : queue_(queue), kernels_(kernels), bucket_limit_(bucket_elements), overlap_(overlap) {}
  // Finishes whatever is in flight (a reduction's buffers must outlive it).
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The group's gradient of this micro-batch is complete (ParamGroup::finish_grads(k, true)
  // done): it joins the open bucket, which launches once it holds bucket_elements.
  void add(ParamGroup& group);
  // Launches the open bucket, then waits for every reduction and puts each into its store.
  void finish();
  // Reductions launched and not yet finished.
  size_t in_flight() const { return in_flight_.size(); }
  // Called with each group once its reduction is finished and in its store (the engine sends
  // the step's final gradients to an offloaded optimizer from here).
  void set_on_reduced(std::function<void(ParamGroup&)> f) { on_reduced_ = std::move(f); }

 private:
  void launch_bucket();
  void finish_in_flight();

  CommQueue& queue_;
  Kernels& kernels_;
  int64_t bucket_limit_;
  bool overlap_;
  std::vector<ParamGroup*> bucket_;
  int64_t bucket_elements_ = 0;
  std::deque<std::pair<ParamGroup*, CommHandle>> in_flight_;
  std::function<void(ParamGroup&)> on_reduced_;
};

}  // namespace zt
