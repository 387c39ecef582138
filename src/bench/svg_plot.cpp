#include "bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/bench_math.h"
#include "core/error.h"

namespace lily {

namespace {

struct Pt {
  double x, y;
};

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::vector<Pt> points(const nlohmann::ordered_json& arr, const char* key) {
  std::vector<Pt> p;
  for (const auto& e : arr) {
    double y = e["tok_s"]["median"].get<double>();
    if (y > 0) p.push_back({double(e[key].get<int>()), y});
  }
  std::sort(p.begin(), p.end(), [](Pt a, Pt b) { return a.x < b.x; });
  return p;
}

}  // namespace

std::string bench_svg(const std::vector<PlotSeries>& series) {
  const double W = 900, H = 540, L = 80, R = 220, T = 40, B = 60;
  std::vector<std::vector<Pt>> pre, dec;
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  for (const auto& s : series) {
    pre.push_back(points(s.bench["prefill"], "length"));
    dec.push_back(points(s.bench["decode"], "context"));
    for (const auto* v : {&pre.back(), &dec.back()})
      for (auto p : *v) {
        xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
        ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
      }
  }
  if (xmax == 0) xmin = 256, xmax = 131072, ymin = 1, ymax = 1000;
  double lx0 = std::floor(std::log2(xmin)), lx1 = std::max(lx0 + 1, std::ceil(std::log2(xmax)));
  double ly0 = std::floor(std::log10(ymin)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(ymax)));
  auto X = [&](double x) { return L + (std::log2(x) - lx0) / (lx1 - lx0) * (W - L - R); };
  auto Y = [&](double y) { return H - B - (std::log10(y) - ly0) / (ly1 - ly0) * (H - T - B); };
  std::ostringstream o;
  char buf[512];
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << L << "\" y=\"24\" font-size=\"15\">lily bench: tokens/s vs length (prefill solid, decode dashed)</text>\n";
  for (double lx = lx0; lx <= lx1; ++lx) {
    double x = X(std::exp2(lx));
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                  x, T, x, H - B, x, H - B + 18, length_label(int(std::exp2(lx))).c_str());
    o << buf;
  }
  for (double ly = ly0; ly <= ly1; ++ly) {
    double y = Y(std::pow(10.0, ly));
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  L, y, W - R, y, L - 6, y + 4, std::pow(10.0, ly));
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">tokens (prompt length / decode context)</text>\n"
                "<text x=\"18\" y=\"%.1f\" transform=\"rotate(-90 18 %.1f)\" text-anchor=\"middle\">tokens/s</text>\n",
                (L + W - R) / 2, H - 16, (T + H - B) / 2, (T + H - B) / 2);
  o << buf;
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};
  for (size_t s = 0; s < series.size(); ++s) {
    const char* col = colors[s % 7];
    for (int kind = 0; kind < 2; ++kind) {
      const auto& pts = kind == 0 ? pre[s] : dec[s];
      if (pts.empty()) continue;
      o << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\"" << (kind ? " stroke-dasharray=\"6 4\"" : "")
        << " points=\"";
      for (auto p : pts) {
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(p.x), Y(p.y));
        o << buf;
      }
      o << "\"/>\n";
      for (auto p : pts) {
        std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %s %s: %.1f tok/s</title></circle>\n",
                      X(p.x), Y(p.y), col, xml_escape(series[s].label).c_str(), kind ? "decode" : "prefill",
                      length_label(int(p.x)).c_str(), p.y);
        o << buf;
      }
    }
    double ly = T + 20 + double(s) * 36;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  W - R + 12, ly, W - R + 40, ly, col, W - R + 12, ly + 12, W - R + 40, ly + 12, col, W - R + 46, ly + 10,
                  xml_escape(series[s].label.substr(0, 24)).c_str());
    o << buf;
  }
  o << "</svg>\n";
  return o.str();
}

void write_bench_svg(const std::vector<std::string>& json_paths, const std::string& out_path) {
  std::vector<PlotSeries> series;
  for (const auto& p : json_paths) {
    std::ifstream f(p);
    if (!f) throw Error("cannot open bench JSON " + p);
    PlotSeries s;
    try {
      s.bench = nlohmann::ordered_json::parse(f);
    } catch (const std::exception& e) {
      throw Error(p + ": not JSON: " + e.what());
    }
    if (!s.bench.contains("prefill") || !s.bench.contains("decode"))
      throw Error(p + ": not a lily bench JSON (no prefill/decode arrays)");
    s.label = std::filesystem::path(p).stem().string() + " (" + s.bench.value("backend", std::string("?")) + ")";
    series.push_back(std::move(s));
  }
  std::ofstream o(out_path);
  if (!o) throw Error("cannot create " + out_path);
  o << bench_svg(series);
  if (!o) throw Error("writing " + out_path + " failed");
}

}  // namespace lily
