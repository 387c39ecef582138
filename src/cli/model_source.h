// Where a command's model comes from: --model DIR, or the bundled tiny demo model when none is given.
#pragma once
#include <string>

#include "cli/args.h"

namespace lily {

// The bundled demo model: the tiny random-weight fixture with the real architecture (its output is noise).
std::string demo_model_dir();
// --model DIR if given; otherwise the demo model, after printing a plain warning to stderr.
std::string model_dir_or_demo(const Args& a);

}  // namespace lily
