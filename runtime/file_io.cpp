// read_file.
#include "runtime/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/status.h"

namespace zt {

std::string read_file(const std::string& path, std::string_view what, std::string_view hint) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw_input(fmt::format("cannot open {} {}: {}{}", what, path, std::strerror(errno), hint));
  std::string text;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) text.append(chunk, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw_system(fmt::format("error reading {} {}", what, path));
  return text;
}

}  // namespace zt
