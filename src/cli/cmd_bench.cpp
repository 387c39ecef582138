// `lily bench`: the fixed batch-1 throughput protocol (bench/bench_runner.h) with a table on stdout,
// optional JSON record (--json F), device limits (--limits) and an SVG chart (--plot F.svg [--series a,b]).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "app/make_backend.h"
#include "bench/bench_math.h"
#include "bench/bench_report.h"
#include "bench/bench_runner.h"
#include "bench/device_limits.h"
#include "bench/machine_info.h"
#include "bench/svg_plot.h"
#include "cli/model_args.h"
#include "cli/mtp_args.h"
#include "cli/registry.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_factory.h"
#endif
#include "core/error.h"
#include "core/progress.h"

namespace lily {
namespace {

const char* kDefaultLengths = "256,512,1K,2K,4K,8K,16K,32K,64K,128K";

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  if (!f) throw Error("cannot create " + path);
  f << j.dump(2) << "\n";
  if (!f) throw Error("writing " + path + " failed");
}

void print_limits(const DeviceLimits& d) {
  std::printf("device limits: %s\n  copy   %.2f GB/s (%s)\n  matmul %.4f TFLOP/s (%s)\n", d.device.c_str(),
              d.copy_gbps, d.copy_method.c_str(), d.matmul_tflops, d.matmul_method.c_str());
}

int run_bench_cmd(const Args& a) {
  auto known = model_flags();
  for (const char* k : {"backend", "prefill-lengths", "decode-contexts", "reps", "prefill-chunk", "json", "limits",
                        "limits-seconds", "plot", "series", "decode-context", "decode-steps", "sampled", "mtp",
                        "mtp-from", "mtp-accept"})
    known.push_back(k);
  a.check_known(known);
  const bool have_model = a.has("model") || a.has("synthetic");
  std::vector<std::string> series = split_commas(a.get("series"));

  if (!have_model && !a.has("limits")) {
    if (!a.has("plot") || series.empty())
      throw Error("pass --model DIR or --synthetic PRESET to benchmark, --limits to probe the device, or "
                  "--plot F.svg --series a.json,b.json to chart earlier runs");
    write_bench_svg(series, a.get("plot"));
    std::printf("wrote %s (%zu series)\n", a.get("plot").c_str(), series.size());
    return 0;
  }

  const std::string backend_kind = a.get("backend", "auto");
  std::optional<DeviceLimits> limits;
  if (a.has("limits")) {
    // Probes run before the model is loaded, on the device the chosen backend kind uses.
    std::string probe_name = backend_kind == "auto" ? "cpu" : backend_kind;
#ifdef LILY_HAVE_CUDA
    if (backend_kind == "auto" && cuda_device_available()) probe_name = "cuda";  // as make_backend("auto")
#endif
    limits = probe_device_limits(probe_name, a.get_double("limits-seconds", 4.0));
    print_limits(*limits);
    if (!have_model) {
      if (a.has("json")) {
        auto m = machine_info();
        nlohmann::ordered_json j = {{"schema", "lily-limits-1"},
                                    {"machine", {{"cpu_model", m.cpu_model}, {"threads", m.threads},
                                                 {"memory_bytes", m.memory_bytes}, {"hostname", m.hostname}}},
                                    {"limits", limits_json(*limits)}};
        write_json(a.get("json"), j);
      }
      return 0;
    }
  }

  BenchOptions opt;
  opt.prefill_lengths = parse_length_list(a.get("prefill-lengths", kDefaultLengths));
  opt.decode_contexts = parse_length_list(a.get("decode-contexts", kDefaultLengths));
  opt.reps = int(a.get_int("reps", 3));
  opt.decode_steps = int(a.get_int("decode-steps", 64));
  if (opt.decode_steps < 1) throw Error("--decode-steps must be at least 1");
  opt.sampled = a.has("sampled");
  opt.prefill_chunk = int(a.get_int("prefill-chunk", 0));  // 0: the backend's default (resolved below)
  {
    const std::string dc = a.get("decode-context", "prefilled");
    if (dc != "prefilled" && dc != "unfilled")
      throw Error("--decode-context must be prefilled or unfilled (got \"" + dc + "\")");
    opt.unfilled_context = dc == "unfilled";
  }

  auto t_load = std::chrono::steady_clock::now();
  auto weights = open_model(a);
  if (a.has("mtp-accept") && !a.has("mtp")) throw Error("--mtp-accept P,.. needs --mtp K");
  const MtpChoice mtp = a.has("mtp") ? load_mtp_for(a, *weights) : MtpChoice{};
  for (const std::string& s : split_commas(a.get("mtp-accept"))) {
    char* end = nullptr;
    const double p = std::strtod(s.c_str(), &end);
    if (s.empty() || *end || !(p >= 0 && p <= 1))
      throw Error("--mtp-accept: expected probabilities in [0, 1] separated by commas, got '" + s + "'");
    opt.mtp_accept.push_back(p);
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::fprintf(stderr, "lily bench: model ready in %.1f s\n", load_s);
  auto be = make_backend(backend_kind, weights);
  opt.mtp_k = mtp_for_backend(mtp, *be, "bench");
  opt.prefill_chunk = be->prefill_chunk_or_default(opt.prefill_chunk);  // recorded in the report as used

  Progress bar("bench", 1);
  opt.progress = [&](const std::string& what, int done, int total) {
    if (bar.enabled()) bar.update(uint64_t(done), uint64_t(total));
    else std::fprintf(stderr, "lily bench: %s\n", what.c_str());
  };
  auto t0 = std::chrono::steady_clock::now();
  auto results = run_bench(*be, opt);
  bar.finish();
  double bench_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  BenchContext ctx;
  ctx.backend = be->name();
  ctx.model_label = model_label(a);
  ctx.weights = weights.get();
  ctx.kv_elem_bytes = ctx.backend.rfind("cpu", 0) == 0 ? 4 : 2;
  ctx.limits = limits;
  ctx.options = opt;
  auto j = bench_json(ctx, results);
  j["model_load_s"] = load_s;
  j["bench_wall_s"] = bench_s;
  std::fputs(bench_table(j).c_str(), stdout);
  std::printf("model ready in %.1f s, benchmark took %.1f s\n", load_s, bench_s);
  if (a.has("json")) write_json(a.get("json"), j);
  if (a.has("plot")) {
    std::vector<PlotSeries> ps;
    for (const auto& p : series) {
      std::ifstream f(p);
      if (!f) throw Error("cannot open bench JSON " + p);
      ps.push_back({p, nlohmann::ordered_json::parse(f)});
    }
    ps.push_back({"this run (" + ctx.backend + ")", j});
    std::ofstream o(a.get("plot"));
    if (!o) throw Error("cannot create " + a.get("plot"));
    o << bench_svg(ps);
  }
  if (!j["digests_consistent"].get<bool>()) {
    std::fprintf(stderr, "lily bench: the 64-token digest differed between repetitions (see MISMATCH above)\n");
    return 1;
  }
  return 0;
}

LILY_COMMAND("bench",
             "batch-1 prefill/decode throughput protocol (--model DIR | --synthetic PRESET) [--prefill-lengths L "
             "--decode-contexts L --decode-context prefilled|unfilled --decode-steps N --sampled --reps N --limits "
             "--json F] [--mtp K --mtp-accept P,..]",
             run_bench_cmd, {"limits", "sampled"});

}  // namespace
}  // namespace lily
