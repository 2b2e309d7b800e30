// The Jinja engine (runtime/data/jinja.h) against 1,000 mutated templates, deterministic seed:
// the chat template fixtures (tests/runtime/data/templates) with tokens deleted, duplicated,
// swapped or replaced, random bytes inserted, deep nesting and huge loops spliced in. Each
// must end in a render or in one zt::Error (kInput): no crash, no other exception, no hang
// (CTest's timeout; small limits keep each render short).
#include "runtime/data/jinja.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace zt::jinja {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

const std::string kTemplates = std::string(ZT_SOURCE_DIR) + "/tests/runtime/data/templates";

std::vector<std::string> fixtures() {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kTemplates))
    if (e.path().extension() == ".jinja") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// Splits a template into rough tokens: tag delimiters, words, single other characters.
std::vector<std::string> pieces(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && (s.compare(i, 2, "{{") == 0 || s.compare(i, 2, "{%") == 0 ||
                             s.compare(i, 2, "%}") == 0 || s.compare(i, 2, "}}") == 0)) {
      out.push_back(s.substr(i, 2));
      i += 2;
    } else if (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    } else {
      out.push_back(s.substr(i, 1));
      ++i;
    }
  }
  return out;
}

std::string mutate(const std::string& src, std::mt19937_64& rng) {
  std::vector<std::string> p = pieces(src);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  static const char* const kSplices[] = {
      "{% for i in range(100000000) %}x{% endfor %}",
      "{% for i in range(999) %}{% for j in range(999) %}{{ i * j }}{% endfor %}{% endfor %}",
      "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "{{ 'x' * 1000000000 }}",
      "{{ messages[0].content.split('')[::-1] }}",
      "{% raw %}",
      "{{ x.__class__ }}",
      "{% include 'a' %}",
      "{{ 2 ** 999 }}",
      "{{ [1] * 99999999 }}",
      "{{ messages|tojson(indent=4) }}",
  };
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n && !p.empty(); ++k) {
    const size_t i = pick(p.size());
    switch (rng() % 8) {
      case 0: p.erase(p.begin() + i); break;
      case 1: p.insert(p.begin() + i, p[i]); break;
      case 2: std::swap(p[i], p[pick(p.size())]); break;
      case 3: p[i] = p[pick(p.size())]; break;
      case 4: p.insert(p.begin() + i, std::string(1, static_cast<char>(rng() % 256))); break;
      case 5: p.insert(p.begin() + i, kSplices[pick(std::size(kSplices))]); break;
      case 6: {  // deep nesting: brackets, or blocks
        const int depth = 50 + static_cast<int>(rng() % 500);
        std::string s;
        if (rng() % 2) {
          s = "{{ " + std::string(depth, '(') + "1" + std::string(depth, ')') + " }}";
        } else {
          for (int d = 0; d < depth; ++d) s += "{% if true %}";
          for (int d = 0; d < depth; ++d) s += "{% endif %}";
        }
        p.insert(p.begin() + i, s);
        break;
      }
      default: p.erase(p.begin() + i, p.begin() + std::min(p.size(), i + 1 + pick(20)));
    }
  }
  std::string out;
  for (const auto& s : p) out += s;
  return out;
}

TEST(JinjaFuzzTest, MutatedTemplatesRenderOrFailCleanly) {
  const std::vector<std::string> sources = fixtures();
  ASSERT_GE(sources.size(), 7u);
  const OrderedJson context = OrderedJson::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi <think>"},
                 {"role": "assistant", "content": "<think>\nr\n</think>\n\nok",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "42"}, {"role": "user", "content": "again"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  Limits limits;
  limits.max_loop_iterations = 20000;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_depth = 60;
  std::mt19937_64 rng(20240601);
  int rendered = 0, refused = 0;
  std::map<std::string, int> reasons;  // the start of each refusal, for the log
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    const std::string src = mutate(sources[i % sources.size()], rng);
    try {
      const Template t(src, "fuzz", limits);
      t.render(context);
      ++rendered;
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::kInput) << e.message() << "\n--- template " << i << ":\n"
                                             << src;
      ASSERT_EQ(e.message().rfind("template fuzz", 0), 0u) << e.message();
      ++refused;
      const size_t colon = e.message().find(": ");
      ++reasons[e.message().substr(colon + 2, 32)];
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("1000 mutated templates: %d rendered, %d refused with one kInput error, %.2f s\n",
              rendered, refused, seconds);
  for (const auto& [reason, count] : reasons)
    if (count >= 10) std::printf("  %4d x %s...\n", count, reason.c_str());
  EXPECT_EQ(rendered + refused, 1000);
  EXPECT_GT(rendered, 50);
  EXPECT_GT(refused, 50);
}

}  // namespace
}  // namespace zt::jinja
