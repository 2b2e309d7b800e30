// zt-run's restart decisions (launch/restart_policy.h): which exits are restarted, the failures
// read from mpirun's stderr and the hosts they name, the ranks per host, the accumulation that
// keeps the global batch, zt-train's relaunch line, and the restart's line and row.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "launch/restart_policy.h"
#include "runtime/status.h"

namespace zt {
namespace {

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::vector<HostfileEntry> hosts(std::vector<std::pair<std::string, int>> slots) {
  std::vector<HostfileEntry> entries;
  for (auto& [host, n] : slots) entries.push_back({host, n, fmt::format("{} slots={}", host, n)});
  return entries;
}

TEST(RestartPolicy, OnlyFailuresAreRestarted) {
  EXPECT_EQ(classify_job_end(0, false), JobEnd::kSucceeded);
  EXPECT_EQ(classify_job_end(2, false), JobEnd::kBadInput);
  EXPECT_EQ(classify_job_end(4, false), JobEnd::kPreempted);
  for (int code : {1, 3, 137, 205}) EXPECT_EQ(classify_job_end(code, false), JobEnd::kFailed);
  // Whatever the exit, a job zt-run passed a signal to was stopped on request.
  for (int code : {1, 3, 4, 143}) EXPECT_EQ(classify_job_end(code, true), JobEnd::kStopped);
  EXPECT_EQ(classify_job_end(0, true), JobEnd::kSucceeded);
  EXPECT_EQ(not_restarted_because(JobEnd::kFailed, 1), "");
  EXPECT_NE(not_restarted_because(JobEnd::kBadInput, 2).find("exit 2 is bad input"),
            std::string::npos);
  EXPECT_NE(not_restarted_because(JobEnd::kPreempted, 4).find("preemption"), std::string::npos);
}

TEST(RestartPolicy, ReadsTheFailuresMpirunNames) {
  // Open MPI 4.1's lines (help-errmgr-base.txt [node-died], help-orterun.txt).
  const auto daemon = node_failure_in("  Remote daemon: [[41500,0],1] on node 10.213.241.2");
  ASSERT_TRUE(daemon);
  EXPECT_EQ(daemon->kind, NodeFailure::Kind::kDaemonLost);
  EXPECT_EQ(daemon->node, "10.213.241.2");
  EXPECT_EQ(daemon->why, "mpirun lost its daemon on node 10.213.241.2");

  const auto rank = node_failure_in(
      "mpirun noticed that process rank 1 with PID 0 on node zt-node-a exited on signal 9 "
      "(Killed).");
  ASSERT_TRUE(rank);
  EXPECT_EQ(rank->kind, NodeFailure::Kind::kRankSignalled);
  EXPECT_EQ(rank->node, "zt-node-a");
  EXPECT_EQ(rank->why, "rank 1 on node zt-node-a exited on signal 9 (Killed)");
  const auto plain = node_failure_in(
      "mpirun noticed that process rank 3 with PID 77 on node b exited on signal 6.");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->why, "rank 3 on node b exited on signal 6");

  for (const char* other :
       {"zt-train: rank 0: step 4 | loss 10.2", "  HNP daemon   : [[41500,0],0] on node",
        "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD", ""})
    EXPECT_FALSE(node_failure_in(other)) << other;
}

TEST(RestartPolicy, FailedHostsAreTheLostDaemonsElseTheFirstSignalledRank) {
  const auto file = hosts({{"10.0.0.1", 2}, {"10.0.0.2", 2}, {"10.0.0.3", 2}});
  const std::vector<std::string> local = {"node-a", "localhost", "10.0.0.1"};
  using K = NodeFailure::Kind;
  const NodeFailure lost2{K::kDaemonLost, "10.0.0.2", ""}, lost3{K::kDaemonLost, "10.0.0.3", ""};
  const NodeFailure signalled_a{K::kRankSignalled, "node-a", ""};
  const NodeFailure signalled_3{K::kRankSignalled, "10.0.0.3", ""};
  EXPECT_EQ(failed_hosts(file, std::vector{lost3, lost2}, local), (std::vector<size_t>{1, 2}));
  // A rank mpirun ended after losing a daemon is not a failure of its host.
  EXPECT_EQ(failed_hosts(file, std::vector{signalled_a, lost2}, local), (std::vector<size_t>{1}));
  // mpirun names its own machine by its host name: the hostfile's entry for it is an address.
  EXPECT_EQ(failed_hosts(file, std::vector{signalled_a, signalled_3}, local),
            (std::vector<size_t>{0}));
  EXPECT_EQ(failed_hosts(file, std::vector<NodeFailure>{}, local), (std::vector<size_t>{}));
  EXPECT_EQ(failed_hosts(file, std::vector{NodeFailure{K::kDaemonLost, "elsewhere", ""}}, local),
            (std::vector<size_t>{}));
  // No hostfile: nothing to leave out.
  EXPECT_EQ(failed_hosts({}, std::vector{lost2}, local), (std::vector<size_t>{}));
}

TEST(RestartPolicy, RanksPerHostAsMapBySlot) {
  const auto two = hosts({{"a", 2}, {"b", 2}});
  EXPECT_EQ(ranks_per_host(4, two), (std::vector<int>{2, 2}));
  EXPECT_EQ(ranks_per_host(3, two), (std::vector<int>{2, 1}));
  EXPECT_EQ(ranks_per_host(2, two), (std::vector<int>{2, 0}));
  // Oversubscribed: past every slot, the rest spread evenly, the first hosts one more.
  EXPECT_EQ(ranks_per_host(8, two), (std::vector<int>{4, 4}));
  EXPECT_EQ(ranks_per_host(7, two), (std::vector<int>{4, 3}));
  EXPECT_EQ(ranks_per_host(5, hosts({{"a", 1}, {"b", 3}})), (std::vector<int>{2, 3}));
}

TEST(RestartPolicy, KeepsTheGlobalBatchByRaisingAccumulation) {
  const BatchSizes job{32, 8, 1};
  const BatchSizes half = keep_global_batch(job, 4, 2);
  EXPECT_EQ(half.global, 32);
  EXPECT_EQ(half.micro, 8);
  EXPECT_EQ(half.accumulation, 2);
  EXPECT_EQ(keep_global_batch(job, 4, 1).accumulation, 4);
  EXPECT_EQ(keep_global_batch({48, 4, 2}, 6, 4).accumulation, 3);
  EXPECT_EQ(input_error([&] { keep_global_batch(job, 4, 3); }),
            "cannot keep the global batch on 3 ranks: train_batch_size 32 is not a multiple of "
            "train_micro_batch_size_per_gpu 8 x 3 ranks (the job ran 4 ranks x "
            "gradient_accumulation_steps 1)");
}

TEST(RestartPolicy, ReadsZtTrainsConfigAndOverrides) {
  const std::vector<std::string> program = {"/b/zt-train", "--config",        "j.json",  "--set",
                                            "zt.steps=5",  "--set=zt.seed=2", "--resume"};
  const TrainCommand c = parse_train_command(program);
  EXPECT_EQ(c.config, "j.json");
  EXPECT_EQ(c.overrides, (std::vector<std::string>{"zt.steps=5", "zt.seed=2"}));
  EXPECT_EQ(parse_train_command(std::vector<std::string>{"zt-train", "--config=k.json"}).config,
            "k.json");
  EXPECT_EQ(parse_train_command(std::vector<std::string>{"zt-train", "-c", "l.json"}).config,
            "l.json");
  EXPECT_NE(input_error([] {
              parse_train_command(std::vector<std::string>{"/bin/true"});
            }).find("--max-restarts restarts zt-train only"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse_train_command(std::vector<std::string>{"zt-train"});
            }).find("needs zt-train's --config FILE"),
            std::string::npos);
}

TEST(RestartPolicy, RelaunchResumesAndSetsTheBatch) {
  const std::vector<std::string> program = {"zt-train", "--config", "j.json",    "--resume",
                                            "old/ckpt", "--set",    "zt.steps=9"};
  // From the latest checkpoint: the job's own --resume DIR gives way to --resume.
  EXPECT_EQ(relaunch_program(program, true, std::nullopt),
            (std::vector<std::string>{"zt-train", "--config", "j.json", "--set", "zt.steps=9",
                                      "--resume"}));
  EXPECT_EQ(relaunch_program(std::vector<std::string>{"zt-train", "--resume=x", "--resume",
                                                      "--config", "j.json"},
                             true, std::nullopt),
            (std::vector<std::string>{"zt-train", "--config", "j.json", "--resume"}));
  // No checkpoint yet: the job as first launched, its own --resume kept.
  EXPECT_EQ(relaunch_program(program, false, std::nullopt), program);
  const std::vector<std::string> shrunk = relaunch_program(program, true, BatchSizes{32, 8, 2});
  EXPECT_EQ(std::vector<std::string>(shrunk.end() - 6, shrunk.end()),
            (std::vector<std::string>{"--set", "train_batch_size=32", "--set",
                                      "train_micro_batch_size_per_gpu=8", "--set",
                                      "gradient_accumulation_steps=2"}));
}

TEST(RestartPolicy, OneLineAndOneRow) {
  RestartPlan plan;
  plan.restart = 1;
  plan.max_restarts = 2;
  plan.reason = "mpirun lost its daemon on node 10.0.0.2";
  plan.exit_code = 205;
  plan.from_step = 10;
  plan.hosts = {"10.0.0.1"};
  plan.world = 2;
  plan.accumulation = 2;
  EXPECT_EQ(restart_line(plan),
            "restart 1/2 after mpirun lost its daemon on node 10.0.0.2 (exit 205): from step 10 "
            "on host 10.0.0.1 (2 ranks, gradient_accumulation_steps 2)");
  EXPECT_EQ(restart_row(plan).dump(),
            "{\"event\":\"restart\",\"restart\":1,\"max_restarts\":2,\"reason\":\"mpirun lost "
            "its daemon on node 10.0.0.2\",\"exit_code\":205,\"from_step\":10,\"hosts\":["
            "\"10.0.0.1\"],\"world_size\":2,\"gradient_accumulation_steps\":2}");
  // The row names no step and no loss: keep_metrics_through keeps it, '"loss"' counts skip it.
  EXPECT_EQ(restart_row(plan).dump().find("\"loss\""), std::string::npos);
  EXPECT_FALSE(restart_row(plan).contains("step"));
}

}  // namespace
}  // namespace zt
