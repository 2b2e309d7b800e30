// zt-run: starts a ZeroTrain job on N ranks through Open MPI's mpirun, in the spirit of the
// `deepspeed` launcher and torchrun's --max-restarts:
//   zt-run -np N [--hostfile FILE] [--cpu] [--max-restarts N] [--min-nodes N] [--dry-run]
//          -- zt-train --config FILE ...
// It adds what this machine needs (launch/mpirun_command.h says which and why) and prints the
// full mpirun line on stderr. Without --max-restarts it replaces itself with mpirun (so mpirun's
// exit code and signals are the job's); --dry-run prints the line on stdout and runs nothing.
// With --max-restarts N it runs mpirun as its child (launch/supervised_process.h: signals passed
// on, stderr copied through and read for the failures mpirun names) and relaunches a failed
// zt-train job up to N times from its latest complete checkpoint, leaving out the hosts that
// failed and keeping the global batch (launch/restart_policy.h decides; this file gathers the
// facts: the job's config, its checkpoint root's `latest`, this machine's names). One line per
// restart, and the restart's row in metrics.jsonl (written by the relaunched zt-train, which
// gets it in ZT_RESTART). Exit: the job's, or the last failed run's when no restart is left.
// A PROGRAM without a '/' that is not on PATH but sits beside zt-run (build/bin) is given by
// that absolute path. Exit code 2, one line: bad arguments, no mpirun on PATH, an unreadable
// hostfile, a restart that cannot keep the global batch.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
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
#include "launch/restart_policy.h"
#include "launch/supervised_process.h"
#include "launch/tool_frame.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_affinity.h"
#include "runtime/file_io.h"
#include "runtime/status.h"
#include "zero/checkpoint/directory.h"

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

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// The names mpirun's own machine may go by in a hostfile: its host name, "localhost" and the
// loopback addresses, and the address of each of its interfaces.
std::vector<std::string> local_names() {
  std::vector<std::string> names = {this_host_name(), "localhost", "127.0.0.1", "::1"};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return names;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = a->ifa_addr->sa_family;
    const void* address =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr)
        : family == AF_INET6 ? static_cast<const void*>(
                                   &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr)
                             : nullptr;
    if (address != nullptr && ::inet_ntop(family, address, text, sizeof text) != nullptr)
      names.emplace_back(text);
  }
  ::freeifaddrs(list);
  return names;
}

std::string read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) zt::throw_input(fmt::format("cannot read hostfile {}: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The job a restart relaunches: where it runs and with which batch sizes.
struct Placement {
  std::vector<zt::HostfileEntry> hosts;  // empty: this machine only (no --hostfile)
  int world = 1;
};

// The reason a restart names: the lost daemon, else the first rank mpirun saw killed by a
// signal, else the exit code alone.
std::string failure_reason(const std::vector<zt::NodeFailure>& failures) {
  for (auto kind : {zt::NodeFailure::Kind::kDaemonLost, zt::NodeFailure::Kind::kRankSignalled})
    for (const zt::NodeFailure& f : failures)
      if (f.kind == kind) return f.why;
  return "a failure";
}

// Runs `request` under mpirun and relaunches it after a failure, up to request.max_restarts
// times (see the file's comment). Returns the exit code for zt-run.
int run_with_restarts(zt::RunRequest request, zt::LaunchHost host, const std::string& mpirun,
                      const int cores) {
  const zt::TrainCommand command = zt::parse_train_command(request.program);
  const zt::Config config = zt::load_config(command.config, command.overrides, request.ranks);
  const zt::BatchSizes job_batch{config.train_batch_size, config.train_micro_batch_size_per_gpu,
                                 config.gradient_accumulation_steps};
  const std::string root = zt::checkpoint_root(config);
  const std::vector<std::string> program = request.program;
  const int job_world = request.ranks;
  const std::vector<std::string> names = local_names();
  Placement placement{{}, request.ranks};
  if (!request.hostfile.empty())
    placement.hosts = zt::parse_hostfile(read_hostfile(request.hostfile), cores, request.hostfile);
  const size_t nodes = std::max<size_t>(1, placement.hosts.size());
  if (static_cast<size_t>(request.min_nodes) > nodes)
    zt::throw_input(fmt::format("--min-nodes {} is more than the job's {} host{}",
                                request.min_nodes, nodes, nodes == 1 ? "" : "s"));

  ::unsetenv("ZT_RESTART");  // set below for a relaunch only: the row its zt-train writes
  for (int restart = 0;; ++restart) {
    host.environment = environment_names();
    const std::vector<std::string> line = zt::mpirun_argv(request, host);
    std::fprintf(stderr, "zt-run: %s\n", zt::shell_line(line).c_str());
    std::fflush(stderr);
    std::vector<zt::NodeFailure> failures;
    const zt::ProcessExit exit = zt::run_supervised(mpirun, line, [&](std::string_view text) {
      if (auto failure = zt::node_failure_in(text)) failures.push_back(std::move(*failure));
    });
    const int code = exit.exit_code;
    const zt::JobEnd end = zt::classify_job_end(code, exit.forwarded_signal != 0);
    if (end == zt::JobEnd::kSucceeded) return 0;
    if (end != zt::JobEnd::kFailed) {
      std::fprintf(stderr, "zt-run: not restarted: %s\n",
                   zt::not_restarted_because(end, code).c_str());
      return code;
    }
    if (restart == request.max_restarts) {
      std::fprintf(stderr,
                   "zt-run: not restarted: all %d restarts (--max-restarts) used; exit %d\n",
                   request.max_restarts, code);
      return code;
    }

    // Where the job continues: without the hosts that failed, each remaining host with the
    // ranks it had.
    const std::vector<size_t> failed = zt::failed_hosts(placement.hosts, failures, names);
    if (!failed.empty()) {
      const std::vector<int> placed = zt::ranks_per_host(placement.world, placement.hosts);
      Placement left{{}, 0};
      std::string lost;
      for (size_t h = 0; h < placement.hosts.size(); ++h) {
        if (std::find(failed.begin(), failed.end(), h) != failed.end()) {
          lost += (lost.empty() ? "" : ", ") + placement.hosts[h].host;
          continue;
        }
        left.hosts.push_back(placement.hosts[h]);
        left.world += placed[h];
      }
      if (left.hosts.size() < static_cast<size_t>(request.min_nodes)) {
        std::fprintf(stderr,
                     "zt-run: not restarted: without the failed host%s %s, %zu host%s would be "
                     "left, fewer than --min-nodes %d; exit %d\n",
                     failed.size() == 1 ? "" : "s", lost.c_str(), left.hosts.size(),
                     left.hosts.size() == 1 ? "" : "s", request.min_nodes, code);
        return code;
      }
      if (left.world == 0)  // the failed hosts held every rank: fill the others' slots
        for (const zt::HostfileEntry& entry : left.hosts) left.world += entry.slots;
      left.world = std::min(left.world, placement.world);
      placement = std::move(left);
      std::string text;
      for (const zt::HostfileEntry& entry : placement.hosts) text += entry.line + "\n";
      const std::filesystem::path hostfile =
          std::filesystem::path(config.zt.output_dir) / fmt::format("restart{}.hosts", restart + 1);
      std::error_code ec;
      std::filesystem::create_directories(config.zt.output_dir, ec);
      zt::AtomicFile file(hostfile.string());
      file.write(text);
      file.commit();
      request.hostfile = hostfile.string();
      request.ranks = placement.world;
      host.slots = 0;
      for (const zt::HostfileEntry& entry : placement.hosts) host.slots += entry.slots;
    }
    // What it continues from, with which batch sizes.
    std::optional<zt::BatchSizes> batch;
    if (placement.world != job_world)
      batch = zt::keep_global_batch(job_batch, job_world, placement.world);
    const std::optional<int64_t> from_step = zt::latest_checkpoint_step(root);
    request.program = zt::relaunch_program(program, from_step.has_value(), batch);

    zt::RestartPlan plan;
    plan.restart = restart + 1;
    plan.max_restarts = request.max_restarts;
    plan.reason = failure_reason(failures);
    plan.exit_code = code;
    plan.from_step = from_step.value_or(0);
    for (const zt::HostfileEntry& entry : placement.hosts) plan.hosts.push_back(entry.host);
    if (plan.hosts.empty()) plan.hosts.push_back(this_host_name());
    plan.world = placement.world;
    plan.accumulation = batch ? batch->accumulation : job_batch.accumulation;
    std::fprintf(stderr, "zt-run: %s\n", zt::restart_line(plan).c_str());
    ::setenv("ZT_RESTART", zt::restart_row(plan).dump().c_str(), 1);
  }
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
  if (!request.hostfile.empty())
    host.slots = zt::hostfile_slots(read_hostfile(request.hostfile), cores, request.hostfile);
  request.program.front() = resolve_program(request.program.front());

  if (request.max_restarts > 0 && !request.dry_run)
    return run_with_restarts(std::move(request), std::move(host), mpirun, cores);
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
