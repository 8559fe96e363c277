// HTML report of `phasekv selftest` for people (DESIGN.md section 6, step 6). The machine
// report is JSON (docs/selftest.schema.json, "phasekv-selftest/1"); this turns one into a
// single self-contained page: inline CSS and SVG only, no JavaScript, no external fonts,
// images or links, so it can be archived as a CI artifact and opened anywhere.
//
// The page shows, in order:
//   - a header: model, template, period P and where it came from, the gate verdict;
//   - the run's inputs and the model's memories;
//   - a summary table, one row per protocol (and per control protocol): mean accuracy with
//     its bootstrap interval, A_min and its residue, the gap against the null gap, the
//     spread, Cochran's p and the flagged residues; then the gate checks;
//   - per protocol, an SVG plot of accuracy against residue r = 0..P-1 (Wilson intervals as
//     error bars, the mean as a dashed line over its interval, flagged residues in a
//     contrasting colour and shape with a label, a gridline per residue and thicker lines at
//     multiples of each model stride below P and at 0 and P, residue 0 repeated hollow at
//     r = P; the control curve, when present, in grey), then the period scan and a
//     per-residue table;
//   - the template map (content offset -> residue) and the advice sentences;
//   - timings.
//
// Every string taken from the report is HTML-escaped. Missing or mistyped members render as
// a dash or are left out (a missing control, a single protocol, no gates), so any JSON value
// gives a page; the output depends only on the report (no date), byte for byte.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace phasekv {
namespace tools {

// Renders `report` (a "phasekv-selftest/1" object) as one HTML document, UTF-8. Throws only
// std::bad_alloc; a value that is not an object gives a page saying so.
std::string render_selftest_html(const nlohmann::json& report);

}  // namespace tools
}  // namespace phasekv
