// The trainer_state of a zt-train checkpoint (see trainer_state.h).
#include "train/trainer_state.h"

#include <fmt/format.h>

#include "runtime/status.h"

namespace zt {

ResumePoint resume_point(const CheckpointReader& reader) {
  const std::string where = reader.dir() + "/manifest.json";
  const nlohmann::json& t = reader.manifest().trainer_state;
  auto integer = [&](const char* key, int64_t lowest) {
    const auto it = t.find(key);
    if (it == t.end() || !it->is_number_integer() || it->get<int64_t>() < lowest)
      throw_input(
          fmt::format("{}: trainer_state.{} is missing or not an integer >= {} (not a "
                      "zt-train checkpoint?)",
                      where, key, lowest));
    return it->get<int64_t>();
  };
  ResumePoint p;
  p.step = integer("step", 0);
  p.train_position = integer("train_position", 0);
  p.val_position = integer("val_position", 0);
  p.world = static_cast<int>(integer("world", 1));
  p.micro_batch = integer("micro_batch", 1);
  p.seq_len = integer("seq_len", 1);
  p.seed = static_cast<uint64_t>(integer("seed", 0));
  const auto engine = t.find("engine");
  if (engine == t.end() || !engine->is_object())
    throw_input(fmt::format("{}: trainer_state.engine is missing or not an object", where));
  p.engine = *engine;
  return p;
}

nlohmann::json trainer_state(const Config& config, int world, int64_t step,
                             const DataLoader& train_loader,
                             const std::optional<DataLoader>& val_loader,
                             const Precision& precision) {
  return nlohmann::json{{"step", step},
                        {"train_position", train_loader.position()},
                        {"val_position", val_loader ? val_loader->position() : 0},
                        {"world", world},
                        {"micro_batch", config.train_micro_batch_size_per_gpu},
                        {"seq_len", config.zt.seq_len},
                        {"gradient_accumulation_steps", config.gradient_accumulation_steps},
                        {"seed", config.zt.seed},
                        {"config",
                         {{"source", config.source},
                          {"zero_stage", config.zero_optimization.stage},
                          {"precision", precision_name(precision)}}}};
}

int64_t resumed_train_position(const ResumePoint& point, int world, int64_t B, int64_t T,
                               std::vector<std::string>& notes) {
  if (point.world == world && point.micro_batch == B && point.seq_len == T)
    return point.train_position;
  const int64_t tokens = point.train_position * point.world * point.micro_batch * point.seq_len;
  const int64_t per_batch = static_cast<int64_t>(world) * B * T;
  const int64_t position = tokens / per_batch;
  notes.push_back(fmt::format(
      "the checkpoint's data position (batch {} of {} rank(s) x {} rows x {} tokens) is batch "
      "{} of this run's {} rank(s) x {} x {}{}",
      point.train_position, point.world, point.micro_batch, point.seq_len, position, world, B, T,
      tokens % per_batch == 0 ? "" : " (rounded down: a part-batch is seen again)"));
  return position;
}

}  // namespace zt
