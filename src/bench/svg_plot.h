// A hand-written SVG chart of benchmark JSON files: tokens/s (log10 y) against length (log2 x), one prefill
// line (solid) and one decode line (dashed) per series.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lily {

struct PlotSeries {
  std::string label;
  nlohmann::ordered_json bench;  // a bench_json() document
};

std::string bench_svg(const std::vector<PlotSeries>& series);
// Reads each file (throws lily::Error naming it) and writes the chart to out_path.
void write_bench_svg(const std::vector<std::string>& json_paths, const std::string& out_path);

}  // namespace lily
