#!/usr/bin/env python3
"""The C API's self-test report equals `phasekv selftest --json` field for field.

    test_selftest_capi.py --phasekv BIN --dump BIN --data DIR --tmp DIR [--emulator CMD]

On tiny_qwen3_vocab.gguf (3 random qwen3 layers with SmolLM2's vocabulary), converted with a
compressed memory on layers 1-2 (period 4), the same self-test runs twice: through the tool
(--json) and through pkv_selftest_run_report, whose accessors tests/capi/selftest_report_json.c
writes out in the tool's layout. Every member the dump has must be in the tool's report with
the same value (floats exactly: one deterministic run), and every member of the tool's report
outside `inputs` and the wall-clock timings must be in the dump: nothing the tool reports is
missing from the C API. Three designs: with the control and both gates, with a template file
and no control, and a run cancelled from the progress callback (PKV_ERR_CANCELLED, no report);
then the tool interrupted by SIGINT (exit 130, an earlier report left as it was).

Exit 0: passed; 1: a difference (each printed); 77: no tiny_qwen3_vocab.gguf (it is made from
the SmolLM2 GGUF, "skipped: no tiny_qwen3_vocab.gguf")."""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys

failures = []

# Members of the tool's report that the C API does not carry: what the caller passed in, and
# wall-clock figures that differ between two runs.
TOOL_ONLY = {"schema", "phasekv_version", "inputs", "timings.total_s", "timings.probes_per_s"}


def compare(tool, capi, path=""):
    if isinstance(capi, dict):
        if not isinstance(tool, dict):
            failures.append("%s: the tool has %r, the C API an object" % (path, tool))
            return
        for k in capi:
            sub = (path + "." if path else "") + k
            if k not in tool:
                failures.append("%s: in the C API's report only" % sub)
            else:
                compare(tool[k], capi[k], sub)
        for k in tool:
            sub = (path + "." if path else "") + k
            if k not in capi and sub not in TOOL_ONLY:
                failures.append("%s: the tool reports it, the C API does not" % sub)
    elif isinstance(capi, list):
        if not isinstance(tool, list) or len(tool) != len(capi):
            failures.append("%s: lengths differ (tool %r, C API %r)" % (path, tool, capi))
            return
        for i, (t, c) in enumerate(zip(tool, capi)):
            compare(t, c, "%s[%d]" % (path, i))
    else:
        # bool before int: True == 1 in Python.
        if type(tool) is not type(capi) and not (isinstance(tool, (int, float)) and isinstance(capi, (int, float))
                                                 and not isinstance(tool, bool) and not isinstance(capi, bool)):
            failures.append("%s: types differ (tool %r, C API %r)" % (path, tool, capi))
        elif tool != capi:
            failures.append("%s: tool %r != C API %r" % (path, tool, capi))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--emulator", default="")
    a = ap.parse_args()
    emu = shlex.split(a.emulator) if a.emulator else []
    gguf = os.path.join(a.data, "tiny_qwen3_vocab.gguf")
    if not os.path.exists(gguf):
        print("skipped: no tiny_qwen3_vocab.gguf")
        return 77
    tag = str(os.getpid())
    pkv = os.path.join(a.tmp, "selftest_capi_%s.pkv" % tag)
    tpl = os.path.join(a.tmp, "selftest_capi_%s.txt" % tag)
    with open(tpl, "w") as f:
        f.write("<|im_start|>user\nNotes from the field log:\n{{content}}<|im_end|>\n")
    subprocess.run(emu + [a.phasekv, "convert", gguf, pkv, "--force", "--kv", "1-2:compressed:W=4,S=4,L=8,gate=uniform"],
                   check=True, capture_output=True)
    designs = [
        ("control and gates", ["--ctx", "72", "--samples", "4", "--seed", "5", "--threads", "2", "--control",
                               "--gate-min-acc", "0.5", "--gate-max-gap", "0.3"]),
        ("template, no control", ["--ctx", "112", "--samples", "4", "--seed", "9", "--threads", "1", "--period", "8",
                                  "--template", tpl]),
        ("guard", ["--ctx", "72", "--samples", "4", "--seed", "3", "--threads", "1", "--guard", "1",
                   "--guard-threshold", "0.9"]),
    ]
    try:
        for name, args in designs:
            tj = os.path.join(a.tmp, "selftest_capi_%s_tool.json" % tag)
            cj = os.path.join(a.tmp, "selftest_capi_%s_c.json" % tag)
            r = subprocess.run(emu + [a.phasekv, "selftest", "-m", pkv, "--json", tj, "-q"] + args,
                               capture_output=True, text=True)
            if r.returncode not in (0, 3):
                failures.append("%s: the tool exited %d: %s" % (name, r.returncode, r.stderr[-800:]))
                continue
            r2 = subprocess.run(emu + [a.dump, pkv, cj] + args, capture_output=True, text=True)
            if r2.returncode != 0:
                failures.append("%s: the C API dump exited %d: %s" % (name, r2.returncode, r2.stderr[-800:]))
                continue
            with open(tj) as f:
                tool = json.load(f)
            with open(cj) as f:
                capi = json.load(f)
            n0 = len(failures)
            compare(tool, capi)
            gates_exit = 3 if not tool["gates"]["pass"] else 0
            if r.returncode != gates_exit:
                failures.append("%s: exit %d but gates.pass = %s" % (name, r.returncode, tool["gates"]["pass"]))
            print("%s: %s (%d residues x %d protocols%s, gates %s)" % (
                name, "same report" if len(failures) == n0 else "DIFFERENT", tool["period"],
                len(tool["protocols"]), ", control" if tool["control"] else "",
                "pass" if tool["gates"]["pass"] else "fail"))
            os.remove(tj)
            os.remove(cj)
        # Cancelled from the progress callback after 5 probes: PKV_ERR_CANCELLED, no report.
        cj = os.path.join(a.tmp, "selftest_capi_%s_cancel.json" % tag)
        r3 = subprocess.run(emu + [a.dump, pkv, cj, "--ctx", "72", "--samples", "4", "--cancel-after", "5"],
                            capture_output=True, text=True)
        if r3.returncode != 4 or os.path.exists(cj) or "cancelled after 5 of" not in r3.stdout:
            failures.append("cancel: exit %d, stdout %r, stderr %r" % (r3.returncode, r3.stdout, r3.stderr[-400:]))
        else:
            print("cancel: " + r3.stdout.strip())
        # The tool interrupted by Ctrl-C: exit 130, the message says so, and a report an earlier
        # run left at the --json path is untouched (reports are written whole or not at all).
        old = os.path.join(a.tmp, "selftest_capi_%s_old.json" % tag)
        with open(old, "w") as f:
            f.write('{"earlier": "report"}\n')
        pr = subprocess.Popen(emu + [a.phasekv, "selftest", "-m", pkv, "--ctx", "72", "--samples", "400", "--json",
                                     old], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        for line in pr.stderr:  # the progress lines (one per 10 % in a log): the loop is running
            seen += line
            if "probes" in line:
                break
        pr.send_signal(signal.SIGINT)
        rest_out, rest_err = pr.communicate(timeout=120)
        with open(old) as f:
            kept = f.read()
        if pr.returncode != 130 or "interrupted" not in rest_err or kept != '{"earlier": "report"}\n':
            failures.append("SIGINT: exit %s, stderr %r, report now %r" % (pr.returncode, (seen + rest_err)[-400:],
                                                                             kept[:80]))
        else:
            print("SIGINT: exit 130, " + rest_err.strip().splitlines()[-1])
        os.remove(old)
    finally:
        for p in (pkv, tpl):
            if os.path.exists(p):
                os.remove(p)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
