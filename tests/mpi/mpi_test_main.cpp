// The main of zt_mpi_tests: starts MPI (MpiSession), runs every test on every rank, prints each
// rank's failures (rank 0 also prints GoogleTest's usual report), and exits non-zero on every
// rank when any rank failed. Tests run in the same order everywhere (no shuffling), so their
// collectives match up.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/process_group.h"
#include "runtime/status.h"

namespace {

// Prints "[rank r] file:line: failure" for every failed assertion of a rank other than 0, whose
// default printer is removed to keep the output to one report.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The name is kept here: UnitTest::current_test_info() would take the lock GoogleTest holds
  // while it reports a result.
  void OnTestStart(const testing::TestInfo& test) override {
    test_name_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s at %s:%d\n%s\n", rank_, test_name_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_name_;
};

int run(int argc, char** argv) {
  zt::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const int rank = session.group().rank;
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_ranks = 0;
  ZT_MPI_CHECK(MPI_Allreduce(&local_failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  if (rank == 0 && failed_ranks > 0)
    std::fprintf(stderr, "zt_mpi_tests: tests failed on %d of %d ranks\n", failed_ranks,
                 session.group().world);
  return failed_ranks > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zt::Error& e) {
    std::fprintf(stderr, "zt_mpi_tests: %s\n", e.describe().c_str());
    return 1;
  }
}
