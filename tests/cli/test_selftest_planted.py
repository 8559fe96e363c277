#!/usr/bin/env python3
"""The self-test against planted phase patterns on SmolLM2 (the issue's validation).

SmolLM2-135M retrieves a record's value through layers 20-29: mean-pooling those layers
(uniform W8/S8/L16) takes the probes' accuracy to 0, and so does any training-free retrofit of
all 30 layers. Two retrofits of layers 20-29 keep retrieval and plant a known pattern:

* **planted weak offset** — scalar gates trained by tests/reference/value_gates.py (a linear
  probe, fitted with the numpy reference model on texts of its own, that puts each window's
  weight on the token holding a record's value) with bias -30 at window offset 5: a value at
  offset 5 cannot be selected, so the probes' accuracy collapses exactly where the value lands
  on residue 5. The self-test must report period 8 and flag residue 5 and nothing else.
* **planted strong offset** — one-hot gates `gate=planted:K=5,V=5` keep only the tokens at
  offset 5: the value is readable from far away only on residue 5, which must be the most
  accurate residue, far above the rest, with the lowest NLL (in-sequence padding).

The full-KV control (flags nothing) runs in test_cli.py on the same probe design.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from harness import check, summary  # noqa: E402 (tests/cli/harness.py, beside this script)




def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--smollm2", required=True, help="SmolLM2 GGUF")
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--ctx", default="256")
    ap.add_argument("--seed", default="7")
    a = ap.parse_args()
    if not a.smollm2 or not os.path.exists(a.smollm2):
        print("skipped: no SmolLM2 GGUF")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    tag = str(os.getpid())
    gates = os.path.join(a.tmp, "planted_gates_%s.safetensors" % tag)
    weak = os.path.join(a.tmp, "planted_weak5_%s.pkv" % tag)
    strong = os.path.join(a.tmp, "planted_k5_%s.pkv" % tag)
    rep = os.path.join(a.tmp, "planted_%s.json" % tag)

    def phasekv(args):
        t = time.monotonic()
        p = subprocess.run([a.phasekv] + args, capture_output=True, text=True)
        print("[%.1f s] phasekv %s" % (time.monotonic() - t, " ".join(x for x in args if not x.startswith("/"))))
        return p.returncode, p.stdout, p.stderr

    def selftest(model, extra, want_rc=0):
        rc, out, err = phasekv(["selftest", "-m", model, "-c", a.ctx, "--seed", a.seed, "-t", "2", "-q",
                                "--json", rep] + extra)
        print(out)
        check(rc == want_rc, "selftest %s: exit code %d (want %d): %s" % (model, rc, want_rc, err))
        return json.load(open(rep)) if rc == want_rc else None

    try:
        p = subprocess.run([sys.executable, os.path.join(here, "..", "reference", "value_gates.py"), "--gguf",
                            a.smollm2, "--layers", "20-29", "--window", "8", "--weak", "5", "--strength", "30",
                            "--texts", "2", "--tokens", "600", "--out", gates], capture_output=True, text=True)
        print(p.stdout + p.stderr[-600:])
        check(p.returncode == 0, "value_gates.py")
        rc, _, err = phasekv(["convert", a.smollm2, weak, "--force", "--kv",
                              "20-29:compressed:W=8,S=8,L=16,gate=scalar", "--gates", gates])
        check(rc == 0, "convert with the weak-offset gates: " + err)
        # A release gate on the worst residue must fail there: exit code 3.
        # The phase guard is scored on the same probes (no extra prefill): auto chooses its shift
        # on stage 1 and scores it on stage 2.
        j = selftest(weak, ["--samples", "6", "--gate-min-acc", "0.2", "--guard", "auto"], want_rc=3) if rc == 0 else None
        if j:
            g = j["guard"]
            check(g["shift"] > 0 and g["auto"] and 5 in g["stage1_weak"], "guard: a shift chosen for residue 5: %s"
                  % {k: g[k] for k in ("shift", "stage1_weak")})
            if g["shift"] > 0:
                un, gu = g["unguarded"]["accuracy"], g["guarded"]["accuracy"]
                # Probes whose target sits on the weak residue are answered correctly more often with
                # the guard: the paired gain's 95 % interval lies above 0.
                check(g["worst_residue"] == 5 and gu[5] > un[5] and g["worst_gain_ci"][0] > 0,
                      "guard lifts residue 5: %.3f -> %.3f, gain %.3f [%.3f, %.3f]" % (
                          un[5], gu[5], g["worst_gain"], g["worst_gain_ci"][0], g["worst_gain_ci"][1]))
                print("guard on the planted weak offset: residue 5 %.3f -> %.3f, paired gain %+.3f [%+.3f, %+.3f]; "
                      "mean %.3f -> %.3f, gain %+.3f [%+.3f, %+.3f]" % (
                          un[5], gu[5], g["worst_gain"], g["worst_gain_ci"][0], g["worst_gain_ci"][1],
                          g["unguarded"]["mean_accuracy"], g["guarded"]["mean_accuracy"], g["mean_gain"],
                          g["mean_gain_ci"][0], g["mean_gain_ci"][1]))
            worst = min(r["accuracy"] for pr in j["protocols"].values() for r in pr["residues"])
            check(not j["gates"]["pass"] and worst < 0.2, "gate min_acc 0.2 fails (worst A_r %.3f)" % worst)
            acc = {pr: [r["accuracy"] for r in j["protocols"][pr]["residues"]] for pr in j["protocols"]}
            check(j["period"] == 8 and j["period_source"] == "strides", "period 8 from the strides")
            check(j["flagged"] == [5], "planted weak offset 5: flagged %s, accuracy %s" % (j["flagged"], acc))
            for pr, A in acc.items():
                others = [x for r, x in enumerate(A) if r != 5]
                check(A[5] == min(A) and A[5] + 0.2 < sum(others) / 7,
                      "%s: residue 5 lowest, far below the others' mean: %s" % (pr, A))
            # With a weak residue the advice moves the slot onto the strongest one, unless it is there.
            t = j["template"]
            adv = t["advice"]
            mean = [sum(acc[pr][r] for pr in acc) / len(acc) for r in range(8)]
            check(mean[adv["strongest_residue"]] >= max(mean) - 1e-9, "advice: strongest residue %d, means %s"
                  % (adv["strongest_residue"], mean))
            if adv["strongest_residue"] != t["phase"]:
                check(adv["change_needed"] and adv["pad_tokens_before_slot"] ==
                      (adv["strongest_residue"] - t["t0"]) % 8 and any("neutral token" in x for x in adv["text"]),
                      "advice pads the slot onto the strongest residue: %s" % adv)
            else:
                check(not adv["change_needed"] and adv["pad_tokens_before_slot"] == 0, "advice: already strongest %s" % adv)

        # The integer kernels on the same probes — q8 (8-bit activations) and q8x2 (15-bit, the
        # commands' default): the weak residue must be found the same way, and each residue's hits
        # stay within 3 of the reference mode's (12 probes each).
        for mode in ("q8", "q8x2") if j else ():
            jq = selftest(weak, ["--samples", "6", "--gate-min-acc", "0.2", "--kernels", mode], want_rc=3)
            if jq:
                check(jq["probe_digest"] == j["probe_digest"], "%s: the same probes" % mode)
                check(jq["flagged"] == [5], "%s: planted weak offset 5 flagged: %s" % (mode, jq["flagged"]))
                diffs = {pr: [abs(x["hits"] - y["hits"]) for x, y in
                              zip(jq["protocols"][pr]["residues"], j["protocols"][pr]["residues"])]
                         for pr in j["protocols"]}
                worst = max(max(v) for v in diffs.values())
                n = j["protocols"]["outer"]["residues"][0]["n"]
                check(worst <= 3, "%s vs reference: hit differences per residue %s (at most 3 of %d)"
                      % (mode, diffs, n))
                print("selftest_planted: %s vs reference, hit differences per residue %s" % (mode, diffs))

        rc, _, err = phasekv(["convert", a.smollm2, strong, "--force", "--kv",
                              "20-29:compressed:W=8,S=8,L=16,gate=planted:K=5,V=5"])
        check(rc == 0, "convert planted K=V=5: " + err)
        # One protocol is enough here (the weak model ran both); in-sequence reuses more prefix.
        j = selftest(strong, ["--samples", "4", "--protocol", "in_sequence"]) if rc == 0 else None
        if j:
            for pr in j["protocols"]:
                A = [r["accuracy"] for r in j["protocols"][pr]["residues"]]
                nll = [r["nll"] for r in j["protocols"][pr]["residues"]]
                others = [x for r, x in enumerate(A) if r != 5]
                check(A[5] > 0.5 and A[5] > max(others) + 0.3, "%s: K=V=5 strongest at residue 5: %s" % (pr, A))
                check(min(range(8), key=lambda r: nll[r]) == 5, "%s: K=V=5 lowest NLL at residue 5: %s" % (pr, nll))
    finally:
        for f in (gates, weak, strong, rep):
            if os.path.exists(f):
                os.remove(f)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
