// Whole-file text reads with lily::Error on failure (config.json, index files).
#pragma once
#include <string>

namespace lily {

// Reads the whole file; throws lily::Error naming `path` when it cannot be opened or read.
std::string read_text_file(const std::string& path);

}  // namespace lily
