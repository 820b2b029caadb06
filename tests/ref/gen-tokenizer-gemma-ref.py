#!/usr/bin/env python3
"""gen-tokenizer-gemma-ref.py - reference tokenisations of Gemma 3 by llama.cpp.

Tokenises a fixed set of prompts (hand-written corner cases of
SentencePiece with byte fallback and no space prefix, Gemma's control
tokens, then random strings drawn with a fixed seed from a pool of
troublesome characters) with llama.cpp as packaged by llama-cpp-python,
reading only the vocabulary of gemma-3-270m-q4_k_m.gguf (vocab_only), and
writes them in the format tests/test_tokenizer_gemma.c reads (that of
tests/data/tokenizer-smollm2.txt):

    # comment
    T <parse_special 0|1> <prompt as lowercase hex>
    I <token ids separated by spaces>

Every case is tokenised with add_bos requested, with parse_special off and,
where the prompt holds a '<' or '[', on as well.

Usage: gen-tokenizer-gemma-ref.py [gemma-3-270m-q4_k_m.gguf] \\
           > tests/data/tokenizer-gemma3.txt
The model defaults to $PAGODA_MODEL_DIR/gemma-3-270m-q4_k_m.gguf
(scripts/fetch-model gemma3-270m fetches it).  CI does not run this: it
compares against the stored output.
"""
import os
import random
import sys

import llama_cpp

CASES = [
    "Hello world",
    " Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " ",
    "  ",
    "   ",
    " " * 40,
    "   leading and trailing spaces   ",
    "a  b   c    d     e      f",
    "word\n\nnew paragraph\n\n\n\nfour newlines",
    "\n",
    "\n\n\n",
    "\n" * 40,
    " \n \n",
    "tabs\tand\t\ttwo tabs\t \t mixed",
    "\t\t\t\t",
    "line one\r\nline two\r\n",
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
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 \u1ea0\u1ea1 ti\u1ebfng Vi\u1ec7t",
    "emoji \U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f \U0001F1EB\U0001F1F7",
    "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 zwj",
    "\U0001F600",
    "\U0001FAE8 \U0001FAE9 \U0001F9CC rare emoji",
    "\U00010348 gothic \U0001D11E music \U00020000 cjk ext b",
    "\ue000\uf8ff private use \U000F0000",
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\tprintf(\"%d\\n\", a[i] + b->c);\n\treturn 0;\n}\n",
    "if (a <= b && c != d) { x += 1; } else { y >>= 2; }",
    "    indented\n        more\n            most",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "https://example.com/path?q=1&r=two#frag user@mail.org",
    "$100 + 50% = ~150 | a^b `code` <tag> [x] {y}",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos>more<pad>",
    "<start_of_turn><end_of_turn><start_of_turn>",
    "partial <start_of_turn and end_of_turn>",
    "<unk> <mask> [multimodal] <unused0> <unused99>",
    "<start_of_image> <end_of_image> <image_soft_token>",
    "<|im_start|>user\nnot Gemma's<|im_end|>",
    "\u00a0non-breaking\u00a0space\u3000ideographic\u2003em",
    "\u0085next line\u2028line sep\u2029para",
    "x\u180ey mongolian vowel separator",
    "\u2581 lower one eighth block \u2581\u2581",
    "a \n b \t\n c  \n\n  d",
    "   \n   x",
    "!!!???...,,,;;;",
    "snake_case_name camelCaseName SCREAMING_CASE kebab-case",
    "\u00bd \u2153 \u00b2 \u2460 \u0663\u0664 \u096a\u096b",
    "Mixed 123abc abc123 a1b2c3 1a",
    "ok\u0000nul",
    "\u0001\u0002\u001f\u007f controls",
    "a" * 300,
    "ab" * 150,
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
]

POOL = (
    list("abcXYZ019 \t\n\r'.,!?-_<>|$%&*()[]{}")
    + ["'s", "'ll", "\u2019", "  ", "\n\n", "   ", "\u00e9", "\u00df",
       "\u65e5", "\u672c", "\u3002", "\U0001F600", "\U0001F3FD",
       "\u200d", "\u0301", "\u00a0", "\u3000", "\u0663", "\u00b2",
       "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "\ud55c",
       "\u0416", "\u03a9", "\ufe0f", "\u2028", "\u0085", "\u2581",
       "\U0001FAE8", "\U00010348", "\u0e2a", "\u0928"]
)


def random_cases(n, seed=20260301):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(POOL) for _ in range(k)))
    return out


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        path = os.path.join(os.environ.get("PAGODA_MODEL_DIR", ""),
                            "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(path):
        sys.exit("gen-tokenizer-gemma-ref.py: %s is absent: run "
                 "scripts/fetch-model gemma3-270m, or name the file" % path)
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    print("# tokenizer reference for %s" % os.path.basename(path))
    print("# made by tests/ref/gen-tokenizer-gemma-ref.py with llama-cpp-python %s"
          % llama_cpp.__version__)
    print("# T <parse_special> <prompt hex> / I <ids>; add_bos requested")
    for text in CASES + random_cases(150):
        b = text.encode("utf-8")
        for special in (0, 1):
            if special and "<" not in text and "[" not in text:
                continue
            ids = llm.tokenize(b, add_bos=True, special=bool(special))
            print("T %d %s" % (special, b.hex()))
            print("I %s" % " ".join(str(i) for i in ids))


if __name__ == "__main__":
    main()
