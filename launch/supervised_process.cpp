// run_supervised: fork/exec, signals through a signalfd, stderr through a pipe (see
// supervised_process.h).
#include "launch/supervised_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "runtime/status.h"

namespace zt {

namespace {

// Signals zt-run passes on; SIGCHLD is how the loop learns the child ended.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

// How long the child's stderr may stay open after it ended: a process it started (an Open MPI
// daemon being torn down) may hold the pipe for a moment, or for ever.
constexpr auto kDrainAfterExit = std::chrono::seconds(2);

void write_all(int fd, const char* bytes, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr gone: the copy is best effort, the callback still sees lines
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

ProcessExit run_supervised(const std::string& path, const std::vector<std::string>& argv,
                           const std::function<void(std::string_view line)>& on_stderr_line) {
  sigset_t handled, previous;
  sigemptyset(&handled);
  for (int s : kForwarded) sigaddset(&handled, s);
  sigaddset(&handled, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &handled, &previous);
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC);
  int err_pipe[2];
  if (signals < 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    if (signals >= 0) ::close(signals);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    throw_system(fmt::format("cannot set up to run {}: {}", path, std::strerror(e)));
  }
  std::vector<char*> exec_argv;
  for (const std::string& word : argv) exec_argv.push_back(const_cast<char*>(word.c_str()));
  exec_argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    // Only async-signal-safe calls from here to exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // zt-run died before prctl
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::execv(path.c_str(), exec_argv.data());
    const char* reason = std::strerror(errno);
    write_all(STDERR_FILENO, "zt-run: cannot run ", 19);
    write_all(STDERR_FILENO, path.c_str(), path.size());
    write_all(STDERR_FILENO, ": ", 2);
    write_all(STDERR_FILENO, reason, std::strlen(reason));
    write_all(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(err_pipe[1]);
  if (child < 0) {
    ::close(err_pipe[0]);
    ::close(signals);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    throw_system(fmt::format("cannot start {}: {}", path, std::strerror(fork_errno)));
  }

  ProcessExit result;
  bool exited = false, drained = false;
  std::chrono::steady_clock::time_point drain_deadline;
  std::string line;
  auto take_output = [&](const char* bytes, size_t size) {
    write_all(STDERR_FILENO, bytes, size);
    for (size_t i = 0; i < size; ++i) {
      if (bytes[i] != '\n') {
        line += bytes[i];
        continue;
      }
      on_stderr_line(line);
      line.clear();
    }
  };
  auto reap = [&] {
    int status = 0;
    if (!exited && ::waitpid(child, &status, WNOHANG) == child) {
      exited = true;
      result.exit_code = exit_code_of(status);
      drain_deadline = std::chrono::steady_clock::now() + kDrainAfterExit;
    }
  };
  while (!(exited && drained)) {
    pollfd fds[2] = {{signals, POLLIN, 0}, {drained ? -1 : err_pipe[0], POLLIN, 0}};
    int timeout_ms = -1;
    if (exited) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          drain_deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeout_ms = static_cast<int>(left.count());
    }
    const int ready = ::poll(fds, 2, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      if (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info) &&
          info.ssi_signo != SIGCHLD && !exited) {
        ::kill(child, static_cast<int>(info.ssi_signo));
        if (result.forwarded_signal == 0)
          result.forwarded_signal = static_cast<int>(info.ssi_signo);
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char bytes[4096];
      const ssize_t n = ::read(err_pipe[0], bytes, sizeof bytes);
      if (n > 0)
        take_output(bytes, static_cast<size_t>(n));
      else if (n == 0 || errno != EINTR)
        drained = true;
    }
    reap();
  }
  if (!line.empty()) on_stderr_line(line);
  if (!exited) {  // the drain ended the loop before the exit was seen (it is, by now)
    int status = 0;
    ::waitpid(child, &status, 0);
    result.exit_code = exit_code_of(status);
  }
  ::close(err_pipe[0]);
  ::close(signals);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  return result;
}

}  // namespace zt
