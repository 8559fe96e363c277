"""The training mix: key = value records among filler, then lookups of some of them (T/16 per sequence).

This generator is the trainer's own (it shares no code and no sentences with the self-test's
probe builder in runtime/selftest_probes.cpp): records " key = value\\n" with keys and values
drawn from the vocabulary's pseudo-words (a fresh random pairing in every sequence, so nothing
can be memorised), filler lines of the trainer's filler words, and runs of " -" padding of
random length before lines, so every record lands on every residue. The sequence ends with
lookups " key = value\\n" of records from the haystack in random order; the loss weighs the
looked-up values (weight 1) above plain next-token prediction of everything else.
"""
import numpy as np

# The mix's knobs (train.py sets them from its options; the defaults are the mix CI trains on).
LM_WEIGHT = 0.1     # weight of the other next-token predictions
QUERIES = 0         # lookups per sequence (0: T/16, at least 4)
REPLACE = False     # lookups drawn with replacement (no answer can be had by elimination)
SEP = True          # records "key = value" (False: "key value", a diagnostic: plain one-step induction)
REPEAT = 0.0        # share of filler lines that repeat the start of an earlier one (induction practice)
DENSE = 0.0         # share of sequences that are dense recall (sample_dense: records, then lookups to the end)
DENSE_RECORDS = 8   # records per dense sequence


def append_lookups(ids, weights, which, keys, vals, value_pos, sep, vocab):
    """Appends the lookups " key = value\n" of records `which` to ids and weights (weight 1 on the
    prediction of the value); returns per lookup (position of its '=', position of the value)."""
    lookups = []
    for x in which:
        ids += [int(keys[x])] + sep
        weights += [LM_WEIGHT] * len(sep) + [1.0]  # the prediction made at '=' is the value
        lookups.append((len(ids) - 1, value_pos[int(x)]))
        ids += [int(vals[x]), vocab.newline]
        weights += [LM_WEIGHT, LM_WEIGHT]
    return lookups


def sample(rng, vocab, T, records=0):
    """One sequence: ids [T], loss weights [T] (on the prediction of ids[t+1]), and per lookup
    (position of its '=' , position of the record's value token in the haystack).

    About half of the haystack is records, the rest filler lines and pads; a quarter of the
    sequence is lookups."""
    R = 4 if SEP else 3  # tokens per record line
    sep = [vocab.sep] if SEP else []
    Q = QUERIES or max(4, T // 16)  # lookups
    if records and not REPLACE:  # fewer records (a curriculum's first stage): as many lookups, more filler
        Q = min(Q, records)
    budget = T - 1 - R * Q
    n_rec = records or (min(64, budget // (2 * R)) if REPLACE else max(Q, min(64, budget // (2 * R))))
    kv = rng.choice(vocab.words, size=2 * n_rec, replace=False)
    keys, vals = kv[:n_rec], kv[n_rec:]
    lines = [("rec", i) for i in range(n_rec)]
    remaining = budget - R * n_rec
    while remaining >= 8:
        n = int(rng.integers(3, min(9, remaining - 4) + 1))
        lines.append(("fill", rng.choice(vocab.filler, size=n)))
        remaining -= n + 2
    order = rng.permutation(len(lines))
    # Pad runs before lines: the leftover budget, spread at random.
    cuts = np.sort(rng.integers(0, len(lines) + 1, size=remaining))
    pads_before = np.bincount(cuts, minlength=len(lines) + 1)
    ids = [vocab.bos]
    weights = []
    value_pos = {}
    seen = []  # filler lines so far (a later line may repeat the start of a longer one: induction)
    for li, k in enumerate(order):
        ids += [vocab.pad] * int(pads_before[li])
        kind, x = lines[k]
        if kind == "rec":
            ids += [int(keys[x])] + sep
            value_pos[x] = len(ids)
            ids += [int(vals[x]), vocab.newline]
        else:
            longer = [y for y in seen if len(y) >= len(x)] if REPEAT else []
            if longer and rng.random() < REPEAT:  # the start of an earlier line, as long as this one
                x = longer[int(rng.integers(len(longer)))][:len(x)]
                weights += [LM_WEIGHT] * (len(ids) - len(weights))
                weights += [1.0] * len(x)  # the words after its first (and the '.') are predictable
            seen.append(x)
            ids += [int(t) for t in x] + [vocab.period, vocab.newline]
    ids += [vocab.pad] * int(pads_before[len(lines)])
    weights += [LM_WEIGHT] * (len(ids) - len(weights))
    lookups = append_lookups(ids, weights, rng.choice(n_rec, size=Q, replace=REPLACE), keys, vals, value_pos, sep,
                             vocab)
    assert len(ids) == T, (len(ids), T)
    weights[-1] = 0.0  # nothing follows the last token
    return np.array(ids, np.int32), np.array(weights, np.float32), lookups


def sample_dense(rng, vocab, T, R):
    """Dense recall (Zoology's MQAR, with the mix's record format): 0-7 pads, R records, then
    lookups drawn with replacement until T is full (pads after the last whole one). The start pads
    put the values on every residue mod 8. Same return values as sample()."""
    sep = [vocab.sep] if SEP else []
    L = 3 + len(sep)
    start = int(rng.integers(0, 8))
    Q = (T - 1 - start - L * R) // L
    if Q < 1:
        raise ValueError(f"dense recall: T {T} holds no lookup after {R} records")
    kv = rng.choice(vocab.words, size=2 * R, replace=False)
    keys, vals = kv[:R], kv[R:]
    ids = [vocab.bos] + [vocab.pad] * start
    value_pos = {}
    for x in rng.permutation(R):
        ids += [int(keys[x])] + sep
        value_pos[int(x)] = len(ids)
        ids += [int(vals[x]), vocab.newline]
    weights = [LM_WEIGHT] * len(ids)
    lookups = append_lookups(ids, weights, rng.choice(R, size=Q), keys, vals, value_pos, sep, vocab)
    weights += [0.0] * (T - len(ids))
    ids += [vocab.pad] * (T - len(ids))
    weights[-1] = 0.0
    return np.array(ids, np.int32), np.array(weights, np.float32), lookups


def batch(rng, vocab, B, T, records=0, dense=None):
    """B sequences; a share `dense` (default DENSE) of them dense recall (no record curriculum)."""
    dense = DENSE if dense is None else dense
    ids, w, lk = zip(*(sample_dense(rng, vocab, T, DENSE_RECORDS) if dense > 0 and not records and rng.random() < dense
                       else sample(rng, vocab, T, records) for _ in range(B)))
    return np.stack(ids), np.stack(w), list(lk)
