#!/usr/bin/env python3
"""Checks a `phasekv selftest` report pair: the JSON against docs/selftest.schema.json and
against the relations between fields that a schema cannot state, the HTML for being one
self-contained page with one plot per protocol, and the page rendered by headless Chromium.

    test_selftest_report.py --schema docs/selftest.schema.json --report R.json --html R.html --out-dir DIR

Exit 0: all passed; 1: a check failed (each failure is printed); 77: the checks that do not
need a browser passed but Chromium is not installed ("skipped: chromium not installed").
Needs the `jsonschema` package; everything else is the standard library (the screenshot is
decoded here, no PIL)."""
import argparse
import html
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)
    return cond


def close(a, b, tol=1e-3):
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol


# ---- The schema itself ---------------------------------------------------------------------


def undocumented(node, path="#"):
    """Paths of schemas under properties/items/prefixItems/$defs that have no description."""
    out = []
    if isinstance(node, dict):
        for key in ("properties", "$defs"):
            for name, sub in node.get(key, {}).items():
                if isinstance(sub, dict) and "description" not in sub:
                    out.append("%s/%s/%s" % (path, key, name))
                out += undocumented(sub, "%s/%s/%s" % (path, key, name))
        if isinstance(node.get("items"), dict):
            if "description" not in node["items"]:
                out.append(path + "/items")
            out += undocumented(node["items"], path + "/items")
        for i, sub in enumerate(node.get("prefixItems", [])):
            if "description" not in sub:
                out.append("%s/prefixItems/%d" % (path, i))
        for key in ("oneOf", "anyOf", "allOf"):
            for i, sub in enumerate(node.get(key, [])):
                out += undocumented(sub, "%s/%s/%d" % (path, key, i))
    return out


def check_schema(schema):
    import jsonschema
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        check(True, "")
    except jsonschema.SchemaError as e:
        check(False, "the schema is not a valid draft 2020-12 schema: %s" % e.message)
    check(schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema", "schema declares draft 2020-12")
    missing = undocumented(schema)
    check(not missing, "schema fields without a description: %s" % ", ".join(missing))


def validate(schema, report):
    import jsonschema
    v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(v.iter_errors(report), key=lambda e: list(e.absolute_path))
    for e in errors[:25]:
        print("  at /%s: %s" % ("/".join(str(p) for p in e.absolute_path), e.message))
    check(not errors, "report does not validate against the schema (%d errors)" % len(errors))
    return not errors


# ---- Relations between fields (the schema cannot state them) --------------------------------


def check_protocol(where, p, P, inputs):
    res = p["residues"]
    K = inputs["targets"]
    s = p["summary"]
    # Every residue is looked up K times per sample, in both stages.
    check(all(e["n"] == 2 * p["clusters"] * K for e in res), "%s: n != 2 x clusters x targets %d" % (where, K))
    check(s["mde"] >= inputs["delta"] - 1e-12, "%s: mde %s below delta" % (where, s["mde"]))
    if K > 1:
        check(close(s["mde"], max(inputs["delta"], s["mde_empirical"]), 1e-9),
              "%s: with %d targets mde %s != max(delta, mde_empirical %s)" % (where, K, s["mde"], s["mde_empirical"]))
    check(len(res) == P, "%s: %d residues, P = %d" % (where, len(res), P))
    check([e["r"] for e in res] == list(range(len(res))), "%s: residues not in order 0..P-1" % where)
    for e in res:
        w = "%s residue %d" % (where, e["r"])
        check(e["hits"] <= e["n"], "%s: hits %d > n %d" % (w, e["hits"], e["n"]))
        if e["n"] > 0:
            check(close(e["accuracy"], e["hits"] / e["n"], 1e-4), "%s: accuracy %s != hits/n" % (w, e["accuracy"]))
        lo, hi = e["ci"]
        check(lo <= hi, "%s: interval %s has lo > hi" % (w, e["ci"]))
        check(lo - 1e-6 <= e["accuracy"] <= hi + 1e-6, "%s: accuracy %s outside its interval %s" % (w, e["accuracy"], e["ci"]))
        check(e["holm_p"] >= e["loo_p"] - 1e-9, "%s: Holm p %s below the raw p %s" % (w, e["holm_p"], e["loo_p"]))
        # Jensen: the mean of exp(-NLL) is at least exp(-mean NLL).
        check(e["probability"] >= math.exp(-e["nll"]) - 1e-9, "%s: probability %s below exp(-nll) %s"
              % (w, e["probability"], math.exp(-e["nll"])))
    flagged = [e["r"] for e in res if e["flagged"]]
    check(p["flagged"] == flagged, "%s: flagged %s, residues marked flagged %s" % (where, p["flagged"], flagged))
    acc = [e["accuracy"] for e in res]
    s = p["summary"]
    if acc:
        check(close(s["mean_accuracy"], sum(acc) / len(acc)), "%s: mean_accuracy %s != mean of A_r" % (where, s["mean_accuracy"]))
        check(close(s["min_accuracy"], min(acc)), "%s: min_accuracy %s != min A_r" % (where, s["min_accuracy"]))
        check(0 <= s["argmin"] < len(acc) and close(acc[s["argmin"]], min(acc)),
              "%s: argmin %s is not the worst residue" % (where, s["argmin"]))
        check(close(s["gap"], max(acc) - min(acc)), "%s: gap %s != max - min" % (where, s["gap"]))
        others = [x for i, x in enumerate(acc) if i != s["argmin"]]
        check(close(s["deficit"], sum(others) / len(others) - min(acc)),
              "%s: deficit %s != mean of the other residues - A_min" % (where, s["deficit"]))
        if s["mean_accuracy"] > 0:
            check(close(s["gap_rel"], s["gap"] / s["mean_accuracy"]), "%s: gap_rel != gap / mean" % where)
    check(s["mean_ci"][0] <= s["mean_ci"][1], "%s: mean_ci %s has lo > hi" % (where, s["mean_ci"]))
    periods = [c["period"] for c in p["period_scan"]["candidates"]]
    check(periods == sorted(periods), "%s: period_scan candidates not ascending: %s" % (where, periods))
    check(p["period_scan"]["period"] in periods + [0], "%s: period_scan.period %d is not a candidate"
          % (where, p["period_scan"]["period"]))


def check_relations(r):
    P = r["period"]
    inputs = r["inputs"]
    if r["period_source"] == "override":
        check(inputs["period_override"] == P, "period_source override but period_override %s != period %d"
              % (inputs["period_override"], P))
    if inputs["period_override"] is not None:
        check(r["period_source"] == "override", "period_override set but period_source is %s" % r["period_source"])
    strides = r["model"]["strides"]
    check(strides == sorted(strides), "model.strides not ascending: %s" % strides)

    union = set()
    for name, p in r["protocols"].items():
        check_protocol("protocols.%s" % name, p, P, inputs)
        union |= set(p["flagged"])
    check(r["flagged"] == sorted(union), "flagged %s != union of the protocols' flags %s" % (r["flagged"], sorted(union)))

    check(inputs["control"] == (r["control"] is not None), "inputs.control and the control section disagree")
    if r["control"] is not None:
        c = r["control"]
        cu = set()
        for name, p in c["protocols"].items():
            check_protocol("control.protocols.%s" % name, p, P, inputs)
            cu |= set(p["flagged"])
        check(c["flagged"] == sorted(cu), "control.flagged %s != union %s" % (c["flagged"], sorted(cu)))
        check(c["probe_digest"] == r["probe_digest"], "the control evaluated other probes: digest %s != %s"
              % (c["probe_digest"], r["probe_digest"]))
        shared = [n for n in r["protocols"] if n in c["protocols"]]
        if shared:
            gap = sum(c["protocols"][n]["summary"]["mean_accuracy"] - r["protocols"][n]["summary"]["mean_accuracy"]
                      for n in shared) / len(shared)
            check(close(c["compression_gap"], gap), "compression_gap %s != %s" % (c["compression_gap"], gap))

    t = r["template"]
    check(t["phase"] == t["t0"] % P, "template.phase %d != t0 mod P" % t["phase"])
    check([m["offset"] for m in t["map"]] == list(range(P)), "template.map offsets are not 0..P-1 in order")
    for m in t["map"]:
        check(m["residue"] == (t["t0"] + m["offset"]) % P, "template.map offset %d: residue %d != (t0 + offset) mod P"
              % (m["offset"], m["residue"]))
        check(m["weak"] == (m["residue"] in r["flagged"]), "template.map offset %d: weak disagrees with flagged" % m["offset"])
    a = t["advice"]
    check(0 <= a["strongest_residue"] < P, "advice.strongest_residue out of 0..P-1")
    accs = [m["accuracy"] for m in sorted(t["map"], key=lambda m: m["residue"])]
    check(all(accs[a["strongest_residue"]] >= x for x in accs), "advice.strongest_residue is not the most accurate")
    check(accs[t["phase"]] < accs[a["strongest_residue"]] or a["strongest_residue"] == t["phase"],
          "a tie with the slot's own phase moved the slot")
    want_change = bool(r["flagged"]) and a["strongest_residue"] != t["phase"]
    check(a["change_needed"] == want_change, "advice.change_needed %s, expected %s" % (a["change_needed"], want_change))
    if want_change:
        check(a["pad_tokens_before_slot"] == (a["strongest_residue"] - t["t0"]) % P,
              "advice.pad_tokens_before_slot %d != (strongest - t0) mod P" % a["pad_tokens_before_slot"])
    else:
        check(a["pad_tokens_before_slot"] == 0, "padding advised where nothing is weak or the slot is already strongest")
        check(not any("neutral token" in x for x in a["text"]), "advice text asks for padding: %s" % a["text"])

    g = r["gates"]
    for c in g["checks"]:
        want = c["value"] >= c["threshold"] if c["name"] == "min_acc" else c["value"] <= c["threshold"]
        check(c["pass"] == want, "gate %s: pass %s for value %s, threshold %s" % (c["name"], c["pass"], c["value"], c["threshold"]))
    check(g["pass"] == all(c["pass"] for c in g["checks"]), "gates.pass disagrees with the checks")
    names = [c["name"] for c in g["checks"]]
    check(len(names) == len(set(names)), "a gate appears twice: %s" % names)
    check(("min_acc" in names) == (inputs["gate_min_acc"] is not None), "min_acc check present iff gate_min_acc set")
    check(("max_gap" in names) == (inputs["gate_max_gap"] is not None), "max_gap check present iff gate_max_gap set")

    tm = r["timings"]
    check(tm["prefill_tokens"] <= tm["naive_prefill_tokens"], "prefill_tokens above naive_prefill_tokens")
    if tm["total_s"] > 0:
        check(math.isclose(tm["probes_per_s"], tm["probes"] / tm["total_s"], rel_tol=1e-2),
              "probes_per_s %s != probes / total_s" % tm["probes_per_s"])


# ---- The HTML ---------------------------------------------------------------------------------


def check_html(text, report, valid):
    """`report` may be anything when not `valid`; then only the checks it allows are run."""
    low = text.lower()
    check(low.startswith("<!doctype html>"), "HTML does not start with <!DOCTYPE html>")
    check("<script" not in low, "HTML contains <script>")
    check(not re.search(r"<[^>]*\son[a-z]+\s*=", low), "HTML contains an inline event handler (on...=)")
    ext = re.findall(r"""(?:src|href|xlink:href|action|poster|data)\s*=\s*["']?\s*((?:https?:)?//[^"'\s>]*)""", text, re.I)
    check(not ext, "HTML refers to external resources: %s" % ext[:5])
    check(not re.search(r"url\(\s*['\"]?\s*(?:https?:)?//", low), "CSS loads a url() from outside")
    check("@import" not in low and "<link" not in low and "<iframe" not in low and "<object" not in low and "<embed" not in low,
          "HTML pulls in another document (@import, link, iframe, object, embed)")

    svgs = re.findall(r"<svg\b.*?</svg>", text, re.S | re.I)
    protocols = report.get("protocols") if isinstance(report, dict) else None
    protocols = protocols if isinstance(protocols, dict) else {}
    check(len(re.findall(r"<svg\b", text, re.I)) == len(protocols),
          "%d <svg> elements for %d protocols" % (len(re.findall(r"<svg\b", text, re.I)), len(protocols)))
    for i, s in enumerate(svgs):
        try:
            root = ET.fromstring(s)
            check(root.tag == "{http://www.w3.org/2000/svg}svg", "svg %d: not in the SVG namespace" % i)
            texts = "".join(root.itertext())
            if valid:
                check("P=%d" % report["period"] in texts, "svg %d: no P=%d boundary label" % (i, report["period"]))
        except ET.ParseError as e:
            check(False, "svg %d is not well-formed XML: %s" % (i, e))

    # Strings from the report appear HTML-escaped.
    if valid:
        strings = [report["inputs"]["model"], report["inputs"]["template"]] + report["template"]["advice"]["text"]
        strings += report["model"]["memories"]
        for s in strings:
            check(html.escape(s, quote=True) in text, "HTML lacks the escaped report string %r" % s)
        for r in report.get("flagged", []):
            check(re.search(r'<span class="chip weak">%d</span>' % r, text) is not None,
                  "flagged residue %d is not shown in the summary" % r)


# ---- The screenshot -------------------------------------------------------------------------


def png_pixels(path):
    """(width, height, channels, rows) of an 8-bit non-interlaced PNG; rows are bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + n
    if ihdr is None:
        raise ValueError("no IHDR chunk")
    w, h, depth, ctype, _, _, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError("unsupported PNG: depth %d, colour type %d, interlace %d" % (depth, ctype, interlace))
    raw = zlib.decompress(b"".join(idat))
    stride = w * channels
    if len(raw) != h * (stride + 1):
        raise ValueError("decompressed size %d, expected %d" % (len(raw), h * (stride + 1)))
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ftype = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(channels, stride):
                row[i] = (row[i] + row[i - channels]) & 255
        elif ftype == 2:
            row = bytearray((a + b) & 255 for a, b in zip(row, prev))
        elif ftype == 3:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 255
        elif ftype == 4:
            for i in range(stride):
                a = row[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        elif ftype != 0:
            raise ValueError("bad filter type %d in row %d" % (ftype, y))
        rows.append(bytes(row))
        prev = row
    return w, h, channels, rows


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def check_screenshot(chromium, html_path, out_dir):
    png = os.path.join(out_dir, "selftest.png")
    if os.path.exists(png):
        os.remove(png)
    with tempfile.TemporaryDirectory(prefix="pkv-chromium-") as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--user-data-dir=" + profile, "--screenshot=" + png, "--window-size=1000,1400",
               "file://" + os.path.abspath(html_path)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = -1, "timed out after 180 s"
    if not check(rc == 0 and os.path.exists(png), "chromium screenshot (rc %s): %s" % (rc, err[-2000:])):
        return
    size = os.path.getsize(png)
    check(size > 10 * 1024, "screenshot is only %d bytes" % size)
    try:
        w, h, ch, rows = png_pixels(png)
    except (ValueError, zlib.error, struct.error) as e:
        check(False, "screenshot could not be decoded: %s" % e)
        return
    colours = set()
    for row in rows:
        for x in range(0, len(row), ch):
            colours.add(row[x:x + ch])
        if len(colours) > 4096:
            break
    check(len(colours) > 1, "screenshot is a single colour")
    print("screenshot %s: %dx%d, %d bytes, %s colours" % (png, w, h, size, "4096+" if len(colours) > 4096 else len(colours)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schema", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--html", required=True)
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)

    with open(a.schema, encoding="utf-8") as f:
        schema = json.load(f)
    with open(a.report, encoding="utf-8") as f:
        report = json.load(f)
    with open(a.html, encoding="utf-8") as f:
        page = f.read()

    check_schema(schema)
    valid = validate(schema, report)
    if valid:
        try:
            check_relations(report)
        except (KeyError, TypeError, IndexError, ZeroDivisionError) as e:
            check(False, "relations between fields: %r" % e)
    check_html(page, report, valid)

    chromium = find_chromium()
    if chromium is not None:
        check_screenshot(chromium, a.html, a.out_dir)
    print("%d passed, %d failed" % (passed, failed))
    if failed:
        return 1
    if chromium is None:
        print("skipped: chromium not installed")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
