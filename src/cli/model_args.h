// The model of a command: --model DIR (a checkpoint), or --synthetic PRESET [--seed N] (random weights in
// memory, see synth/synthetic_model.h). Flags for check_known: model_flags().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "model/weights.h"

namespace lily {

std::vector<std::string> model_flags();  // {"model", "synthetic", "seed", "synthetic-format"}
// load_model(--model) or make_synthetic_in_format(--synthetic, --seed [default 1], --synthetic-format [default
// mlx-4bit]), with a progress bar on a TTY.
// Throws lily::Error when neither or both are given.
std::shared_ptr<ModelWeights> open_model(const Args& a);
// "synthetic:PRESET:seed=N[:FORMAT]" or the --model directory, for reports.
std::string model_label(const Args& a);

}  // namespace lily
