#!/usr/bin/env python3
"""What happens around the inputs (hardening round two), end to end with the `phasekv` binary:
concurrent writers of one output, signals during a write, an input named like a temporary,
and a model file replaced in place under a running process (--no-mmap keeps running on its
copy; --verify detects the change). The refusals themselves are in the bad-input catalogue."""
import argparse
import glob
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from harness import check, summary  # noqa: E402 (tests/cli/harness.py, beside this script)

EMULATOR = []



def cmd(args):
    return EMULATOR + [PHASEKV] + args


def run(args):
    p = subprocess.run(cmd(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def temporaries(path):
    return glob.glob(glob.escape(path) + ".partial*")


def concurrent_writers(gguf, tmp):
    out = os.path.join(tmp, "outputs_concurrent_%d.pkv" % os.getpid())
    for force in (False, True):
        if os.path.exists(out):
            os.remove(out)
        extra = ["--force"] if force else []
        procs = [subprocess.Popen(cmd(["convert", gguf, out] + extra), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [(p.wait(), p.stderr.read()) for p in procs]
        codes = sorted(rc for rc, _ in results)
        if force:
            check(codes == [0, 0, 0, 0], "4 writers with --force all complete: %s" % results)
        else:
            check(codes == [0, 2, 2, 2], "4 writers without --force: one wins, three report: %s" % results)
            for rc, err in results:
                if rc == 2:
                    check("exists (pass --force" in err or "was created by another process" in err,
                          "a losing writer says why: " + err)
        rc, out_text, err = run(["inspect", out, "--verify"])
        check(rc == 0 and "verified" in out_text, "the surviving file is whole and verifies: " + err)
        check(temporaries(out) == [], "no temporary left by concurrent writers: %s" % temporaries(out))
    os.remove(out)


def signals_during_write(src, tmp):
    """A writer stopped while its temporary exists, then signalled: it dies by the signal, the
    temporary is gone and the previous output is as it was."""
    out = os.path.join(tmp, "outputs_signal_%d.pkv" % os.getpid())
    with open(out, "wb") as f:
        f.write(b"the previous model\n")
    before = sha(out)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        p = subprocess.Popen(cmd(["convert", src, out, "--force"]), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        caught = False
        deadline = time.time() + 30
        while time.time() < deadline and p.poll() is None:
            if temporaries(out):
                os.kill(p.pid, signal.SIGSTOP)
                caught = True
                break
            time.sleep(0.0005)
        if not caught:  # finished before a temporary was seen: nothing to interrupt this time
            p.wait()
            print("note: convert finished before %s could be sent" % sig.name)
            with open(out, "wb") as f:
                f.write(b"the previous model\n")
            continue
        os.kill(p.pid, sig)
        os.kill(p.pid, signal.SIGCONT)
        rc = p.wait()
        check(rc == -sig, "%s during the write ends the process by that signal (rc %d)" % (sig.name, rc))
        check(temporaries(out) == [], "%s leaves no temporary: %s" % (sig.name, temporaries(out)))
        check(sha(out) == before, "%s leaves the previous output as it was" % sig.name)
    os.remove(out)


def input_named_like_a_temporary(gguf, tmp):
    d = os.path.join(tmp, "outputs_partial_%d" % os.getpid())
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, "model.pkv")
    src = out + ".partial"  # the name the previous writer used for its temporary
    shutil.copy(gguf, src)
    before = sha(src)
    rc, _, err = run(["convert", src, out])
    check(rc == 0 and sha(src) == before, "an input named OUT.partial is never taken by the temporary: " + err)
    check(sorted(os.listdir(d)) == ["model.pkv", "model.pkv.partial"], "only the input and the output: %s"
          % os.listdir(d))
    shutil.rmtree(d)


def replaced_under_a_running_process(smollm2, tmp):
    """The model is overwritten in place (same size, other bytes) and then truncated while a
    `run --no-mmap` generates: the run finishes with exactly the text of an undisturbed run."""
    model = os.path.join(tmp, "outputs_replace_%d.pkv" % os.getpid())
    rc, _, err = run(["convert", smollm2, model, "--force"])
    check(rc == 0, "convert: " + err)
    base = ["run", "-m", model, "-p", "The capital of France is", "-n", "48", "--greedy", "-t", "2", "--no-mmap"]
    rc, want, err = run(base)
    check(rc == 0 and want.strip(), "reference run --no-mmap: " + err)
    size = os.path.getsize(model)
    p = subprocess.Popen(cmd(base), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = os.read(p.stdout.fileno(), 8)  # the prompt is echoed after the prefill: the model is loaded
    with open(model, "r+b") as f:  # what `cp other.pkv model.pkv` does to the bytes
        f.write(b"\xa5" * size)
    os.truncate(model, 4096)
    rest, err = p.communicate()
    got = (first + rest).decode("utf-8", "replace")
    check(p.returncode == 0 and got == want, "run --no-mmap is unaffected by the file's replacement: rc %d %r vs %r %s"
          % (p.returncode, got, want, err.decode()[-300:]))
    rc, _, err = run(["inspect", model])
    check(rc == 2, "the damaged file itself is refused: " + err)
    # A same-size in-place overwrite of the blob leaves the metadata valid: --verify sees it.
    rc, _, err = run(["convert", smollm2, model, "--force"])
    with open(model, "r+b") as f:
        f.seek(size - 4096)
        f.write(b"\x00" * 64)
    rc, _, err = run(["inspect", model, "--verify"])
    check(rc == 2 and "integrity.blob_hash" in err, "inspect --verify detects an in-place change: " + err)
    rc, _, err = run(["run", "-m", model, "-p", "Hi", "-n", "1", "--verify", "-t", "1"])
    check(rc == 2 and "integrity.blob_hash" in err, "run --verify refuses it before running: " + err)
    os.remove(model)


def full_disk(data, tmp):
    """A report or model written to a full file system: a clear error (exit 2, ENOSPC named),
    the previous file intact, no temporary left. Needs a small tmpfs (mount as root)."""
    mnt = os.path.join(tmp, "outputs_full_%d" % os.getpid())
    os.makedirs(mnt, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], capture_output=True).returncode != 0:
        print("skipped: full-disk checks (cannot mount a small tmpfs here; needs root)")
        os.rmdir(mnt)
        return
    try:
        q3 = os.path.join(tmp, "outputs_q3_%d.pkv" % os.getpid())
        rc, _, err = run(["convert", os.path.join(data, "tiny_qwen3_vocab.gguf"), q3, "--force",
                          "--kv", "1-2:compressed:W=4,S=4,L=8,gate=uniform"])
        check(rc == 0, "convert the self-test fixture: " + err)
        report = os.path.join(mnt, "report.json")
        model = os.path.join(mnt, "model.pkv")
        with open(report, "w") as f:
            f.write('{"previous": true}\n')
        with open(model, "wb") as f:
            f.write(b"the previous model\n")
        before = (sha(report), sha(model))
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)  # fill the file system, then free a page
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        os.truncate(filler, max(0, os.path.getsize(filler) - 4096))
        rc, _, err = run(["selftest", "-m", q3, "--ctx", "72", "--samples", "4", "-t", "1", "--json", report, "-q"])
        check(rc == 2 and "cannot write --json" in err and "No space left on device" in err,
              "a report to a full disk: exit 2 naming ENOSPC: %d %s" % (rc, err))
        rc, _, err = run(["convert", os.path.join(data, "tiny.gguf"), model, "--force"])
        check(rc == 2 and "No space left on device" in err, "a model to a full disk: %d %s" % (rc, err))
        check((sha(report), sha(model)) == before, "the previous report and model are intact")
        check(temporaries(report) == [] and temporaries(model) == [], "no temporary left on the full disk: %s"
              % os.listdir(mnt))
        os.remove(q3)
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


def main():
    global PHASEKV
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--smollm2", default="")
    ap.add_argument("--emulator", default="")
    a = ap.parse_args()
    PHASEKV = os.path.abspath(a.phasekv)
    EMULATOR.extend(shlex.split(a.emulator))
    gguf = os.path.join(a.data, "tiny.gguf")
    concurrent_writers(gguf, a.tmp)
    input_named_like_a_temporary(gguf, a.tmp)
    if os.path.exists(os.path.join(a.data, "tiny_qwen3_vocab.gguf")):
        full_disk(a.data, a.tmp)
    else:
        print("skipped: full-disk checks (no tiny_qwen3_vocab.gguf: it is made from the SmolLM2 GGUF)")
    if EMULATOR:
        print("skipped: signal delivery checks (under an emulator the signal goes to the emulator)")
    else:
        signals_during_write(a.smollm2 or gguf, a.tmp)
    if a.smollm2:
        replaced_under_a_running_process(a.smollm2, a.tmp)
    else:
        print("skipped: replacement under a running process (no --smollm2)")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
