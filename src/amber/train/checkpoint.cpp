#include "amber/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <unistd.h>

#include "amber/io/checksum.h"
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

// The index of the first NaN or infinity in a floating-point tensor, or -1. Read from
// the bit patterns (an all-ones exponent), so any float dtype is checked the same way.
int64_t first_non_finite(const Tensor& t) {
  const auto scan = [&](auto word, uint64_t exponent) -> int64_t {
    const auto* p = static_cast<const decltype(word)*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i)
      if ((p[i] & exponent) == exponent) return i;
    return -1;
  };
  switch (t.dtype()) {
    case DType::f64: return scan(uint64_t{}, 0x7ff0000000000000ull);
    case DType::f32: return scan(uint32_t{}, 0x7f800000u);
    case DType::bf16: return scan(uint16_t{}, 0x7f80u);
    case DType::f16: return scan(uint16_t{}, 0x7c00u);
    default: return -1;
  }
}

// Checks `file` against the checksum trainer_state.json recorded for it; checkpoints
// written before checksums were recorded carry none and load unchecked.
void verify_checksum(const nlohmann::json& state, const fs::path& dir, const std::string& file) {
  if (!state.contains("checksums")) return;
  const nlohmann::json& sums = state["checksums"];
  AMBER_CHECK(sums.is_object() && sums.contains(file) && sums[file].is_string(), (dir / "trainer_state.json").string(),
              ": checksums has no entry for ", file, "; the checkpoint's state is damaged");
  const std::string path = (dir / file).string(), actual = file_checksum(path);
  AMBER_CHECK(actual == sums[file].get<std::string>(), path, " fails its checksum (recorded ",
              sums[file].get<std::string>(), ", file has ", actual,
              "): the file was damaged after it was written; resume from an earlier checkpoint");
}

void load_tensors(const std::string& path, const std::vector<std::pair<std::string, Tensor*>>& targets,
                  const std::string& what) {
  SafetensorsFile file = load_safetensors(path);
  for (const auto& [name, tensor] : targets) {
    auto it = file.tensors.find(name);
    AMBER_CHECK(it != file.tensors.end(), path, ": ", what, " tensor '", name,
                "' is missing; the checkpoint was written by a different model or optimizer configuration");
    const int64_t bad = first_non_finite(it->second);
    AMBER_CHECK(bad < 0, path, ": ", what, " tensor '", name, "' holds a non-finite value (", it->second.item(bad),
                " at flat index ", bad, "); the checkpoint is damaged or was saved from a diverged run");
    AMBER_CHECK(it->second.shape() == tensor->shape(), path, ": ", what, " tensor '", name, "' has shape ",
                it->second.shape(), " but the configured model expects ", tensor->shape(),
                "; check that the config matches the checkpoint's");
    tensor->copy_from(it->second);
    file.tensors.erase(it);
  }
  AMBER_CHECK(file.tensors.empty(), path, ": ", what, " tensor '", file.tensors.begin()->first,
              "' is not part of the configured model; the checkpoint belongs to a different configuration");
}

// What using a checkpoint needs, into `dir`: model.safetensors (each parameter as
// `stored` gives it, the buffers as they are, the model config in the metadata) and,
// given its path, a copy of the tokenizer.
template <class Stored>
void save_model_files(const fs::path& dir, const LanguageModel& model, Stored stored, const std::string& tokenizer) {
  std::vector<NamedTensor> weights;
  for (const auto& p : model.params()) weights.push_back({p->name, stored(p->value)});
  for (const auto& [name, tensor] : model.buffers()) weights.push_back({name, tensor});
  save_safetensors((dir / "model.safetensors").string(), weights,
                   {{"format", "pt"}, {"amber.model_config", model_config_to_toml(model.config())}});
  if (!tokenizer.empty()) fs::copy_file(tokenizer, dir / "tokenizer.json");
}

}  // namespace

std::string save_checkpoint(const std::string& out_dir, int64_t step, const LanguageModel& model,
                            Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last,
                            const std::string& tokenizer) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  fs::create_directories(root);
  std::ostringstream name;
  name << "step-" << std::setw(8) << std::setfill('0') << step;
  const fs::path final_dir = root / name.str();
  const fs::path temporary = root / (name.str() + ".tmp-" + std::to_string(getpid()));
  fs::remove_all(temporary);
  fs::create_directories(temporary);

  save_model_files(temporary, model, [](const Tensor& value) { return value; }, tokenizer);
  std::vector<NamedTensor> state;
  for (const StateTensor& s : optimizer.state()) state.push_back({s.name, *s.tensor});
  save_safetensors((temporary / "optimizer.safetensors").string(), state);
  nlohmann::json meta = trainer_state;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    meta["checksums"][file] = file_checksum((temporary / file).string());
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

void save_weights_checkpoint(const std::string& dir, const LanguageModel& model, const nlohmann::json& trainer_state,
                             DType dtype, const std::string& tokenizer) {
  AMBER_CHECK(dtype == DType::f32 || dtype == DType::bf16, "a weights-only checkpoint stores f32 or bf16, not ",
              dtype_name(dtype));
  fs::path root = fs::path(dir).lexically_normal();
  if (root.filename().empty()) root = root.parent_path();  // "out/" names the folder "out"
  AMBER_CHECK(!fs::exists(root) || (fs::is_directory(root) && fs::is_empty(root)), dir,
              " already exists and is not an empty folder; choose another --out or remove it");
  // Written beside its final name and renamed when complete, as training checkpoints are.
  const fs::path temporary = root.string() + ".tmp-" + std::to_string(getpid());
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  save_model_files(temporary, model, [dtype](const Tensor& value) { return value.to(Device::cpu()).to(dtype); },
                   tokenizer);
  nlohmann::json meta = {{"format_version", kFormatVersion},
                         {"weights_only", true},
                         {"config", trainer_state.at("config")},
                         {"step", trainer_state.value("step", int64_t{0})}};
  meta["checksums"]["model.safetensors"] = file_checksum((temporary / "model.safetensors").string());
  write_text_atomically(temporary / "trainer_state.json", meta.dump(2));
  if (fs::exists(root)) fs::remove(root);  // empty, checked above
  fs::rename(temporary, root);
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
  AMBER_CHECK(!fs::is_directory(state_path), state_path.string(), " is a directory, not a file: ", dir,
              " is not a complete amber checkpoint");
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
  std::vector<std::pair<std::string, Tensor>> buffers = model.buffers();  // handles on the model's storage
  for (auto& [name, tensor] : buffers) weights.emplace_back(name, &tensor);
  verify_checksum(state, dir, "model.safetensors");
  load_tensors((fs::path(dir) / "model.safetensors").string(), weights, "model");
  model.refresh_working_copies();
  if (optimizer) {
    AMBER_CHECK(!state.value("weights_only", false), dir,
                " is a weights-only checkpoint (amber export weights): it holds no optimizer state or data position "
                "to resume from; resume from the training checkpoint it was made from, or sample, evaluate or export "
                "it");
    std::vector<std::pair<std::string, Tensor*>> tensors;
    for (const StateTensor& s : optimizer->state()) tensors.emplace_back(s.name, s.tensor);
    verify_checksum(state, dir, "optimizer.safetensors");
    load_tensors((fs::path(dir) / "optimizer.safetensors").string(), tensors, "optimizer");
    const int64_t steps = trainer_state_integer(state, "optimizer_steps", dir);
    AMBER_CHECK(steps >= 0, (fs::path(dir) / "trainer_state.json").string(),
                ": optimizer_steps must not be negative, got ", steps, "; the checkpoint is damaged");
    optimizer->set_steps(steps);
  }
  return state;
}

}  // namespace amber
