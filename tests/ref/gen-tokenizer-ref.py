#!/usr/bin/env python3
"""gen-tokenizer-ref.py - reference tokenisations of SmolLM2 by llama.cpp.

Tokenises a fixed set of prompts (hand-written corner cases, then random
strings drawn with a fixed seed from a pool of troublesome characters) with
llama.cpp as packaged by llama-cpp-python, and writes them in the format
tests/test_tokenizer.c reads:

    # comment
    P <pre-tokenizer>    (the cases after it: "smollm" is the file as is)
    T <parse_special 0|1> <prompt as lowercase hex>
    I <token ids separated by spaces>

The other pre-tokenizers (llama-bpe, default, gpt-2, qwen2) run on SmolLM2's
vocabulary relabelled in a vocabulary-only copy of the file, so that their
regexes are checked against llama.cpp without a Llama 3 download.

Usage: gen-tokenizer-ref.py [model.gguf] > tests/data/tokenizer-smollm2.txt
The model defaults to $PAGODA_MODEL.  CI does not run this: it compares
against the stored output.
"""
import os
import random
import sys
import tempfile

import gguf
import llama_cpp

CASES = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "  ",
    "   leading and trailing spaces   ",
    "a  b   c    d     e",
    "word\n\nnew paragraph\n\n\n\nfour newlines",
    "tabs\tand\t\ttwo tabs\t \t mixed",
    "line one\r\nline two\r\n",
    "\n\n\n",
    "1234567",
    "3.14 and 2.718281828 and 1,000,000 and -42",
    "Year 2024, call 555-0199, ratio 16:9",
    "I'm sure you're right, we'll see; they've gone, he'd say it's 'quoted'",
    "I\u2019m sure you\u2019re right \u2018curly\u2019 \u201cdouble\u201d",
    "DON'T SHOUT, It'S fine",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u00e5ngstr\u00f6m",
    "e\u0301 combining acute, n\u0303 tilde",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u4e2d\u6587\u5b57\u7b26\u3002\ud55c\uad6d\uc5b4",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "emoji \U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f \U0001F1EB\U0001F1F7",
    "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 zwj",
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\tprintf(\"%d\\n\", a[i] + b->c);\n\treturn 0;\n}\n",
    "if (a <= b && c != d) { x += 1; } else { y >>= 2; }",
    "https://example.com/path?q=1&r=two#frag user@mail.org",
    "$100 + 50% = ~150 | a^b `code` <tag> [x] {y}",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "partial <|im_start and im_end|>",
    "<repo_name>pagoda<file_sep>main.c",
    "\u00a0non-breaking\u00a0space\u3000ideographic\u2003em",
    "\u0085next line\u2028line sep\u2029para",
    "x\u180ey mongolian vowel separator",
    "a \n b \t\n c  \n\n  d",
    "   \n   x",
    "!!!???...,,,;;;",
    "snake_case_name camelCaseName SCREAMING_CASE kebab-case",
    "\u00bd \u2153 \u00b2 \u2460 \u0663\u0664 \u096a\u096b",
    "Mixed 123abc abc123 a1b2c3 1a",
    "ok\u0000nul",
]

POOL = (
    list("abcXYZ019 \t\n\r'.,!?-_<>|$%&*()[]{}")
    + ["'s", "'ll", "\u2019", "  ", "\n\n", "   ", "\u00e9", "\u00df",
       "\u65e5", "\u672c", "\u3002", "\U0001F600", "\U0001F3FD",
       "\u200d", "\u0301", "\u00a0", "\u3000", "\u0663", "\u00b2",
       "<|im_start|>", "<|im_end|>", "<|endoftext|>", "\ud55c",
       "\u0416", "\u03a9", "\ufe0f", "\u2028", "\u0085"]
)


def random_cases(n, seed=20240607):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(POOL) for _ in range(k)))
    return out


def relabel(src, dst, pre):
    """A copy of src's metadata (no tensors) with tokenizer.ggml.pre = pre."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        v = pre if name == "tokenizer.ggml.pre" else f.contents()
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, v, f.types[0], sub_type=f.types[-1])
        else:
            w.add_key_value(name, v, f.types[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def emit(path, texts):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    for text in texts:
        b = text.encode("utf-8")
        for special in (0, 1):
            if special and "<" not in text:
                continue
            ids = llm.tokenize(b, add_bos=True, special=bool(special))
            print("T %d %s" % (special, b.hex()))
            print("I %s" % " ".join(str(i) for i in ids))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PAGODA_MODEL")
    if not path:
        sys.exit("usage: gen-tokenizer-ref.py model.gguf (or set PAGODA_MODEL)")
    print("# tokenizer reference for %s" % os.path.basename(path))
    print("# made by tests/ref/gen-tokenizer-ref.py with llama-cpp-python %s"
          % llama_cpp.__version__)
    print("# T <parse_special> <prompt hex> / I <ids>; add_bos requested")
    print("P smollm")
    emit(path, CASES + random_cases(120))
    with tempfile.TemporaryDirectory() as tmp:
        for pre in ("llama-bpe", "default", "gpt-2", "qwen2"):
            dst = os.path.join(tmp, pre + ".gguf")
            relabel(path, dst, pre)
            print("P %s" % pre)
            emit(dst, CASES + random_cases(40, seed=len(pre)))


if __name__ == "__main__":
    main()
