// llama_ref: dumps llama.cpp's own logits and token ids for lily's GGUF cross-checks. A test tool built
// against a llama.cpp checkout (see build.sh), not part of lily's build.
//
//   llama_ref logits MODEL.gguf IDS.txt OUT.safetensors [STEP_IDS.txt]
//     IDS.txt: token ids separated by commas or white space. The prompt is fed as one batch with every
//     position's logits kept; then each id of STEP_IDS.txt (if given) is fed alone through the caches.
//     OUT.safetensors: prompt_ids I32 [L], prompt_logits F32 [L, V] and, with steps, step_ids I32 [S],
//     step_logits F32 [S, V] (the logits after feeding step_ids[i]).
//     The KV cache is f32 and flash attention is off, so the only rounding llama.cpp adds beyond its
//     weights is in its CPU matrix products (activations converted to the weight type's dot type).
//
//   llama_ref quantize IN.gguf OUT.gguf TYPE
//     llama_model_quantize with llama-quantize's defaults and 2 threads, i.e. `llama-quantize IN OUT TYPE 2`
//     (TYPE: Q4_0, Q4_K_M, Q5_K_M, Q6_K or Q8_0), without building llama-quantize's command-line library.
//
//   llama_ref tokenize MODEL.gguf CASES.jsonl OUT.jsonl
//     Each CASES line is a JSON object with "text"; OUT gets {"ids": [...]} per line: llama_tokenize with
//     no BOS/EOS added and special tokens in the text recognised (as Hugging Face's encode does).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llama.h"

namespace {

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  for (char& c : s)
    if (c == ',') c = ' ';
  std::istringstream in(s);
  std::vector<int32_t> ids;
  long long v;
  while (in >> v) ids.push_back(int32_t(v));
  if (!in.eof()) throw std::runtime_error(path + ": not a list of integers");
  return ids;
}

struct Tensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void write_safetensors(const std::string& path, const std::vector<Tensor>& ts) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  size_t off = 0;
  for (const Tensor& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), std::streamsize(hs.size()));
  for (const Tensor& t : ts) f.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

template <class T>
Tensor tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  Tensor t{name, dtype, std::move(shape), std::vector<uint8_t>(v.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

llama_model* load(const std::string& path, bool vocab_only) {
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = vocab_only;
  llama_model* m = llama_model_load_from_file(path.c_str(), mp);
  if (!m) throw std::runtime_error("llama.cpp could not load " + path);
  return m;
}

// Feeds ids[0..n) at positions pos0.. as one batch; keeps every position's logits when all_logits.
void decode(llama_context* ctx, const std::vector<int32_t>& ids, int32_t pos0, bool all_logits) {
  llama_batch b = llama_batch_init(int32_t(ids.size()), 0, 1);
  b.n_tokens = int32_t(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    b.token[i] = ids[i];
    b.pos[i] = pos0 + int32_t(i);
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = all_logits || i + 1 == ids.size();
  }
  const int32_t rc = llama_decode(ctx, b);
  llama_batch_free(b);
  if (rc != 0) throw std::runtime_error("llama_decode failed with " + std::to_string(rc));
}

int cmd_logits(int argc, char** argv) {
  if (argc != 5 && argc != 6) throw std::runtime_error("usage: llama_ref logits MODEL IDS OUT [STEP_IDS]");
  const std::vector<int32_t> ids = read_ids(argv[3]);
  const std::vector<int32_t> steps = argc == 6 ? read_ids(argv[5]) : std::vector<int32_t>{};
  if (ids.empty()) throw std::runtime_error("no prompt ids");
  llama_model* m = load(argv[2], false);
  const int32_t V = llama_vocab_n_tokens(llama_model_get_vocab(m));
  llama_context_params cp = llama_context_default_params();
  const uint32_t total = uint32_t(ids.size() + steps.size());
  cp.n_ctx = total < 256 ? 256 : (total + 255) / 256 * 256;
  cp.n_batch = cp.n_ubatch = uint32_t(ids.size());
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(m, cp);
  if (!ctx) throw std::runtime_error("llama_init_from_model failed");
  const size_t L = ids.size();
  std::vector<float> logits(L * size_t(V)), step_logits(steps.size() * size_t(V));
  decode(ctx, ids, 0, true);
  for (size_t i = 0; i < L; ++i) std::memcpy(&logits[i * size_t(V)], llama_get_logits_ith(ctx, int32_t(i)), size_t(V) * 4);
  for (size_t s = 0; s < steps.size(); ++s) {
    decode(ctx, {steps[s]}, int32_t(L + s), true);
    std::memcpy(&step_logits[s * size_t(V)], llama_get_logits_ith(ctx, 0), size_t(V) * 4);
  }
  std::vector<Tensor> out = {tensor("prompt_ids", "I32", {int64_t(L)}, ids),
                             tensor("prompt_logits", "F32", {int64_t(L), V}, logits)};
  if (!steps.empty()) {
    out.push_back(tensor("step_ids", "I32", {int64_t(steps.size())}, steps));
    out.push_back(tensor("step_logits", "F32", {int64_t(steps.size()), V}, step_logits));
  }
  write_safetensors(argv[4], out);
  llama_free(ctx);
  llama_model_free(m);
  std::fprintf(stderr, "llama_ref: %zu prompt + %zu step positions of %d logits -> %s\n", L, steps.size(), V, argv[4]);
  return 0;
}

int cmd_quantize(int argc, char** argv) {
  if (argc != 5) throw std::runtime_error("usage: llama_ref quantize IN.gguf OUT.gguf TYPE");
  const std::string t = argv[4];
  llama_model_quantize_params p = llama_model_quantize_default_params();
  if (t == "Q4_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
  else if (t == "Q4_K_M") p.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_M;
  else if (t == "Q5_K_M") p.ftype = LLAMA_FTYPE_MOSTLY_Q5_K_M;
  else if (t == "Q6_K") p.ftype = LLAMA_FTYPE_MOSTLY_Q6_K;
  else if (t == "Q8_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
  else throw std::runtime_error("unknown type " + t + " (Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0)");
  p.nthread = 2;
  if (llama_model_quantize(argv[2], argv[3], &p) != 0) throw std::runtime_error("llama_model_quantize failed");
  return 0;
}

int cmd_tokenize(int argc, char** argv) {
  if (argc != 5) throw std::runtime_error("usage: llama_ref tokenize MODEL CASES.jsonl OUT.jsonl");
  llama_model* m = load(argv[2], true);
  const llama_vocab* vocab = llama_model_get_vocab(m);
  std::ifstream in(argv[3]);
  if (!in) throw std::runtime_error(std::string("cannot open ") + argv[3]);
  std::ofstream out(argv[4]);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::string text = nlohmann::json::parse(line).at("text").get<std::string>();
    std::vector<llama_token> ids(text.size() + 16);
    int32_t k = llama_tokenize(vocab, text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()), false, true);
    if (k < 0) {
      ids.resize(size_t(-k));
      k = llama_tokenize(vocab, text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()), false, true);
    }
    if (k < 0) throw std::runtime_error("llama_tokenize failed on line " + std::to_string(n + 1));
    ids.resize(size_t(k));
    out << nlohmann::json{{"ids", ids}}.dump() << "\n";
    ++n;
  }
  llama_model_free(m);
  std::fprintf(stderr, "llama_ref: %d texts tokenised -> %s\n", n, argv[4]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    llama_backend_init();
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "logits") return cmd_logits(argc, argv);
    if (cmd == "quantize") return cmd_quantize(argc, argv);
    if (cmd == "tokenize") return cmd_tokenize(argc, argv);
    std::fprintf(stderr, "usage: llama_ref logits MODEL IDS OUT [STEP_IDS] | quantize IN OUT TYPE | tokenize MODEL CASES OUT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama_ref: %s\n", e.what());
    return 1;
  }
}
