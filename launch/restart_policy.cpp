// zt-run's restart decisions (see restart_policy.h).
#include "launch/restart_policy.h"

#include <algorithm>
#include <filesystem>

#include "launch/tool_frame.h"
#include "runtime/status.h"

namespace zt {

namespace {

bool contains(std::span<const std::string> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The word after `marker` in `line` (up to a space, or the end), or "".
std::string_view word_after(std::string_view line, std::string_view marker) {
  const size_t at = line.find(marker);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + marker.size());
  return rest.substr(0, rest.find(' '));
}

}  // namespace

JobEnd classify_job_end(int exit_code, bool signal_forwarded) {
  if (exit_code == 0) return JobEnd::kSucceeded;
  if (signal_forwarded) return JobEnd::kStopped;
  if (exit_code == kExitBadInput) return JobEnd::kBadInput;
  if (exit_code == kExitPreempted) return JobEnd::kPreempted;
  return JobEnd::kFailed;
}

std::string not_restarted_because(JobEnd end, int exit_code) {
  switch (end) {
    case JobEnd::kSucceeded: return "it succeeded";
    case JobEnd::kBadInput:
      return fmt::format(
          "exit {} is bad input (command line, config, data or checkpoint), "
          "which a restart would meet again",
          exit_code);
    case JobEnd::kPreempted:
      return fmt::format(
          "exit {} is a preemption (a checkpoint was saved; continue with "
          "zt-train --resume)",
          exit_code);
    case JobEnd::kStopped:
      return fmt::format("zt-run passed a signal on to it (exit {})", exit_code);
    case JobEnd::kFailed: return "";
  }
  return "";
}

std::optional<NodeFailure> node_failure_in(std::string_view line) {
  using Kind = NodeFailure::Kind;
  if (line.find("Remote daemon:") != std::string_view::npos) {
    const std::string_view node = word_after(line, " on node ");
    if (node.empty()) return std::nullopt;
    return NodeFailure{Kind::kDaemonLost, std::string(node),
                       fmt::format("mpirun lost its daemon on node {}", node)};
  }
  if (line.find("noticed that process rank ") != std::string_view::npos &&
      line.find(" exited on signal ") != std::string_view::npos) {
    const std::string_view rank = word_after(line, "process rank ");
    const std::string_view node = word_after(line, " on node ");
    std::string_view signal = line.substr(line.find(" exited on signal ") + 18);
    while (!signal.empty() &&
           (signal.back() == '.' || signal.back() == ' ' || signal.back() == '\r'))
      signal.remove_suffix(1);
    if (rank.empty() || node.empty()) return std::nullopt;
    return NodeFailure{Kind::kRankSignalled, std::string(node),
                       fmt::format("rank {} on node {} exited on signal {}", rank, node, signal)};
  }
  return std::nullopt;
}

std::vector<size_t> failed_hosts(std::span<const HostfileEntry> hosts,
                                 std::span<const NodeFailure> failures,
                                 std::span<const std::string> local_names) {
  std::vector<std::string> nodes;
  for (const NodeFailure& f : failures)
    if (f.kind == NodeFailure::Kind::kDaemonLost) nodes.push_back(f.node);
  if (nodes.empty())
    for (const NodeFailure& f : failures)
      if (f.kind == NodeFailure::Kind::kRankSignalled) {
        nodes.push_back(f.node);
        break;
      }
  std::vector<size_t> failed;
  for (size_t h = 0; h < hosts.size(); ++h)
    for (const std::string& node : nodes) {
      const bool local = contains(local_names, node) && contains(local_names, hosts[h].host);
      if (hosts[h].host == node || local) failed.push_back(h);
    }
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
  return failed;
}

std::vector<int> ranks_per_host(int ranks, std::span<const HostfileEntry> hosts) {
  std::vector<int> placed(hosts.size(), 0);
  if (hosts.empty()) return placed;
  int left = ranks;
  for (size_t h = 0; h < hosts.size() && left > 0; ++h) {
    placed[h] = std::min(hosts[h].slots, left);
    left -= placed[h];
  }
  const int n = static_cast<int>(hosts.size());
  for (int h = 0; h < n && left > 0; ++h) placed[h] += left / n + (h < left % n ? 1 : 0);
  return placed;
}

BatchSizes keep_global_batch(const BatchSizes& job, int job_world, int world) {
  ZT_ASSERT(job.micro > 0 && world > 0, "micro={} world={}", job.micro, world);
  const int64_t per_micro_step = job.micro * world;
  if (job.global % per_micro_step != 0)
    throw_input(fmt::format(
        "cannot keep the global batch on {} ranks: train_batch_size {} is not a multiple of "
        "train_micro_batch_size_per_gpu {} x {} ranks (the job ran {} ranks x "
        "gradient_accumulation_steps {})",
        world, job.global, job.micro, world, job_world, job.accumulation));
  return {job.global, job.micro, job.global / per_micro_step};
}

TrainCommand parse_train_command(std::span<const std::string> program) {
  if (program.empty() || std::filesystem::path(program.front()).filename() != "zt-train")
    throw_input(fmt::format(
        "--max-restarts restarts zt-train only (zt-run reads its config and resumes it from "
        "its checkpoint); the program is '{}'",
        program.empty() ? "" : program.front()));
  TrainCommand command;
  for (size_t i = 1; i < program.size(); ++i) {
    const std::string& arg = program[i];
    const bool has_next = i + 1 < program.size();
    if ((arg == "--config" || arg == "-c") && has_next)
      command.config = program[++i];
    else if (arg.starts_with("--config="))
      command.config = arg.substr(9);
    else if (arg == "--set" && has_next)
      command.overrides.push_back(program[++i]);
    else if (arg.starts_with("--set="))
      command.overrides.push_back(arg.substr(6));
  }
  if (command.config.empty())
    throw_input(
        "--max-restarts needs zt-train's --config FILE (zt-run reads the job's batch "
        "sizes and checkpoint directory from it)");
  return command;
}

std::vector<std::string> relaunch_program(std::span<const std::string> program, bool resume,
                                          const std::optional<BatchSizes>& batch) {
  std::vector<std::string> argv;
  for (size_t i = 0; i < program.size(); ++i) {
    const std::string& arg = program[i];
    if (resume && arg.starts_with("--resume=")) continue;
    if (resume && arg == "--resume") {
      // zt-train's rule: "--resume DIR" when the next word is not an option.
      if (i + 1 < program.size() && !program[i + 1].starts_with("-")) ++i;
      continue;
    }
    argv.push_back(arg);
  }
  if (resume) argv.push_back("--resume");
  if (batch) {
    for (std::string set : {fmt::format("train_batch_size={}", batch->global),
                            fmt::format("train_micro_batch_size_per_gpu={}", batch->micro),
                            fmt::format("gradient_accumulation_steps={}", batch->accumulation)}) {
      argv.push_back("--set");
      argv.push_back(std::move(set));
    }
  }
  return argv;
}

std::string restart_line(const RestartPlan& plan) {
  std::string hosts;
  for (const std::string& host : plan.hosts) hosts += (hosts.empty() ? "" : ", ") + host;
  return fmt::format(
      "restart {}/{} after {} (exit {}): from step {} on host{} {} ({} rank{}, "
      "gradient_accumulation_steps {})",
      plan.restart, plan.max_restarts, plan.reason, plan.exit_code, plan.from_step,
      plan.hosts.size() == 1 ? "" : "s", hosts, plan.world, plan.world == 1 ? "" : "s",
      plan.accumulation);
}

nlohmann::ordered_json restart_row(const RestartPlan& plan) {
  return {{"event", "restart"},
          {"restart", plan.restart},
          {"max_restarts", plan.max_restarts},
          {"reason", plan.reason},
          {"exit_code", plan.exit_code},
          {"from_step", plan.from_step},
          {"hosts", plan.hosts},
          {"world_size", plan.world},
          {"gradient_accumulation_steps", plan.accumulation}};
}

}  // namespace zt
