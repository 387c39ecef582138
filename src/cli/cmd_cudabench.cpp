// `lily cudabench`: batch-1 greedy decode speed of the CUDA backend on a synthetic full-size qwen3.6-35b-a3b
// (random weights in the exact MLX 4-bit g64 layout, router/shared gate 8-bit), at several context lengths.
// The context is reached by setting the state's position (KV cache zero-filled): the kernels read the same bytes
// as after a real prefill. Reports tok/s and achieved GB/s (weights + KV + recurrent state r/w per token).
// Host memory stays small: one random buffer per matrix shape, shared by all layers/experts; the device gets
// separate copies (no cache reuse across experts).
#include "engine/step_sampler.h"
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

#include "cli/registry.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/backend.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_factory.h"
#endif

namespace lily {
namespace {

#ifdef LILY_HAVE_CUDA
struct SynthPool {
  std::map<std::string, std::shared_ptr<std::vector<uint32_t>>> bufs;
  std::mt19937_64 rng{42};
  // A random affine matrix [rows, cols] with bits/g64 and sane scales (weights ~ U(-0.02, 0.02)).
  QMatrix affine(int64_t rows, int64_t cols, int bits, std::vector<std::shared_ptr<const void>>& keep) {
    const std::string key = std::to_string(rows) + "x" + std::to_string(cols) + "b" + std::to_string(bits);
    auto& b = bufs[key];
    const size_t nw = size_t(rows) * cols * bits / 32, ng = size_t(rows) * cols / 64;
    if (!b) {
      b = std::make_shared<std::vector<uint32_t>>(nw + ng);  // packed words, then (scale | bias<<16) words
      for (size_t i = 0; i < nw; ++i) (*b)[i] = uint32_t(rng());
      const float qmax = float((1 << bits) - 1);
      uint16_t* sb = reinterpret_cast<uint16_t*>(b->data() + nw);
      for (size_t i = 0; i < ng; ++i) {
        const float s = (0.04f / qmax) * (0.5f + float(rng() % 1000) / 1000.f);
        sb[i] = f32_to_bf16(s);
        sb[ng + i] = f32_to_bf16(-0.5f * qmax * s);
      }
      keep.push_back(b);
    }
    QMatrix m;
    m.kind = QMatrix::Kind::Affine;
    m.sdtype = DType::BF16;
    m.w = b->data();
    m.scales = reinterpret_cast<const uint16_t*>(b->data() + nw);
    m.biases = reinterpret_cast<const uint16_t*>(b->data() + nw) + ng;
    m.bits = bits;
    m.group = 64;
    m.rows = rows;
    m.cols = cols;
    return m;
  }
};

std::shared_ptr<ModelWeights> synthetic_35b() {
  auto w = std::make_shared<ModelWeights>();
  ModelConfig& c = w->cfg;
  c.model_type = "qwen3_5_moe_text";
  c.hidden = 2048;
  c.n_layers = 40;
  for (int i = 0; i < 40; ++i) c.is_full.push_back((i + 1) % 4 == 0);
  c.vocab = 248320;
  c.n_q_heads = 16;
  c.n_kv_heads = 2;
  c.head_dim = 256;
  c.rope_dim = 64;
  c.rope_theta = 1e7;
  c.lin_k_heads = 16;
  c.lin_v_heads = 32;
  c.lin_k_dim = 128;
  c.lin_v_dim = 128;
  c.conv_kernel = 4;
  c.n_experts = 256;
  c.top_k = 8;
  c.expert_inter = 512;
  c.shared_inter = 512;
  c.max_pos = 262144;
  w->layout = "mlx-affine";
  SynthPool P;
  auto& keep = w->keep_alive;
  const int H = c.hidden;
  w->embed = P.affine(c.vocab, H, 4, keep);
  w->lm_head = P.affine(c.vocab, H, 4, keep);
  w->final_norm.assign(size_t(H), 1.f);
  std::mt19937 r(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights L;
    L.is_full = c.is_full[size_t(i)];
    L.in_norm.assign(size_t(H), 1.f);
    L.post_norm.assign(size_t(H), 1.f);
    if (L.is_full) {
      L.attn.q = P.affine(c.q_proj_rows(), H, 4, keep);
      L.attn.k = P.affine(c.kv_dim(), H, 4, keep);
      L.attn.v = P.affine(c.kv_dim(), H, 4, keep);
      L.attn.o = P.affine(H, c.n_q_heads * c.head_dim, 4, keep);
      L.attn.q_norm.assign(size_t(c.head_dim), 1.f);
      L.attn.k_norm.assign(size_t(c.head_dim), 1.f);
    } else {
      L.lin.in_qkv = P.affine(c.conv_dim(), H, 4, keep);
      L.lin.in_z = P.affine(c.value_dim(), H, 4, keep);
      L.lin.in_b = P.affine(c.lin_v_heads, H, 4, keep);
      L.lin.in_a = P.affine(c.lin_v_heads, H, 4, keep);
      L.lin.out = P.affine(H, c.value_dim(), 4, keep);
      L.lin.conv.resize(size_t(c.conv_dim()) * c.conv_kernel);
      for (auto& v : L.lin.conv) v = 0.3f * u(r);
      L.lin.dt_bias.assign(size_t(c.lin_v_heads), 0.f);
      L.lin.a_neg.assign(size_t(c.lin_v_heads), -1.f);
      L.lin.norm.assign(size_t(c.lin_v_dim), 1.f);
    }
    L.moe.router = P.affine(c.n_experts, H, 8, keep);
    L.moe.sh_gate_w = P.affine(1, H, 8, keep);
    for (int e = 0; e < c.n_experts; ++e) {
      L.moe.gate.e.push_back(P.affine(c.expert_inter, H, 4, keep));
      L.moe.up.e.push_back(P.affine(c.expert_inter, H, 4, keep));
      L.moe.down.e.push_back(P.affine(H, c.expert_inter, 4, keep));
    }
    L.moe.sh_gate = P.affine(c.shared_inter, H, 4, keep);
    L.moe.sh_up = P.affine(c.shared_inter, H, 4, keep);
    L.moe.sh_down = P.affine(H, c.shared_inter, 4, keep);
    w->layers.push_back(std::move(L));
  }
  return w;
}

int run_cudabench(const Args& a) {
  a.check_known({"ctx", "steps", "sampled"});
  if (!cuda_device_available()) throw Error("cudabench: no CUDA device");
  std::vector<int> ctxs;
  {
    std::stringstream ss(a.get("ctx", "256,4096,32768,131072"));
    std::string t;
    while (std::getline(ss, t, ',')) ctxs.push_back(std::stoi(t));
  }
  const int steps = int(a.get_int("steps", 256));
  // --sampled 0: greedy decode only (the sampled columns print 0), so LILY_CUDA_TRACE's last step is a greedy one
  const bool with_sampled = a.get_int("sampled", 1) != 0;
  // the hardware limit the GB/s column is read against: the device's sustained copy rate (bytes read + written)
  const double copy_gbps = cuda_copy_gbps(0.5);
  auto t0 = std::chrono::steady_clock::now();
  auto w = synthetic_35b();
  auto be = make_cuda_backend(w);
  auto* cb = dynamic_cast<cuda::CudaBackend*>(be.get());
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = w->cfg;
  const double wbytes = double(cb->step_weight_bytes());
  const double state_rw = 2.0 * 30 * c.lin_v_heads * c.lin_v_dim * c.lin_k_dim * 4;
  std::printf("synthetic qwen3.6-35b-a3b (MLX 4-bit g64): %.2f GB on device, %.3f GB weights read per token, "
              "load %.1f s; device copy %.0f GB/s\n", double(cb->weight_bytes()) / 1e9, wbytes / 1e9, load_s,
              copy_gbps);
  std::printf("%8s %8s %10s %10s %10s %8s %14s %14s %14s\n", "ctx", "steps", "ms/tok", "tok/s", "GB/s", "of copy",
              "T=1 tok/s", "k20,p.9 tok/s", "host-smp tok/s");
  for (int ctx : ctxs) {
    auto st = be->new_state(ctx + steps + 8);
    std::vector<int32_t> out(size_t(steps) + 8);
    st->pos = ctx;
    be->decode_argmax(*st, 8, 1, out.data());  // warm-up (graph capture on first use)
    auto t1 = std::chrono::steady_clock::now();
    be->decode_argmax(*st, steps, out[7], out.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const double kv = double(ctx + 8 + steps / 2) * 10 * 2 * c.n_kv_heads * c.head_dim * 2;
    const double bytes = wbytes + kv + state_rw;
    // Sampled decode through decode_sample (device step sampler; then the host-sampling default for comparison):
    // T = 1 over the whole vocabulary, and T = 0.7 with top-k 20 + top-p 0.9.
    auto sampled = [&](float temp, int top_k, float top_p, bool host) {
      SamplerParams sp;
      sp.temperature = temp;
      sp.top_k = top_k;
      sp.top_p = top_p;
      sp.has_seed = true;
      sp.seed = 1;
      StepSampler smp(sp, {}, c.vocab);
      auto st2 = be->new_state(ctx + steps + 8);
      st2->pos = ctx;
      auto cont = [](int32_t) { return true; };
      if (host) be->Backend::decode_sample(*st2, smp, 1, 4, cont);
      else be->decode_sample(*st2, smp, 1, 4, cont);
      const auto ta = std::chrono::steady_clock::now();
      const int n = host ? be->Backend::decode_sample(*st2, smp, 1, steps, cont) : be->decode_sample(*st2, smp, 1, steps, cont);
      return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - ta).count();
    };
    const double t1s = with_sampled ? sampled(1.0f, 0, 1.0f, false) : 0.0,
                 tks = with_sampled ? sampled(0.7f, 20, 0.9f, false) : 0.0,
                 hs = with_sampled ? sampled(0.7f, 20, 0.9f, true) : 0.0;
    const double gbps = bytes * steps / s / 1e9;
    std::printf("%8d %8d %10.4f %10.1f %10.1f %7.1f%% %14.1f %14.1f %14.1f\n", ctx, steps, 1e3 * s / steps, steps / s,
                gbps, copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0, t1s, tks, hs);
    std::fflush(stdout);
  }
  return 0;
}
#else
int run_cudabench(const Args&) { throw Error("cudabench: this build has no CUDA backend"); }
#endif

}  // namespace

LILY_COMMAND("cudabench",
             "decode tok/s of the CUDA backend on a synthetic full-size model (--ctx 256,4096 --steps N --sampled 0|1)",
             run_cudabench, {});

}  // namespace lily
