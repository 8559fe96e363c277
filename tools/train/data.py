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

LM_WEIGHT = float(__import__("os").environ.get("PKV_LM_WEIGHT", "0.1"))      # weight of the other next-token predictions


def sample(rng, vocab, T, records=0):
    """One sequence: ids [T], loss weights [T] (on the prediction of ids[t+1]), and per lookup
    (position of its '=' , position of the record's value token in the haystack).

    About half of the haystack is records, the rest filler lines and pads; a quarter of the
    sequence is lookups."""
    Q = max(4, T // 16)  # lookups
    if records:  # fewer records (a curriculum's first stage): as many lookups, more filler
        Q = min(Q, records)
    budget = T - 1 - 4 * Q
    n_rec = records or max(Q, min(64, budget // 8))
    kv = rng.choice(vocab.words, size=2 * n_rec, replace=False)
    keys, vals = kv[:n_rec], kv[n_rec:]
    lines = [("rec", i) for i in range(n_rec)]
    remaining = budget - 4 * n_rec
    while remaining >= 8:
        n = int(rng.integers(3, min(9, remaining - 4) + 1))
        lines.append(("fill", rng.choice(vocab.filler, size=n)))
        remaining -= n + 2
    order = rng.permutation(len(lines))
    # Pad runs before lines: the leftover budget, spread at random.
    cuts = np.sort(rng.integers(0, len(lines) + 1, size=remaining))
    pads_before = np.bincount(cuts, minlength=len(lines) + 1)
    ids = [vocab.bos]
    value_pos = {}
    for li, k in enumerate(order):
        ids += [vocab.pad] * int(pads_before[li])
        kind, x = lines[k]
        if kind == "rec":
            ids += [int(keys[x]), vocab.sep]
            value_pos[x] = len(ids)
            ids += [int(vals[x]), vocab.newline]
        else:
            ids += [int(t) for t in x] + [vocab.period, vocab.newline]
    ids += [vocab.pad] * int(pads_before[len(lines)])
    weights = [LM_WEIGHT] * len(ids)
    lookups = []
    for x in rng.choice(n_rec, size=Q, replace=False):
        ids += [int(keys[x]), vocab.sep]
        weights += [LM_WEIGHT, 1.0]  # the prediction made at '=' is the value
        lookups.append((len(ids) - 1, value_pos[int(x)]))
        ids += [int(vals[x]), vocab.newline]
        weights += [LM_WEIGHT, LM_WEIGHT]
    assert len(ids) == T, (len(ids), T)
    weights[-1] = 0.0  # nothing follows the last token
    return np.array(ids, np.int32), np.array(weights, np.float32), lookups


def batch(rng, vocab, B, T, records=0):
    ids, w, lk = zip(*(sample(rng, vocab, T, records) for _ in range(B)))
    return np.stack(ids), np.stack(w), list(lk)
