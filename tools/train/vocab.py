"""The trained models' tokenizer: a small byte-level BPE (GPT-2 byte alphabet, "gpt2"
pre-tokenizer) made here, deterministic, so that a model with a vocabulary of a few thousand
tokens can be trained on two CPU cores and still pass the phase self-test's vocabulary checks.

Layout (ids):
  0..255    the 256 byte tokens, in byte order, as GPT-2's byte-to-unicode map writes them
  256       <|endoftext|> (control; BOS and EOS)
  257..     merged tokens, in merge order: " =", " -", then every word of the self-test's
            filler sentences, the trainer's own filler words, then the pseudo-words that serve
            as keys and values (training) and, past the self-test's first 300, as its probes.
Every word is a chain of merges "Ġw1 w2" -> "Ġw1w2" -> ...: in a piece " word" only the first
symbol starts with Ġ, so BPE can only follow the chain and every listed word is one token.
"""
import numpy as np

# The self-test's filler sentences (runtime/selftest_probes.cpp, kSentences): their words are
# merged so the sentences stay short and one of them (" Yes.") is 2 tokens.
SELFTEST_SENTENCES = [
    " The kettle is on the stove.", " It rained for most of the afternoon.", " The bus was late again.",
    " A cat slept on the warm windowsill.", " We walked along the river after lunch.", " The library closes at six.",
    " Fresh bread was sold out by noon.", " The garden needs more water.", " Nobody answered the phone.",
    " The train left on time.", " Children played in the park.", " The meeting moved to Tuesday.",
    " Snow covered the hills overnight.", " The old bridge was repaired last year.", " She painted the fence green.",
    " The shop on the corner sells maps.", " Coffee tastes better in the morning.", " The wind came from the north.",
    " He forgot his umbrella at work.", " The museum opened a new wing.", " Birds gathered on the roof.",
    " The road to the village is narrow.", " A letter arrived in the afternoon.", " The lamp flickered twice.",
    " Dinner was ready before seven.", " The river rose after the storm.", " Our neighbour fixed the gate.",
    " The clock in the hall runs slow.", " Apples fell from the tree.", " The tea had gone cold.",
    " Everyone agreed to meet again next week.", " The lights in the office stayed on late.",
    " A small boat drifted past the pier.", " The soup needed a little more salt.", " Yes.", " Fine.", " Okay.",
    " Thanks.", " Not yet.", " See you soon.",
]

# The trainer's own filler words (its generator never uses the self-test's sentences).
FILLER_WORDS = (
    "we they he she it one two some many few all none this that there here then now soon later today "
    "red blue green small large old new warm cold dark light quick slow quiet loud near far high low "
    "box cup pen map key door road hill lake tree rock sand wind rain snow fire ship car bike boat "
    "runs walks sits sees finds takes gives makes keeps holds moves turns opens closes reads writes "
    "and or but so if when while after before under over with from into onto near past through"
).split()

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def pseudo_words(n, seed=20261202):
    """n distinct pronounceable lowercase words of 4 letters (CVCV): their merge chains' other
    tokens (" b", " ba", " bak") are shorter than the self-test's 4-letter minimum, so exactly
    these n words are the probe and training vocabulary."""
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    while len(out) < n:
        w = "".join((CONSONANTS if i % 2 == 0 else VOWELS)[int(rng.integers(0, 5 if i % 2 else 14))]
                    for i in range(4))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class Vocab:
    """tokens / types / merges for GGUF, plus the id sets the data generator uses."""

    def __init__(self, n_words=160):
        b2u = bytes_to_unicode()
        self.byte_char = b2u
        self.tokens = [b2u[b] for b in range(256)] + ["<|endoftext|>"]
        self.types = [1] * 256 + [3]
        self.bos = self.eos = 256
        self.merges = []
        self.index = {t: i for i, t in enumerate(self.tokens)}
        sp = b2u[ord(" ")]

        def add_piece(text):
            """Merge chain for one space-led piece (" word" or " ="); returns its token id."""
            chars = [b2u[b] for b in text.encode("utf-8")]
            cur = chars[0]
            for c in chars[1:]:
                nxt = cur + c
                if nxt not in self.index:
                    self.merges.append(f"{cur} {c}")
                    self.index[nxt] = len(self.tokens)
                    self.tokens.append(nxt)
                    self.types.append(1)
                cur = nxt
            return self.index[cur]

        self.sep = add_piece(" =")
        self.pad = add_piece(" -")
        self.newline = self.index[b2u[ord("\n")]]
        self.period = self.index[b2u[ord(".")]]
        for s in SELFTEST_SENTENCES:
            for word in s.replace(".", " ").split():
                add_piece(" " + word)
        self.filler = [add_piece(" " + w) for w in FILLER_WORDS]
        words = [w for w in pseudo_words(n_words) if (sp + w) not in self.index]
        first_word_id = len(self.tokens)
        for w in words:
            add_piece(" " + w)
        # Keys and values for training: the pseudo-words (space-led, 4 lowercase letters).
        self.words = [i for i in range(first_word_id, len(self.tokens))
                      if self.tokens[i].startswith(sp) and len(self.tokens[i]) >= 5 and self.tokens[i][1:].isalpha()]
        self.words = np.array(self.words, np.int32)
        self.filler = np.array(self.filler, np.int32)

    def __len__(self):
        return len(self.tokens)

    def text(self, ids):
        u2b = {c: b for b, c in self.byte_char.items()}
        out = bytearray()
        for i in ids:
            t = self.tokens[int(i)]
            if self.types[int(i)] == 3:
                out += t.encode()
            else:
                out += bytes(u2b[c] for c in t)
        return out.decode("utf-8", "replace")

    def gguf_fields(self):
        return {"tokens": self.tokens, "types": self.types, "merges": self.merges, "pre": "gpt2",
                "bos": self.bos, "eos": self.eos}
