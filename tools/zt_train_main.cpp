// zt-train: trains a model from a JSON job config, on one process or under mpirun.
//   zt-train --config FILE [--set key.path=value]... [--resume [DIR]]
//   mpirun -np N zt-train --config FILE ...
//   zt-train --config FILE --dry-run   (the memory plan of zt-estimate for this config; exits)
// --resume continues from a sharded checkpoint: DIR (a checkpoint root, which follows its
// `latest`, or one step directory), or without DIR the config's zt.checkpoint.dir (default
// <zt.output_dir>/checkpoints). Exit code 4: preempted (SIGTERM/SIGUSR1), checkpoint saved.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "comm/collective_watchdog.h"
#include "comm/communicator_factory.h"
#include "comm/process_group.h"
#include "launch/cpu_binding.h"
#include "launch/logger.h"
#include "launch/tool_frame.h"
#include "runtime/device_factory.h"
#include "runtime/status.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace po = boost::program_options;

namespace {

struct CommandLine {
  std::string config_path;
  std::vector<std::string> overrides;
  std::optional<std::string> resume;  // --resume [DIR]: "" without DIR
  bool help = false;
  bool dry_run = false;
};

CommandLine parse_command_line(int argc, char** argv, std::string* help_text) {
  CommandLine cl;
  po::options_description desc(
      "usage: zt-train --config FILE [--set key.path=value]... [--resume [DIR]]");
  std::string resume;
  desc.add_options()("help,h", "show this help")(
      "config,c", po::value(&cl.config_path), "job config (JSON, DeepSpeed key names + zt block)")(
      "set", po::value(&cl.overrides)->composing(),
      "override a config key, e.g. --set zt.steps=100 (repeatable; value parsed as JSON)")(
      "dry-run", po::bool_switch(&cl.dry_run),
      "print the memory plan per rank for this config and world size (zt-estimate's) and exit")(
      "resume", po::value(&resume)->implicit_value(""),
      "continue from a checkpoint: DIR (a checkpoint root or a step directory), or without DIR "
      "the latest under zt.checkpoint.dir");
  const std::vector<std::string> args = zt::attach_optional_value(argc, argv, "--resume");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    zt::throw_input(fmt::format("{} (see zt-train --help)", e.what()));
  }
  std::ostringstream text;
  text << desc;
  *help_text = text.str();
  cl.help = vm.count("help") > 0;
  if (vm.count("resume")) cl.resume = resume;
  if (!cl.help && cl.config_path.empty())
    zt::throw_input("--config FILE is required (see zt-train --help)");
  return cl;
}

}  // namespace

int main(int argc, char** argv) {
  zt::block_preemption_signals();  // before any thread: see train/preemption.h
  zt::MpiSession mpi(&argc, &argv);
  const zt::ProcessGroup& group = mpi.group();
  zt::Logger log(group.rank, group.world);

  // Phase 1: everything the job's input can get wrong, on every rank, then one agreement: the
  // lowest failing rank's message is printed once and every rank exits with its code.
  std::optional<zt::TrainSetup> setup;
  std::optional<zt::CpuBinding> cpus;
  std::string help_text;
  bool help = false;
  std::string dry_run_plan;  // rank 0's plan text under --dry-run
  const int setup_code = zt::agree_on_exit_code("zt-train", group.rank, group.world, [&] {
    // First, before any thread of ours exists: threads inherit the mask when they start.
    cpus = zt::bind_local_cpus(group);
    CommandLine cl = parse_command_line(argc, argv, &help_text);
    help = cl.help;
    if (!help && cl.dry_run) {
      // Nothing is allocated and no data file is opened: the config, the model's tables and
      // the world's shape (nodes = world / ranks on this machine) are all the plan needs.
      zt::Config config = zt::load_config(cl.config_path, cl.overrides, group.world);
      const zt::ModelSpec shape = zt::resolve_model(config);
      zt::resolve_auto_from_model(config, shape.hidden_size());
      const std::unique_ptr<zt::Model> model = zt::build_model(shape);
      const int nodes = std::max(1, group.world / std::max(1, group.local_world));
      const zt::PlanRequest request =
          zt::plan_request_from_config(config, shape, *model, group.world, nodes);
      dry_run_plan = zt::plan_report(request, &shape).text;
      help = true;  // nothing more to do
      return 0;
    }
    if (!help)
      setup =
          zt::prepare_training(cl.config_path, cl.overrides, group.rank, group.world, cl.resume);
    return 0;
  });
  if (setup_code != 0) return setup_code;
  if (help) {
    if (group.rank == 0) std::cout << (dry_run_plan.empty() ? help_text + "\n" : dry_run_plan);
    return 0;
  }

  // Phase 2: training. A failure here is one rank's, and the others may be inside a
  // collective: print it and end the whole job. The exception is a device too small
  // (zt.device_memory_limit, or a GPU's memory) for the communicator's buffers or the model
  // states: every rank allocates them before any collective of training, so the ranks agree on
  // that as in phase 1 (train() returns the agreed TrainResult::exit_code), and every rank
  // stops before the first step with the lowest failing rank's line. Errors once the engine
  // exists are reported from inside train() (on_error), before the stack unwinds past the
  // engine: its CommQueue would otherwise wait for collectives the other ranks never issue. A
  // collective stuck past zt.comm_timeout_s is reported by the communicator's watchdog thread,
  // which ends the job the same way with exit code 3.
  bool agreed_failure = false;
  const int report_rank = group.world > 1 ? group.rank : -1;
  const int code = zt::run_tool(
      "zt-train",
      [&] {
        const zt::ZtConfig& zc = setup->config.zt;
        // One GPU per rank by local rank (CUDA_VISIBLE_DEVICES honoured by the CUDA runtime).
        std::unique_ptr<zt::Device> device =
            zt::make_device(zt::parse_device_kind(zc.device, setup->config.source + ": zt.device"),
                            group.local_rank);
        zt::set_allow_tf32(*device, zc.allow_tf32);
        device->set_memory_limit(zc.device_memory_limit);
        // The communicator's staging buffers are the first device memory of the job, allocated
        // after its collectives (duplicating the world): that they do not fit the device is agreed
        // on as in phase 1, and so are the model states (train()). Other errors end the job.
        std::unique_ptr<zt::Communicator> comm;
        std::string out_of_memory;
        try {
          comm = zt::make_communicator(zc.comm_backend, *device, zc.comm_timeout_s,
                                       zc.comm_init_timeout_s);
        } catch (const zt::Error& e) {
          if (e.kind() != zt::ErrorKind::kOutOfMemory) throw;
          zt::describe_current_exception(&out_of_memory);
        }
        if (const int agreed =
                zt::agree_on_failure("zt-train", group.rank, group.world,
                                     out_of_memory.empty() ? 0 : zt::kExitFailure, out_of_memory)) {
          agreed_failure = true;
          return agreed;
        }
        comm->set_watchdog(zc.comm_timeout_s, [&](const zt::CollectiveTimeout& timeout) {
          zt::abort_job("zt-train", report_rank, timeout.message(), zt::kExitCommTimeout);
        });
        auto abort_on_error = [&] {
          if (group.world == 1) return;  // nobody waits: run_tool below reports it
          std::string message;
          const int error_code = zt::describe_current_exception(&message);
          zt::abort_job("zt-train", report_rank, message, error_code);
        };
        const zt::TrainResult result =
            zt::train(*setup, *cpus, *device, *comm, log, abort_on_error);
        if (result.exit_code == 0) return 0;
        agreed_failure = true;
        if (!result.failure.empty()) std::fprintf(stderr, "zt-train: %s\n", result.failure.c_str());
        return result.exit_code;
      },
      report_rank);
  if (code != 0 && group.world > 1 && !agreed_failure) {
    zt::arm_abort_deadline(code);  // MPI_Abort may block when the launcher is unreachable
    mpi.abort(code);
  }
  return code;
}
