// The per-layout tensor lists of checkpoint_writer.h.
#include <cmath>

#include "core/error.h"
#include "synth/checkpoint_writer.h"
#include "synth/module_plan.h"

namespace lily {

namespace {

// Row `r` of a matrix as BF16 (Affine: scale*q + bias per group; Dense: converted).
void row_to_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  if (m.kind == QMatrix::Kind::Dense) {
    for (int64_t c = 0; c < m.cols; ++c) {
      size_t i = size_t(r * m.cols + c);
      float v;
      switch (m.dtype) {
        case DType::BF16: out[c] = static_cast<const uint16_t*>(m.w)[i]; continue;
        case DType::F16: v = f16_to_f32(static_cast<const uint16_t*>(m.w)[i]); break;
        case DType::F32: v = static_cast<const float*>(m.w)[i]; break;
        default: throw Error("hf-bf16 writer: unsupported dense dtype " + std::string(dtype_name(m.dtype)));
      }
      out[c] = f32_to_bf16(v);
    }
    return;
  }
  if (m.sdtype != DType::BF16) throw Error("hf-bf16 writer: only BF16 scales are supported");
  const auto* words = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(m.w) + size_t(r) * size_t(m.cols) * size_t(m.bits) / 8);
  const int64_t groups = m.cols / m.group;
  const auto* s = static_cast<const uint16_t*>(m.scales) + r * groups;
  const auto* b = static_cast<const uint16_t*>(m.biases) + r * groups;
  const int per_word = 32 / m.bits;
  const uint32_t mask = (1u << m.bits) - 1;
  for (int64_t c = 0; c < m.cols; ++c) {
    uint32_t q = (words[c / per_word] >> (m.bits * (c % per_word))) & mask;
    out[c] = f32_to_bf16(bf16_to_f32(s[c / m.group]) * float(q) + bf16_to_f32(b[c / m.group]));
  }
}

void write_rows_bf16(TensorSink& sink, const QMatrix& m) {
  std::vector<uint16_t> row(size_t(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    row_to_bf16(m, r, row.data());
    sink.write(row.data(), row.size() * 2);
  }
}

std::vector<int64_t> with_count(int count, std::vector<int64_t> s) {
  if (count > 1) s.insert(s.begin(), count);
  return s;
}

bool zero_centred(VecSlot s) {
  return s == VecSlot::InNorm || s == VecSlot::PostNorm || s == VecSlot::FinalNorm || s == VecSlot::QNorm ||
         s == VecSlot::KNorm;
}

// A vector as stored: BF16 (norms -1 when hf), A_log as F32 log(-a_neg).
TensorOut vector_tensor(const ModelWeights& w, const VectorSpec& v, std::string name, std::vector<int64_t> shape,
                        bool hf) {
  const auto* data = &slot_vector(w, v);
  if ((int64_t)data->size() != v.numel())
    throw Error("checkpoint writer: " + v.name + " has " + std::to_string(data->size()) + " values, expected " +
                std::to_string(v.numel()));
  if (v.slot == VecSlot::ALog) {
    return {std::move(name), DType::F32, std::move(shape), [data](TensorSink& s) {
              std::vector<float> a(data->size());
              for (size_t i = 0; i < a.size(); ++i) a[i] = std::log(-(*data)[i]);
              s.write(a.data(), a.size() * 4);
            }};
  }
  const float off = hf && zero_centred(v.slot) ? 1.0f : 0.0f;
  return {std::move(name), DType::BF16, std::move(shape), [data, off](TensorSink& s) {
            std::vector<uint16_t> a(data->size());
            for (size_t i = 0; i < a.size(); ++i) a[i] = f32_to_bf16((*data)[i] - off);
            s.write(a.data(), a.size() * 2);
          }};
}

// Appends the vectors of `layer` (-1: globals).
void add_vectors(const ModelWeights& w, int layer, bool hf, std::vector<TensorOut>& out) {
  for (const auto& v : plan_vectors(w.cfg)) {
    if (v.layer != layer) continue;
    if (!hf) {
      out.push_back(vector_tensor(w, v, v.name, v.shape, false));
      continue;
    }
    std::string name = v.name;
    const std::string mlx_pre = "language_model.model.";
    name = "model.language_model." + name.substr(mlx_pre.size());
    auto shape = v.shape;
    if (v.slot == VecSlot::Conv) shape = {v.shape[0], 1, v.shape[1]};  // same bytes, HF axis order
    out.push_back(vector_tensor(w, v, std::move(name), std::move(shape), true));
  }
}

}  // namespace

std::vector<TensorOut> mlx_tensors(const ModelWeights& w) {
  std::vector<TensorOut> out;
  int cur_layer = -2;
  const auto modules = plan_modules(w.cfg);
  for (const auto& m : modules) {
    if (m.layer != cur_layer && m.layer >= 0) add_vectors(w, m.layer, false, out);
    cur_layer = m.layer;
    std::vector<const QMatrix*> mats;
    for (int e = 0; e < m.count; ++e) {
      const QMatrix* q = &slot_matrix(w, m, e);
      if (q->kind != QMatrix::Kind::Affine || q->bits != m.bits || q->group != m.group || q->rows != m.rows ||
          q->cols != m.cols || q->sdtype != DType::BF16)
        throw Error("mlx-4bit writer: " + m.name + " is not an affine " + std::to_string(m.bits) +
                    "-bit group-64 BF16-scaled [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                    "] matrix");
      mats.push_back(q);
    }
    const size_t wb = size_t(m.rows) * size_t(m.cols) * size_t(m.bits) / 8;
    const size_t sb = size_t(m.rows) * size_t(m.cols / m.group) * 2;
    out.push_back({m.name + ".weight", DType::U32, with_count(m.count, {m.rows, m.cols * m.bits / 32}),
                   [mats, wb](TensorSink& s) { for (auto* q : mats) s.write(q->w, wb); }});
    out.push_back({m.name + ".scales", DType::BF16, with_count(m.count, {m.rows, m.cols / m.group}),
                   [mats, sb](TensorSink& s) { for (auto* q : mats) s.write(q->scales, sb); }});
    out.push_back({m.name + ".biases", DType::BF16, with_count(m.count, {m.rows, m.cols / m.group}),
                   [mats, sb](TensorSink& s) { for (auto* q : mats) s.write(q->biases, sb); }});
  }
  add_vectors(w, -1, false, out);
  return out;
}

std::vector<TensorOut> hf_bf16_tensors(const ModelWeights& w) {
  std::vector<TensorOut> out;
  int cur_layer = -2;
  const auto modules = plan_modules(w.cfg);
  for (size_t i = 0; i < modules.size(); ++i) {
    const auto& m = modules[i];
    if (m.layer != cur_layer && m.layer >= 0) add_vectors(w, m.layer, true, out);
    cur_layer = m.layer;
    if (m.slot == MatSlot::Embed) {
      const QMatrix* q = &w.embed;
      out.push_back({"model.language_model.embed_tokens.weight", DType::BF16, {m.rows, m.cols},
                     [q](TensorSink& s) { write_rows_bf16(s, *q); }});
      continue;
    }
    if (m.slot == MatSlot::LmHead) {
      const QMatrix* q = &w.lm_head;
      out.push_back({"lm_head.weight", DType::BF16, {m.rows, m.cols}, [q](TensorSink& s) { write_rows_bf16(s, *q); }});
      continue;
    }
    const std::string pre = "model.language_model.layers." + std::to_string(m.layer) + ".";
    const auto* L = &w.layers.at(size_t(m.layer));
    if (m.slot == MatSlot::ExpGate) {  // fused with the following ExpUp
      out.push_back({pre + "mlp.experts.gate_up_proj", DType::BF16, {m.count, 2 * m.rows, m.cols}, [L](TensorSink& s) {
                       for (size_t e = 0; e < L->moe.gate.e.size(); ++e) {
                         write_rows_bf16(s, L->moe.gate.e[e]);
                         write_rows_bf16(s, L->moe.up.e[e]);
                       }
                     }});
      continue;
    }
    if (m.slot == MatSlot::ExpUp) continue;
    if (m.slot == MatSlot::ExpDown) {
      out.push_back({pre + "mlp.experts.down_proj", DType::BF16, {m.count, m.rows, m.cols}, [L](TensorSink& s) {
                       for (const auto& q : L->moe.down.e) write_rows_bf16(s, q);
                     }});
      continue;
    }
    const std::string mlx_pre = "language_model.model.layers." + std::to_string(m.layer) + ".";
    const QMatrix* q = &slot_matrix(w, m, 0);
    out.push_back({pre + m.name.substr(mlx_pre.size()) + ".weight", DType::BF16, {m.rows, m.cols},
                   [q](TensorSink& s) { write_rows_bf16(s, *q); }});
  }
  add_vectors(w, -1, true, out);
  return out;
}

}  // namespace lily
