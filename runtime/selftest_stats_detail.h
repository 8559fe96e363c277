// Small numeric helpers shared by the self-test statistics files (selftest_stats.cpp,
// selftest_flags.cpp, selftest_period.cpp). Internal: not part of any API.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "selftest_stats.h"

namespace phasekv {
namespace selftest {
namespace detail {

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline double mean_of(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / double(x.size());
}

// Sample sd (n−1 denominator), two-pass.
inline double sd_of(const std::vector<double>& x) {
  if (x.size() < 2) return 0.0;
  const double m = mean_of(x);
  double ss = 0.0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / double(x.size() - 1));
}

// Quantile of sorted data with linear interpolation between order statistics (R type 7).
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  PKV_ASSERT(!sorted.empty());
  const double h = double(sorted.size() - 1) * q;
  const size_t lo = size_t(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - double(lo)) * (sorted[lo + 1] - sorted[lo]);
}

// First index of the minimum / maximum (ties → lowest index).
inline int32_t argmin_of(const std::vector<double>& x) {
  return int32_t(std::min_element(x.begin(), x.end()) - x.begin());
}
inline int32_t argmax_of(const std::vector<double>& x) {
  return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
}

// Fisher–Yates on [first, first + n) with stride `step`.
inline void shuffle_strided(double* first, int32_t n, int32_t step, Rng& rng) {
  for (int32_t i = n - 1; i > 0; --i) {
    const int32_t j = int32_t(rng.below(uint64_t(i) + 1));
    std::swap(first[size_t(i) * size_t(step)], first[size_t(j) * size_t(step)]);
  }
}

// Permutation counts treat values within a relative 1e-12 as ties (ties count as exceedances),
// so a permuted statistic equal to the observed one up to summation order is never lost.
inline bool at_least(double permuted, double observed) {
  return permuted >= observed - 1e-12 * std::max(1.0, std::fabs(observed));
}

inline double permutation_p(int64_t exceed, int32_t n_permutations) {
  return double(1 + exceed) / double(1 + n_permutations);
}

inline int32_t gcd_i(int32_t a, int32_t b) {
  while (b != 0) {
    const int32_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

}  // namespace detail
}  // namespace selftest
}  // namespace phasekv
