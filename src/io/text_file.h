// Whole-file text reads with lily::Error on failure (config.json, index files, tokenizer.json, templates).
// Every read is bounded: a file (or a symlink to /dev/zero, a FIFO, ...) longer than the limit is refused
// after reading at most limit + 1 bytes.
#pragma once
#include <cstddef>
#include <string>

namespace lily {

constexpr size_t kMaxTextFileBytes = size_t(64) << 20;  // config / index / template files
constexpr size_t kMaxTokenizerFileBytes = size_t(256) << 20;

// Reads the whole file; throws lily::Error naming `path` when it cannot be opened or read, or when it is
// longer than `max_bytes` (the message names the limit).
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

}  // namespace lily
