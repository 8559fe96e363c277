#!/usr/bin/env python3
"""One table for a trained grid (tools/train/train.sh): per model the trainer's figures
(evaluation loss, its own lookup accuracy), the export check, and the self-test's per-protocol
mean accuracy, worst residue with its 95 % interval, gap, detected period and flagged residues.
Writes OUT/summary.json and prints a Markdown table; with OUT/causal.txt (train.sh's causal
check) also the shifted model's worst residue and the weak band's deficit-centre move against k.

Usage: summarize.py OUT [--grid NAME] [--check]
--check: exit 1 unless every export matched (rel L2 <= its tolerance, same greedy tokens), no
full-attention model has a flagged residue, and a compressed model's flags, if any, repeat with
its stride S (the flagged set mod P is closed under +S, or the period scan found S).
"""
import argparse
import cmath
import json
import math
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def deficit_centre(acc):
    """Where a per-residue accuracy curve is weak, as a residue: the circular mean of the
    residues 0..P-1 weighted by their deficits (max accuracy - accuracy); None for a flat curve.
    Unlike the argmin it is stable inside a band of near-equal weak residues."""
    P, top = len(acc), max(acc)
    z = sum((top - a) * cmath.exp(2j * math.pi * r / P) for r, a in enumerate(acc))
    if abs(z) < 1e-9:
        return None
    return (cmath.phase(z) / (2 * math.pi) * P) % P


def describe(cfg):
    comp = [i for i, s in enumerate(cfg["layers"]) if s["kind"] == "compressed"]
    if not comp:
        return "full", None
    s = cfg["layers"][comp[0]]
    where = "" if len(comp) == len(cfg["layers"]) else " (layers " + ",".join(map(str, comp)) + ")"
    return f"W{s['W']}/S{s['S']} L{s['L']} {s.get('gate', 'uniform')}{where}", s["S"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--grid", default="")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    rows, problems = [], []
    for name in sorted(os.listdir(a.out)):
        d = os.path.join(a.out, name)
        tr = load(os.path.join(d, "train.json"))
        if not tr:
            continue
        ck = load(os.path.join(d, "check.json")) or {}
        st = load(os.path.join(d, "selftest.json"))
        kind, S = describe(tr["config"])
        row = {"model": name, "memory": kind, "steps": tr["steps"], "train_s": tr["train_s"],
               "eval_loss": round(tr["eval_loss"], 4), "trainer_lookup_acc": tr["lookup_acc_mean"],
               "export_rel_l2": ck.get("rel_l2"), "export_ok": ck.get("ok", False), "protocols": {}}
        if not row["export_ok"]:
            problems.append(f"{name}: the export does not match the trainer ({ck or 'no check.json'})")
        if st is None:
            problems.append(f"{name}: no self-test report")
        else:
            P = st["period"]
            for proto, pr in st["protocols"].items():
                sm = pr["summary"]
                worst = pr["residues"][sm["argmin"]]
                scan = pr.get("period_scan") or {}
                flagged = sorted(pr.get("flagged") or [])
                row["protocols"][proto] = {
                    "mean": sm["mean_accuracy"], "min": sm["min_accuracy"], "argmin": sm["argmin"],
                    "min_ci": worst["ci"], "gap": sm["gap"], "gap_null": sm.get("gap_null"),
                    "period": scan.get("period") if scan.get("detected") else None, "flagged": flagged,
                    "acc": [r["accuracy"] for r in pr["residues"]]}
                if S is None and flagged:
                    problems.append(f"{name} ({proto}): a full-attention model has flagged residues {flagged}")
                if S is not None and flagged:
                    closed = all(((r + S) % P) in flagged for r in flagged)
                    if not closed and scan.get("period") != S:
                        problems.append(f"{name} ({proto}): flagged residues {flagged} mod {P} do not repeat "
                                        f"with S = {S} (period scan: {scan.get('period')})")
        g = load(os.path.join(d, "gates.json"))
        if g is not None and st is not None:
            flagged = sorted(set().union(*[set(p["flagged"]) for p in row["protocols"].values()]))
            pred = sorted(g["predicted_weak"])
            row["gates"] = {"predicted_weak": pred, "flagged": flagged, "agree": pred == flagged,
                            "n_static": {f"{b['layer']}{b['branch']}{b['kv_head']}": round(b["n_static"], 2)
                                         for b in g["branches"]},
                            "n_window": {f"{b['layer']}{b['branch']}{b['kv_head']}": round(b["n_window"], 2)
                                         for b in g["branches"]}}
        rows.append(row)
    causal = None
    cz = os.path.join(a.out, "causal.txt")
    if os.path.exists(cz):
        name, k = open(cz).read().split()
        k = int(k)
        d = os.path.join(a.out, name)
        base, shifted = load(os.path.join(d, "selftest.json")), load(os.path.join(d, f"selftest_shift{k}.json"))
        if base and shifted:
            causal = {"model": name, "shift": k, "protocols": {}}
            for proto in base["protocols"]:
                b, s2 = base["protocols"][proto], shifted["protocols"][proto]
                P = base["period"]
                causal["protocols"][proto] = {
                    "argmin": b["summary"]["argmin"], "argmin_shifted": s2["summary"]["argmin"],
                    "expected": (b["summary"]["argmin"] + k) % P,
                    "flagged": b.get("flagged") or [], "flagged_shifted": s2.get("flagged") or [],
                    "acc": [r["accuracy"] for r in b["residues"]],
                    "acc_shifted": [r["accuracy"] for r in s2["residues"]]}
                c = causal["protocols"][proto]
                c0, c1 = deficit_centre(c["acc"]), deficit_centre(c["acc_shifted"])
                c["centre"], c["centre_shifted"] = c0, c1
                # The weak band's move, in (-P/2, P/2]: k if the curve translates with the gates.
                moved = None if c0 is None or c1 is None else (c1 - c0) % P
                c["centre_moved"] = moved - P if moved is not None and moved > P / 2 else moved
    summary = {"grid": a.grid, "models": rows, "causal": causal, "problems": problems}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    def pct(x):
        return "" if x is None else f"{100 * x:.1f}"

    print(f"| model | memory | eval loss | trainer lookup acc | export rel L2 | protocol | mean Ā | A_min [95 % CI] (r) "
          f"| Δ (null) | period | flagged |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for proto, p in r["protocols"].items() or [("-", None)]:
            if p is None:
                continue
            print(f"| {r['model']} | {r['memory']} | {r['eval_loss']:.3f} | {pct(r['trainer_lookup_acc'])} | "
                  f"{r['export_rel_l2']:.1e} | {proto} | {pct(p['mean'])} | {pct(p['min'])} "
                  f"[{pct(p['min_ci'][0])}, {pct(p['min_ci'][1])}] ({p['argmin']}) | {pct(p['gap'])} "
                  f"({pct(p['gap_null'])}) | {p['period'] or '-'} | {p['flagged'] or '-'} |")
    gated = [r for r in rows if "gates" in r]
    if gated:
        print()
        print("| model | gates predict weak | self-test flagged (either protocol) | agree |")
        print("|---|---|---|---|")
        for r in gated:
            gg = r["gates"]
            print(f"| {r['model']} | {gg['predicted_weak'] or '-'} | {gg['flagged'] or '-'} | {'yes' if gg['agree'] else 'no'} |")
        print(f"gate analysis agrees with the self-test on {sum(r['gates']['agree'] for r in gated)} of {len(gated)} "
              f"compressed models")
    if causal:
        print()
        print(f"causal check on {causal['model']}: per-offset gate parameters shifted by {causal['shift']}")
        for proto, c in causal["protocols"].items():
            moved = "-" if c["centre_moved"] is None else (f"{c['centre']:.1f} -> {c['centre_shifted']:.1f}, "
                                                           f"moved {c['centre_moved']:+.1f}")
            print(f"  {proto}: worst residue {c['argmin']} -> {c['argmin_shifted']} (expected {c['expected']}); "
                  f"deficit centre {moved} (k = {causal['shift']}); "
                  f"flagged {c['flagged'] or '-'} -> {c['flagged_shifted'] or '-'}")
    for p in problems:
        print("problem:", p)
    if a.check and problems:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
