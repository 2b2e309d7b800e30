// CollectiveWatchdog's thread: it wakes a few times per timeout, compares the running
// collective's start with the clock and calls the handler outside its lock.
#include "comm/collective_watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The last termination signal of this process (note_termination_signal): when (steady clock
// seconds, 0: none) and its name. Process-wide because signals are.
std::atomic<double> g_signal_s{0.0};
std::atomic<const char*> g_signal_name{nullptr};

// Every live watchdog, so that a signal wakes them at once (the next wake may be a second away,
// and mpirun's SIGKILL follows its SIGTERM by one).
std::mutex g_live_mutex;
std::vector<CollectiveWatchdog*> g_live;

}  // namespace

std::string CollectiveTimeout::message() const {
  if (!signal.empty())
    return fmt::format(
        "{}{}{} was waiting when {} came and has not completed (waited {:.1f} s on rank {}; a "
        "preemption needs it within {:g} s; zt.comm_timeout_s = {:g} s): a peer is gone or "
        "stuck, so this is not a preemption; ending without a checkpoint",
        collective, unit.empty() ? std::string() : fmt::format(" for unit {}", unit),
        context.empty() ? std::string() : fmt::format(" at {}", context), signal, waited_s, rank,
        signal_grace_s, timeout_s);
  return fmt::format(
      "{}{}{} did not complete within zt.comm_timeout_s = {:g} s on rank {} "
      "(waited {:.1f} s): a rank stopped, died or issued a different collective",
      collective, unit.empty() ? std::string() : fmt::format(" for unit {}", unit),
      context.empty() ? std::string() : fmt::format(" at {}", context), timeout_s, rank, waited_s);
}

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, WatchdogHandler handler, int rank)
    : timeout_s_(timeout_s), handler_(std::move(handler)), rank_(rank) {
  if (!(timeout_s_ > 0) || !std::isfinite(timeout_s_))
    throw_input(
        fmt::format("zt.comm_timeout_s must be a positive number of seconds; got {}", timeout_s_));
  ZT_ASSERT(static_cast<bool>(handler_), "a collective watchdog needs a handler");
  // The thread's first wake is measured from here: a stop before it was first scheduled counts.
  const double created_s = now_s();
  thread_ = std::thread([this, created_s] { run(created_s); });
  std::lock_guard<std::mutex> live(g_live_mutex);
  g_live.push_back(this);
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> live(g_live_mutex);
    std::erase(g_live, this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void CollectiveWatchdog::begin(const CollectiveCall& call, int world, std::string_view unit,
                               std::string_view context) {
  std::string what =
      fmt::format("{} of {} bytes", collective_kind_name(call.kind), collective_bytes(call, world));
  std::lock_guard<std::mutex> lock(mutex_);
  collective_ = std::move(what);
  unit_.assign(unit);
  context_.assign(context);
  started_s_ = now_s();
  running_ = true;
  reported_ = false;
}

void CollectiveWatchdog::end(bool failed) {
  CollectiveTimeout report;
  bool report_now = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed) report_now = due(now_s(), &report);
    running_ = false;
  }
  if (report_now) handler_(report);
}

void CollectiveWatchdog::note_termination_signal(const char* name) {
  g_signal_name.store(name);
  double none = 0.0;
  g_signal_s.compare_exchange_strong(none, now_s());  // the first signal counts
  std::lock_guard<std::mutex> live(g_live_mutex);
  for (CollectiveWatchdog* w : g_live) w->wake_.notify_one();
}

bool CollectiveWatchdog::due(double now, CollectiveTimeout* report) {
  if (!running_ || reported_) return false;
  // Waiting when a termination signal came, for kSignalGraceS in all: a peer is gone.
  const double signal_s = g_signal_s.load();
  const double grace_s = std::min(kSignalGraceS, timeout_s_);
  const bool after_signal = signal_s > 0 && started_s_ <= signal_s && now - started_s_ >= grace_s;
  if (!after_signal && now - started_s_ < timeout_s_) return false;
  reported_ = true;
  *report =
      CollectiveTimeout{collective_, unit_, context_, rank_, timeout_s_, now - started_s_, {}, 0};
  if (after_signal && now - started_s_ < timeout_s_) {
    const char* name = g_signal_name.load();
    report->signal = name != nullptr ? name : "a termination signal";
    report->signal_grace_s = grace_s;
  }
  return true;
}

void CollectiveWatchdog::run(double last_s) {
  // A tenth of the timeout, within [10 ms, 1 s]: a timeout is reported at most that late.
  const double period_s = std::clamp(timeout_s_ / 10, 0.01, 1.0);
  const auto period = std::chrono::duration<double>(period_s);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period);  // a signal (note_termination_signal) wakes it early
    if (stopping_) return;
    const double now = now_s();
    // A wake far later than the period means this process did not run in between: it was
    // stopped (SIGSTOP, a debugger, a paused VM), not its peers. That time is not held against
    // them, so a rank resumed only for mpirun to end it (SIGCONT, then SIGTERM) does not report
    // a timeout of its own beside the rank that saw the real one. The slack keeps a thread that
    // was merely scheduled late from moving the deadline.
    const double lost_s = now - last_s - period_s;
    if (lost_s > kSuspendedAfterS && running_) started_s_ += lost_s;
    last_s = now;
    CollectiveTimeout report;
    if (!due(now, &report)) continue;
    lock.unlock();
    handler_(report);  // may end the process; if it returns, this collective stays reported
    lock.lock();
    last_s = now_s();
  }
}

}  // namespace zt
