// Error metrics shared by the kernel tests. A non-finite value never passes: the metric is then infinite.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace lily::testmetrics {

// sqrt(sum (got - want)^2 / sum want^2)
inline double rms_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// max |got - want| / max |want|
inline double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double mx = 0, mw = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    mx = std::max(mx, std::fabs(double(got[i]) - want[i]));
    mw = std::max(mw, std::fabs(double(want[i])));
  }
  return mx / mw;
}

}  // namespace lily::testmetrics
