// Writers of int4 (GPTQ, AWQ, compressed-tensors) and FP8 (block-scaled e4m3) checkpoints made from the tiny BF16
// fixture, each following its format's own packing conventions; shared by the format and fuzz tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "model/weights.h"

namespace lily_test {

using namespace lily;

constexpr int kGroup = 64;  // the tiny model's expert down_proj has 64 inputs (the real model uses 128)
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AutoAWQ: nibble n of a word holds output 8w + order[n]

enum class Fmt { Gptq, Awq, CtSym, CtAsym };

// Integer codes q [rows][cols], zeros z [rows][groups] and f16 scales s [rows][groups] of one matrix.
struct Int4 {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> q, z;
  std::vector<uint16_t> s;
  float w(int64_t o, int64_t i) const {  // (q - z) * s, computed exactly in double
    const size_t g = size_t(o * (cols / kGroup) + i / kGroup);
    return float((double(q[size_t(o * cols + i)]) - z[g]) * double(f16_to_f32(s[g])));
  }
};

inline Int4 quantise(const std::vector<float>& w, int64_t rows, int64_t cols, bool sym) {
  Int4 r{rows, cols, std::vector<uint8_t>(size_t(rows * cols)), std::vector<uint8_t>(size_t(rows * cols / kGroup)),
         std::vector<uint16_t>(size_t(rows * cols / kGroup))};
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t g = 0; g < cols / kGroup; ++g) {
      const float* x = w.data() + o * cols + g * kGroup;
      float lo = *std::min_element(x, x + kGroup), hi = *std::max_element(x, x + kGroup);
      float sc = sym ? std::max(std::fabs(lo), std::fabs(hi)) / 7.5f : (hi - lo) / 15.0f;
      const uint16_t s16 = f32_to_f16(sc > 0 ? sc : 1.0f);
      sc = f16_to_f32(s16);
      const int z = sym ? 8 : std::clamp(int(std::lround(-lo / sc)), 1, 15);  // >= 1: GPTQ v1 stores z - 1
      const size_t gi = size_t(o * (cols / kGroup) + g);
      r.s[gi] = s16;
      r.z[gi] = uint8_t(z);
      for (int k = 0; k < kGroup; ++k)
        r.q[size_t(o * cols + g * kGroup + k)] = uint8_t(std::clamp(int(std::lround(x[k] / sc)) + z, 0, 15));
    }
  return r;
}

inline std::vector<uint8_t> words(const std::vector<uint32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::vector<uint8_t> halves(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The tensors of module `m` in format f.
inline void encode(const Int4& x, Fmt f, const std::string& m, std::vector<OwnedTensor>& out) {
  const int64_t R = x.rows, C = x.cols, G = C / kGroup;
  std::vector<uint16_t> s_t(size_t(G * R));  // [G][R] (GPTQ / AWQ)
  for (int64_t o = 0; o < R; ++o)
    for (int64_t g = 0; g < G; ++g) s_t[size_t(g * R + o)] = x.s[size_t(o * G + g)];
  if (f == Fmt::Gptq) {
    std::vector<uint32_t> qw(size_t(C / 8 * R)), qz(size_t(G * R / 8));
    for (int64_t i = 0; i < C; ++i)
      for (int64_t o = 0; o < R; ++o) qw[size_t((i / 8) * R + o)] |= uint32_t(x.q[size_t(o * C + i)]) << (4 * (i % 8));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t o = 0; o < R; ++o)
        qz[size_t(g * (R / 8) + o / 8)] |= (uint32_t(x.z[size_t(o * G + g)] - 1) & 0xfu) << (4 * (o % 8));
    std::vector<uint32_t> gidx(static_cast<size_t>(C));
    for (int64_t i = 0; i < C; ++i) gidx[size_t(i)] = uint32_t(i / kGroup);
    out.push_back({m + ".qweight", DType::I32, {C / 8, R}, words(qw)});
    out.push_back({m + ".qzeros", DType::I32, {G, R / 8}, words(qz)});
    out.push_back({m + ".scales", DType::F16, {G, R}, halves(s_t)});
    out.push_back({m + ".g_idx", DType::I32, {C}, words(gidx)});
  } else if (f == Fmt::Awq) {
    std::vector<uint32_t> qw(size_t(C * R / 8)), qz(size_t(G * R / 8));
    for (int64_t i = 0; i < C; ++i)
      for (int64_t w = 0; w < R / 8; ++w)
        for (int n = 0; n < 8; ++n) qw[size_t(i * (R / 8) + w)] |= uint32_t(x.q[size_t((8 * w + kAwqOrder[n]) * C + i)]) << (4 * n);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t w = 0; w < R / 8; ++w)
        for (int n = 0; n < 8; ++n) qz[size_t(g * (R / 8) + w)] |= uint32_t(x.z[size_t((8 * w + kAwqOrder[n]) * G + g)]) << (4 * n);
    out.push_back({m + ".qweight", DType::I32, {C, R / 8}, words(qw)});
    out.push_back({m + ".qzeros", DType::I32, {G, R / 8}, words(qz)});
    out.push_back({m + ".scales", DType::F16, {G, R}, halves(s_t)});
  } else {
    // stored value = signed q + 8 = our unsigned code q (with the signed value q - 8)
    std::vector<uint32_t> qw(size_t(R * C / 8));
    for (int64_t o = 0; o < R; ++o)
      for (int64_t i = 0; i < C; ++i) qw[size_t(o * (C / 8) + i / 8)] |= uint32_t(x.q[size_t(o * C + i)]) << (4 * (i % 8));
    out.push_back({m + ".weight_packed", DType::I32, {R, C / 8}, words(qw)});
    out.push_back({m + ".weight_scale", DType::F16, {R, G}, halves(x.s)});
    std::vector<uint32_t> shape = {uint32_t(R), uint32_t(C)};
    out.push_back({m + ".weight_shape", DType::I32, {2}, words(shape)});
    if (f == Fmt::CtAsym) {  // zero point signed z - 8, stored + 8, packed along the output
      std::vector<uint32_t> zp(size_t(R / 8 * G));
      for (int64_t o = 0; o < R; ++o)
        for (int64_t g = 0; g < G; ++g) zp[size_t((o / 8) * G + g)] |= uint32_t(x.z[size_t(o * G + g)]) << (4 * (o % 8));
      out.push_back({m + ".weight_zero_point", DType::I32, {R / 8, G}, words(zp)});
    }
  }
}

inline nlohmann::json quant_config(Fmt f) {
  switch (f) {
    case Fmt::Gptq:
      return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", kGroup}, {"desc_act", false}, {"sym", false},
              {"checkpoint_format", "gptq"}};
    case Fmt::Awq: return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", kGroup}, {"zero_point", true}, {"version", "gemm"}};
    default:
      return {{"quant_method", "compressed-tensors"},
              {"format", "pack-quantized"},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}},
                  {"weights",
                   {{"num_bits", 4}, {"type", "int"}, {"symmetric", f == Fmt::CtSym}, {"group_size", kGroup}, {"strategy", "group"}}}}}}},
              {"ignore", {"lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"}}};
  }
}

// The BF16 fixture with every per-layer linear of >= 8 rows (but the router and the shared-expert gate, which
// conversions leave in BF16) in format f, experts one tensor per expert. Returns the codes of each module.
inline std::map<std::string, Int4> write_int4(const std::string& dir, Fmt f) {
  std::map<std::string, Int4> codes;
  auto src = load_model(tiny("model-bf16"));
  rewrite_checkpoint(tiny("model-bf16"), dir, [&](std::vector<OwnedTensor>& ts) {
    std::vector<OwnedTensor> out;
    for (auto& t : ts) {
      const std::string& n = t.name;
      const bool layer = n.rfind("model.language_model.layers.", 0) == 0;
      const bool keep = !layer || t.shape.size() == 1 || n.find("mlp.gate.") != std::string::npos ||
                        n.find("shared_expert_gate") != std::string::npos || n.find("in_proj_a") != std::string::npos ||
                        n.find("in_proj_b") != std::string::npos || n.find("conv1d") != std::string::npos;
      if (keep) {
        out.push_back(std::move(t));
        continue;
      }
      const int li = std::stoi(n.substr(std::string("model.language_model.layers.").size()));
      const LayerWeights& L = src->layers[size_t(li)];
      auto add = [&](const std::string& module, const QMatrix& m) {
        std::vector<float> w(size_t(m.rows * m.cols));
        for (int64_t r = 0; r < m.rows; ++r) dequant_row(m, r, w.data() + size_t(r * m.cols));
        Int4 x = quantise(w, m.rows, m.cols, f == Fmt::CtSym);
        encode(x, f, module, out);
        codes[module] = std::move(x);
      };
      const std::string pre = n.substr(0, n.find(".mlp.") + 5);
      if (n.ends_with("experts.gate_up_proj")) {
        for (size_t e = 0; e < L.moe.gate.e.size(); ++e) {
          add(pre + "experts." + std::to_string(e) + ".gate_proj", L.moe.gate.e[e]);
          add(pre + "experts." + std::to_string(e) + ".up_proj", L.moe.up.e[e]);
        }
        continue;
      }
      if (n.ends_with("experts.down_proj")) {
        for (size_t e = 0; e < L.moe.down.e.size(); ++e) add(pre + "experts." + std::to_string(e) + ".down_proj", L.moe.down.e[e]);
        continue;
      }
      const std::string module = n.substr(0, n.size() - 7);  // drop ".weight"
      const std::string tail = module.substr(module.rfind('.') + 1);
      const QMatrix* m = tail == "in_proj_qkv" ? &L.lin.in_qkv : tail == "in_proj_z" ? &L.lin.in_z
                       : tail == "out_proj" ? &L.lin.out : tail == "q_proj" ? &L.attn.q : tail == "k_proj" ? &L.attn.k
                       : tail == "v_proj" ? &L.attn.v : tail == "o_proj" ? &L.attn.o : nullptr;
      if (!m && module.find("shared_expert.") != std::string::npos)
        m = tail == "gate_proj" ? &L.moe.sh_gate : tail == "up_proj" ? &L.moe.sh_up : &L.moe.sh_down;
      if (!m) {
        ADD_FAILURE() << "unexpected tensor " << n;
        continue;
      }
      add(module, *m);
    }
    ts = std::move(out);
  });
  auto cfg = nlohmann::json::parse(read_text(fs::path(dir) / "config.json"));
  cfg["quantization_config"] = quant_config(f);
  write_text((fs::path(dir) / "config.json").string(), cfg.dump());
  return codes;
}

constexpr int64_t kBlock = 128;

inline uint8_t to_e4m3(float x) {  // nearest e4m3 value (ties to the even code), saturating at +-448
  uint8_t best = 0;
  float err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const float v = f8e4m3_to_f32(uint8_t(c));
    if (std::isnan(v)) continue;
    const float e = std::fabs(v - x);
    if (e < err || (e == err && (c & 1) == 0)) {
      err = e;
      best = uint8_t(c);
    }
  }
  return best;
}

// One matrix as FP8: codes [R][C] and BF16 block scales [ceil(R/128)][ceil(C/128)].
inline void encode_fp8(const QMatrix& m, const std::string& module, std::vector<OwnedTensor>& out, DType sdt) {
  const int64_t R = m.rows, C = m.cols, BR = (R + kBlock - 1) / kBlock, BC = (C + kBlock - 1) / kBlock;
  std::vector<float> w(size_t(R * C));
  for (int64_t r = 0; r < R; ++r) dequant_row(m, r, w.data() + size_t(r * C));
  std::vector<float> sc(size_t(BR * BC), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float& s = sc[size_t((r / kBlock) * BC + c / kBlock)];
      s = std::max(s, std::fabs(w[size_t(r * C + c)]) / 448.0f);
    }
  std::vector<uint8_t> sbytes(sc.size() * dtype_size(sdt));
  for (size_t i = 0; i < sc.size(); ++i) {
    if (sdt == DType::BF16) {
      const uint16_t h = f32_to_bf16(sc[i] > 0 ? sc[i] : 1.0f);
      sc[i] = bf16_to_f32(h);
      std::memcpy(sbytes.data() + 2 * i, &h, 2);
    } else {
      if (!(sc[i] > 0)) sc[i] = 1.0f;
      std::memcpy(sbytes.data() + 4 * i, &sc[i], 4);
    }
  }
  std::vector<uint8_t> codes(size_t(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) codes[size_t(r * C + c)] = to_e4m3(w[size_t(r * C + c)] / sc[size_t((r / kBlock) * BC + c / kBlock)]);
  out.push_back({module + ".weight", DType::F8_E4M3, {R, C}, std::move(codes)});
  out.push_back({module + ".weight_scale_inv", sdt, {BR, BC}, std::move(sbytes)});
}

inline void write_fp8(const std::string& dir, DType sdt) {
  auto src = load_model(tiny("model-bf16"));
  rewrite_checkpoint(tiny("model-bf16"), dir, [&](std::vector<OwnedTensor>& ts) {
    std::vector<OwnedTensor> out;
    for (auto& t : ts) {
      const std::string& n = t.name;
      const bool layer = n.rfind("model.language_model.layers.", 0) == 0;
      if (!layer || t.shape.size() == 1 || n.find("mlp.gate.") != std::string::npos ||
          n.find("shared_expert_gate") != std::string::npos || n.find("in_proj_a") != std::string::npos ||
          n.find("in_proj_b") != std::string::npos || n.find("conv1d") != std::string::npos) {
        out.push_back(std::move(t));
        continue;
      }
      const int li = std::stoi(n.substr(std::string("model.language_model.layers.").size()));
      const LayerWeights& L = src->layers[size_t(li)];
      const std::string pre = n.substr(0, n.find(".mlp.") + 5);
      if (n.ends_with("experts.gate_up_proj")) {
        for (size_t e = 0; e < L.moe.gate.e.size(); ++e) {
          encode_fp8(L.moe.gate.e[e], pre + "experts." + std::to_string(e) + ".gate_proj", out, sdt);
          encode_fp8(L.moe.up.e[e], pre + "experts." + std::to_string(e) + ".up_proj", out, sdt);
        }
        continue;
      }
      if (n.ends_with("experts.down_proj")) {
        for (size_t e = 0; e < L.moe.down.e.size(); ++e)
          encode_fp8(L.moe.down.e[e], pre + "experts." + std::to_string(e) + ".down_proj", out, sdt);
        continue;
      }
      const std::string module = n.substr(0, n.size() - 7);
      const std::string tail = module.substr(module.rfind('.') + 1);
      const bool sh = module.find("shared_expert.") != std::string::npos;
      const QMatrix* m = sh ? (tail == "gate_proj" ? &L.moe.sh_gate : tail == "up_proj" ? &L.moe.sh_up : &L.moe.sh_down)
                       : tail == "in_proj_qkv" ? &L.lin.in_qkv : tail == "in_proj_z" ? &L.lin.in_z
                       : tail == "out_proj" ? &L.lin.out : tail == "q_proj" ? &L.attn.q : tail == "k_proj" ? &L.attn.k
                       : tail == "v_proj" ? &L.attn.v : &L.attn.o;
      encode_fp8(*m, module, out, sdt);
    }
    ts = std::move(out);
  });
  auto cfg = nlohmann::json::parse(read_text(fs::path(dir) / "config.json"));
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}},
                                {"activation_scheme", "dynamic"},
                                {"modules_to_not_convert", {"lm_head", "mlp.gate", "shared_expert_gate"}}};
  write_text((fs::path(dir) / "config.json").string(), cfg.dump());
}

}  // namespace lily_test
