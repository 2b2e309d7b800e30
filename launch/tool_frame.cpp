// Error-to-exit-code mapping and the thread environment of the executables.
#include "launch/tool_frame.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "runtime/status.h"

namespace zt {

int run_tool(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool,
                 e.kind() == ErrorKind::kInput ? e.message().c_str() : e.describe().c_str());
    return e.kind() == ErrorKind::kInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return 1;
  }
}

void ensure_thread_environment(int argc, char** argv) {
  (void)argc;
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc?): carry on with the default policy; only speed is affected.
}

}  // namespace zt
