// `lily logits`: teacher-forced logits of given ids (and optionally a greedy continuation) written to a
// safetensors file in the reference fixtures' conventions. Output format is stable: other backends and
// outside references are compared through it.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "app/make_backend.h"
#include "cli/model_args.h"
#include "cli/model_source.h"
#include "cli/registry.h"
#include "core/error.h"
#include "engine/backend.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace lily {
namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    if (tok.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(tok.c_str(), &end, 10);
    if (*end || v < 0 || v > INT32_MAX) throw Error("--ids: '" + tok + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error("--ids: no ids given (expected e.g. --ids 1,2,3)");
  return ids;
}

int run(const Args& a) {
  a.check_known({"model", "synthetic", "seed", "synthetic-format", "ids", "decode", "prefill-chunk", "out", "backend"});
  if (!a.has("out")) throw Error("--out F.safetensors is required");
  auto ids = parse_ids(a.get("ids"));
  const int n_dec = static_cast<int>(a.get_int("decode", 0));
  if (n_dec < 0) throw Error("--decode must be >= 0");
  auto w = a.has("synthetic") || a.has("synthetic-format") ? open_model(a) : load_model(model_dir_or_demo(a));
  auto be = make_backend(a.get("backend", "cpu"), w);
  const int L = static_cast<int>(ids.size()), V = w->cfg.vocab;
  ForwardOptions opt;
  opt.prefill_chunk = static_cast<int>(a.get_int("prefill-chunk", 0));  // 0: the backend's default
  auto st = be->new_state(L + n_dec + 1);
  std::vector<float> prompt(static_cast<size_t>(L) * V), glog(static_cast<size_t>(n_dec) * V);
  std::vector<int32_t> gids(n_dec);
  be->forward(*st, ids.data(), L, L, prompt.data(), opt);
  const float* last = prompt.data() + static_cast<size_t>(L - 1) * V;
  for (int i = 0; i < n_dec; ++i) {
    gids[i] = static_cast<int32_t>(std::max_element(last, last + V) - last);
    float* row = glog.data() + static_cast<size_t>(i) * V;
    be->forward(*st, &gids[i], 1, 1, row, opt);
    last = row;
  }
  std::vector<TensorToWrite> t;
  t.push_back({"prompt_ids", DType::I32, {L}, ids.data(), ids.size() * 4});
  t.push_back({"prompt_logits", DType::F32, {L, V}, prompt.data(), prompt.size() * 4});
  if (n_dec > 0) {
    t.push_back({"greedy_ids", DType::I32, {n_dec}, gids.data(), gids.size() * 4});
    t.push_back({"greedy_logits", DType::F32, {n_dec, V}, glog.data(), glog.size() * 4});
  }
  write_safetensors(a.get("out"), t);
  std::fprintf(stderr, "wrote %s: prompt_logits [%d, %d]%s (backend %s)\n", a.get("out").c_str(), L, V,
               n_dec ? ", greedy_ids, greedy_logits" : "", be->name().c_str());
  return 0;
}

}  // namespace

LILY_COMMAND("logits", "teacher-forced logits of --ids (and --decode N greedy steps) to --out F.safetensors", run, {});

}  // namespace lily
