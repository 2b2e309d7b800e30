// zt-run: starts a ZeroTrain job on N ranks through Open MPI's mpirun, in the spirit of the
// `deepspeed` launcher, and replaces itself with mpirun (so mpirun's exit code and signals are
// the job's):
//   zt-run -np N [--hostfile FILE] [--cpu] [--dry-run] -- zt-train --config FILE ...
// It adds what this machine needs (launch/mpirun_command.h says which and why), prints the full
// mpirun line on stderr, and execs it; --dry-run prints the line on stdout and runs nothing.
// A PROGRAM without a '/' that is not on PATH but sits beside zt-run (build/bin) is given by
// that absolute path. Exit code 2, one line: bad arguments, no mpirun on PATH, an unreadable
// hostfile.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "launch/mpirun_command.h"
#include "launch/tool_frame.h"
#include "runtime/cpu/cpu_affinity.h"
#include "runtime/status.h"

extern char** environ;

namespace fs = std::filesystem;

namespace {

// The executable `name` on PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
  }
  return "";
}

std::string read_sysfs_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// Cores among the CPUs this process may run on, as Open MPI counts slots without a hostfile:
// distinct (package, core) pairs from sysfs; each CPU one core where sysfs has no topology.
int cores_of_this_machine() {
  std::set<std::pair<std::string, std::string>> cores;
  const std::vector<int> cpus = zt::this_thread_cpus();
  for (int cpu : cpus) {
    const fs::path topology =
        fs::path("/sys/devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "topology";
    const std::string package = read_sysfs_line(topology / "physical_package_id");
    const std::string core = read_sysfs_line(topology / "core_id");
    if (core.empty())
      cores.insert({"cpu", std::to_string(cpu)});
    else
      cores.insert({package, core});
  }
  return std::max<int>(1, static_cast<int>(cores.size()));
}

// A CUDA device is visible: the NVIDIA driver lists a GPU and CUDA_VISIBLE_DEVICES (when set)
// does not hide every device.
bool gpu_visible() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string v = visible;
    if (v.empty() || v == "-1" || v == "NoDevFiles") return false;
  }
  std::error_code ec;
  const fs::path gpus = "/proc/driver/nvidia/gpus";
  if (!fs::is_directory(gpus, ec)) return false;
  return fs::directory_iterator(gpus, ec) != fs::directory_iterator();
}

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq != nullptr) names.emplace_back(*entry, static_cast<size_t>(eq - *entry));
  }
  return names;
}

// `program` as mpirun should start it: unchanged when it has a '/' or is on PATH; else the
// executable of that name beside zt-run, when there is one.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos || !find_on_path(program).empty()) return program;
  std::error_code ec;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / program;
  if (!ec && fs::is_regular_file(beside, ec) && ::access(beside.c_str(), X_OK) == 0)
    return beside.string();
  return program;
}

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  zt::RunRequest request = zt::parse_run_request(args);
  if (request.help) {
    std::cout << zt::run_usage();
    return 0;
  }
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty())
    zt::throw_input(
        "mpirun is not on PATH: install Open MPI (openmpi-bin) or add its bin "
        "directory to PATH");

  zt::LaunchHost host;
  host.root = ::geteuid() == 0;
  host.gpu_visible = gpu_visible();
  host.environment = environment_names();
  const int cores = cores_of_this_machine();
  host.slots = cores;
  if (!request.hostfile.empty()) {
    std::ifstream in(request.hostfile);
    if (!in)
      zt::throw_input(
          fmt::format("cannot read hostfile {}: {}", request.hostfile, std::strerror(errno)));
    std::ostringstream text;
    text << in.rdbuf();
    host.slots = zt::hostfile_slots(text.str(), cores, request.hostfile);
  }
  request.program.front() = resolve_program(request.program.front());

  const std::vector<std::string> line = zt::mpirun_argv(request, host);
  if (request.dry_run) {
    std::cout << zt::shell_line(line) << "\n";
    return 0;
  }
  std::fprintf(stderr, "zt-run: %s\n", zt::shell_line(line).c_str());
  std::fflush(stderr);
  std::vector<char*> exec_argv;
  for (const std::string& word : line) exec_argv.push_back(const_cast<char*>(word.c_str()));
  exec_argv.push_back(nullptr);
  ::execv(mpirun.c_str(), exec_argv.data());
  zt::throw_system(fmt::format("cannot run {}: {}", mpirun, std::strerror(errno)));
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool("zt-run", [&] { return run(argc, argv); });
}
