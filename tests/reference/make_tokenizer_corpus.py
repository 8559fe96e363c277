#!/usr/bin/env python3
"""Writes a deterministic corpus of test strings for the byte-level BPE tokenizer.

The corpus is a JSON array of strings (strings may contain newlines, control characters and
any Unicode scalar value except surrogates). It is meant to be fed to tokenizer_ref.py, which
encodes every string with the HuggingFace `tokenizers` reference.

Usage: make_tokenizer_corpus.py OUT.json

Standard library only, fixed seed: the same Python version gives byte-identical output.
A per-category count is printed on stderr. The JSON is written as UTF-8 with
ensure_ascii=False, so only '"', '\\' and U+0000..U+001F are escaped.
"""
import argparse
import json
import random
import sys
import unicodedata

SEED = 20261130

# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------

PROSE = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Pack my box with five dozen liquor jugs.",
    "It was the best of times, it was the worst of times.",
    "Call me Ishmael. Some years ago - never mind how long precisely - having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world.",
    "In the beginning the Universe was created. This has made a lot of people very angry and been widely "
    "regarded as a bad move.",
    "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
    "The slings and arrows of outrageous fortune,",
    "A language model predicts the next token given the previous tokens.",
    "The key-value cache stores keys and values for every layer and every head.",
    "Paged attention splits the cache into fixed-size blocks.",
    "Please summarize the following article in three sentences.",
    "What is the capital of France? The capital of France is Paris.",
    "Once upon a time, in a land far, far away, there lived a small dragon named Ember.",
    "Mr. Smith went to Washington D.C. on Jan. 5th, arriving at 10:30 a.m.",
    "e.g. i.e. etc. vs. Dr. Mrs. St. Ave.",
    "Dear Sir or Madam,\n\nI am writing to inquire about the position.\n\nKind regards,\nJane",
    "She sells sea shells by the sea shore.",
    "Colorless green ideas sleep furiously.",
    "hello",
    "Hello",
    "HELLO",
    "hElLo WoRlD",
    " hello",
    "hello ",
    "  hello  world  ",
    "a",
    "I",
    "A B C D E F G",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "The U.S.A. and the U.K. signed the treaty.",
    "user@example.com wrote: see https://example.org/path?query=1&x=y#frag",
    "@mention #hashtag $TICKER %percent ^caret &amp; *star",
]

SUBJECTS = ["the cat", "a model", "my neighbour", "the compiler", "every student", "our team", "the river",
            "this algorithm", "the old man", "a tiny robot", "the GPU", "nobody", "they", "we", "you", "it",
            "the weather", "a transformer", "the kernel", "Alice", "Bob", "the committee"]
VERBS = ["eats", "computes", "ignores", "builds", "reads", "walks past", "optimizes", "loves", "breaks",
         "describes", "tokenizes", "allocates", "returns", "visits", "paints", "measures", "forgets"]
OBJECTS = ["the fish", "a long sentence", "three apples", "the memory pool", "every token", "the mountain",
           "a red balloon", "the attention mask", "their homework", "the quantized weights", "an old map",
           "the last train", "a cup of tea", "the entire dataset"]
ADVERBS = ["quickly", "slowly", "carefully", "never", "always", "sometimes", "", "", "reluctantly",
           "in parallel", "at night", "without warning", "again"]
WORDS = ("the of and to in is was for on that with as by at from this be are or it an not have which but "
         "they had were one all their there been has more when will would who so no out up into if about "
         "than them can only other new some could time these two may first then do any like my now over "
         "such our man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people how too little state good very make "
         "world still own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take three "
         "token model layer cache buffer kernel tensor matrix vector quantize decode encode batch stream").split()

CONTRACTIONS = ["don't", "doesn't", "didn't", "can't", "won't", "wouldn't", "shouldn't", "couldn't", "isn't",
                "aren't", "wasn't", "weren't", "hasn't", "haven't", "hadn't", "I'm", "I'll", "I've", "I'd",
                "you're", "you'll", "you've", "you'd", "he's", "he'll", "he'd", "she's", "she'll", "she'd",
                "it's", "it'll", "it'd", "we're", "we'll", "we've", "we'd", "they're", "they'll", "they've",
                "they'd", "that's", "there's", "what's", "who's", "let's", "y'all", "ma'am", "o'clock",
                "rock'n'roll", "'tis", "'twas", "John's", "the dog's", "Chris'", "the students'",
                "gov't", "int'l", "'90s", "ne'er-do-well", "should've", "would've", "could've", "might've"]

PUNCT_FIXED = [
    "...", "..", ".", "....", "…", "?!", "!?", "?!?!", "!!!", "???", "---", "--", "-", "—", "–", "''", "'",
    "\"", "\"\"", "\"\"\"", "'''", "``", "`", "```", "«»", "«quoted»", "‹single›", "“smart quotes”",
    "‘single smart’", "„German“", "‚low single‘", "「Japanese」", "『double』", "《book》", "〈angle〉",
    "He said, \"Hi!\"", "She said: 'no...'", "Wait -- what?!", "Well... I don't know...",
    "(parenthetical)", "[bracketed]", "{braced}", "<angled>", "((()))", "[[[]]]", "{{{}}}", "<<<>>>",
    "a,b;c:d.e!f?g", "!@#$%^&*()_+-=[]{}|;':\",./<>?`~", "\\", "\\\\", "\\n", "/", "//", "///", "/* */",
    "#!", "<!-- -->", "&&", "||", "==", "===", "!==", "<=>", "->", "=>", "::", "...rest", "::-webkit",
    "***", "___", "~~~", "^^^", "%%%", "$$$", "###", "@@@", "+++", "===", "|||", ":)", ";-)", ":-(", "¯\\_(ツ)_/¯",
    "§1", "¶", "†‡", "•", "·", "°", "±", "×", "÷", "≠", "≈", "≤≥", "∞", "√", "∑", "∏", "∫", "∂", "∆", "∇",
    "€", "£", "¥", "¢", "₹", "₽", "₩", "₿", "©", "®", "™", "‰", "′″", "¿Qué?", "¡Hola!", "؟", "،", "。", "、",
    "！", "？", "，", "．", "：", "；",
]
PUNCT_ALPHABET = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list("…—–«»“”‘’„‚‹›¡¿·•†‡§¶°")

EMOJI_SINGLE = ["😀", "😂", "🤣", "❤", "❤️", "👍", "🔥", "🚀", "🎉", "🤖", "🧠", "💡", "✅", "❌", "⭐", "🌍",
                "🍕", "🐍", "🦀", "☕", "⚡", "☀️", "☃", "✨", "💯", "🙏", "👀", "🥲", "🫠", "🪐"]
EMOJI_ZWJ = ["👨‍👩‍👧‍👦", "👩‍👩‍👦", "👨‍💻", "👩‍🔬", "🧑‍🚀", "🏳️‍🌈", "🏳️‍⚧️", "❤️‍🔥", "😶‍🌫️",
             "👁️‍🗨️", "🐕‍🦺", "🐻‍❄️", "👩‍❤️‍💋‍👨", "🧑‍🤝‍🧑"]
EMOJI_FLAGS = ["🇺🇸", "🇬🇧", "🇫🇷", "🇩🇪", "🇯🇵", "🇨🇳", "🇰🇷", "🇮🇳", "🇧🇷", "🇺🇦", "🇪🇺", "🇺🇳",
               "🏴󠁧󠁢󠁥󠁮󠁧󠁿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🏁", "🚩"]
SKIN_TONES = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
SKIN_BASES = ["👋", "👍", "👏", "🙌", "✋", "🤝", "👩", "🧑", "👨‍💻", "🏃", "🙋‍♀️"]
KEYCAPS = [c + "\uFE0F\u20E3" for c in "0123456789#*"] + [c + "\u20E3" for c in "0123456789#*"]

CHINESE = ["你好，世界！", "我爱自然语言处理。", "今天天气很好，我们去公园散步吧。", "大型语言模型正在改变世界。",
           "中华人民共和国", "北京是中国的首都。", "这是一个测试句子，包含标点符号：“引号”和（括号）。",
           "机器学习", "键值缓存", "繁體中文與简体中文", "一二三四五六七八九十百千万亿", "龘靐齉爩"]
JAPANESE = ["こんにちは、世界！", "私は日本語を勉強しています。", "カタカナとひらがなと漢字。", "東京タワー",
            "ありがとうございます", "ｶﾀｶﾅ ﾊﾝｶｸ", "ラーメンを食べたい。", "コンピューター・サイエンス",
            "ゔぁゔぃゔゔぇゔぉ", "ー〜ッ", "吾輩は猫である。名前はまだ無い。", "ゝゞヽヾ々〆"]
KOREAN = ["안녕하세요, 세계!", "한국어를 배우고 있습니다.", "대한민국", "서울특별시", "감사합니다",
          "\u1100\u1161\u11A8", "ㄱㄴㄷㄹㅁㅂㅅ", "똠방각하", "읽다 읽었다 읽겠다"]
FULLWIDTH = ["ＡＢＣ ａｂｃ １２３", "ＨＥＬＬＯ，ＷＯＲＬＤ！", "（全角）［括弧］｛波｝", "＠＃＄％＾＆＊"]

SCRIPTS = {
    "arabic": ["مرحبا بالعالم", "السلام عليكم", "اللغة العربية جميلة.", "كِتَابٌ", "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
               "العدد ١٢٣٤٥", "مدرسة، جامعة؛ مكتبة؟", "ﻻ ﷲ ﷺ"],
    "hebrew": ["שלום עולם", "עברית היא שפה שמית.", "בְּרֵאשִׁית בָּרָא אֱלֹהִים", "ירושלים", "א׳ ב״"],
    "cyrillic": ["Привет, мир!", "Съешь же ещё этих мягких французских булок, да выпей чаю.", "МОСКВА",
                 "Українська мова: ґ є і ї", "Ђорђе Љубиша Њ Џ", "ёжик в тумане"],
    "greek": ["Γειά σου Κόσμε!", "Ελληνικά", "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ", "αβγδεζηθικλμνξοπρστυφχψω ς",
              "ἐν ἀρχῇ ἦν ὁ λόγος", "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία."],
    "devanagari": ["नमस्ते दुनिया", "हिन्दी भाषा", "संस्कृतम्", "क्षत्रिय ज्ञान श्री", "१२३४५ रुपये", "मैं ठीक हूँ।"],
    "thai": ["สวัสดีชาวโลก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "กรุงเทพมหานคร", "๑๒๓ บาท", "น้ำ ที่ ไม้"],
}
SCRIPT_RANGES = {
    "arabic": (0x0621, 0x064A), "hebrew": (0x05D0, 0x05EA), "cyrillic": (0x0410, 0x044F),
    "greek": (0x0391, 0x03C9), "devanagari": (0x0905, 0x0939), "thai": (0x0E01, 0x0E2E),
    "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA), "hangul": (0xAC00, 0xD7A3),
    "cjk": (0x4E00, 0x9FFF), "latin1": (0x00C0, 0x00FF), "latinext": (0x0100, 0x017F),
}

ACCENTED = ["café", "naïve", "résumé", "Zürich", "São Paulo", "Ærøskøbing", "Łódź", "Kraków", "İstanbul",
            "ıi İI", "Straße", "STRASSE", "ﬁnance ﬂow", "Đặng Thị Ngọc Thịnh", "Tiếng Việt", "Ñandú",
            "crème brûlée", "façade", "piñata", "Ångström", "Dvořák", "Møller", "Þórr", "Œuvre", "ǅemal",
            "Ärger über Öl", "¿Dónde está la biblioteca?", "À bientôt, mon élève!"]
COMBINING = ["\u0301", "\u0300", "\u0302", "\u0303", "\u0308", "\u030A", "\u0327", "\u0328", "\u030C",
             "\u0323", "\u0331", "\u0336", "\u0338", "\u20DD", "\u0489"]

UNICODE_NUMERALS = ["²", "³", "¹", "⁰⁴⁵", "₀₁₂", "½", "¼", "¾", "⅓", "⅔", "⅕", "⅞", "↉", "Ⅻ", "Ⅳ", "ⅷ",
                    "ⅯⅯⅩⅩⅥ", "٣", "٠١٢٣٤٥٦٧٨٩", "۱۲۳", "५", "०१२३४५६७८९", "๓", "০১২", "੧੨", "௧௨",
                    "①②③", "⑩⑳", "⓿", "❶❷", "𝟙𝟚𝟛", "𝟎𝟏", "０１２３４５６７８９", "〇一二三", "〡〢〣", "𐄇",
                    "x²+y²=z²", "10³ m", "E=mc²", "H₂O", "CO₂", "1½ cups", "3¼ inches", "Chapter Ⅻ",
                    "Louis XIV vs Louis ⅩⅣ", "٣ كتب", "५ किताबें", "page ๑๒", "km²", "m/s²", "2⁸=256"]

UNUSUAL_WS = ["\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
              "\u2007", "\u2008", "\u2009", "\u200A", "\u2028", "\u2029", "\u202F", "\u205F", "\u3000",
              "\u0085", "\u200B", "\u200C", "\u200D", "\u2060", "\uFEFF", "\u180E", "\u000B", "\u000C",
              "\u001C", "\u001D", "\u001E", "\u001F"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                  "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
                  "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
                  "<jupyter_script>", "<empty_output>"]

PY_SNIPPETS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    for arg in argv[1:]:\n        print(arg)\n    return 0\n\n\n"
    "if __name__ == \"__main__\":\n    sys.exit(main(sys.argv))\n",
    "class Point:\n    \"\"\"A 2D point.\"\"\"\n\n    def __init__(self, x: float, y: float) -> None:\n"
    "        self.x = x\n        self.y = y\n\n    def __repr__(self):\n        return f\"Point({self.x}, {self.y})\"\n",
    "x = [i ** 2 for i in range(10) if i % 2 == 0]\n",
    "with open('data.txt', 'r', encoding='utf-8') as f:\n\tfor line in f:\n\t\tprint(line.rstrip())\n",
    "try:\n    value = int(s)\nexcept ValueError as e:\n    raise RuntimeError('bad') from e\n",
    "@decorator\nasync def fetch(url):\n    async with session.get(url) as r:\n        return await r.json()\n",
    "lambda x, *args, **kwargs: (x, args, kwargs)",
    "d = {'a': 1, \"b\": 2, 'c': [1, 2, 3]}\nprint(d['a'])  # comment\n",
    "    # indented comment\n    pass\n",
    "s = r'\\d+\\.\\d*' + b'bytes'.decode() + '''triple''' + \"\"\"doc\"\"\"\n",
    "if x:\n\tif y:\n\t\tif z:\n\t\t\treturn 1\n",
    "numbers = np.arange(0, 1e-3, 2.5e-5, dtype=np.float32)\n",
]
C_SNIPPETS = [
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"Hello, world!\\n\");\n    return 0;\n}\n",
    "#include <vector>\n#include <string>\n\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n"
    "\tT s{};\n\tfor (const auto& x : v) s += x;\n\treturn s;\n}\n",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "struct Node {\n  int value;\n  Node* next = nullptr;\n};\n",
    "for (int i = 0; i < n; ++i) {\n    a[i] += b[i] * c[i];\n}",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#ifndef NDEBUG\n#  define LOG(...) fprintf(stderr, __VA_ARGS__)\n#endif\n",
    "std::unique_ptr<Foo> p = std::make_unique<Foo>(42);\nauto [it, ok] = map.emplace(key, std::move(value));",
    "__global__ void kernel(float* __restrict__ out, const float* in, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = in[i] * 2.0f;\n}\n",
    "/* block comment */ // line comment\nchar c = '\\0'; const char* s = \"tab\\there\";",
    "namespace phasekv::detail {\nconstexpr std::size_t kBlock = 16;\n}  // namespace phasekv::detail\n",
    "x->y.z[0]++; --p; a <<= 2; b >>= 3; c != d && e || !f;",
]
JSON_SNIPPETS = [
    "{\"name\": \"SmolLM2\", \"params\": 135000000, \"tags\": [\"llm\", \"small\"], \"ok\": true, \"x\": null}",
    "{\n  \"a\": 1,\n  \"b\": [\n    1.5,\n    -2e10\n  ]\n}",
    "[]", "{}", "[{}, [], \"\", 0, -0.0, 1e308]", "{\"unicode\": \"\\u00e9\\ud83d\\ude00\", \"esc\": \"\\n\\t\\\"\"}",
    "{\n\t\"tabbed\": {\n\t\t\"deep\": [1, 2, 3]\n\t}\n}",
]
SHELL_SNIPPETS = [
    "#!/usr/bin/env bash\nset -euo pipefail\n\nfor f in *.txt; do\n  echo \"$f\"\ndone\n",
    "ls -la | grep -v '^d' | awk '{print $9}' > out.txt 2>&1",
    "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j$(nproc)",
    "export PATH=\"$HOME/.local/bin:$PATH\"\nif [ -z \"${VAR:-}\" ]; then\n\techo 'unset'\nfi",
    "curl -sSL https://example.com/install.sh | sh -s -- --yes",
    "find . -name '*.py' -print0 | xargs -0 sed -i 's/foo/bar/g'",
    "$ python3 -m venv .venv && source .venv/bin/activate\n(.venv) $ pip install -U pip",
]
MD_SNIPPETS = [
    "# Title\n\nSome *emphasis* and **strong** text with `code`.\n\n## Subtitle\n\n- item one\n- item two\n  - nested\n",
    "| col1 | col2 |\n|------|:----:|\n| a    | b    |\n| 1    | 2    |\n",
    "```python\nprint('hi')\n```\n",
    "> quoted line\n> another\n\n1. first\n2. second\n3. third\n",
    "[link](https://example.com) ![img](a.png \"title\")\n\n---\n\n***\n",
    "Term\n: definition\n\n    indented code block\n    second line\n",
    "- [ ] todo\n- [x] done\n\n<details><summary>More</summary>\n\nHidden\n</details>\n",
]

# ---------------------------------------------------------------------------------------------


def rand_cp(rng, lo, hi):
    """Random scalar value in [lo, hi], never a surrogate."""
    while True:
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def rand_word(rng, alphabet="abcdefghijklmnopqrstuvwxyz", lo=1, hi=12):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def sentence(rng):
    parts = [rng.choice(SUBJECTS), rng.choice(ADVERBS), rng.choice(VERBS), rng.choice(OBJECTS)]
    s = " ".join(p for p in parts if p)
    s = s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?", "...", ";", ""])
    return s


def gen_prose(rng):
    out = list(PROSE)
    for _ in range(120):
        out.append(sentence(rng))
    for _ in range(60):
        out.append(" ".join(sentence(rng) for _ in range(rng.randint(2, 6))))
    for _ in range(30):
        out.append("\n\n".join(" ".join(sentence(rng) for _ in range(rng.randint(1, 4)))
                               for _ in range(rng.randint(2, 4))))
    for _ in range(40):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 25))]
        style = rng.randrange(4)
        if style == 1:
            words = [w.upper() for w in words]
        elif style == 2:
            words = [w.capitalize() for w in words]
        out.append(" ".join(words))
    return out


def gen_code(rng):
    out = []
    for group in (PY_SNIPPETS, C_SNIPPETS, JSON_SNIPPETS, SHELL_SNIPPETS, MD_SNIPPETS):
        out.extend(group)
        for snip in group:  # every line on its own (keeps leading indentation)
            out.extend(line for line in snip.split("\n") if line.strip())
    names = ["foo", "bar", "compute_attention", "kv_cache", "getValue", "_private", "__dunder__", "x1",
             "MAX_LEN", "i", "tokenize", "HTTPServer", "parse_json"]
    for _ in range(60):  # generated Python with varying indentation
        ind = rng.choice(["    ", "  ", "\t", "        ", " \t"])
        fn, a, b = rng.sample(names, 3)
        body = [f"def {fn}({a}, {b}={rng.randint(0, 999)}):",
                f"{ind}if {a} > {b}:",
                f"{ind}{ind}return {a} - {b}",
                f"{ind}for k in range(len({a})):",
                f"{ind}{ind}{b} += {a}[k] * {rng.random():.4f}",
                f"{ind}return {b}"]
        nl = rng.choice(["\n", "\n", "\r\n"])
        out.append(nl.join(body[: rng.randint(2, len(body))]) + rng.choice(["", nl, nl * 2]))
    for _ in range(50):  # generated C / C++
        ind = rng.choice(["    ", "  ", "\t"])
        t = rng.choice(["int", "float", "double", "uint8_t", "size_t", "std::int64_t", "const char*", "auto"])
        fn, a = rng.sample(names, 2)
        body = [f"static {t} {fn}({t} {a}, int n) {{",
                f"{ind}for (int i = 0; i < n; ++i) {{",
                f"{ind}{ind}{a} = ({t})({a} * {rng.randint(2, 99)} + i);",
                f"{ind}}}",
                f"{ind}return {a};  // {rng.choice(WORDS)}",
                "}"]
        out.append("\n".join(body))
    for _ in range(40):  # generated JSON with various indents
        obj = {rand_word(rng): rng.choice([rng.randint(-10**6, 10**6), round(rng.uniform(-1e3, 1e3), 5),
                                           rand_word(rng), None, True, False, [1, 2, 3], {"k": "v"}])
               for _ in range(rng.randint(1, 5))}
        out.append(json.dumps(obj, indent=rng.choice([None, 1, 2, 4, "\t"]), ensure_ascii=rng.random() < 0.5))
    for _ in range(30):  # shell
        out.append(f"{rng.choice(['ls', 'cat', 'grep -rn', 'rm -rf', 'echo', 'cp -a'])} "
                   f"{rand_word(rng)}/{rand_word(rng)}.{rng.choice(['txt', 'py', 'cpp', 'gguf'])}"
                   f"{rng.choice(['', ' | wc -l', ' && echo ok', ' > /dev/null 2>&1', ' &', ';'])}")
    for _ in range(30):  # markdown
        out.append(f"{'#' * rng.randint(1, 6)} {sentence(rng)}\n\n"
                   + "\n".join(f"{rng.choice(['-', '*', '1.', '+'])} {sentence(rng)}" for _ in range(rng.randint(1, 4)))
                   + rng.choice(["", "\n", "\n\n```\ncode\n```\n"]))
    return out


def gen_punct(rng):
    out = list(PUNCT_FIXED)
    for _ in range(90):
        out.append("".join(rng.choice(PUNCT_ALPHABET) for _ in range(rng.randint(1, 12))))
    for _ in range(70):
        w = rng.choice(WORDS)
        p = "".join(rng.choice(PUNCT_ALPHABET) for _ in range(rng.randint(1, 4)))
        out.append(rng.choice([w + p, p + w, p + w + p, w + " " + p + " " + w, w + p + w]))
    return out


def gen_numbers(rng):
    out = ["0", "1", "12", "123", "1234", "12345", "1234567", "3.14159", "-0.5e-10", "2026-11-30", "1,000,000",
           "1.000.000,50", "+1 (555) 123-4567", "555-0100", "+44 20 7946 0958", "+49 (0)30 123456", "0x7FFF",
           "0xDEADBEEF", "0b1010", "0o755", "1e9", "6.022e23", "-273.15", "99.9%", "$1,234.56", "€0,99",
           "12:34:56", "23:59", "v1.2.3", "192.168.0.1", "::1", "1/2", "3/4", "2^10", "10**6", "1_000_000",
           "3rd", "21st", "1st place", "abc123def", "x1y2z3", "A1B2", "007", "000000", "1.", ".5", "-1", "+1",
           "1-2-3", "9.99", "100%", " 123", "  123", "\t123", "a 1", "1 a", "12 34 56", "2026", "1984",
           "ISBN 978-3-16-148410-0", "(123) 456-7890", "1,2,3", "1.2.3.4.5", "-0", "∞", "NaN", "inf",
           "2026-11-30T12:34:56.789Z", "1e-10", "1E+10", "0.000001", "123456789012345678901234567890"]
    for n in range(1, 31):  # every length of digit string
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
    for _ in range(40):
        out.append(str(rng.randint(-10**12, 10**12)))
    for _ in range(30):
        out.append(repr(rng.uniform(-1e6, 1e6)))
    for _ in range(20):
        out.append(f"{rng.uniform(-10, 10):.{rng.randint(1, 8)}e}")
    for _ in range(20):
        out.append(f"{rng.randint(1000, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
    for _ in range(20):
        out.append(f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}")
    for _ in range(20):
        out.append(f"{rng.randint(0, 10**9):,}")
    for _ in range(30):
        out.append(f"{rng.choice(WORDS)} {rng.randint(0, 10**rng.randint(1, 8))} {rng.choice(WORDS)}"
                   f"{rng.choice(['', '.', ',', 's', 'th', '%', 'px', 'ms'])}")
    return out


def gen_whitespace(rng):
    out = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "\n\r",
           " \n", "\n ", " \n ", "\t\n", "\n\t", " \t \t", "a b", "a  b", "a   b", "a\tb", "a\nb", "a\n\nb",
           "a\n\n\nb", "a\r\nb", "a \nb", "a\n b", " a", "  a", "a ", "a  ", " a ", "\ta", "a\t", "\na", "a\n",
           "line1\n    \nline3", "line1\n\t\t\nline3", "        ", "\n        \n", "   \n   \n   ",
           "Hello  world", "Hello \n world", "end.  \n", "x\u000by\u000cz", "  leading", "trailing  ",
           "\n\n\nHello", "Hello\n\n\n", " \r\n \r\n ", "\t \n \t"]
    pool = [" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u000b", "\u000c"]
    for _ in range(120):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(0, 5))))
            if rng.random() < 0.7:
                parts.append(rng.choice(WORDS + ["123", "!", "é", "日本", "🙂"]))
        out.append("".join(parts))
    for _ in range(20):  # lines consisting of only spaces
        out.append("\n".join(" " * rng.randint(0, 12) for _ in range(rng.randint(2, 6))))
    return out


def gen_contractions(rng):
    out = []
    for c in CONTRACTIONS:
        out.append(c)
        out.append(c.upper())
    for c in CONTRACTIONS[:30]:
        out.append(c.capitalize())
        out.append(c.replace("'", "\u2019"))
    out += ["I'LL", "WE'VE", "IT'S", "DON'T", "I'M", "YOU'RE", "THEY'D", "We'Ve", "iT's", "'S", "'s", "'t", "'re",
            "'ve", "'m", "'ll", "'d", "'LL", "'x", "''s", "s'", "'", "don''t", "it's'", "'quoted'", "'s'",
            "I said 'don't' and he said 'won't'", "He's got 3's and 4's", "the 1990's", "rock 'n' roll"]
    for _ in range(60):
        ws = [rng.choice(CONTRACTIONS) if rng.random() < 0.4 else rng.choice(WORDS) for _ in range(rng.randint(3, 10))]
        s = " ".join(ws)
        out.append(s.upper() if rng.random() < 0.3 else s)
    return out


def gen_emoji(rng):
    out = list(EMOJI_SINGLE) + list(EMOJI_ZWJ) + list(EMOJI_FLAGS) + list(KEYCAPS)
    out += [b + t for b in SKIN_BASES for t in SKIN_TONES[:3]]
    out += ["👍🏿", "🧑🏽‍🚀", "👩🏻‍❤️‍👨🏾", "🫱🏼‍🫲🏿", "\U0001F1E6", "\U0001F1E6\U0001F1E7\U0001F1E8", "\uFE0F", "\u20E3",
            "a\uFE0Fb", "I ❤️ NY", "Great job! 👍👍👍", "🔥🔥🔥🔥🔥", "emoji😀inside", "😀 😃 😄", "#1️⃣", "☺︎ vs ☺️"]
    pool = EMOJI_SINGLE + EMOJI_ZWJ + EMOJI_FLAGS + KEYCAPS
    for _ in range(80):
        s = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                s.append(rng.choice(pool))
            elif r < 0.55:
                s.append(rng.choice(SKIN_BASES) + rng.choice(SKIN_TONES))
            elif r < 0.65:
                s.append(rand_cp(rng, 0x1F300, 0x1FAFF))
            else:
                s.append(rng.choice([" ", "", " " + rng.choice(WORDS) + " ", "!", "\n"]))
        out.append("".join(s))
    return out


def gen_cjk(rng):
    out = CHINESE + JAPANESE + KOREAN + FULLWIDTH
    for _ in range(40):
        out.append("".join(rand_cp(rng, *SCRIPT_RANGES["cjk"]) for _ in range(rng.randint(1, 20))))
    for _ in range(30):
        out.append("".join(rand_cp(rng, *SCRIPT_RANGES[rng.choice(["hiragana", "katakana", "cjk"])])
                           for _ in range(rng.randint(1, 20))))
    for _ in range(30):
        out.append(" ".join("".join(rand_cp(rng, *SCRIPT_RANGES["hangul"]) for _ in range(rng.randint(1, 5)))
                            for _ in range(rng.randint(1, 5))))
    for _ in range(20):
        out.append(rng.choice(CHINESE + JAPANESE) + rng.choice([" ", "", "\n"]) + sentence(rng))
    out += ["\U00020000\U0002A6D6", "𠮷野家", "中文English混合123", "日本語のテキストとEnglish", "한국어와 English"]
    return out


def gen_scripts(rng):
    out = []
    for name, texts in SCRIPTS.items():
        out += texts
        lo, hi = SCRIPT_RANGES[name]
        for _ in range(20):
            out.append(" ".join("".join(rand_cp(rng, lo, hi) for _ in range(rng.randint(1, 9)))
                                for _ in range(rng.randint(1, 6))))
    out += ["Hello مرحبا שלום Привет", "abc אבג 123", "(مرحبا)", "\u202Eevil\u202C", "\u200Fright-to-left\u200E",
            "Ελληνικά and English", "हिन्दी123English", "ไทย123"]
    return out


def gen_accents(rng):
    out = list(ACCENTED)
    out += [unicodedata.normalize("NFD", s) for s in ACCENTED]
    out += [unicodedata.normalize("NFKC", s) for s in ACCENTED if unicodedata.normalize("NFKC", s) != s]
    letters = "aeiouAEIOUnNcCsSzZyY"
    for _ in range(40):  # base letters with 1-3 combining marks
        out.append("".join(rng.choice(letters) + "".join(rng.choice(COMBINING) for _ in range(rng.randint(0, 3)))
                           for _ in range(rng.randint(1, 8))))
    for _ in range(10):  # "zalgo"
        out.append("".join(c + "".join(rng.choice(COMBINING) for _ in range(rng.randint(3, 10)))
                           for c in rng.choice(WORDS)))
    for _ in range(30):
        w = "".join(rand_cp(rng, *SCRIPT_RANGES[rng.choice(["latin1", "latinext"])]) for _ in range(rng.randint(1, 8)))
        out.append(rng.choice([w, unicodedata.normalize("NFD", w), rng.choice(WORDS) + " " + w]))
    out += ["\u0301", "\u0301a", " \u0301", "e\u0301\u0301\u0301", "\u0345", "\u034F", "a\u034Fb"]
    return out


def gen_unicode_numerals(rng):
    out = list(UNICODE_NUMERALS)
    pool = "²³¹⁰⁴⁵⁶⁷⁸⁹½¼¾⅓ⅠⅡⅢⅣⅤⅫⅰⅱ٠١٢٣٤٥٦٧٨٩०१२३४५६७८९๐๑๒๓০১੧௧①②⑳❶０１２３〇𝟙𝟚"
    for _ in range(60):
        s = "".join(rng.choice(pool + "0123456789 .,-abc") for _ in range(rng.randint(1, 10)))
        out.append(s)
    return out


def gen_unusual_ws(rng):
    out = list(UNUSUAL_WS)
    for w in UNUSUAL_WS:
        out.append("a" + w + "b")
        out.append("Hello" + w + "world")
        out.append(w + "x")
        out.append("x" + w)
        out.append(" " + w + " ")
    out += ["100\u00A0km", "10\u2009000", "「\u3000」", "zero\u200Bwidth\u200Bspace", "line\u2028sep",
            "para\u2029sep", "next\u0085line", "\u00A0\u00A0\u00A0", "\u3000\u3000", "\uFEFFBOM at start",
            "soft\u00ADhyphen", "a\u00A0\n\u00A0b"]
    for _ in range(40):
        out.append("".join(rng.choice(UNUSUAL_WS + [" ", "\t", "\n"]) if rng.random() < 0.5 else rng.choice(WORDS)
                           for _ in range(rng.randint(2, 8))))
    return out


def gen_controls(rng):
    ctrl = [chr(c) for c in list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))]
    out = []
    for c in ctrl:
        out.append(c)
        out.append("a" + c + "b")
    out += ["\x1b[31mred\x1b[0m", "\x1b[1;32mbold green\x1b[0m", "NUL\x00in\x00middle", "\x00", "\x00\x00\x00",
            "bell\x07", "back\x08space", "\x7f\x7f", "form\x0cfeed", "\x1b]0;title\x07", "tab\tand\x0bvtab"]
    for _ in range(30):
        out.append("".join(rng.choice(ctrl) if rng.random() < 0.3 else rng.choice(WORDS + [" ", "1"])
                           for _ in range(rng.randint(2, 8))))
    return out


def gen_special(rng):
    out = list(SPECIAL_TOKENS)
    out += ["<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>", "Hello<|endoftext|>World", "<|endoftext|><|endoftext|>",
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n2+2 = 4.<|im_end|>\n",
            "<|im_start|>assistant\n", "<|im_start|>", " <|im_start|> ", "\n<|im_end|>\n", "text <|im_end|>",
            "<|im_start|><|im_end|>", "<<|im_start|>>", "<|im_start|", "|im_start|>", "<|im_start |>", "<|IM_START|>",
            "< |im_start|>", "<|im_start|>>", "<<|endoftext|>", "<|endoftext|>|>", "<|endoftext|>.", "x<|endoftext|>y",
            "<|endoftext", "endoftext", "<|>", "<||>", "<|", "|>", "<filename>main.py\n<file_sep>", "<reponame>phasekv",
            "<gh_stars>100", "<repo_name>org/repo<file_sep>README.md\n# Title",
            "<jupyter_start><jupyter_code>print(1)<jupyter_output>1<empty_output>",
            "<issue_start>Bug<issue_comment>Fixed<issue_closed>", "<jupyter_text>", "<jupyter_script>x=1",
            "<filename >", "<file_sep", "file_sep>", "<FILE_SEP>", "<im_start>", "‹|im_start|›", "＜|im_start|＞"]
    for _ in range(80):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(SPECIAL_TOKENS))
            elif r < 0.7:
                parts.append(rng.choice(WORDS + ["user", "assistant", "system", "\n", " ", "  ", "日本", "🙂", "123"]))
            else:
                parts.append(sentence(rng))
        out.append(rng.choice(["", " ", "\n"]).join(parts))
    return out


def gen_long(rng):
    out = ["a" * 300, "A" * 257, "ab" * 200, "supercalifragilisticexpialidocious" * 12, "x" * 1000, "0" * 300,
           "1234567890" * 40, " " * 300, "\t" * 200, "\n" * 300, "\r\n" * 150, " \n" * 150, "!" * 400, "-" * 300,
           "=" * 256, "." * 300, "_" * 200, "#" * 120, "😀" * 150, "👨‍👩‍👧‍👦" * 40, "日本語" * 100, "안녕" * 150,
           "ا" * 300, "é" * 300, "e\u0301" * 200, "\u00A0" * 200, "\u3000" * 150, "\x00" * 100, "<|im_end|>" * 50,
           "a " * 300, " a" * 300, "ab cd " * 80, "'s" * 150, "don't " * 60, "\u200B" * 200,
           "https://example.com/" + "/".join(rand_word(rng) for _ in range(60)),
           "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(512)) + "==",
           " ".join(rng.choice(WORDS) for _ in range(400))]
    for n in (200, 300, 400, 500, 700):
        out.append(rand_word(rng, lo=n, hi=n))
        out.append(rand_word(rng, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", lo=n, hi=n))
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
        out.append("".join(rand_cp(rng, *SCRIPT_RANGES["cjk"]) for _ in range(n // 2)))
        out.append("".join(rng.choice(PUNCT_ALPHABET) for _ in range(n)))
        out.append("".join(rng.choice(" \t\n") for _ in range(n)))
    for _ in range(10):
        out.append("".join(rng.choice("aeiouxyz") for _ in range(rng.randint(200, 600))))
    return out


def gen_codepoints(rng):
    out = [chr(c) for c in range(0x20, 0x7F)]  # every printable ASCII character alone
    out += [chr(c) for c in range(0xA0, 0x100)]  # Latin-1 supplement (all 2-byte lead C2/C3)
    out += [chr(c) for c in range(0x100, 0x144)]  # the chars GPT-2's byte-to-unicode map uses ("Ġ", "Ċ", ...)
    out += ["Ġthe", "ĠĠ", "Ċ", "ĉ", "âĢĻ", "Ã©", "Ð", "ðŁĺĢ"]  # byte-level alphabet appearing as real text
    boundaries = [0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xE000, 0xF8FF, 0xFDD0, 0xFFFD, 0xFFFE, 0xFFFF,
                  0x10000, 0x1F600, 0x2FFFF, 0xE0001, 0xE007F, 0xF0000, 0x10FFFD, 0x10FFFE, 0x10FFFF]
    out += [chr(c) for c in boundaries]
    out += ["a" + chr(c) + "b" for c in boundaries]
    for _ in range(60):  # random scalar values, weighted towards each UTF-8 length
        lo, hi = rng.choice([(0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF)])
        out.append("".join(rand_cp(rng, lo, hi) for _ in range(rng.randint(1, 4))))
    return out


def gen_mixed(rng, pools):
    out = []
    flat = [s for p in pools for s in p if len(s) < 80]
    for _ in range(400):
        parts = []
        for _ in range(rng.randint(2, 8)):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(flat))
            elif r < 0.75:
                parts.append(rng.choice([" ", "\n", "\t", "  ", "\u00A0", ""]))
            else:
                lo, hi = SCRIPT_RANGES[rng.choice(list(SCRIPT_RANGES))]
                parts.append("".join(rand_cp(rng, lo, hi) for _ in range(rng.randint(1, 5))))
        out.append("".join(parts))
    return out


def build_corpus():
    rng = random.Random(SEED)
    cats = [
        ("empty", [""]),
        ("prose", gen_prose(rng)),
        ("code", gen_code(rng)),
        ("punctuation", gen_punct(rng)),
        ("numbers", gen_numbers(rng)),
        ("whitespace", gen_whitespace(rng)),
        ("contractions", gen_contractions(rng)),
        ("emoji", gen_emoji(rng)),
        ("cjk", gen_cjk(rng)),
        ("scripts", gen_scripts(rng)),
        ("accents_combining", gen_accents(rng)),
        ("unicode_numerals", gen_unicode_numerals(rng)),
        ("unusual_whitespace", gen_unusual_ws(rng)),
        ("control_chars", gen_controls(rng)),
        ("special_tokens", gen_special(rng)),
        ("long", gen_long(rng)),
        ("codepoints", gen_codepoints(rng)),
    ]
    cats.append(("mixed", gen_mixed(rng, [c[1] for c in cats])))
    seen = {}
    counts = {}
    for name, strings in cats:
        counts[name] = 0
        for s in strings:
            assert isinstance(s, str)
            assert not any(0xD800 <= ord(c) <= 0xDFFF for c in s), (name, s)
            if s not in seen:  # first category to produce a string owns it
                seen[s] = name
                counts[name] += 1
    return list(seen), counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", metavar="OUT.json", help="path of the JSON array to write")
    args = ap.parse_args()
    corpus, counts = build_corpus()
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(corpus, f, ensure_ascii=False, indent=0)
        f.write("\n")
    for name, n in counts.items():
        print(f"{name:20s} {n:5d}", file=sys.stderr)
    print(f"{'total':20s} {len(corpus):5d}", file=sys.stderr)


if __name__ == "__main__":
    main()
