#include "bench/bench_report.h"

#include <cstdio>

#include "bench/bench_math.h"
#include "bench/cost_model.h"
#include "bench/machine_info.h"
#include "synth/synthetic_model.h"

namespace lily {

namespace {

using J = nlohmann::ordered_json;

J stats_json(const SampleStats& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}}; }

// tokens/s of each sample
std::vector<double> rates(const std::vector<double>& secs, double tokens) {
  std::vector<double> r;
  for (double s : secs) r.push_back(s > 0 ? tokens / s : 0.0);
  return r;
}

}  // namespace

J limits_json(const DeviceLimits& d) {
  return {{"device", d.device},
          {"copy_gbps", d.copy_gbps},
          {"copy_method", d.copy_method},
          {"matmul_tflops", d.matmul_tflops},
          {"matmul_method", d.matmul_method}};
}

J bench_json(const BenchContext& ctx, const std::vector<BenchLengthResult>& results) {
  const ModelWeights& w = *ctx.weights;
  auto m = machine_info();
  J j;
  j["schema"] = "lily-bench-1";
  j["machine"] = {{"cpu_model", m.cpu_model},
                  {"threads", m.threads},
                  {"memory_bytes", m.memory_bytes},
                  {"hostname", m.hostname},
                  {"gpu", ctx.limits && ctx.backend.rfind("cpu", 0) != 0 ? J(ctx.limits->device) : J(nullptr)}};
  j["backend"] = ctx.backend;
  j["model"] = {{"label", ctx.model_label},
                {"layout", w.layout},
                {"weight_bytes", model_weight_bytes(w)},
                {"active_params", active_params(w)},
                {"layers", w.cfg.n_layers},
                {"vocab", w.cfg.vocab}};
  j["protocol"] = {{"batch", 1},
                   {"prompt_ids", "((i*2654435761) mod 2^32) mod vocab"},
                   {"reps", ctx.options.reps},
                   {"decode_steps", ctx.options.decode_steps},
                   {"prefill_chunk", ctx.options.prefill_chunk},
                   {"decode_context", ctx.options.unfilled_context ? "unfilled (timing only)" : "prefilled"},
                   {"kv_elem_bytes", ctx.kv_elem_bytes}};
  j["limits"] = ctx.limits ? limits_json(*ctx.limits) : J(nullptr);
  J prefill = J::array(), decode = J::array();
  bool all_consistent = true;
  for (const auto& r : results) {
    if (r.prefill_measured) {
      auto st = sample_stats(rates(r.prefill_s, r.length));
      double tflops = st.median * prefill_flops(w, r.length) / r.length / 1e12;
      J e = {{"length", r.length}, {"samples_s", r.prefill_s}, {"tok_s", stats_json(st)}, {"tflops", tflops}};
      e["fraction_of_limit"] = ctx.limits && ctx.limits->matmul_tflops > 0 ? J(tflops / ctx.limits->matmul_tflops) : J(nullptr);
      prefill.push_back(e);
    }
    if (r.decode_measured) {
      auto st = sample_stats(rates(r.decode_s, ctx.options.decode_steps));
      // The mean context over the 64 steps is length + 32; bytes are taken at that context.
      auto b = decode_bytes_per_token(w, r.length + ctx.options.decode_steps / 2, ctx.kv_elem_bytes);
      double gbps = st.median * double(b.total()) / 1e9;
      J digests = J::array();
      for (auto d : r.digests) digests.push_back(hex64(d));
      J e = {{"context", r.length},
             {"samples_s", r.decode_s},
             {"tok_s", stats_json(st)},
             {"bytes_per_token",
              {{"total", b.total()}, {"dense", b.dense}, {"experts", b.experts}, {"lm_head", b.lm_head},
               {"embed_row", b.embed_row}, {"kv", b.kv}, {"recurrent", b.recurrent}}},
             {"gbps", gbps}};
      e["fraction_of_limit"] = ctx.limits && ctx.limits->copy_gbps > 0 ? J(gbps / ctx.limits->copy_gbps) : J(nullptr);
      e["digest"] = r.digests.empty() ? J(nullptr) : J(hex64(r.digests.front()));
      e["digests"] = digests;
      e["digest_consistent"] = r.digest_consistent;
      if (r.sampled_t1 > 0)
        e["sampled_tok_s"] = {{"t1", r.sampled_t1}, {"t0.7_k20_p0.9", r.sampled_k20},
                              {"host_t0.7_k20_p0.9", r.sampled_host_k20}};
      if (r.mtp_measured) {
        J runs = J::array();
        for (const auto& m : r.mtp.runs) {
          J x = {{"k", r.mtp.k},
                 {"emulated", m.accept_p >= 0},
                 {"accept_p", m.accept_p >= 0 ? J(m.accept_p) : J(nullptr)},
                 {"tok_s", m.tok_s},
                 {"drafted", m.drafted},
                 {"accepted", m.accepted},
                 {"acceptance", m.drafted ? J(double(m.accepted) / double(m.drafted)) : J(nullptr)},
                 {"rounds", m.rounds},
                 {"identical_to_plain", m.identical}};
          runs.push_back(x);
          all_consistent = all_consistent && m.identical;
        }
        e["mtp"] = {{"k", r.mtp.k},
                    {"plain_step_ms", r.mtp.plain_step_ms},
                    {"verify_step_ms", r.mtp.verify_step_ms},
                    {"verify_over_plain", r.mtp.plain_step_ms > 0 ? J(r.mtp.verify_step_ms / r.mtp.plain_step_ms)
                                                                  : J(nullptr)},
                    {"draft_ms", r.mtp.draft_ms},
                    {"runs", runs}};
      }
      all_consistent = all_consistent && r.digest_consistent;
      decode.push_back(e);
    }
  }
  j["prefill"] = prefill;
  j["decode"] = decode;
  j["digests_consistent"] = all_consistent;
  return j;
}

std::string bench_table(const J& j) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "backend %s, model %s\n", j["backend"].get<std::string>().c_str(),
                j["model"]["label"].get<std::string>().c_str());
  out += line;
  auto frac = [](const J& e) {
    char b[32];
    if (e["fraction_of_limit"].is_null()) return std::string("-");
    std::snprintf(b, sizeof b, "%.1f%%", 100.0 * e["fraction_of_limit"].get<double>());
    return std::string(b);
  };
  if (!j["prefill"].empty()) {
    out += "prefill   length      tok/s (median)   [min, max]            TFLOP/s  of limit\n";
    for (const auto& e : j["prefill"]) {
      std::snprintf(line, sizeof line, "          %-8s %12.1f    [%.1f, %.1f] %14.4f  %s\n",
                    length_label(e["length"].get<int>()).c_str(), e["tok_s"]["median"].get<double>(),
                    e["tok_s"]["min"].get<double>(), e["tok_s"]["max"].get<double>(), e["tflops"].get<double>(),
                    frac(e).c_str());
      out += line;
    }
  }
  if (!j["decode"].empty()) {
    const auto& o = j["protocol"];
    if (o.contains("decode_context") && o["decode_context"].get<std::string>() != "prefilled")
      out += "decode contexts that are not prefill lengths: not prefilled, zeros (timing only)\n";
    out += "decode    context     tok/s (median)   [min, max]            GB/s     of limit  digest\n";
    for (const auto& e : j["decode"]) {
      std::snprintf(line, sizeof line, "          %-8s %12.2f    [%.2f, %.2f] %14.2f  %-8s  %s%s\n",
                    length_label(e["context"].get<int>()).c_str(), e["tok_s"]["median"].get<double>(),
                    e["tok_s"]["min"].get<double>(), e["tok_s"]["max"].get<double>(), e["gbps"].get<double>(),
                    frac(e).c_str(), e["digest"].is_null() ? "-" : e["digest"].get<std::string>().c_str(),
                    e["digest_consistent"].get<bool>() ? "" : " MISMATCH");
      out += line;
    }
    for (const auto& e : j["decode"]) {
      if (!e.contains("sampled_tok_s")) continue;
      const auto& s = e["sampled_tok_s"];
      std::snprintf(line, sizeof line, "sampled   %-8s T=1 %.1f tok/s, T=0.7 k20 p0.9 %.1f tok/s (host sampler %.1f)\n",
                    length_label(e["context"].get<int>()).c_str(), s["t1"].get<double>(),
                    s["t0.7_k20_p0.9"].get<double>(), s["host_t0.7_k20_p0.9"].get<double>());
      out += line;
    }
    for (const auto& e : j["decode"]) {
      if (!e.contains("mtp")) continue;
      const auto& m = e["mtp"];
      std::snprintf(line, sizeof line,
                    "mtp       %-8s k=%d: verify of %d positions %.3f ms = %.2fx a plain step (%.3f ms); drafting %.3f ms\n",
                    length_label(e["context"].get<int>()).c_str(), m["k"].get<int>(), m["k"].get<int>() + 1,
                    m["verify_step_ms"].get<double>(),
                    m["verify_over_plain"].is_null() ? 0.0 : m["verify_over_plain"].get<double>(),
                    m["plain_step_ms"].get<double>(), m["draft_ms"].get<double>());
      out += line;
      for (const auto& x : m["runs"]) {
        char p[48];
        if (x["emulated"].get<bool>()) std::snprintf(p, sizeof p, "emulated p=%.2f", x["accept_p"].get<double>());
        else std::snprintf(p, sizeof p, "own drafts");
        std::snprintf(line, sizeof line, "          %-8s %-17s %10.2f tok/s  accepted %lld/%lld%s\n",
                      length_label(e["context"].get<int>()).c_str(), p, x["tok_s"].get<double>(),
                      static_cast<long long>(x["accepted"].get<int64_t>()),
                      static_cast<long long>(x["drafted"].get<int64_t>()),
                      x["identical_to_plain"].get<bool>() ? "" : "  OUTPUT DIFFERS FROM PLAIN");
        out += line;
      }
    }
  }
  return out;
}

}  // namespace lily
