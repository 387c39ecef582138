// The per-layout tensor lists of checkpoint_writer.h.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "synth/checkpoint_writer.h"
#include "synth/module_plan.h"

namespace lily {

namespace {

void write_rows_bf16(TensorSink& sink, const QMatrix& m) {
  // Row by row: dense BF16 rows are copied, anything else decoded by dequant_row (exact in f32) and rounded.
  std::vector<float> f(size_t(m.cols));
  std::vector<uint16_t> row(size_t(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    if (m.kind == QMatrix::Kind::Dense && m.dtype == DType::BF16) {
      sink.write(static_cast<const uint8_t*>(m.w) + size_t(r) * m.row_bytes(), m.row_bytes());
      continue;
    }
    dequant_row(m, r, f.data());
    for (size_t c = 0; c < f.size(); ++c) row[c] = f32_to_bf16(f[c]);
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

std::vector<TensorOut> mlx_tensors(const ModelWeights& w, const MlxRecipe& recipe) {
  std::vector<TensorOut> out;
  int cur_layer = -2;
  const auto modules = plan_modules(w.cfg);
  for (const auto& m : modules) {
    if (m.layer != cur_layer && m.layer >= 0) add_vectors(w, m.layer, false, out);
    cur_layer = m.layer;
    const QuantChoice qc = recipe.choose(m.name);
    check_quant_choice(qc, m.name);
    if (m.cols % qc.group) throw Error(m.name + ": " + std::to_string(m.cols) + " input columns are not a multiple of "
                                       "the group size " + std::to_string(qc.group));
    std::vector<const QMatrix*> mats;
    for (int e = 0; e < m.count; ++e) {
      const QMatrix* q = &slot_matrix(w, m, e);
      if (q->rows != m.rows || q->cols != m.cols)
        throw Error("mlx writer: " + m.name + " is [" + std::to_string(q->rows) + ", " + std::to_string(q->cols) +
                    "], expected [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]");
      mats.push_back(q);
    }
    const int bits = qc.bits, group = qc.group;
    const int64_t rows = m.rows, cols = m.cols, G = cols / group;
    const size_t wb = size_t(rows) * size_t(cols) * size_t(bits) / 8;
    const size_t sb = size_t(rows) * size_t(G) * 2;
    // A matrix already in this exact form is copied; any other is decoded row by row and quantised.
    auto same = [bits, group](const QMatrix* q) {
      return q->kind == QMatrix::Kind::Affine && q->bits == bits && q->group == group && q->sdtype == DType::BF16;
    };
    auto quantised = [mats, bits, group, rows, cols, G](TensorSink& s, int part) {  // part 0 w, 1 scales, 2 biases
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<uint8_t> codes(size_t(cols) * size_t(bits) / 8);
      std::vector<uint16_t> sc(static_cast<size_t>(G)), bi(static_cast<size_t>(G));
      for (const QMatrix* q : mats)
        for (int64_t r = 0; r < rows; ++r) {
          dequant_row(*q, r, row.data());
          quantize_row_affine(row.data(), cols, bits, group, codes.data(), sc.data(), bi.data());
          if (part == 0) s.write(codes.data(), codes.size());
          else s.write(part == 1 ? sc.data() : bi.data(), size_t(G) * 2);
        }
    };
    auto producer = [mats, same, quantised, wb, sb](int part) {
      return [mats, same, quantised, wb, sb, part](TensorSink& s) {
        if (std::all_of(mats.begin(), mats.end(), same)) {
          for (auto* q : mats) s.write(part == 0 ? q->w : part == 1 ? q->scales : q->biases, part == 0 ? wb : sb);
          return;
        }
        quantised(s, part);
      };
    };
    out.push_back({m.name + ".weight", DType::U32, with_count(m.count, {rows, cols * bits / 32}), producer(0)});
    out.push_back({m.name + ".scales", DType::BF16, with_count(m.count, {rows, G}), producer(1)});
    out.push_back({m.name + ".biases", DType::BF16, with_count(m.count, {rows, G}), producer(2)});
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
