// CheckpointFiles: the safetensors files of a checkpoint directory (index, single file, or a set of files).
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/progress.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace lily {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A shard name from an index must stay inside the checkpoint directory.
bool safe_relative_name(const std::string& f) {
  if (f.empty() || f[0] == '/') return false;
  for (const auto& part : fs::path(f))
    if (part == "..") return false;
  return true;
}

}  // namespace

CheckpointFiles::CheckpointFiles(const std::string& dir, const std::function<bool(const std::string&)>& keep)
    : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(dir + ": not a directory");
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  if (fs::exists(index_path, ec)) {
    has_index_ = true;
    json idx;
    try {
      idx = json::parse(read_text_file(index_path));
    } catch (const json::exception& e) {
      throw Error(index_path + ": not valid JSON: " + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw Error(index_path + ": expected an object with a 'weight_map' object, found none");
    std::unordered_map<std::string, size_t> file_index;
    std::vector<std::pair<std::string, size_t>> entries;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (keep && !keep(it.key())) continue;
      if (!it.value().is_string())
        throw Error(index_path + ": weight_map entry for tensor '" + it.key() + "': expected a file name string, found a JSON " +
                    it.value().type_name());
      const std::string f = it.value().get<std::string>();
      if (!safe_relative_name(f))
        throw Error(index_path + ": weight_map entry for tensor '" + it.key() +
                    "': expected a file name inside the directory, found '" + f + "'");
      auto [fi, inserted] = file_index.emplace(f, file_names_.size());
      if (inserted) {
        const std::string full = (fs::path(dir) / f).string();
        if (!fs::is_regular_file(full, ec))
          throw Error(index_path + ": weight_map names file '" + f + "' (for tensor '" + it.key() +
                      "'), but " + full + " does not exist");
        file_names_.push_back(f);
      }
      entries.emplace_back(it.key(), fi->second);
    }
    open_files_with_progress(dir);
    for (auto& [name, fi] : entries) {
      where_.emplace(name, fi);
      names_.push_back(name);
    }
    return;
  }
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  if (fs::is_regular_file(single, ec)) {
    file_names_.push_back("model.safetensors");
  } else {
    for (const auto& de : fs::directory_iterator(dir, ec))
      if (de.path().extension() == ".safetensors" && de.is_regular_file(ec))
        file_names_.push_back(de.path().filename().string());
    std::sort(file_names_.begin(), file_names_.end());
    if (file_names_.empty())
      throw Error(dir + ": expected model.safetensors.index.json, model.safetensors or *.safetensors files, found none");
  }
  open_files_with_progress(dir);
  for (size_t i = 0; i < file_names_.size(); ++i) {
    for (const std::string& name : files_[i]->names()) {
      if (keep && !keep(name)) continue;
      auto [it, inserted] = where_.emplace(name, i);
      if (!inserted)
        throw Error(dir + ": tensor '" + name + "' appears in both " + file_names_[it->second] + " and " +
                    file_names_[i] + "; expected each tensor in one file");
      names_.push_back(name);
    }
  }
}

const TensorView* CheckpointFiles::find(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  const TensorView* t = files_[it->second]->find(name);
  if (!t)
    throw Error(files_[it->second]->path() + ": tensor '" + name +
                "': listed in model.safetensors.index.json for this file, but the file has no such tensor");
  return t;
}

const TensorView& CheckpointFiles::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw Error("tensor '" + name + "' not found (searched " + files_searched() + ")");
  return *t;
}

std::string CheckpointFiles::files_searched() const {
  std::string s;
  if (has_index_) s = "model.safetensors.index.json and ";
  for (size_t i = 0; i < file_names_.size(); ++i) s += (i ? ", " : "") + file_names_[i];
  return s + " in " + dir_;
}

std::vector<std::string> CheckpointFiles::realigned_files() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < files_.size(); ++i)
    if (files_[i]->realigned()) out.push_back(file_names_[i]);
  return out;
}

std::vector<std::shared_ptr<const void>> CheckpointFiles::keep_alive() const {
  return std::vector<std::shared_ptr<const void>>(files_.begin(), files_.end());
}

// Opening maps (and pre-faults) each shard: the bar counts bytes, shown only on a terminal.
void CheckpointFiles::open_files_with_progress(const std::string& dir) {
  std::error_code ec;
  uint64_t total = 0;
  for (const std::string& f : file_names_) total += fs::file_size(fs::path(dir) / f, ec);
  Progress bar("loading", total);
  for (const std::string& f : file_names_) {
    files_.push_back(SafetensorsFile::open((fs::path(dir) / f).string()));
    bar.add(files_.back()->mapping()->size());
  }
  bar.finish();
}

}  // namespace lily
