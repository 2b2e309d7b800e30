// Layer rules (docs/architecture.md, "Layers"), checked on the source tree: every target has the
// repository root as an include directory, so neither the compiler nor the linker stops a file
// from including a layer above its own; this test does. It reads every .h/.cpp/.cu/.cuh under
// the layer folders, parses `#include "folder/..."` and fails naming file:line and the include
// when a file includes a folder its layer may not see, and on `#if`/`#ifdef` on CUDA (or NCCL)
// outside runtime/ and comm/. The checker is run first on small fixture trees with known
// violations, so a checker that found nothing would fail here too. Reads files only; builds
// nothing.
//
// What each layer may include (the CMake target graph; includes point downward only):
//   runtime    runtime
//   comm       runtime, comm
//   offload    runtime, offload
//   model_zoo  runtime, model_zoo               (a model is written against runtime's Model only)
//   zero       runtime, comm, offload, zero     (never model_zoo: it drives any runtime::Model)
//   pretrained runtime, model_zoo, zero, pretrained     (weights files, save_pretrained)
//   generate   runtime, comm, zero, generate    (text generation: a cache over any Model)
//   launch     runtime, comm, launch            (the process: mpirun line, restarts, exit codes)
//   train      every layer below it and train   (the training job: trainer and components)
//   bench      every layer but tools            (the benchmarks and their harness)
//   tools      every layer                      (the executables' mains: the only top)
// No layer includes tests/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::set<std::string>>& allowed_includes() {
  static const std::map<std::string, std::set<std::string>> allowed = {
      {"runtime", {"runtime"}},
      {"comm", {"runtime", "comm"}},
      {"offload", {"runtime", "offload"}},
      {"model_zoo", {"runtime", "model_zoo"}},
      {"zero", {"runtime", "comm", "offload", "zero"}},
      {"pretrained", {"runtime", "model_zoo", "zero", "pretrained"}},
      {"generate", {"runtime", "comm", "zero", "generate"}},
      {"launch", {"runtime", "comm", "launch"}},
      {"train",
       {"runtime", "comm", "offload", "model_zoo", "zero", "pretrained", "launch", "train"}},
      {"bench",
       {"runtime", "comm", "offload", "model_zoo", "zero", "pretrained", "launch", "train",
        "bench"}},
      {"tools",
       {"runtime", "comm", "offload", "model_zoo", "zero", "pretrained", "generate", "launch",
        "train", "bench", "tools"}},
  };
  return allowed;
}

// Folders an include may name besides the layers: naming one from a layer is a violation.
const std::set<std::string>& other_top_folders() {
  static const std::set<std::string> folders = {"tests", "configs", "scripts"};
  return folders;
}

// Layers whose code may branch on the CUDA back end at compile time.
bool may_branch_on_cuda(const std::string& layer) { return layer == "runtime" || layer == "comm"; }

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
}

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// One message per violation, "path:line: what is wrong", path relative to root.
std::vector<std::string> check_tree(const fs::path& root) {
  static const std::regex include_re(R"re(^\s*#\s*include\s*"(([^"/]+)/[^"]*)")re");
  static const std::regex cuda_if_re(R"(^\s*#\s*(if|ifdef|ifndef|elif)\b.*(CUDA|NCCL))");
  std::vector<std::string> violations;
  for (const auto& [layer, allowed] : allowed_includes()) {
    const fs::path dir = root / layer;
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.is_regular_file() && is_source(entry.path())) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      const std::string rel = fs::relative(file, root).generic_string();
      std::ifstream in(file);
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        std::smatch m;
        const std::string where = rel + ":" + std::to_string(number) + ": ";
        if (std::regex_search(line, m, include_re)) {
          const std::string path = m[1].str(), folder = m[2].str();
          const bool is_layer = allowed_includes().count(folder) > 0;
          if ((is_layer || other_top_folders().count(folder)) && !allowed.count(folder))
            violations.push_back(where + "includes \"" + path + "\": " + layer +
                                 "/ may include only " + join(allowed));
        }
        if (!may_branch_on_cuda(layer) && std::regex_search(line, m, cuda_if_re))
          violations.push_back(where + "`" + line + "`: no #if on CUDA outside runtime/ and comm/");
      }
    }
  }
  return violations;
}

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

TEST(Layering, SourceTreeFollowsTheLayerRules) {
  const fs::path root = ZT_SOURCE_DIR;
  ASSERT_TRUE(fs::is_directory(root / "runtime")) << root << " is not the source tree";
  const std::vector<std::string> violations = check_tree(root);
  EXPECT_TRUE(violations.empty()) << violations.size() << " layer violation(s):\n"
                                  << lines(violations);
}

// A fixture tree written under the test's temporary directory.
class LayeringChecker : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("zt_layering_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(LayeringChecker, AcceptsDownwardIncludes) {
  write("runtime/a.h", "#pragma once\n#include <vector>\n#include \"runtime/b.h\"\n");
  write("runtime/cuda/k.cu", "#if ZT_HAVE_CUDA\n#include \"runtime/a.h\"\n#endif\n");
  write("comm/c.cpp",
        "#include \"comm/c.h\"\n#include \"runtime/a.h\"\n#ifdef ZT_HAVE_NCCL\n#endif\n");
  write("zero/z.cpp", "#include \"zero/z.h\"\n#include \"comm/c.h\"\n#include \"offload/o.h\"\n");
  write("model_zoo/m.cpp", "#include \"model_zoo/m.h\"\n#include \"runtime/model.h\"\n");
  write("tools/l.cpp",
        "#include \"zero/z.h\"\n#include \"model_zoo/m.h\"\n#include \"comm/c.h\"\n"
        "#include \"cblas.h\"\n#include \"nlohmann/json.hpp\"\n");
  EXPECT_EQ(lines(check_tree(root_)), "");
}

TEST_F(LayeringChecker, NamesEveryUpwardOrSidewaysInclude) {
  write("runtime/r.cpp", "// text\n#include \"runtime/r.h\"\n#include \"comm/communicator.h\"\n");
  write("zero/sub/z.h", "#pragma once\n  #  include \"model_zoo/gpt2.h\"\n");
  write("model_zoo/m.cpp", "#include \"zero/engine.h\"\n");
  write("comm/c.cpp", "#include \"tests/runtime/random_data.h\"\n");
  write("offload/o.cpp", "#include \"comm/communicator.h\"\n");
  const std::vector<std::string> v = check_tree(root_);
  ASSERT_EQ(v.size(), 5u) << lines(v);
  const std::string all = lines(v);
  EXPECT_NE(all.find("runtime/r.cpp:3: includes \"comm/communicator.h\": runtime/ may include "
                     "only runtime"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("zero/sub/z.h:2: includes \"model_zoo/gpt2.h\""), std::string::npos) << all;
  EXPECT_NE(all.find("model_zoo/m.cpp:1: includes \"zero/engine.h\""), std::string::npos) << all;
  EXPECT_NE(all.find("comm/c.cpp:1: includes \"tests/runtime/random_data.h\""), std::string::npos)
      << all;
  EXPECT_NE(all.find("offload/o.cpp:1: includes \"comm/communicator.h\""), std::string::npos)
      << all;
}

// The layers above zero/: pretrained/ (weights files) over zero/ and model_zoo/; launch/ (the
// process) over comm/ only; train/ over both; bench/ over train/; tools/ on top. What each may
// include is accepted; each include a layer may not make is named.
TEST_F(LayeringChecker, KeepsTheJobLayersInOrder) {
  write("pretrained/w.cpp", "#include \"zero/engine.h\"\n#include \"model_zoo/hf_config.h\"\n");
  write("launch/l.cpp", "#include \"comm/process_group.h\"\n#include \"runtime/status.h\"\n");
  write("train/t.cpp",
        "#include \"pretrained/w.h\"\n#include \"launch/logger.h\"\n#include \"zero/engine.h\"\n"
        "#include \"offload/swap_store.h\"\n");
  write("bench/b.cpp", "#include \"train/checkpointer.h\"\n#include \"launch/logger.h\"\n");
  write("tools/m.cpp", "#include \"bench/bench.h\"\n#include \"train/trainer.h\"\n");
  EXPECT_EQ(lines(check_tree(root_)), "");

  write("pretrained/x.cpp", "#include \"train/trainer.h\"\n");
  write("launch/x.cpp", "#include \"zero/engine.h\"\n");
  write("train/x.cpp", "#include \"bench/bench.h\"\n");
  write("bench/x.cpp", "#include \"tools/checkpoint_tool.h\"\n");
  write("zero/x.cpp", "#include \"pretrained/weights_io.h\"\n");
  write("model_zoo/x.cpp", "#include \"pretrained/save_pretrained.h\"\n");
  write("tools/x.cpp", "#include \"tests/model_zoo/tiny_llama.h\"\n");
  const std::vector<std::string> v = check_tree(root_);
  ASSERT_EQ(v.size(), 7u) << lines(v);
  const std::string all = lines(v);
  for (const char* expected :
       {"pretrained/x.cpp:1: includes \"train/trainer.h\": pretrained/ may include only model_zoo, "
        "pretrained, runtime, zero",
        "launch/x.cpp:1: includes \"zero/engine.h\": launch/ may include only comm, launch, "
        "runtime",
        "train/x.cpp:1: includes \"bench/bench.h\"", "bench/x.cpp:1: includes \"tools/",
        "zero/x.cpp:1: includes \"pretrained/", "model_zoo/x.cpp:1: includes \"pretrained/",
        "tools/x.cpp:1: includes \"tests/"})
    EXPECT_NE(all.find(expected), std::string::npos) << expected << "\n" << all;
}

TEST_F(LayeringChecker, NamesCudaConditionalsOutsideRuntimeAndComm) {
  write("zero/z.cpp", "#include \"zero/z.h\"\n#ifdef ZT_HAVE_CUDA\n#endif\n");
  write("launch/l.cpp", "#if defined(__CUDACC__)\n#elif ZT_HAVE_NCCL\n#endif\n");
  write("model_zoo/m.h", "#ifndef ZT_HAVE_CUDA\n#endif\n// #ifdef ZT_HAVE_CUDA in a comment\n");
  const std::vector<std::string> v = check_tree(root_);
  ASSERT_EQ(v.size(), 4u) << lines(v);
  EXPECT_NE(v[0].find("launch/l.cpp:1:"), std::string::npos) << lines(v);
  EXPECT_NE(v[1].find("launch/l.cpp:2:"), std::string::npos) << lines(v);
  EXPECT_NE(v[2].find("model_zoo/m.h:1:"), std::string::npos) << lines(v);
  EXPECT_NE(v[3].find("zero/z.cpp:2: `#ifdef ZT_HAVE_CUDA`"), std::string::npos) << lines(v);
}

}  // namespace
