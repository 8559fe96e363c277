"""Shared by the tool's end-to-end test scripts: counted checks and the summary line."""

_counts = {"passed": 0, "failed": 0}


def check(cond, what):
    """Counts a check; a failed one is printed with what it was about."""
    if cond:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print("FAIL:", what)


def failures():
    return _counts["failed"]


def summary():
    """Prints "N passed, M failed" and returns the exit code (1 when anything failed)."""
    print("%d passed, %d failed" % (_counts["passed"], _counts["failed"]))
    return 1 if _counts["failed"] else 0
