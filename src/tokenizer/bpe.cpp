#include "tokenizer/bpe.h"

#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace lily {

namespace {

constexpr int64_t kMaxId = 1 << 26;          // far above any real vocabulary; guards allocations
constexpr size_t kCacheLimit = 1 << 16;      // words kept before the cache is cleared
constexpr size_t kCacheMaxWordBytes = 256;   // longer words are not cached

}  // namespace

BpeModel::BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  by_spelling_ = std::move(o.by_spelling_);
  id_bytes_ = std::move(o.id_bytes_);
  id_present_ = std::move(o.id_present_);
  for (int i = 0; i < 256; ++i) byte_id_[i] = o.byte_id_[i];
  merges_ = std::move(o.merges_);
  ignore_merges_ = o.ignore_merges_;
  cache_ = std::move(o.cache_);
  return *this;
}

BpeModel BpeModel::from_json(const nlohmann::json& m) {
  if (!m.is_object()) throw Error("tokenizer.json: \"model\" must be an object");
  if (!m.contains("type") || !m["type"].is_string() || m["type"].get<std::string>() != "BPE") {
    std::string t = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "(none)";
    throw Error("tokenizer.json: unsupported model type \"" + t + "\" (only BPE)");
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    throw Error("tokenizer.json: BPE dropout is not supported");
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>())
    throw Error("tokenizer.json: BPE byte_fallback is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
      throw Error(std::string("tokenizer.json: BPE ") + k + " is not supported");
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw Error("tokenizer.json: model.vocab missing or not an object");
  if (!m.contains("merges") || !m["merges"].is_array()) throw Error("tokenizer.json: model.merges missing or not an array");

  BpeModel b;
  b.ignore_merges_ = m.contains("ignore_merges") && m["ignore_merges"].is_boolean() && m["ignore_merges"].get<bool>();
  const auto& vocab = m["vocab"];
  b.by_spelling_.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      throw Error("tokenizer.json: model.vocab entry \"" + it.key() + "\" has a non-integer id");
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxId)
      throw Error("tokenizer.json: model.vocab entry \"" + it.key() + "\" has id " + std::to_string(id) + " out of range");
    b.by_spelling_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  b.id_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  b.id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [spelled, id] : b.by_spelling_) {
    std::string raw;
    // A spelling outside the byte alphabet decodes to its own UTF-8 (as HF's ByteLevel decoder does).
    if (!byte_level::decode(spelled, &raw)) raw = spelled;
    b.id_bytes_[id] = std::move(raw);
    b.id_present_[id] = 1;
  }
  for (int i = 0; i < 256; ++i) b.byte_id_[i] = b.id_of_spelling(byte_level::encode(std::string(1, static_cast<char>(i))));

  const auto& merges = m["merges"];
  b.merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& e : merges) {
    std::string left, right;
    std::string where = "tokenizer.json: model.merges[" + std::to_string(rank) + "]";
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw Error(where + " \"" + s + "\" is not two tokens separated by one space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      throw Error(where + " must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    int32_t a = b.id_of_spelling(left), c = b.id_of_spelling(right), ab = b.id_of_spelling(left + right);
    if (a < 0 || c < 0 || ab < 0) {
      const std::string& missing = a < 0 ? left : c < 0 ? right : left + right;
      throw Error(where + " uses \"" + missing + "\", which is not in model.vocab");
    }
    b.merges_.emplace(key(a, c), Merge{rank, ab});  // a repeated pair keeps its first (lowest) rank
    ++rank;
  }
  return b;
}

int32_t BpeModel::id_of_spelling(std::string_view spelled) const {
  auto it = by_spelling_.find(std::string(spelled));
  return it == by_spelling_.end() ? -1 : it->second;
}

const std::string* BpeModel::bytes_of(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() || !id_present_[id]) return nullptr;
  return &id_bytes_[id];
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {  // no merge possible
    if (byte_id_[static_cast<unsigned char>(bytes[0])] >= 0) out.push_back(byte_id_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  const bool cacheable = bytes.size() <= kCacheMaxWordBytes;
  std::string k;
  if (cacheable) {
    k.assign(bytes);
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(k);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  bpe(bytes, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::move(k), std::move(ids));
  }
}

void BpeModel::bpe(std::string_view bytes, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    int32_t whole = id_of_spelling(byte_level::encode(bytes));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(bytes.size());
  for (unsigned char c : bytes) {
    int32_t id = byte_id_[c];
    if (id < 0) continue;  // no token for this byte and no unk token: HF drops it
    int32_t i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, -1, true});
    if (i > 0) syms[i - 1].next = i;
  }
  struct Cand {
    int32_t rank, pos, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) q.push({it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Sym& s = syms[c.pos];
    if (!s.alive || s.next < 0) continue;
    auto it = merges_.find(key(s.id, syms[s.next].id));
    if (it == merges_.end() || it->second.id != c.id || it->second.rank != c.rank) continue;  // stale entry
    Sym& r = syms[s.next];
    r.alive = false;
    s.id = c.id;
    s.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.pos;
    consider(s.prev);
    consider(c.pos);
  }
  for (const auto& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace lily
