// Preemption signals (train/preemption.h): one waiting thread, one flag.
#include "train/preemption.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "comm/collective_watchdog.h"
#include "launch/tool_frame.h"

namespace zt {

namespace {

std::atomic<int> preempt_signal{0};

sigset_t preemption_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

void install_preemption_handlers() {
  static std::once_flag started;
  std::call_once(started, [] {
    block_preemption_signals();  // the caller's thread too, if main() did not
    std::thread([] {
      const sigset_t set = preemption_signals();
      for (;;) {
        int signal = 0;
        if (sigwait(&set, &signal) != 0) continue;
        if (const int code = abort_code(); code != 0) std::_Exit(code);
        CollectiveWatchdog::note_termination_signal(signal == SIGTERM ? "SIGTERM" : "SIGUSR1");
        preempt_signal.store(signal);
      }
    }).detach();
  });
}

int preemption_signal() { return preempt_signal.load(); }

void block_preemption_signals() {
  const sigset_t set = preemption_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace zt
