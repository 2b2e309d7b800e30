// CollectiveWatchdog: a thread that notices a collective running longer than a timeout and
// reports it, once, through a handler its owner installed. MPI cannot cancel a collective, so
// this thread decides on behalf of the thread stuck inside one: launch/'s handler prints one line
// and ends the job (MPI_Abort); library code only reports. It does not cancel, retry or abort
// anything itself, and it knows nothing of the back end: Communicator::execute marks the start
// and end of every collective (comm/communicator.h, set_watchdog).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "comm/communicator.h"

namespace zt {

// What the handler is told about a collective that did not complete in time.
struct CollectiveTimeout {
  std::string collective;  // "all_gather of 4096 bytes"
  std::string unit;        // the unit it was submitted for; empty when none was named
  std::string context;     // the engine's context when it was submitted: "step 12"; may be empty
  int rank = -1;           // the rank that saw it (this process)
  double timeout_s = 0;
  double waited_s = 0;  // how long it had been running when reported
  // Set when the collective was reported because it was waiting when a termination signal came
  // and had waited signal_grace_s (note_termination_signal), before timeout_s: "SIGTERM".
  std::string signal;
  double signal_grace_s = 0;
  // One line: "all_gather of 4096 bytes for unit h.1 at step 12 did not complete within
  // zt.comm_timeout_s = 20 s on rank 0 (waited 20.3 s): a rank stopped, died or issued a
  // different collective". After a signal: "all_gather of 4096 bytes at step 12 was waiting when
  // SIGTERM came and has not completed (waited 9.8 s on rank 0; a preemption needs it within
  // 5 s; zt.comm_timeout_s = 20 s): a peer is gone or stuck, so this is not a preemption; ending
  // without a checkpoint".
  std::string message() const;
};

// WatchdogHandler (comm/communicator.h) is called at most once per collective, on the
// watchdog's thread (or on the stuck thread, when the back end gave up by itself: see
// CollectiveWatchdog::end). It may end the process; if it returns, the collective goes on
// waiting (or failing) as it would have, and is not reported again.

class CollectiveWatchdog {
 public:
  // timeout_s > 0 and finite, else kInput; handler non-empty, else kInternal. Starts the thread.
  // Time the process spent stopped (SIGSTOP, a paused VM: seen as a watchdog wake more than
  // kSuspendedAfterS late) does not count towards a collective's timeout: a stopped rank is not
  // waiting for its peers.
  CollectiveWatchdog(double timeout_s, WatchdogHandler handler, int rank);
  // Stops the thread. A collective still marked running is not reported.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // The calling thread starts `call`; one collective at a time (the communicator's contract).
  void begin(const CollectiveCall& call, int world, std::string_view unit,
             std::string_view context);
  // It finished (or threw). `failed`: when it had run past the timeout and was not reported yet
  // (a back end with a deadline of its own, NCCL, gave up about when the watchdog would have),
  // it is reported now, on this thread, so that every back end's timeout reads the same.
  void end(bool failed);

  double timeout_s() const { return timeout_s_; }

  // A termination signal (SIGTERM, SIGUSR1; `name` a string literal) reached this process. A
  // preemption is such a signal while the job is healthy: every rank finishes its step and
  // saves. A rank that was waiting in a collective when the signal came is not healthy once that
  // collective has waited kSignalGraceS in all (at most the timeout; at once when it already
  // had): its watchdog reports it then (CollectiveTimeout::signal), so a rank whose peers are
  // gone (mpirun ending the job after losing a node) names the collective and ends, instead of
  // waiting for a save it can never reach. Process-wide (signals are); not async-signal-safe:
  // call it from a thread that took the signal with sigwait.
  static void note_termination_signal(const char* name);
  static constexpr double kSignalGraceS = 5.0;

 private:
  void run(double last_s);  // last_s: when the watchdog was made, steady clock
  // Copies the running collective's description if it is due; under mutex_.
  bool due(double now_s, CollectiveTimeout* report);

  // A watchdog wake this much later than due is taken for a suspension of the process, whose
  // length is then not counted in the running collective's wait (run()).
  static constexpr double kSuspendedAfterS = 1.0;

  const double timeout_s_;
  const WatchdogHandler handler_;
  const int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;  // stopping_
  bool stopping_ = false;
  bool running_ = false;   // a collective is between begin and end
  bool reported_ = false;  // the running one was reported
  double started_s_ = 0;   // steady clock, seconds
  std::string collective_, unit_, context_;
  std::thread thread_;
};

}  // namespace zt
