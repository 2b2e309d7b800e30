// Communicator's shared half: argument validation, routing through an attached CommQueue and
// CommStats. No communication happens here (the back ends do it); the rank-order reduction
// arithmetic is comm/rank_order_reduction.cpp.
#include "comm/communicator.h"

#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "comm/collective_watchdog.h"
#include "comm/comm_queue.h"
#include "runtime/status.h"

namespace zt {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
  }
  return "?";
}

std::string CommStats::to_string() const {
  std::string out;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const CollectiveStats& s = by_kind[k];
    if (s.calls == 0) continue;
    out += fmt::format("{}: {} calls, {:.1f} MiB, {:.1f} ms\n",
                       collective_kind_name(static_cast<CollectiveKind>(k)), s.calls,
                       s.bytes / 1048576.0, s.seconds * 1e3);
  }
  return out;
}

int64_t collective_bytes(const CollectiveCall& call, int world) {
  const int64_t elems =
      call.kind == CollectiveKind::kReduceScatter || call.kind == CollectiveKind::kAllGather
          ? call.count * world
          : call.count;
  return elems * static_cast<int64_t>(dtype_size(call.dtype));
}

Communicator::Communicator() = default;
Communicator::~Communicator() = default;

namespace {

bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa + static_cast<uintptr_t>(a_bytes) <= pb || pb + static_cast<uintptr_t>(b_bytes) <= pa;
}

}  // namespace

void Communicator::validate(const CollectiveCall& call) const {
  const std::string_view what = collective_kind_name(call.kind);
  if (call.count < 0) throw_input(fmt::format("{}: count must be >= 0; got {}", what, call.count));
  const int n = world();
  const int64_t size = static_cast<int64_t>(dtype_size(call.dtype));
  if (call.count > std::numeric_limits<int64_t>::max() / (int64_t(n) * size))
    throw_input(fmt::format("{}: count {} x {} ranks overflows a byte count", what, call.count, n));
  if (call.kind == CollectiveKind::kBroadcast && (call.root < 0 || call.root >= n))
    throw_input(fmt::format("broadcast: root {} out of range [0, {})", call.root, n));
  ZT_ASSERT(!call.host_memory || call.kind == CollectiveKind::kAllGather,
            "{} call marked host memory: only all_gather has a host-memory entry", what);
  if (call.count == 0) return;
  if (call.send == nullptr || call.recv == nullptr)
    throw_input(fmt::format("{}: null buffer with count {}", what, call.count));

  const int64_t block = call.count * size;  // one rank's block, in bytes
  const char* send = static_cast<const char*>(call.send);
  const char* recv = static_cast<const char*>(call.recv);
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      if (send != recv && !disjoint(send, block, recv, block))
        throw_input(
            "all_reduce: send and recv overlap without being equal (in place means "
            "send == recv)");
      break;
    case CollectiveKind::kReduceScatter:
      if (recv != send + rank() * block && !disjoint(send, n * block, recv, block))
        throw_input(
            "reduce_scatter: recv overlaps send without being in place (in place means "
            "recv == send + rank*recv_count*dtype_size)");
      break;
    case CollectiveKind::kAllGather:
      if (send != recv + rank() * block && !disjoint(send, block, recv, n * block))
        throw_input(
            "all_gather: send overlaps recv without being in place (in place means "
            "send == recv + rank*send_count*dtype_size)");
      break;
    case CollectiveKind::kBroadcast:
      ZT_ASSERT(send == recv, "broadcast call with send {} != recv {}", fmt::ptr(send),
                fmt::ptr(recv));
      break;
  }
}

void Communicator::set_watchdog(double timeout_s, WatchdogHandler handler) {
  if (queue_ != nullptr)
    throw_internal(
        fmt::format("set_watchdog on communicator '{}' while a CommQueue is attached", name()));
  watchdog_.reset();
  watchdog_timeout_s_ = timeout_s;
  watchdog_handler_ = handler;
  watchdog_ = std::make_unique<CollectiveWatchdog>(timeout_s, std::move(handler), rank());
}

std::unique_ptr<Communicator> Communicator::duplicate() {
  std::unique_ptr<Communicator> copy = backend_duplicate();
  if (watchdog_) copy->set_watchdog(watchdog_timeout_s_, watchdog_handler_);
  return copy;
}

void Communicator::execute(const CollectiveCall& call, std::string_view unit,
                           std::string_view context) {
  const auto t0 = std::chrono::steady_clock::now();
  if (call.count > 0 && watchdog_) {
    watchdog_->begin(call, world(), unit, context);
    try {
      run_backend(call);
    } catch (...) {
      watchdog_->end(true);
      throw;
    }
    watchdog_->end(false);
  } else if (call.count > 0) {
    run_backend(call);
  }
  CollectiveStats& s = stats_[call.kind];
  s.calls += 1;
  s.bytes += collective_bytes(call, world());
  s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Communicator::run_backend(const CollectiveCall& call) {
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      backend_all_reduce(call.send, call.recv, call.count, call.dtype, call.op);
      break;
    case CollectiveKind::kReduceScatter:
      backend_reduce_scatter(call.send, call.recv, call.count, call.dtype, call.op);
      break;
    case CollectiveKind::kAllGather:
      if (call.host_memory)
        backend_all_gather_host(call.send, call.recv, call.count, call.dtype);
      else
        backend_all_gather(call.send, call.recv, call.count, call.dtype);
      break;
    case CollectiveKind::kBroadcast:
      backend_broadcast(call.recv, call.count, call.dtype, call.root);
      break;
  }
}

void Communicator::submit_and_wait(const CollectiveCall& call) {
  validate(call);
  if (queue_ != nullptr && !queue_->on_worker_thread()) {
    queue_->submit(call).wait();
  } else {
    execute(call);
  }
}

void Communicator::all_reduce(const void* send, void* recv, int64_t count, DType dtype,
                              ReduceOp op) {
  submit_and_wait({CollectiveKind::kAllReduce, send, recv, count, dtype, op, 0});
}

void Communicator::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                  ReduceOp op) {
  submit_and_wait({CollectiveKind::kReduceScatter, send, recv, recv_count, dtype, op, 0});
}

void Communicator::all_gather(const void* send, void* recv, int64_t send_count, DType dtype) {
  submit_and_wait({CollectiveKind::kAllGather, send, recv, send_count, dtype, ReduceOp::kSum, 0});
}

void Communicator::all_gather_host(const void* send, void* recv, int64_t send_count, DType dtype) {
  CollectiveCall call{CollectiveKind::kAllGather, send, recv, send_count, dtype, ReduceOp::kSum, 0};
  call.host_memory = true;
  submit_and_wait(call);
}

void Communicator::broadcast(void* buf, int64_t count, DType dtype, int root) {
  submit_and_wait({CollectiveKind::kBroadcast, buf, buf, count, dtype, ReduceOp::kSum, root});
}

std::vector<double> all_gather_doubles(Communicator& comm, std::span<const double> values) {
  static_assert(sizeof(double) == 2 * sizeof(float));
  std::vector<double> all(values.size() * static_cast<size_t>(comm.world()));
  comm.all_gather_host(values.data(), all.data(), 2 * static_cast<int64_t>(values.size()),
                       DType::kF32);
  return all;
}

}  // namespace zt
