// A child process that zt-run supervises instead of exec'ing (mpirun, when restarts may follow):
// started in its own process group with stdin from /dev/null and SIGTERM to it should zt-run
// die; zt-run's SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 passed on to it once each; its
// stderr copied through to zt-run's line by line, each line also handed to the caller; waits for
// it and says how it ended. Its own process group keeps a terminal's Ctrl-C (sent to the
// foreground group) from reaching mpirun twice: Open MPI's mpirun takes a second SIGINT or
// SIGTERM as "end now" and leaves its ranks running. What it does not do: decide anything about
// the exit (launch/restart_policy.h does), or restart.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

struct ProcessExit {
  int exit_code = 0;         // the child's exit status, or 128 + the signal that ended it
  int forwarded_signal = 0;  // the first signal zt-run passed on to it; 0 if none
};

// Runs `path` with `argv` (argv[0] included) and the caller's environment, as above, and
// returns when it has ended and its stderr is drained (or 2 s after it ended, when something it
// started still holds its stderr open). `on_stderr_line` gets each line without its newline.
// kSystem when the child cannot be started.
ProcessExit run_supervised(const std::string& path, const std::vector<std::string>& argv,
                           const std::function<void(std::string_view line)>& on_stderr_line);

}  // namespace zt
