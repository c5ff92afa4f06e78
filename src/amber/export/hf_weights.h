// A model's weights under a stock Hugging Face class's names (hf_layout.h's map), and
// back: export slices the fused gate/up projection, folds the depth residual scale into
// the output projections and rounds to the stored dtype; import undoes each step and
// checks every tensor's presence and shape against the run's model config.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "amber/io/safetensors.h"
#include "amber/model/language_model.h"

namespace amber {

// Every tensor of the Hugging Face checkpoint of `model`, in `dtype` (f32 or bf16).
std::vector<NamedTensor> hf_tensors(const LanguageModel& model, DType dtype);

// Writes `tensors` (Hugging Face names, any float dtype) into `model`'s parameters. A
// missing, unexpected or mis-shaped tensor is an error naming it, `origin` (the folder)
// and the model option to change.
void load_hf_tensors(const std::map<std::string, Tensor>& tensors, LanguageModel& model, const std::string& origin);

}  // namespace amber
