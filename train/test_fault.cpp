// Parsing of ZT_TEST_FAULT and ZT_TEST_WRITE_LIMIT, and the injected error.
#include "train/test_fault.h"

#include <csignal>
#include <cstdlib>
#include <sstream>

#include "runtime/status.h"

namespace zt {

namespace {

int64_t parse_integer(const std::string& text, const char* variable, const std::string& key) {
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw_input(fmt::format("{}: '{}' must be an integer; got '{}'", variable, key, text));
}

}  // namespace

const char* test_fault_point_name(TestFault::Point point) {
  switch (point) {
    case TestFault::Point::kForward: return "forward";
    case TestFault::Point::kBackward: return "backward";
    case TestFault::Point::kOptimizer: return "optimizer";
    case TestFault::Point::kEvaluation: return "evaluation";
    case TestFault::Point::kSave: return "save";
    case TestFault::Point::kCheckpoint: return "checkpoint";
    case TestFault::Point::kCommit: return "commit";
  }
  return "?";
}

std::optional<TestFault> TestFault::from_environment() {
  const char* text = std::getenv("ZT_TEST_FAULT");
  if (text == nullptr || *text == '\0') return std::nullopt;
  TestFault fault;
  bool have_point = false, have_rank = false;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw_input(fmt::format("ZT_TEST_FAULT: '{}' is not key=value (in '{}')", item, text));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "point") {
      have_point = true;
      bool known = false;
      for (Point p : {Point::kForward, Point::kBackward, Point::kOptimizer, Point::kEvaluation,
                      Point::kSave, Point::kCheckpoint, Point::kCommit})
        if (value == test_fault_point_name(p)) fault.point = p, known = true;
      if (!known)
        throw_input(
            fmt::format("ZT_TEST_FAULT: unknown point '{}'; use forward, backward, "
                        "optimizer, evaluation, save, checkpoint or commit",
                        value));
    } else if (key == "rank") {
      have_rank = true;
      fault.rank = static_cast<int>(parse_integer(value, "ZT_TEST_FAULT", key));
    } else if (key == "step") {
      fault.step = parse_integer(value, "ZT_TEST_FAULT", key);
    } else if (key == "unit") {
      fault.unit = static_cast<int>(parse_integer(value, "ZT_TEST_FAULT", key));
    } else if (key == "action") {
      if (value != "throw" && value != "kill")
        throw_input(fmt::format("ZT_TEST_FAULT: action '{}'; use throw or kill", value));
      fault.action = value == "kill" ? Action::kKill : Action::kThrow;
    } else {
      throw_input(
          fmt::format("ZT_TEST_FAULT: unknown key '{}'; use point, rank, step, unit, action", key));
    }
  }
  if (!have_point || !have_rank)
    throw_input(fmt::format("ZT_TEST_FAULT needs point= and rank=; got '{}'", text));
  return fault;
}

bool TestFault::due(Point at, int my_rank, int64_t at_step, int at_unit) const {
  return at == point && my_rank == rank && (point == Point::kSave || at_step == step) &&
         (unit < 0 || at_unit == unit);
}

void TestFault::fire(const std::string& unit_name, int64_t at_step, int my_rank) const {
  if (action == Action::kKill) {
    std::raise(SIGKILL);
    std::abort();  // not reached
  }
  throw_system(fmt::format("injected fault (ZT_TEST_FAULT) at {} of unit {}, {} {}, on rank {}",
                           test_fault_point_name(point), unit_name,
                           point == Point::kEvaluation ? "evaluation after step" : "step", at_step,
                           my_rank));
}

int64_t test_write_limit_from_environment() {
  const char* text = std::getenv("ZT_TEST_WRITE_LIMIT");
  if (text == nullptr || *text == '\0') return -1;
  const int64_t limit = parse_integer(text, "ZT_TEST_WRITE_LIMIT", "value");
  if (limit < 0) throw_input(fmt::format("ZT_TEST_WRITE_LIMIT must be >= 0; got {}", limit));
  return limit;
}

}  // namespace zt
