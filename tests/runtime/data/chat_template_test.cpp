// ChatTemplate (runtime/data/chat_template.h):
//   - every template of tests/runtime/data/templates (Llama 2, Llama 3, Qwen3, ChatML,
//     Mistral-instruct, Zephyr, Phi-3 and our features.jinja) on every conversation of
//     cases.json, with add_generation_prompt false and true, renders byte for byte as jinja2
//     renders it with transformers' settings (render_jinja.py), and errors exactly where jinja2
//     errors. The reference is rendered by /usr/bin/python3 when it has jinja2 (Debian's
//     python3-jinja2, scripts/install_deps.sh), else by `python3` on PATH; skipped, saying so,
//     when neither imports jinja2;
//   - load() finds chat_template.jinja before tokenizer_config.json's chat_template, takes
//     "default" from a list of named templates (or "tool_use" with tools), reads special tokens
//     written as strings or {"content"} objects, and refuses a directory without a template,
//     naming the file.
#include "runtime/data/chat_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "runtime/status.h"
#include "tests/runtime/data/tokenizer_test_util.h"

namespace zt {
namespace {

using OrderedJson = nlohmann::ordered_json;
using test::TempDir;

const std::string kTemplates = std::string(ZT_SOURCE_DIR) + "/tests/runtime/data/templates";

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `command`; its stdout, and its exit status in `status`.
std::string run(const std::string& command, int* status) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string out;
  if (!pipe) {
    *status = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  *status = pclose(pipe.release());
  return out;
}

// A python3 that imports jinja2, or "" when there is none.
std::string python_with_jinja2() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    int status;
    run(std::string(py) + " -c 'import jinja2' >/dev/null 2>&1", &status);
    if (status == 0) return py;
  }
  return "";
}

TEST(ChatTemplateTest, RendersAsJinja2Does) {
  const std::string python = python_with_jinja2();
  if (python.empty())
    GTEST_SKIP() << "neither /usr/bin/python3 nor python3 on PATH imports jinja2 "
                    "(apt-get install python3-jinja2, scripts/install_deps.sh)";
  int status;
  const std::string out =
      run(python + " " + ZT_SOURCE_DIR + "/tests/runtime/data/render_jinja.py " + kTemplates +
              "/cases.json",
          &status);
  ASSERT_EQ(status, 0) << "render_jinja.py failed";
  const OrderedJson reference = OrderedJson::parse(out);
  const OrderedJson cases = OrderedJson::parse(file_text(kTemplates + "/cases.json"));
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  for (const auto& [name, t] : cases["templates"].items())
    templates[name] = std::make_unique<ChatTemplate>(
        file_text(kTemplates + "/" + t["file"].get<std::string>()), t["special_tokens"], name);
  int compared = 0, equal = 0, errors = 0;
  for (const auto& r : reference["results"]) {
    const std::string tname = r["template"], cname = r["conversation"];
    const bool agp = r["add_generation_prompt"];
    const OrderedJson& conv = cases["conversations"][cname];
    SCOPED_TRACE(tname + " x " + cname + (agp ? " (add_generation_prompt)" : ""));
    std::string ours, our_error;
    try {
      ours = templates.at(tname)->render(conv["messages"], agp, conv.value("tools", OrderedJson()),
                                         conv.value("extra", OrderedJson()));
    } catch (const Error& e) {
      our_error = e.message();
    }
    ++compared;
    if (r.contains("error")) {
      EXPECT_FALSE(our_error.empty()) << "jinja2: " << r["error"] << "\nours rendered:\n" << ours;
      if (!our_error.empty()) ++errors, ++equal;
      continue;
    }
    EXPECT_EQ(our_error, "");
    EXPECT_EQ(ours, r["text"].get<std::string>());
    if (our_error.empty() && ours == r["text"].get<std::string>()) ++equal;
  }
  std::printf("compared %d renders with jinja2 %s (%s): %d equal (%d of them errors in both)\n",
              compared, reference["jinja2"].get<std::string>().c_str(), python.c_str(), equal,
              errors);
  EXPECT_EQ(compared, 144);
  EXPECT_EQ(equal, compared);
}

TEST(ChatTemplateTest, RendersPrefixesForALossMask) {
  const ChatTemplate chatml(file_text(kTemplates + "/chatml.jinja"), OrderedJson::object());
  const OrderedJson messages = OrderedJson::parse(
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])");
  const OrderedJson prompt = OrderedJson::array({messages[0]});
  const std::string before = chatml.render(prompt, true);
  const std::string all = chatml.render(messages, false);
  EXPECT_EQ(before, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(all.rfind(before, 0), 0u);
  EXPECT_EQ(all.substr(before.size()), "Hello<|im_end|>\n");
}

TEST(ChatTemplateTest, LoadsTheTemplateOfAModelDirectory) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false},
      "eos_token": "</s>", "unk_token": null,
      "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}{{ unk_token is defined }}"})");
  const OrderedJson messages = OrderedJson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(ChatTemplate::load(dir.str()).render(messages, false), "<s>x</s>False");
  // chat_template.jinja wins over tokenizer_config.json's.
  dir.write("chat_template.jinja", "jinja file {{ eos_token }}\n");
  EXPECT_EQ(ChatTemplate::load(dir.str()).render(messages, false), "jinja file </s>");
}

TEST(ChatTemplateTest, TakesTheDefaultOfNamedTemplates) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [
      {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default"}]})");
  EXPECT_EQ(ChatTemplate::load(dir.str()).render(OrderedJson::array(), false), "default");
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  try {
    ChatTemplate::load(dir.str());
    FAIL() << "no default template accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("no template named \"default\" (it has: rag)"), std::string::npos)
        << e.message();
  }
}

TEST(ChatTemplateTest, RefusesADirectoryWithoutATemplate) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": null, "eos_token": "</s>"})");
  try {
    ChatTemplate::load(dir.str());
    FAIL() << "a directory without a template accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_NE(e.message().find("tokenizer_config.json has no chat_template"), std::string::npos)
        << e.message();
  }
  TempDir empty;
  EXPECT_THROW(ChatTemplate::load(empty.str()), Error);
}

TEST(ChatTemplateTest, RaiseExceptionIsAnInputErrorNamingTheLine) {
  const ChatTemplate llama2(file_text(kTemplates + "/llama2.jinja"),
                            OrderedJson{{"bos_token", "<s>"}, {"eos_token", "</s>"}}, "llama2");
  const OrderedJson two_users =
      OrderedJson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  try {
    llama2.render(two_users, false);
    FAIL() << "non-alternating roles accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInput);
    EXPECT_EQ(e.message(),
              "template llama2 line 1: the template raised an error: Conversation roles must "
              "alternate user/assistant/user/assistant/...");
  }
}

}  // namespace
}  // namespace zt
