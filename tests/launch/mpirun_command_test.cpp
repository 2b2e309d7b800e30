// zt-run's mpirun line (launch/mpirun_command.h): what is added for root, for more CPU ranks than
// slots, and which variables are forwarded; the hostfile's slots; bad arguments as input errors.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "launch/mpirun_command.h"
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

RunRequest parse(std::vector<std::string> args) { return parse_run_request(args); }

std::string line_of(const RunRequest& request, const LaunchHost& host) {
  return shell_line(mpirun_argv(request, host));
}

TEST(MpirunCommand, ParsesOptionsAndProgram) {
  const RunRequest r = parse({"-np", "4", "--hostfile", "hosts", "--cpu", "--", "zt-train",
                              "--config", "x.json", "--", "-np"});
  EXPECT_EQ(r.ranks, 4);
  EXPECT_EQ(r.hostfile, "hosts");
  EXPECT_TRUE(r.cpu);
  EXPECT_FALSE(r.dry_run);
  // Everything after the first "--" is the program's, even "--" and "-np".
  EXPECT_EQ(r.program, (std::vector<std::string>{"zt-train", "--config", "x.json", "--", "-np"}));
  EXPECT_EQ(parse({"-n", "2", "--dry-run", "--", "a"}).ranks, 2);
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_EQ(r.max_restarts, 0);  // torchrun's default: a failure ends the job
  EXPECT_EQ(r.min_nodes, 1);
  const RunRequest restarts =
      parse({"-np", "4", "--max-restarts", "2", "--min-nodes", "2", "--", "zt-train"});
  EXPECT_EQ(restarts.max_restarts, 2);
  EXPECT_EQ(restarts.min_nodes, 2);
}

TEST(MpirunCommand, BadArgumentsAreInputErrors) {
  EXPECT_NE(input_error([] {
              parse({"-np", "0", "--", "a"});
            }).find("positive integer"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse({"-np", "2x", "--", "a"}); }).find("'2x'"), std::string::npos);
  EXPECT_NE(input_error([] { parse({"-np"}); }).find("needs a value"), std::string::npos);
  EXPECT_NE(input_error([] { parse({"--", "a"}); }).find("-np N is required"), std::string::npos);
  EXPECT_NE(input_error([] {
              parse({"-np", "2", "zt-train"});
            }).find("missing '--' before the program 'zt-train'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              parse({"-np", "2", "--host", "a", "--", "b"});
            }).find("unknown option '--host'"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse({"-np", "2"}); }).find("missing '--'"), std::string::npos);
  EXPECT_NE(input_error([] { parse({"-np", "2", "--"}); }).find("no program"), std::string::npos);
  EXPECT_EQ(input_error([] {
              parse({"-np", "2", "--max-restarts", "-1", "--", "a"});
            }),
            "--max-restarts must be an integer >= 0; got '-1'");
  EXPECT_EQ(input_error([] {
              parse({"-np", "2", "--min-nodes", "0", "--", "a"});
            }),
            "--min-nodes must be a positive integer; got '0'");
}

TEST(MpirunCommand, NonRootWithinSlots) {
  LaunchHost host;
  host.slots = 2;
  EXPECT_EQ(line_of(parse({"-np", "2", "--", "zt-train", "--config", "c.json"}), host),
            "mpirun -np 2 --map-by slot --bind-to none zt-train --config c.json");
}

TEST(MpirunCommand, RootAndOversubscribedOnCpus) {
  LaunchHost host;
  host.root = true;
  host.slots = 2;
  EXPECT_EQ(line_of(parse({"-np", "4", "--", "zt-train"}), host),
            "mpirun -np 4 --allow-run-as-root --oversubscribe --map-by slot --bind-to none "
            "zt-train");
  // With a GPU visible, more ranks than slots is mpirun's to refuse, unless --cpu says the
  // ranks compute on CPUs.
  host.gpu_visible = true;
  EXPECT_EQ(line_of(parse({"-np", "4", "--", "zt-train"}), host).find("--oversubscribe"),
            std::string::npos);
  EXPECT_NE(line_of(parse({"-np", "4", "--cpu", "--", "zt-train"}), host).find("--oversubscribe"),
            std::string::npos);
}

TEST(MpirunCommand, ForwardsTheRanksEnvironment) {
  LaunchHost host;
  host.slots = 8;
  host.environment = {"HOME",      "PATH",       "ZT_TEST_FAULT",   "OMP_NUM_THREADS",
                      "TERM",      "NCCL_DEBUG", "OMP_WAIT_POLICY", "LD_LIBRARY_PATH",
                      "OMPI_MCA_x"};
  EXPECT_EQ(line_of(parse({"-np", "2", "--hostfile", "my hosts", "--", "zt-train"}), host),
            "mpirun -np 2 --hostfile 'my hosts' --map-by slot --bind-to none "
            "--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 "
            "--mca oob_tcp_keepalive_probes 3 -x LD_LIBRARY_PATH "
            "-x NCCL_DEBUG -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x PATH -x ZT_TEST_FAULT "
            "zt-train");
}

// With a hostfile, Open MPI's keepalive for its daemons; one the caller set (OMPI_MCA_<name>)
// is left to the caller; without a hostfile, none.
TEST(MpirunCommand, DaemonKeepaliveWithAHostfileUnlessSet) {
  LaunchHost host;
  host.slots = 8;
  host.environment = {"OMPI_MCA_oob_tcp_keepalive_time"};
  EXPECT_EQ(line_of(parse({"-np", "2", "--hostfile", "h", "--", "zt-train"}), host),
            "mpirun -np 2 --hostfile h --map-by slot --bind-to none "
            "--mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 zt-train");
  EXPECT_EQ(line_of(parse({"-np", "2", "--", "zt-train"}), host),
            "mpirun -np 2 --map-by slot --bind-to none zt-train");
}

TEST(MpirunCommand, HostfileSlots) {
  EXPECT_EQ(hostfile_slots("# two nodes\nnode0 slots=2\nnode1 slots=3 max_slots=4\n\n", 16, "h"),
            5);
  // Without slots=, max_slots, else the node's cores (this machine's stand in).
  EXPECT_EQ(hostfile_slots("a max_slots=4\nb\n", 2, "h"), 6);
  EXPECT_NE(input_error([] { hostfile_slots("a slots=x\n", 2, "h"); }).find("h:1: 'slots=x'"),
            std::string::npos);
  EXPECT_NE(input_error([] { hostfile_slots("# nothing\n", 2, "h"); }).find("lists no host"),
            std::string::npos);
  // Each host line, its slots and the line without its comment.
  const std::vector<HostfileEntry> entries = parse_hostfile("a slots=2 # first\nb\n", 3, "h");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].host, "a");
  EXPECT_EQ(entries[0].slots, 2);
  EXPECT_EQ(entries[0].line, "a slots=2 ");
  EXPECT_EQ(entries[1].host, "b");
  EXPECT_EQ(entries[1].slots, 3);
}

TEST(MpirunCommand, ShellLineQuotes) {
  const std::vector<std::string> argv = {"a", "b c", "it's", "", "--set", "zt.x={\"k\":1}"};
  EXPECT_EQ(shell_line(argv), "a 'b c' 'it'\\''s' '' --set 'zt.x={\"k\":1}'");
}

}  // namespace
}  // namespace zt
