// ModelWeights -> qwen35moe GGUF (layout and type mix in gguf_checkpoint.h).
#include "synth/gguf_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>

#include "core/error.h"
#include "core/parallel.h"
#include "io/gguf_quants.h"
#include "io/gguf_writer.h"
#include "synth/presets.h"
#include "synth/synth_tokenizer.h"
#include "tokenizer/gguf_tokenizer.h"

namespace lily {

void gguf_add_model_metadata(const ModelConfig& c, GgufWriter& w) {
  const std::string a = "qwen35moe.";
  w.add_string("general.architecture", "qwen35moe");
  w.add_u32(a + "block_count", uint32_t(c.n_layers));
  w.add_u32(a + "context_length", uint32_t(c.max_pos));
  w.add_u32(a + "embedding_length", uint32_t(c.hidden));
  w.add_u32(a + "attention.head_count", uint32_t(c.n_q_heads));
  w.add_u32(a + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.add_u32(a + "attention.key_length", uint32_t(c.head_dim));
  w.add_u32(a + "attention.value_length", uint32_t(c.head_dim));
  w.add_f32(a + "rope.freq_base", float(c.rope_theta));
  w.add_u32(a + "rope.dimension_count", uint32_t(c.rope_dim));
  const auto sec = default_mrope_sections(c.rope_dim);  // llama.cpp's qwen35moe loader requires the key
  w.add_i32s(a + "rope.dimension_sections", {sec[0], sec[1], sec[2], 0});
  w.add_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.add_u32(a + "expert_count", uint32_t(c.n_experts));
  w.add_u32(a + "expert_used_count", uint32_t(c.top_k));
  w.add_u32(a + "expert_feed_forward_length", uint32_t(c.expert_inter));
  w.add_u32(a + "expert_shared_feed_forward_length", uint32_t(c.shared_inter));
  w.add_u32(a + "ssm.conv_kernel", uint32_t(c.conv_kernel));
  w.add_u32(a + "ssm.state_size", uint32_t(c.lin_k_dim));
  w.add_u32(a + "ssm.group_count", uint32_t(c.lin_k_heads));
  w.add_u32(a + "ssm.time_step_rank", uint32_t(c.lin_v_heads));
  w.add_u32(a + "ssm.inner_size", uint32_t(c.value_dim()));
  int interval = 0;
  for (int i = 0; i < c.n_layers && !interval; ++i)
    if (c.is_full[size_t(i)]) interval = i + 1;
  for (int i = 0; i < c.n_layers; ++i)
    if (interval == 0 || c.is_full[size_t(i)] != ((i + 1) % interval == 0))
      throw Error("gguf writer: the layer pattern is not 'full attention every N layers'");
  w.add_u32(a + "full_attention_interval", uint32_t(interval));
  if (!c.eos_ids.empty()) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(c.eos_ids[0]));
}

namespace {

using IndexMap = std::function<int64_t(int64_t)>;

bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

constexpr size_t kWindowBytes = size_t(64) << 20;

struct Streamer {
  GgufWriter& w;
  uint64_t total = 0;
  std::function<void(uint64_t)> tick;

  GgmlType pick(GgmlType want, int64_t cols) const { return cols % 256 == 0 ? want : GgmlType::Q8_0; }

  // n matrices (shape [n, rows, cols], or [rows, cols] when !stacked); dest row r <- source row rows_from(r);
  // dest column block b (of cb columns) <- source block cols_from(b). The rows are quantised in windows of about
  // kWindowBytes of output, each window's rows split over all cores, and a window is written (one sequential
  // write) while the next one is quantised.
  void mats(const std::string& name, std::vector<QMatrix> ms, bool stacked, GgmlType want,
            IndexMap rows_from = nullptr, int64_t cb = 0, IndexMap cols_from = nullptr) {
    const int64_t rows = ms[0].rows, cols = ms[0].cols;
    const GgmlType t = pick(want, cols);
    std::vector<int64_t> shape = {rows, cols};
    if (stacked) shape.insert(shape.begin(), int64_t(ms.size()));
    total += uint64_t(ms.size() * rows);
    w.add_tensor_stream(name, t, shape, [=, this](const GgufWriter::Emit& emit) {
      const int64_t all = int64_t(ms.size()) * rows;
      const size_t orb = gguf_row_bytes(t, cols);
      const int64_t window = std::max<int64_t>(1, int64_t(kWindowBytes / orb));
      std::vector<uint8_t> bufs[2];
      std::future<void> writing;
      for (int64_t r0 = 0, k = 0; r0 < all; r0 += window, k ^= 1) {
        const int64_t n = std::min(window, all - r0);
        std::vector<uint8_t>& buf = bufs[k];
        buf.resize(size_t(n) * orb);
        parallel_for(n, 8, [&](int64_t a, int64_t b) {
          std::vector<float> src(static_cast<size_t>(cols)), dst(static_cast<size_t>(cols));
          for (int64_t i = a; i < b; ++i) {
            const int64_t g = r0 + i, r = g % rows;
            dequant_row(ms[size_t(g / rows)], rows_from ? rows_from(r) : r, src.data());
            const float* q = src.data();
            if (cb) {
              for (int64_t c = 0; c < cols / cb; ++c)
                std::memcpy(&dst[size_t(c * cb)], &src[size_t(cols_from(c) * cb)], size_t(cb) * 4);
              q = dst.data();
            }
            gguf_quantize_into(t, q, cols, buf.data() + size_t(i) * orb);
          }
        });
        if (writing.valid()) writing.get();  // the previous window is written before this one starts
        writing = std::async(std::launch::async, [&emit, &buf] { emit(buf.data(), buf.size()); });
        if (tick) tick(uint64_t(n));
      }
      if (writing.valid()) writing.get();
    });
  }

  void vec(const std::string& name, const std::vector<int64_t>& shape, std::vector<float> v,
           IndexMap from = nullptr) {
    std::vector<uint8_t> b(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) std::memcpy(&b[i * 4], &v[size_t(from ? from(int64_t(i)) : int64_t(i))], 4);
    w.add_tensor(name, GgmlType::F32, shape, std::move(b));
  }
};

}  // namespace

namespace {

// Adds the model's metadata and tensors to `w`; the tensors' producers run when `w` writes.
void build_gguf(const ModelWeights& mw, const std::string& tokenizer_json, GgufWriter& w, Streamer& s) {
  const ModelConfig& c = mw.cfg;
  gguf_add_model_metadata(c, w);
  gguf_add_tokenizer(tokenizer_json, w, "qwen35", mw.cfg.vocab);
  const int64_t H = c.hidden, Hk = c.lin_k_heads, Hv = c.lin_v_heads, r = Hv / Hk, Dv = c.lin_v_dim;
  const int64_t qk = 2 * int64_t(c.key_dim()), K = c.conv_kernel;
  // Tiled position t holds grouped value head (t % Hk) * r + t / Hk (identity when Hk == Hv).
  const IndexMap head = [=](int64_t t) { return (t % Hk) * r + t / Hk; };
  const IndexMap vrows = [=](int64_t row) { return head(row / Dv) * Dv + row % Dv; };
  const IndexMap qkv = [=](int64_t row) { return row < qk ? row : qk + vrows(row - qk); };
  s.mats("token_embd.weight", {mw.embed}, false, GgmlType::Q4_K);
  s.vec("output_norm.weight", {H}, mw.final_norm);
  if (!c.tie_embeddings) s.mats("output.weight", {mw.lm_head}, false, GgmlType::Q6_K);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = mw.layers[size_t(i)];
    const std::string b = "blk." + std::to_string(i) + ".";
    const bool mb = more_bits(i, c.n_layers);
    s.vec(b + "attn_norm.weight", {H}, L.in_norm);
    s.vec(b + "post_attention_norm.weight", {H}, L.post_norm);
    if (L.is_full) {
      s.mats(b + "attn_q.weight", {L.attn.q}, false, GgmlType::Q4_K);
      s.mats(b + "attn_k.weight", {L.attn.k}, false, GgmlType::Q4_K);
      s.mats(b + "attn_v.weight", {L.attn.v}, false, mb ? GgmlType::Q6_K : GgmlType::Q4_K);
      s.mats(b + "attn_output.weight", {L.attn.o}, false, GgmlType::Q4_K);
      s.vec(b + "attn_q_norm.weight", {c.head_dim}, L.attn.q_norm);
      s.vec(b + "attn_k_norm.weight", {c.head_dim}, L.attn.k_norm);
    } else {
      s.mats(b + "attn_qkv.weight", {L.lin.in_qkv}, false, GgmlType::Q4_K, qkv);
      s.mats(b + "attn_gate.weight", {L.lin.in_z}, false, GgmlType::Q4_K, vrows);
      s.mats(b + "ssm_beta.weight", {L.lin.in_b}, false, GgmlType::Q4_K, head);
      s.mats(b + "ssm_alpha.weight", {L.lin.in_a}, false, GgmlType::Q4_K, head);
      s.vec(b + "ssm_conv1d.weight", {c.conv_dim(), K}, L.lin.conv, [=](int64_t e) { return qkv(e / K) * K + e % K; });
      s.vec(b + "ssm_dt.bias", {Hv}, L.lin.dt_bias, head);
      s.vec(b + "ssm_a", {Hv}, L.lin.a_neg, head);
      s.vec(b + "ssm_norm.weight", {Dv}, L.lin.norm);
      s.mats(b + "ssm_out.weight", {L.lin.out}, false, GgmlType::Q4_K, nullptr, Dv, head);
    }
    const MoeWeights& m = L.moe;
    std::vector<float> router(static_cast<size_t>(m.router.rows * m.router.cols)), shg(static_cast<size_t>(H));
    for (int64_t e = 0; e < m.router.rows; ++e) dequant_row(m.router, e, &router[size_t(e * H)]);
    dequant_row(m.sh_gate_w, 0, shg.data());
    s.vec(b + "ffn_gate_inp.weight", {m.router.rows, H}, router);
    s.mats(b + "ffn_gate_exps.weight", m.gate.e, true, GgmlType::Q4_K);
    s.mats(b + "ffn_up_exps.weight", m.up.e, true, GgmlType::Q4_K);
    s.mats(b + "ffn_down_exps.weight", m.down.e, true, mb ? GgmlType::Q6_K : GgmlType::Q4_K);
    s.mats(b + "ffn_gate_shexp.weight", {m.sh_gate}, false, GgmlType::Q4_K);
    s.mats(b + "ffn_up_shexp.weight", {m.sh_up}, false, GgmlType::Q4_K);
    s.mats(b + "ffn_down_shexp.weight", {m.sh_down}, false, mb ? GgmlType::Q6_K : GgmlType::Q4_K);
    s.vec(b + "ffn_gate_inp_shexp.weight", {H}, shg);
  }
}

}  // namespace

namespace {

// The GGUF of mw built into a writer, then finish(writer): the tensor producers run inside it (they read s.tick then).
template <class Finish>
auto with_gguf(const ModelWeights& mw, const std::string& tokenizer_json,
               const std::function<void(uint64_t, uint64_t)>& progress, Finish finish) {
  GgufWriter w;
  Streamer s{w, 0, nullptr};
  build_gguf(mw, tokenizer_json, w, s);
  uint64_t done = 0;
  if (progress) s.tick = [&](uint64_t k) { progress(done += k, s.total); };
  return finish(w);
}

}  // namespace

void write_gguf_checkpoint(const ModelWeights& mw, const std::string& path, const std::string& tokenizer_json,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  with_gguf(mw, tokenizer_json, progress, [&](GgufWriter& w) { w.write(path); });
}

std::vector<uint8_t> gguf_checkpoint_bytes(const ModelWeights& mw, const std::string& tokenizer_json,
                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  return with_gguf(mw, tokenizer_json, progress, [](GgufWriter& w) { return w.bytes(); });
}

std::string synthetic_gguf_tokenizer(const std::string& preset, int vocab) {
  const int preset_bpe = synthetic_bpe_vocab(preset);
  const int bpe = std::max(256, preset_bpe > 0 ? preset_bpe : vocab / 4096 * 4096);
  if (bpe > vocab) throw Error("tokenizer BPE size " + std::to_string(bpe) + " exceeds vocab_size");
  return make_synthetic_tokenizer(bpe, std::min(33, vocab - bpe)).dump();
}

}  // namespace lily
