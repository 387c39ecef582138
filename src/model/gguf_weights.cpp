// load_model_gguf: a qwen35moe GGUF file -> ModelWeights (see gguf_weights.h for the converter's transforms).
#include "model/gguf_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"

namespace lily {

bool is_gguf_path(const std::string& path) { return path.size() > 5 && path.ends_with(".gguf"); }

ModelConfig gguf_model_config(const GgufModel& m) {
  const std::string arch = m.get_string("general.architecture");
  if (arch != "qwen35moe")
    throw Error(m.first().path() + ": general.architecture is '" + arch + "', expected 'qwen35moe' (Qwen3.5/3.6 MoE)");
  const std::string a = arch + ".";
  auto pos_int = [&](const std::string& key, int64_t lo = 1) {
    const int64_t v = m.get_int(a + key);
    if (v < lo || v > (int64_t(1) << 30))
      throw Error(m.first().path() + ": metadata key '" + a + key + "' = " + std::to_string(v) + " is out of range");
    return int(v);
  };
  ModelConfig c;
  c.model_type = "qwen3_5_moe";
  c.hidden = pos_int("embedding_length");
  const int blocks = pos_int("block_count");
  const int64_t nextn = m.get_int(a + "nextn_predict_layers", 0);
  if (nextn < 0 || nextn >= blocks)
    throw Error(m.first().path() + ": metadata key '" + a + "nextn_predict_layers' = " + std::to_string(nextn) +
                " is out of range for block_count " + std::to_string(blocks));
  c.n_layers = blocks - int(nextn);
  const int64_t interval = m.get_int(a + "full_attention_interval", 4);
  if (interval < 1 || interval > c.n_layers)
    throw Error(m.first().path() + ": metadata key '" + a + "full_attention_interval' = " + std::to_string(interval) +
                " is out of range");
  for (int i = 0; i < c.n_layers; ++i) c.is_full.push_back((i + 1) % interval == 0);
  c.rms_eps = float(m.get_float(a + "attention.layer_norm_rms_epsilon"));
  c.n_q_heads = pos_int("attention.head_count");
  c.n_kv_heads = pos_int("attention.head_count_kv");
  c.head_dim = m.kv(a + "attention.key_length") ? pos_int("attention.key_length") : c.hidden / c.n_q_heads;
  c.rope_dim = m.kv(a + "rope.dimension_count") ? pos_int("rope.dimension_count") : c.head_dim / 4;
  c.rope_theta = m.get_float(a + "rope.freq_base", 1e7);
  c.lin_k_heads = pos_int("ssm.group_count");
  c.lin_v_heads = pos_int("ssm.time_step_rank");
  c.lin_k_dim = pos_int("ssm.state_size");
  const int inner = pos_int("ssm.inner_size");
  if (inner % c.lin_v_heads != 0 || c.lin_v_heads % c.lin_k_heads != 0)
    throw Error(m.first().path() + ": ssm.inner_size " + std::to_string(inner) + ", time_step_rank " +
                std::to_string(c.lin_v_heads) + " and group_count " + std::to_string(c.lin_k_heads) +
                " are inconsistent");
  c.lin_v_dim = inner / c.lin_v_heads;
  c.conv_kernel = pos_int("ssm.conv_kernel");
  c.n_experts = pos_int("expert_count");
  c.top_k = pos_int("expert_used_count");
  if (c.top_k > c.n_experts) throw Error(m.first().path() + ": expert_used_count exceeds expert_count");
  c.expert_inter = pos_int("expert_feed_forward_length");
  c.shared_inter = pos_int("expert_shared_feed_forward_length");
  c.max_pos = m.kv(a + "context_length") ? pos_int("context_length") : 262144;
  const GgufTensor& emb = m.get("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != c.hidden)
    throw Error(emb.file + ": tensor 'token_embd.weight' has shape " + shape_str(emb.shape()) + ", expected [vocab, " +
                std::to_string(c.hidden) + "]");
  c.vocab = int(emb.ne[1]);
  c.tie_embeddings = m.find("output.weight") == nullptr;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const GgufValue* v = m.kv(k); v && v->is_int() && v->i >= 0 && v->i < c.vocab) {
      bool seen = false;
      for (int e : c.eos_ids) seen |= e == int(v->i);
      if (!seen) c.eos_ids.push_back(int(v->i));
    }
  return c;
}

namespace {

using RowMap = std::function<int64_t(int64_t)>;

// Builds QMatrix views and f32 vectors from GGUF tensors, owning what it converts.
class Builder {
 public:
  Builder(const GgufModel& m, ModelWeights& w) : m_(m), w_(w) {}

  // Shapes compare as ggml compares them: leading size-1 dimensions do not count (llama.cpp's converter writes
  // the shared-expert gate as [1, H], llama-quantize as [H]).
  static std::vector<int64_t> squeezed(std::vector<int64_t> s) {
    while (s.size() > 1 && s.front() == 1) s.erase(s.begin());
    return s;
  }

  const GgufTensor& tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensor& t = m_.get(name);
    if (squeezed(t.shape()) != squeezed(shape))
      throw Error(t.file + ": tensor '" + name + "': expected shape " + shape_str(shape) + ", found " +
                  shape_str(t.shape()));
    used_.insert(name);
    return t;
  }

  // Whole tensor decoded to f32; `src` (optional) gives, for each output element, the source element.
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape, const RowMap& src = nullptr) {
    const GgufTensor& t = tensor(name, shape);
    if (!gguf_can_decode(t.type))
      throw Error(t.file + ": tensor '" + name + "': type " + ggml_type_name(t.type) + " is not supported");
    std::vector<float> v(size_t(t.numel()));
    gguf_dequant_row(t.type, t.data, t.numel(), v.data());
    if (!src) return v;
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[size_t(src(int64_t(i)))];
    return out;
  }

  // n matrices [rows, cols] stored as `shape`; row r of each comes from source row rows_from(r); with
  // col_block > 0, column block b (of col_block columns) comes from source block cols_from(b).
  std::vector<QMatrix> mats(const std::string& name, const std::vector<int64_t>& shape, int64_t n, int64_t rows,
                            int64_t cols, const RowMap& rows_from = nullptr, int64_t col_block = 0,
                            const RowMap& cols_from = nullptr) {
    const GgufTensor& t = tensor(name, shape);
    GgmlTypeInfo ti;
    ggml_type_info(t.type, &ti);
    const size_t src_row_bytes = size_t(cols / ti.block) * size_t(ti.bytes);
    auto src_row = [&](int64_t k, int64_t r) {
      return t.data + size_t(k * rows + (rows_from ? rows_from(r) : r)) * src_row_bytes;
    };
    const bool dense = t.type == uint32_t(GgmlType::F32) || t.type == uint32_t(GgmlType::F16) ||
                       t.type == uint32_t(GgmlType::BF16);
    const DType dt = t.type == uint32_t(GgmlType::F32) ? DType::F32
                     : t.type == uint32_t(GgmlType::F16) ? DType::F16 : DType::BF16;
    std::vector<QMatrix> out(static_cast<size_t>(n));
    auto permute_cols = [&](uint8_t* row, size_t unit_bytes) {  // unit_bytes: bytes of one column block
      if (!col_block) return;
      const int64_t nb = cols / col_block;
      std::vector<uint8_t> tmp(row, row + size_t(nb) * unit_bytes);
      for (int64_t b = 0; b < nb; ++b)
        std::memcpy(row + size_t(b) * unit_bytes, tmp.data() + size_t(cols_from(b)) * unit_bytes, unit_bytes);
    };
    if (dense && !rows_from && !col_block) {
      note(name, t.type, std::string(dtype_name(dt)) + " (used in place)");
      for (int64_t k = 0; k < n; ++k) out[size_t(k)] = dense_view(src_row(k, 0), dt, rows, cols);
      return out;
    }
    if (col_block && (cols % col_block != 0 || col_block % 32 != 0))
      throw Error(t.file + ": tensor '" + name + "': cannot move column blocks of " + std::to_string(col_block));
    if (gguf_repackable(t.type)) {
      const int bits = gguf_repack_bits(t.type);
      // Q4_K / Q5_K keep their scales as stored (KS8, one 12-byte block per 256 columns) unless the column
      // reorder splits the 256-blocks (ssm_out with 128-wide value heads): f32 scales there.
      const bool ks8 = gguf_repack_ks8(t.type) && (!col_block || col_block % 256 == 0);
      const DType sdt = ks8 ? DType::KS8 : DType::F32;
      note(name, t.type, "affine " + std::to_string(bits) + "-bit, group 32, " +
                             (ks8 ? "scales as stored (KS8)" : "f32 scales") + " (exact repack)");
      const size_t wpr = size_t(cols) * size_t(bits) / 32, gpr = size_t(cols / 32);
      const size_t srb = scale_bytes(sdt, gpr);  // scale (and bias) bytes of a row
      auto words = own<uint32_t>(size_t(n * rows) * wpr);
      auto sc = own<uint8_t>(size_t(n * rows) * srb), bi = own<uint8_t>(size_t(n * rows) * srb);
      parallel_for(n * rows, 64, [&](int64_t a, int64_t e) {  // rows of all n matrices, on all cores
        for (int64_t g = a; g < e; ++g) {
          const size_t at = size_t(g);
          uint32_t* wr = words + at * wpr;
          uint8_t* sr = sc + at * srb;
          uint8_t* br = bi + at * srb;
          if (ks8) {
            gguf_repack_row_ks8(t.type, src_row(g / rows, g % rows), cols, wr, sr, br);
          } else {
            gguf_repack_row(t.type, src_row(g / rows, g % rows), cols, wr, reinterpret_cast<float*>(sr),
                            reinterpret_cast<float*>(br));
          }
          permute_cols(reinterpret_cast<uint8_t*>(wr), size_t(col_block) * size_t(bits) / 8);
          permute_cols(sr, scale_bytes(sdt, size_t(col_block / 32)));
          permute_cols(br, scale_bytes(sdt, size_t(col_block / 32)));
        }
      });
      for (int64_t k = 0; k < n; ++k) {
        QMatrix& q = out[size_t(k)];
        q.kind = QMatrix::Kind::Affine;
        q.sdtype = sdt;
        q.bits = bits;
        q.group = 32;
        q.rows = rows;
        q.cols = cols;
        q.w = words + size_t(k * rows) * wpr;
        q.scales = sc + size_t(k * rows) * srb;
        q.biases = bi + size_t(k * rows) * srb;
      }
      return out;
    }
    if (!dense && !gguf_can_decode(t.type))
      throw Error(t.file + ": tensor '" + name + "': type " + ggml_type_name(t.type) + " is not supported");
    if (!dense && (!col_block || col_block % ti.block == 0)) {
      // Other quantised types (Q6_K) stay in their blocks, decoded a row at a time by the kernels (exact);
      // moved rows and whole-block column runs are copied.
      QMatrix q;
      q.kind = QMatrix::Kind::Ggml;
      q.gtype = t.type;
      q.dtype = DType::U8;
      q.rows = rows;
      q.cols = cols;
      const bool moved = rows_from || col_block;
      note(name, t.type, moved ? "its own blocks (rows reordered), decoded in the kernels"
                               : "its own blocks (in place), decoded in the kernels");
      const uint8_t* base = t.data;
      if (moved) {
        uint8_t* buf = own<uint8_t>(size_t(n * rows) * src_row_bytes);
        for (int64_t k = 0; k < n; ++k)
          for (int64_t r = 0; r < rows; ++r) {
            uint8_t* dst = buf + size_t(k * rows + r) * src_row_bytes;
            std::memcpy(dst, src_row(k, r), src_row_bytes);
            permute_cols(dst, size_t(col_block / ti.block) * size_t(ti.bytes));
          }
        base = buf;
      }
      for (int64_t k = 0; k < n; ++k) {
        out[size_t(k)] = q;
        out[size_t(k)].w = base + size_t(k * rows) * src_row_bytes;
      }
      return out;
    }
    // Dense copy with rows/columns moved (F32/F16/BF16 keep their type), or, when column blocks split the
    // quantisation blocks, dequantised to F32 (exact).
    const DType odt = dense ? dt : DType::F32;
    const size_t es = dtype_size(odt), orb = size_t(cols) * es;
    note(name, t.type, dense ? std::string(dtype_name(dt)) + " (copied, heads reordered)" : "F32 (dequantised)");
    auto buf = own<uint8_t>(size_t(n * rows) * orb);
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t r = 0; r < rows; ++r) {
        uint8_t* dst = buf + size_t(k * rows + r) * orb;
        if (dense) {
          std::memcpy(dst, src_row(k, r), orb);
        } else {
          gguf_dequant_row(t.type, src_row(k, r), cols, reinterpret_cast<float*>(dst));
        }
        permute_cols(dst, size_t(col_block) * es);
      }
      out[size_t(k)] = dense_view(buf + size_t(k * rows) * orb, odt, rows, cols);
    }
    return out;
  }

  QMatrix mat(const std::string& name, int64_t rows, int64_t cols, const RowMap& rows_from = nullptr,
              int64_t col_block = 0, const RowMap& cols_from = nullptr) {
    return mats(name, {rows, cols}, 1, rows, cols, rows_from, col_block, cols_from)[0];
  }

  // One line per conversion, naming every tensor by kind and blocks: "token_embd.weight, attn_qkv.weight[0-2,4-6]".
  void print_log() const {
    for (const auto& [what, names] : log_) {
      std::vector<std::pair<std::string, std::vector<int>>> kinds;  // kind -> block ids, in first-seen order
      for (const std::string& n : names) {
        int b = -1, len = 0;
        const bool blk = std::sscanf(n.c_str(), "blk.%d.%n", &b, &len) == 1 && len > 0;
        const std::string kind = blk ? n.substr(size_t(len)) : n;
        auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
        if (it == kinds.end()) it = kinds.insert(kinds.end(), {kind, {}});
        if (blk) it->second.push_back(b);
      }
      std::string s = "gguf: ";  // built by appending: GCC 12 -Wrestrict misfires on "x" + std::string
      s += what;
      s += ": ";
      for (size_t i = 0; i < kinds.size(); ++i) {
        if (i) s += ", ";
        s += kinds[i].first;
        const std::vector<int>& ids = kinds[i].second;
        if (ids.empty()) continue;
        s += '[';
        for (size_t a = 0; a < ids.size();) {
          size_t e = a;
          while (e + 1 < ids.size() && ids[e + 1] == ids[e] + 1) ++e;
          if (a) s += ',';
          s += std::to_string(ids[a]);
          if (e > a) {
            s += '-';
            s += std::to_string(ids[e]);
          }
          a = e + 1;
        }
        s += ']';
      }
      std::fprintf(stderr, "%s\n", s.c_str());
    }
  }

  void warn_unused(int n_layers) const {
    for (const std::string& n : m_.names()) {
      if (used_.count(n)) continue;
      int b = -1;
      if (std::sscanf(n.c_str(), "blk.%d.", &b) == 1 && b >= n_layers) continue;  // multi-token prediction
      std::fprintf(stderr, "gguf: warning: tensor '%s' is not used\n", n.c_str());
    }
  }

 private:
  static QMatrix dense_view(const void* p, DType dt, int64_t rows, int64_t cols) {
    QMatrix q;
    q.kind = QMatrix::Kind::Dense;
    q.dtype = dt;
    q.w = p;
    q.rows = rows;
    q.cols = cols;
    return q;
  }

  template <class T>
  T* own(size_t count) {
    auto v = std::make_shared<std::vector<T>>(count);
    w_.keep_alive.push_back(v);
    return v->data();
  }

  void note(const std::string& name, uint32_t type, const std::string& to) {
    log_[ggml_type_name(type) + " -> " + to].push_back(name);
  }

  const GgufModel& m_;
  ModelWeights& w_;
  std::unordered_set<std::string> used_;
  std::map<std::string, std::vector<std::string>> log_;
};

QMatrix sub_rows(const QMatrix& m, int64_t r0, int64_t n) {
  QMatrix q = m;
  q.rows = n;
  q.w = static_cast<const uint8_t*>(m.w) + size_t(r0) * m.row_bytes();
  if (m.kind == QMatrix::Kind::Affine) {
    const size_t sb = scale_bytes(m.sdtype, size_t(m.cols / m.group));
    q.scales = static_cast<const uint8_t*>(m.scales) + size_t(r0) * sb;
    q.biases = static_cast<const uint8_t*>(m.biases) + size_t(r0) * sb;
  }
  return q;
}

void load_layer(Builder& b, const GgufModel& m, const ModelConfig& c, int i, LayerWeights& lw) {
  const std::string p = "blk." + std::to_string(i) + ".";
  const int64_t H = c.hidden;
  lw.is_full = c.is_full[size_t(i)];
  lw.in_norm = b.vec(p + "attn_norm.weight", {H});
  lw.post_norm = b.vec(p + "post_attention_norm.weight", {H});
  if (lw.is_full) {
    const int64_t hd = c.head_dim;
    lw.attn.q = b.mat(p + "attn_q.weight", c.q_proj_rows(), H);
    lw.attn.k = b.mat(p + "attn_k.weight", c.kv_dim(), H);
    lw.attn.v = b.mat(p + "attn_v.weight", c.kv_dim(), H);
    lw.attn.o = b.mat(p + "attn_output.weight", H, int64_t(c.n_q_heads) * hd);
    lw.attn.q_norm = b.vec(p + "attn_q_norm.weight", {hd});
    lw.attn.k_norm = b.vec(p + "attn_k_norm.weight", {hd});
  } else {
    const int64_t C = c.conv_dim(), K = c.conv_kernel, Hv = c.lin_v_heads, Hk = c.lin_k_heads, Dv = c.lin_v_dim;
    const int64_t r = Hv / Hk, qk = 2 * int64_t(c.key_dim());
    // Grouped head h (= g*r + j) is stored at tiled position j*Hk + g.
    RowMap head = nullptr, vrows = nullptr, qkv_rows = nullptr;
    if (Hk != Hv) {
      head = [=](int64_t h) { return (h % r) * Hk + h / r; };
      vrows = [=](int64_t row) { return ((row / Dv) % r * Hk + (row / Dv) / r) * Dv + row % Dv; };
      qkv_rows = [=](int64_t row) { return row < qk ? row : qk + vrows(row - qk); };
    }
    lw.lin.in_qkv = b.mat(p + "attn_qkv.weight", C, H, qkv_rows);
    lw.lin.in_z = b.mat(p + "attn_gate.weight", c.value_dim(), H, vrows);
    lw.lin.in_b = b.mat(p + "ssm_beta.weight", Hv, H, head);
    lw.lin.in_a = b.mat(p + "ssm_alpha.weight", Hv, H, head);
    lw.lin.conv = b.vec(p + "ssm_conv1d.weight", {C, K},
                        qkv_rows ? RowMap([=](int64_t e) { return qkv_rows(e / K) * K + e % K; }) : nullptr);
    lw.lin.dt_bias = b.vec(p + "ssm_dt.bias", {Hv}, head);
    lw.lin.a_neg = b.vec(p + "ssm_a", {Hv}, head);
    lw.lin.norm = b.vec(p + "ssm_norm.weight", {Dv});
    lw.lin.out = b.mat(p + "ssm_out.weight", H, c.value_dim(), nullptr, head ? Dv : 0, head);
  }
  MoeWeights& moe = lw.moe;
  const int64_t E = c.n_experts, I = c.expert_inter, Is = c.shared_inter;
  moe.router = b.mat(p + "ffn_gate_inp.weight", E, H);
  if (m.find(p + "ffn_gate_up_exps.weight")) {
    const auto gu = b.mats(p + "ffn_gate_up_exps.weight", {E, 2 * I, H}, E, 2 * I, H);
    for (const QMatrix& q : gu) {
      moe.gate.e.push_back(sub_rows(q, 0, I));
      moe.up.e.push_back(sub_rows(q, I, I));
    }
  } else {
    moe.gate.e = b.mats(p + "ffn_gate_exps.weight", {E, I, H}, E, I, H);
    moe.up.e = b.mats(p + "ffn_up_exps.weight", {E, I, H}, E, I, H);
  }
  moe.down.e = b.mats(p + "ffn_down_exps.weight", {E, H, I}, E, H, I);
  moe.sh_gate = b.mat(p + "ffn_gate_shexp.weight", Is, H);
  moe.sh_up = b.mat(p + "ffn_up_shexp.weight", Is, H);
  moe.sh_down = b.mat(p + "ffn_down_shexp.weight", H, Is);
  moe.sh_gate_w = b.mats(p + "ffn_gate_inp_shexp.weight", {H}, 1, 1, H)[0];
}

}  // namespace

std::shared_ptr<ModelWeights> load_model_gguf(const std::string& path) {
  return load_model_gguf(std::make_shared<const GgufModel>(path));
}

std::shared_ptr<ModelWeights> load_model_gguf(std::shared_ptr<const GgufModel> model) {
  const GgufModel& m = *model;
  auto w = std::make_shared<ModelWeights>();
  w->cfg = gguf_model_config(m);
  w->layout = "gguf";
  const ModelConfig& c = w->cfg;
  Builder b(m, *w);
  const int64_t H = c.hidden;
  w->embed = b.mat("token_embd.weight", c.vocab, H);
  w->lm_head = c.tie_embeddings ? w->embed : b.mat("output.weight", c.vocab, H);
  w->final_norm = b.vec("output_norm.weight", {H});
  w->layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) load_layer(b, m, c, i, w->layers[size_t(i)]);
  b.print_log();
  b.warn_unused(c.n_layers);
  for (auto& k : m.keep_alive()) w->keep_alive.push_back(k);
  return w;
}

}  // namespace lily
