// 8-lane float vector for the portable kernels (plain C++; no fused multiply-add).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace phasekv {
namespace cpu {

struct Vec8Portable {
  float v[8];
  static const char* name() { return "portable"; }
  static Vec8Portable zero() { return Vec8Portable{{0, 0, 0, 0, 0, 0, 0, 0}}; }
  static Vec8Portable load(const float* p) {
    Vec8Portable r;
    for (int i = 0; i < 8; ++i) r.v[i] = p[i];
    return r;
  }
  static Vec8Portable set1(float a) { return Vec8Portable{{a, a, a, a, a, a, a, a}}; }
  void store(float* p) const {
    for (int i = 0; i < 8; ++i) p[i] = v[i];
  }
  // acc + a * b
  static Vec8Portable fma(Vec8Portable a, Vec8Portable b, Vec8Portable acc) {
    for (int i = 0; i < 8; ++i) acc.v[i] = acc.v[i] + a.v[i] * b.v[i];
    return acc;
  }
  static Vec8Portable mul(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] *= b.v[i];
    return a;
  }
  static Vec8Portable add(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] += b.v[i];
    return a;
  }
  // For the q8 mode's exp (kernels_impl.h vexp): IEEE operations, fused like the vector ISAs'
  // (std::fma), so the same bits on every ISA. NaN never reaches max / min there.
  static Vec8Portable sub(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] -= b.v[i];
    return a;
  }
  static Vec8Portable div(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] /= b.v[i];
    return a;
  }
  static Vec8Portable max(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
    return a;
  }
  static Vec8Portable min(Vec8Portable a, Vec8Portable b) {
    for (int i = 0; i < 8; ++i) a.v[i] = a.v[i] < b.v[i] ? a.v[i] : b.v[i];
    return a;
  }
  static Vec8Portable fused(Vec8Portable a, Vec8Portable b, Vec8Portable acc) {
    for (int i = 0; i < 8; ++i) acc.v[i] = std::fma(a.v[i], b.v[i], acc.v[i]);
    return acc;
  }
  // The floats whose bits are t's shifted left by 23 (t's low 9 bits to the exponent field).
  static Vec8Portable shl23(Vec8Portable t) {
    for (int i = 0; i < 8; ++i) {
      uint32_t u;
      std::memcpy(&u, &t.v[i], 4);
      u <<= 23;
      std::memcpy(&t.v[i], &u, 4);
    }
    return t;
  }
  // Fixed reduction order: ((0+4)+(2+6)) + ((1+5)+(3+7)).
  float hsum() const { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }
};

}  // namespace cpu
}  // namespace phasekv
