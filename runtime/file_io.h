// Whole-file reads with the project's error messages. No allocation beyond the returned text.
#pragma once

#include <string>
#include <string_view>

namespace zt {

// The bytes of the file at `path`. A file that cannot be opened is an input error naming `what`
// and the path ("cannot open <what> <path>: <reason><hint>"); a read failure a system error.
std::string read_file(const std::string& path, std::string_view what, std::string_view hint = "");

}  // namespace zt
