// libFuzzer target: the `phasekv` command line, parsed exactly as the tool parses it (every
// command's options, validators and transforms registered by register_commands), with the
// commands' callbacks switched off (exit_code == nullptr): argument checking only, no model
// is loaded. Also the number parsers the options use, against an independent evaluation.
//
// Input: arguments separated by NUL bytes (at most 24; "phasekv" is put in front).
// Invariants (docs/FUZZING.md):
//   * parsing ends normally or with a CLI::ParseError (CLI11's error channel, which the tool
//     turns into exit 2); any other exception, crash or sanitizer report is a finding;
//   * parse_unsigned accepts exactly the decimal strings of at most 2^64-1 and returns their
//     value (checked in 128-bit arithmetic); parse_byte_size accepts exactly digits plus an
//     optional unit (b, k, kb, ki, kib ... e, eb, ei, eib; any case; 1024-based) without
//     overflow, and returns digits << (10 x unit index);
//   * finite_number accepts a token exactly when strtod reads all of it as a finite value.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "fuzz_util.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

// Independent reference: the value of a digit string, or -1 when it is not one or overflows.
__int128 digits_value(const std::string& s) {
  if (s.empty()) return -1;
  __int128 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
    if (v > __int128(UINT64_MAX)) return -1;
  }
  return v;
}

void check_number_parsers(const std::string& tok) {
  uint64_t got = 0;
  const __int128 want = digits_value(tok);
  const bool ok = tools::parse_unsigned(tok, &got);
  FUZZ_CHECK(ok == (want >= 0), "parse_unsigned('%s') = %d", tok.c_str(), int(ok));
  if (ok) FUZZ_CHECK(__int128(got) == want, "parse_unsigned('%s') value", tok.c_str());

  // Byte sizes: split digits | unit, evaluate independently.
  size_t i = 0;
  while (i < tok.size() && tok[i] >= '0' && tok[i] <= '9') ++i;
  std::string unit;
  bool space_ok = true;
  for (size_t k = i; k < tok.size(); ++k) {
    if (tok[k] == ' ' && unit.empty()) continue;
    if (tok[k] == ' ') space_ok = false;
    unit += char(tok[k] >= 'A' && tok[k] <= 'Z' ? tok[k] - 'A' + 'a' : tok[k]);
  }
  int shift = -1;
  if (space_ok) {
    if (unit.empty() || unit == "b") shift = 0;
    const std::string letters = "kmgtpe";
    for (size_t u = 0; u < letters.size(); ++u)
      for (const char* suffix : {"", "b", "i", "ib"})
        if (unit == std::string(1, letters[u]) + suffix) shift = int(10 * (u + 1));
  }
  const __int128 n = digits_value(tok.substr(0, i));
  __int128 bytes = -1;
  if (n >= 0 && shift >= 0) {
    bytes = n << shift;
    if (bytes > __int128(UINT64_MAX)) bytes = -1;
  }
  const bool ok_size = tools::parse_byte_size(tok, &got);
  FUZZ_CHECK(ok_size == (bytes >= 0), "parse_byte_size('%s') = %d", tok.c_str(), int(ok_size));
  if (ok_size) FUZZ_CHECK(__int128(got) == bytes, "parse_byte_size('%s') value", tok.c_str());

  std::string copy = tok;
  const bool finite_ok = tools::finite_number()(copy).empty();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(tok.c_str(), &end);
  const bool want_finite = !tok.empty() && end == tok.c_str() + tok.size() && std::isfinite(v) && errno != ERANGE;
  FUZZ_CHECK(finite_ok == want_finite, "finite_number('%s') = %d", tok.c_str(), int(finite_ok));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"phasekv"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 25; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  if (args.size() < 25) args.push_back(cur);
  for (size_t i = 1; i < args.size(); ++i) check_number_parsers(args[i]);

  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  // Building the app registers ~150 options (about 5 ms under the sanitizers): it is built
  // once and rebuilt every 4096 inputs, clear() forgetting each parse in between (an app reused
  // for millions of inputs grew to ~700 MB).
  static std::unique_ptr<CLI::App> app;
  static int uses = 0;
  if (!app || ++uses % 4096 == 0) {
    app.reset(new CLI::App{tools::kAppDescription});
    tools::register_commands(*app, nullptr);
  }
  app->clear();
  try {
    app->parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    // The tool's error channel for arguments: printed by app.exit(), exit 2.
  }
  return 0;
}
