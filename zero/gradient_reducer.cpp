// GradientReducer: buckets and handles in flight.
#include "zero/gradient_reducer.h"

namespace zt {

GradientReducer::~GradientReducer() {
  // Only reached with reductions in flight when the pass failed: wait for them without
  // putting them into the stores (the handles' destructors wait).
  in_flight_.clear();
}

void GradientReducer::add(ParamGroup& group) {
  bucket_.push_back(&group);
  bucket_elements_ += group.shard().padded;
  if (bucket_elements_ >= bucket_limit_) launch_bucket();
}

void GradientReducer::finish() {
  if (!bucket_.empty()) launch_bucket();
  finish_in_flight();
}

void GradientReducer::launch_bucket() {
  finish_in_flight();
  for (ParamGroup* group : bucket_) {
    in_flight_.emplace_back(group, group->begin_reduce(queue_));
    if (!overlap_) finish_in_flight();
  }
  bucket_.clear();
  bucket_elements_ = 0;
}

void GradientReducer::finish_in_flight() {
  while (!in_flight_.empty()) {
    in_flight_.front().second.wait();
    ParamGroup* group = in_flight_.front().first;
    group->finish_reduce(kernels_);
    in_flight_.pop_front();
    if (on_reduced_) on_reduced_(*group);
  }
}

}  // namespace zt
