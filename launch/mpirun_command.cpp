// zt-run's argument parsing, the hostfile's slot count and the mpirun line.
#include "launch/mpirun_command.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "runtime/status.h"

namespace zt {

namespace {

// A non-negative int from the whole of `text`, or -1.
int non_negative_int(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return -1;
  return value;
}

// A positive int from the whole of `text`, or 0.
int positive_int(std::string_view text) { return std::max(0, non_negative_int(text)); }

}  // namespace

std::string run_usage() {
  return "usage: zt-run -np N [--hostfile FILE] [--cpu] [--max-restarts N] [--min-nodes N]\n"
         "              [--dry-run] -- PROGRAM [ARGS...]\n"
         "  e.g. zt-run -np 2 -- zt-train --config configs/gpt2-tiny.json\n"
         "Runs PROGRAM on N ranks with mpirun, adding what this machine needs, and prints the\n"
         "mpirun line first (on stderr; with --dry-run on stdout, and nothing runs).\n"
         "  -np N            ranks in the world (also -n N, --np N)\n"
         "  --hostfile FILE  Open MPI hostfile (\"host slots=K\" a line) for several nodes\n"
         "  --cpu            ranks compute on CPUs: more ranks than slots oversubscribe\n"
         "                   (also without --cpu when no GPU is visible)\n"
         "  --max-restarts N relaunch a failed zt-train job up to N times from its latest\n"
         "                   complete checkpoint (default 0: zt-run execs mpirun); with\n"
         "                   --hostfile, a failed host is left out and the global batch kept\n"
         "  --min-nodes N    a restart continues on at least N hosts (default 1)\n"
         "  --dry-run        print the mpirun line and exit\n"
         "mpirun's own settings go through its environment (OMPI_MCA_name=value).\n";
}

RunRequest parse_run_request(std::span<const std::string> args) {
  RunRequest request;
  size_t i = 0;
  auto value_of = [&](const std::string& option) -> const std::string& {
    if (i + 1 >= args.size()) throw_input(option + " needs a value (see zt-run --help)");
    return args[++i];
  };
  bool separator = false;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      separator = true;
      ++i;
      break;
    }
    if (arg == "-np" || arg == "--np" || arg == "-n") {
      const std::string& text = value_of(arg);
      request.ranks = positive_int(text);
      if (request.ranks == 0)
        throw_input(fmt::format("{} must be a positive integer; got '{}'", arg, text));
    } else if (arg == "--hostfile" || arg == "-hostfile") {
      request.hostfile = value_of(arg);
      if (request.hostfile.empty()) throw_input("--hostfile needs a file name");
    } else if (arg == "--max-restarts") {
      const std::string& text = value_of(arg);
      request.max_restarts = non_negative_int(text);
      if (request.max_restarts < 0)
        throw_input(fmt::format("--max-restarts must be an integer >= 0; got '{}'", text));
    } else if (arg == "--min-nodes") {
      const std::string& text = value_of(arg);
      request.min_nodes = positive_int(text);
      if (request.min_nodes == 0)
        throw_input(fmt::format("--min-nodes must be a positive integer; got '{}'", text));
    } else if (arg == "--cpu") {
      request.cpu = true;
    } else if (arg == "--dry-run") {
      request.dry_run = true;
    } else if (arg == "--help" || arg == "-h") {
      request.help = true;
    } else if (!arg.starts_with("-")) {
      throw_input(
          fmt::format("missing '--' before the program '{}': zt-run -np N -- {} ...", arg, arg));
    } else {
      throw_input(
          fmt::format("unknown option '{}' before '--' (zt-run takes -np, --hostfile, --cpu, "
                      "--max-restarts, --min-nodes, --dry-run; the program and its arguments "
                      "follow '--')",
                      arg));
    }
  }
  if (request.help) return request;
  if (request.ranks == 0) throw_input("-np N is required (see zt-run --help)");
  if (!separator)
    throw_input("missing '--' before the program: zt-run -np N -- zt-train --config FILE");
  request.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (request.program.empty())
    throw_input("no program after '--': zt-run -np N -- zt-train --config FILE");
  return request;
}

std::vector<HostfileEntry> parse_hostfile(std::string_view text, int cores_per_node,
                                          std::string_view path) {
  std::vector<HostfileEntry> entries;
  int line_number = 0;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    int slots = 0, max_slots = 0;
    for (std::string word; words >> word;) {
      for (auto [key, count] : {std::pair{"slots=", &slots}, std::pair{"max_slots=", &max_slots}}) {
        const std::string_view k = key;
        if (!word.starts_with(k)) continue;
        *count = positive_int(std::string_view(word).substr(k.size()));
        if (*count == 0)
          throw_input(
              fmt::format("{}:{}: '{}' must be a positive integer", path, line_number, word));
      }
    }
    entries.push_back({host,
                       slots > 0       ? slots
                       : max_slots > 0 ? max_slots
                                       : std::max(1, cores_per_node),
                       line});
  }
  if (entries.empty()) throw_input(fmt::format("hostfile {} lists no host", path));
  return entries;
}

int hostfile_slots(std::string_view text, int cores_per_node, std::string_view path) {
  int total = 0;
  for (const HostfileEntry& entry : parse_hostfile(text, cores_per_node, path))
    total += entry.slots;
  return total;
}

std::span<const DaemonKeepalive> daemon_keepalive() {
  static constexpr DaemonKeepalive kKeepalive[] = {{"oob_tcp_keepalive_time", 5},
                                                   {"oob_tcp_keepalive_intvl", 2},
                                                   {"oob_tcp_keepalive_probes", 3}};
  return kKeepalive;
}

bool forwarded_to_ranks(std::string_view name) {
  if (name == "PATH" || name == "LD_LIBRARY_PATH" || name == "CUDA_VISIBLE_DEVICES") return true;
  for (std::string_view prefix : {"OMP_", "OPENBLAS_", "ZT_", "NCCL_"})
    if (name.starts_with(prefix)) return true;
  return false;
}

std::vector<std::string> mpirun_argv(const RunRequest& request, const LaunchHost& host) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(request.ranks)};
  if (!request.hostfile.empty()) {
    argv.push_back("--hostfile");
    argv.push_back(request.hostfile);
  }
  if (host.root) argv.push_back("--allow-run-as-root");
  const bool on_cpus = request.cpu || !host.gpu_visible;
  if (on_cpus && request.ranks > host.slots) argv.push_back("--oversubscribe");
  for (const char* word : {"--map-by", "slot", "--bind-to", "none"}) argv.push_back(word);
  if (!request.hostfile.empty()) {
    // Open MPI's own failure detection for its daemons' TCP connections: an unreachable node is
    // declared lost within about time + intvl * probes seconds of silence, instead of the
    // kernel's two hours (or Open MPI's 300 + 20 * 9 s). An OMPI_MCA_<name> the caller set wins.
    for (const DaemonKeepalive& k : daemon_keepalive()) {
      const std::string env = "OMPI_MCA_" + std::string(k.name);
      if (std::find(host.environment.begin(), host.environment.end(), env) !=
          host.environment.end())
        continue;
      for (std::string word : {std::string("--mca"), std::string(k.name), std::to_string(k.value)})
        argv.push_back(std::move(word));
    }
  }

  std::vector<std::string> forwarded;
  for (const std::string& name : host.environment)
    if (forwarded_to_ranks(name)) forwarded.push_back(name);
  std::sort(forwarded.begin(), forwarded.end());
  forwarded.erase(std::unique(forwarded.begin(), forwarded.end()), forwarded.end());
  for (const std::string& name : forwarded) {
    argv.push_back("-x");
    argv.push_back(name);
  }
  argv.insert(argv.end(), request.program.begin(), request.program.end());
  return argv;
}

std::string shell_line(std::span<const std::string> argv) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_./=:,+@%-").find(c) != std::string_view::npos;
  };
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) {
      line += word;
      continue;
    }
    line += '\'';
    for (char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace zt
