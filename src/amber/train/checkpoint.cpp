#include "amber/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <unistd.h>

#include "amber/io/safetensors.h"

namespace amber {
namespace fs = std::filesystem;
namespace {

constexpr int kFormatVersion = 1;

void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    AMBER_CHECK(out, "cannot write ", temporary.string());
    out << text;
    out.flush();
    AMBER_CHECK(out, "writing ", temporary.string(), " failed (disk full?)");
  }
  fs::rename(temporary, path);
}

std::vector<fs::path> completed_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos)
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void load_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor*>>& targets,
                  const std::string& what) {
  SafetensorsFile file = load_safetensors(path);
  for (const auto& [name, tensor] : targets) {
    auto it = file.tensors.find(name);
    AMBER_CHECK(it != file.tensors.end(), path, ": ", what, " tensor '", name,
                "' is missing; the checkpoint was written by a different model or optimizer configuration");
    AMBER_CHECK(it->second.shape() == tensor->shape(), path, ": ", what, " tensor '", name, "' has shape ",
                it->second.shape(), " but the configured model expects ", tensor->shape(),
                "; check that the config matches the checkpoint's");
    tensor->copy_from(it->second);
    file.tensors.erase(it);
  }
  AMBER_CHECK(file.tensors.empty(), path, ": ", what, " tensor '", file.tensors.begin()->first,
              "' is not part of the configured model; the checkpoint belongs to a different configuration");
}

}  // namespace

std::string save_checkpoint(const std::string& out_dir, int64_t step, const LanguageModel& model,
                            Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  fs::create_directories(root);
  std::ostringstream name;
  name << "step-" << std::setw(8) << std::setfill('0') << step;
  const fs::path final_dir = root / name.str();
  const fs::path temporary = root / (name.str() + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(temporary);
  fs::create_directories(temporary);

  std::vector<NamedTensor> weights;
  for (const auto& p : model.params()) weights.push_back({p->name, p->value});
  save_safetensors((temporary / "model.safetensors").string(), weights, {{"format", "pt"}});
  std::vector<NamedTensor> state;
  for (const StateTensor& s : optimizer.state()) state.push_back({s.name, *s.tensor});
  save_safetensors((temporary / "optimizer.safetensors").string(), state);
  nlohmann::json meta = trainer_state;
  meta["format_version"] = kFormatVersion;
  meta["step"] = step;
  meta["optimizer_steps"] = optimizer.steps();
  write_text_atomically(temporary / "trainer_state.json", meta.dump(2));

  fs::remove_all(final_dir);  // an older checkpoint of the same step (a re-run)
  fs::rename(temporary, final_dir);
  write_text_atomically(root / "latest", name.str());

  // Prune: the oldest completed checkpoints beyond keep_last (never the one just
  // written, which `latest` names), and temporaries of dead writers.
  std::vector<fs::path> done = completed_checkpoints(root);
  std::erase(done, final_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < done.size() + 1; ++i) fs::remove_all(done[i]);
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string().find(".tmp-") != std::string::npos &&
        entry.path() != temporary)
      fs::remove_all(entry.path());
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& out_dir) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::ifstream in(root / "latest");
  if (!in) return "";
  std::string name;
  std::getline(in, name);
  const fs::path dir = root / name;
  AMBER_CHECK(!name.empty() && fs::is_directory(dir), (root / "latest").string(), " names '", name,
              "', which is not a checkpoint directory; point it at an existing step-N folder or remove it");
  return dir.string();
}

std::vector<std::string> checkpoint_dirs(const std::string& out_dir) {
  std::vector<std::string> out;
  for (const fs::path& p : completed_checkpoints(fs::path(out_dir) / "checkpoints")) out.push_back(p.string());
  return out;
}

nlohmann::json read_trainer_state(const std::string& dir) {
  AMBER_CHECK(fs::is_directory(dir), "checkpoint ", dir, " does not exist or is not a directory");
  const fs::path state_path = fs::path(dir) / "trainer_state.json";
  std::ifstream in(state_path);
  AMBER_CHECK(in, state_path.string(), " is missing: ", dir, " is not a complete amber checkpoint");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(state_path.string(), " is not valid JSON (", e.what(), "); the checkpoint is damaged");
  }
  AMBER_CHECK(state.is_object(), state_path.string(), " is not a JSON object; the checkpoint is damaged");
  const int64_t version = trainer_state_integer(state, "format_version", dir, 0);
  AMBER_CHECK(version == kFormatVersion, state_path.string(), ": checkpoint format version ", version,
              ", this amber reads ", kFormatVersion);
  return state;
}

int64_t trainer_state_integer(const nlohmann::json& state, const std::string& key, const std::string& dir,
                              std::optional<int64_t> missing) {
  const std::string path = (fs::path(dir) / "trainer_state.json").string();
  if (!state.contains(key)) {
    AMBER_CHECK(missing, path, ": key \"", key, "\" is missing; the checkpoint is damaged or not amber's");
    return *missing;
  }
  const nlohmann::json& value = state.at(key);
  AMBER_CHECK(value.is_number_integer(), path, ": key \"", key, "\" must be an integer, got ", value.dump(),
              "; the checkpoint is damaged");
  return value.get<int64_t>();
}

nlohmann::json load_checkpoint(const std::string& dir, LanguageModel& model, Optimizer* optimizer) {
  const nlohmann::json state = read_trainer_state(dir);
  std::vector<std::pair<std::string, Tensor*>> weights;
  for (const auto& p : model.params()) weights.emplace_back(p->name, &p->value);
  load_tensors((fs::path(dir) / "model.safetensors").string(), weights, "model");
  model.refresh_working_copies();
  if (optimizer) {
    std::vector<std::pair<std::string, Tensor*>> tensors;
    for (const StateTensor& s : optimizer->state()) tensors.emplace_back(s.name, s.tensor);
    load_tensors((fs::path(dir) / "optimizer.safetensors").string(), tensors, "optimizer");
    optimizer->set_steps(trainer_state_integer(state, "optimizer_steps", dir));
  }
  return state;
}

}  // namespace amber
