#!/usr/bin/env python3
"""Runs the bad-input catalogue (cases.json) against a `phasekv` binary.

Each case makes its inputs (inputs.py: named mutations of good files, or small inline texts),
runs one phasekv command and checks that the process reports the error and survives:
  - it exits by itself within the timeout (no signal, no abort, no hang);
  - no sanitizer report, assertion or uncaught exception on stderr;
  - the exit code is the expected one (2 for every bad input: the README, "Errors");
  - stderr contains the expected substring(s) (the message names the field or value);
  - nothing is left half-written: a convert's OUT and OUT.partial do not exist afterwards, and
    files the case lists as "unchanged" keep their bytes.

Usage: run_bad_inputs.py --phasekv BIN --data DIR --tmp DIR [--model GGUF] [--only SUBSTR] [--keep]
                         [--timeout S] [--emulator CMD]
  --data   the ctest fixture directory (tiny.gguf, tiny_qwen.gguf, tiny_gemma.gguf, tiny_iq4xs.gguf)
  --model  SmolLM2 GGUF for the few cases marked "needs": "model" (skipped, visibly, when empty)
Exit status: 0 when every case that ran passed, 1 otherwise.
"""
import argparse
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import inputs  # noqa: E402

CATEGORIES = ("model_file", "gguf", "prompt", "template", "cli")
# A crash, sanitizer report or uncaught exception: never acceptable, whatever the exit code.
CRASH_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                 "UndefinedBehaviorSanitizer", "internal assertion failed", "terminate called",
                 "Segmentation fault", "Aborted", "std::bad_alloc")
CASE_KEYS = {"id", "category", "description", "inputs", "args", "exit", "stderr", "unchanged", "absent",
             "needs", "timeout", "note", "stdout", "stderr_lacks"}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def load_cases(path):
    with open(path) as f:
        cases = json.load(f)["cases"]
    seen = set()
    for c in cases:
        bad = set(c) - CASE_KEYS
        missing = {"id", "category", "description", "args", "exit", "stderr"} - set(c)
        if bad or missing or c["category"] not in CATEGORIES or c["id"] in seen:
            raise SystemExit("cases.json: malformed case %r (unknown keys %s, missing %s, category %r)"
                             % (c.get("id"), sorted(bad), sorted(missing), c.get("category")))
        seen.add(c["id"])
    return cases


class Runner:
    def __init__(self, a):
        self.a = a
        self.phasekv = os.path.abspath(a.phasekv)
        self.root = os.path.join(os.path.abspath(a.tmp), "bad_inputs_%d" % os.getpid())
        self.bases = {}
        self.base_errors = {}

    def run(self, args, timeout, stdout=None):
        """stdout: None (captured), a path to write it to (e.g. /dev/full), or "closed"."""
        env = dict(os.environ)
        # Sanitized builds: report, then exit non-zero (never continue after an error).
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        cmd = shlex.split(self.a.emulator) + [self.phasekv] + args
        if stdout is None:
            return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
        if stdout == "closed":  # the process starts with descriptor 1 closed, as `cmd >&-` does
            return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh"] + cmd, stderr=subprocess.PIPE,
                                  timeout=timeout, env=env)
        with open(stdout, "wb") as f:
            return subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, timeout=timeout, env=env)

    # Good files the mutations start from, made once by the phasekv under test.
    def make_bases(self):
        os.makedirs(self.root, exist_ok=True)
        data = os.path.abspath(self.a.data)
        self.bases["tiny_gguf"] = os.path.join(data, "tiny.gguf")
        self.bases["tiny_qwen_gguf"] = os.path.join(data, "tiny_qwen.gguf")
        self.bases["tiny_gemma_gguf"] = os.path.join(data, "tiny_gemma.gguf")
        self.bases["tiny_iq4xs_gguf"] = os.path.join(data, "tiny_iq4xs.gguf")
        self.bases["tiny_qwen3_gguf"] = os.path.join(data, "compressed", "tiny_cmp_qwen3.gguf")
        for name, p in list(self.bases.items()):
            if not os.path.isfile(p):
                self.base_errors[name] = "fixture %s is missing (run ctest -R gguf_fixtures)" % p
        converts = {
            "tiny_pkv": [],
            # Layer 1 compressed with a planted (scalar, F32 bias) gate: descriptor and gate cases.
            "tiny_cmp_pkv": ["--kv", "1:compressed:W=8,S=4,L=16,gate=planted:K=2,V=5"],
        }
        for name, kv in converts.items():
            self.convert_base(name, self.bases["tiny_gguf"], kv)
        if self.a.model:
            self.convert_base("smol_pkv", self.a.model, [], timeout=600)
        else:
            self.base_errors["smol_pkv"] = "no --model"

    def convert_base(self, name, src, kv, timeout=120):
        out = os.path.join(self.root, name + ".pkv")
        try:
            p = self.run(["convert", src, out, "--force"] + kv, timeout)
            if p.returncode != 0:
                self.base_errors[name] = "convert failed (%d): %s" % (p.returncode, p.stderr.decode()[-500:])
                return
        except subprocess.TimeoutExpired:
            self.base_errors[name] = "convert timed out"
            return
        self.bases[name] = out

    def subst(self, s, env):
        for k, v in env.items():
            s = s.replace("{" + k + "}", v)
        return s

    def run_case(self, c):
        """Returns (status, detail): status is 'ok', 'FAIL' or 'skip'."""
        if "model" in c.get("needs", []) and not self.a.model:
            return "skip", "needs the real model (--model / PHASEKV_TEST_MODEL is empty)"
        if "no_cuda_device" in c.get("needs", []) and os.path.exists("/dev/nvidiactl"):
            return "skip", "needs a machine without a CUDA device (this one has /dev/nvidiactl)"
        case_dir = os.path.join(self.root, c["id"])
        os.makedirs(case_dir, exist_ok=True)
        env = {"data": os.path.abspath(self.a.data), "tmp": self.root, "case": case_dir,
               "out": os.path.join(case_dir, "out.pkv")}
        env.update({k: v for k, v in self.bases.items()})
        used = json.dumps(c)
        for name in self.base_errors:
            if "{" + name + "}" in used or '"from": "%s"' % name in used:
                return "FAIL", "base file %s: %s" % (name, self.base_errors[name])
        for name, spec in c.get("inputs", {}).items():
            path = os.path.join(case_dir, name + spec.get("ext", ""))
            try:
                inputs.make_input(spec, path, self.bases, lambda s: self.subst(s, env))
            except Exception as e:  # a case whose mutation no longer applies must say so
                return "FAIL", "cannot make input '%s': %s: %s" % (name, type(e).__name__, e)
            env[name] = path
        args = [self.subst(x, env) for x in c["args"]]
        unchanged = {p: sha256(p) for p in (self.subst(x, env) for x in c.get("unchanged", []))}
        absent = [self.subst(x, env) for x in c.get("absent", [])]
        if any("{out}" in x for x in c["args"]):
            absent += [env["out"], env["out"] + ".partial"]
        try:
            p = self.run(args, c.get("timeout", self.a.timeout), c.get("stdout"))
        except subprocess.TimeoutExpired:
            return "FAIL", "timed out after %d s: %s" % (c.get("timeout", self.a.timeout), " ".join(args))
        err = p.stderr.decode("utf-8", "replace")
        problems = []
        if p.returncode < 0:
            problems.append("killed by signal %d" % -p.returncode)
        if p.returncode > 128 and c["exit"] <= 128:
            problems.append("killed by signal %d (shell status %d)" % (p.returncode - 128, p.returncode))
        for m in CRASH_MARKERS:
            if m in err:
                problems.append("stderr has '%s'" % m)
        if p.returncode >= 0 and p.returncode != c["exit"]:
            problems.append("exit %d, expected %d" % (p.returncode, c["exit"]))
        wants = c["stderr"] if isinstance(c["stderr"], list) else [c["stderr"]]
        for w in wants:
            if self.subst(w, env) not in err:
                problems.append("stderr lacks %r" % self.subst(w, env))
        for w in c.get("stderr_lacks", []):
            if self.subst(w, env) in err:
                problems.append("stderr has %r" % self.subst(w, env))
        for path in absent:
            if os.path.lexists(path):
                problems.append("left %s behind" % path)
        # No temporary output may outlive the command (AtomicFile: NAME.partial.XXXXXX).
        for root, _, files in os.walk(case_dir):
            for fn in files:
                if ".partial." in fn:
                    problems.append("left temporary %s behind" % os.path.join(root, fn))
        # Running as root, a careless output would replace a device node with a file.
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
            problems.append("/dev/null is no longer a character device")
        for path, h in unchanged.items():
            if not os.path.exists(path) or sha256(path) != h:
                problems.append("changed %s" % path)
        if problems:
            tail = err.strip()[-1500:]
            return "FAIL", "; ".join(problems) + "\n      cmd: phasekv " + " ".join(args) + \
                "\n      stderr: " + tail.replace("\n", "\n              ")
        if not self.a.keep:
            shutil.rmtree(case_dir, ignore_errors=True)
        return "ok", "exit=%d  %s" % (p.returncode, "  ".join(repr(w) for w in wants))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--model", default="", help="SmolLM2 GGUF (cases needing it are skipped when empty)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.json"))
    ap.add_argument("--only", default="", help="run only the cases whose id contains this")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per case (default 60)")
    ap.add_argument("--keep", action="store_true", help="keep every case's files under TMP")
    ap.add_argument("--emulator", default="", help="command run in front of phasekv (cross builds: qemu-aarch64)")
    a = ap.parse_args()

    t0 = time.time()
    cases = [c for c in load_cases(a.cases) if a.only in c["id"]]
    r = Runner(a)
    r.make_bases()
    counts = {"ok": 0, "FAIL": 0, "skip": 0}
    per_cat = {}
    for c in cases:
        status, detail = r.run_case(c)
        counts[status] += 1
        per_cat.setdefault(c["category"], {"ok": 0, "FAIL": 0, "skip": 0})[status] += 1
        print("%-4s %-36s %s" % (status, c["id"], detail), flush=True)
    print("by category: " + ", ".join("%s %d" % (k, sum(v.values())) for k, v in sorted(per_cat.items())))
    print("%d passed, %d failed, %d skipped (%.1f s)" % (counts["ok"], counts["FAIL"], counts["skip"],
                                                         time.time() - t0))
    if not a.keep and counts["FAIL"] == 0:
        shutil.rmtree(r.root, ignore_errors=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
