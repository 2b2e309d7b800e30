// placeholder replaced by the kernels work
#include <memory>
#include "runtime/cpu/cpu_device.h"
namespace zt { std::unique_ptr<Kernels> make_cpu_kernels() { return nullptr; } }
