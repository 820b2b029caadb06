#!/usr/bin/env python3
"""tests/ref/gen-model-ref.py - llama.cpp's answers on a real model, for the golden tests.

Runs llama.cpp (as packaged by llama-cpp-python) on a model (by default
SmolLM2-135M-Instruct Q4_1) over a fixed set of prompts and writes, for each
prompt: its tokens, llama.cpp's greedy completion, and its top-16 logits at
every position of prompt + completion from the last prompt token on (teacher
forcing). The outputs are committed; make check compares pagoda's
tokenizer and forward pass with them, so CI never needs llama-cpp-python:

  default model          tests/data/golden-smollm2.txt   (tests/test_golden)
  gemma-3-270m-q4_k_m    tests/data/golden-gemma3.txt    (tests/test-golden-gemma3.sh)
  scripts/requantize's   tests/data/golden-smollm2-TYPE.txt
  copies of the default  (tests/test-golden-requant.sh), TYPE q4_k_m q5_k_m q6_k q3_k_m

This is a developer's tool, not a test: run it again only when the prompts or
the reference change, and commit the new data with a note of why.

Usage: tests/ref/gen-model-ref.py [--model GGUF] [--out FILE] [--made-by TEXT]
                                 [--teacher batched|one-token]

  e.g. tests/ref/gen-model-ref.py --model ~/.cache/pagoda/models/gemma-3-270m-q4_k_m.gguf \
           --out tests/data/golden-gemma3.txt --teacher one-token

--teacher says where the teacher-forced logits (the pos lines) come from:
  batched    (the default) one llama_decode of the whole prompt + completion; on
             the default model this is bit for bit the greedy run's arithmetic,
             and golden-smollm2.txt is made so;
  one-token  the greedy run itself: the prompt in one batch, then one token per
             llama_decode, so that the pos lines and the greedy completion are
             one computation. On Gemma 3 and the K-quant copies llama.cpp's
             batched matrix products take other kernels than its one-token
             ones (spread up to ~1.9): their files are made with this mode.
             No pos line is written for the position after an
             end-of-generation token (nothing is generated there).

The model's file name and SHA-256 go into the header ("# model: FILE (sha256
HEX)"), which the tests check before they compare; --made-by records how the
file was made (scripts/requantize's copies).
"""

import argparse
import os
import sys

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# file name -> (description for the header, an end-of-generation token for it)
KNOWN_MODELS = {
    MODEL_FILE: ("SmolLM2-135M-Instruct Q4_1", "<|im_end|>"),
    "gemma-3-270m-q4_k_m.gguf": ("Gemma 3 270M (base) Q4_K_M", "<end_of_turn>"),
}
for _t in ("Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M"):
    KNOWN_MODELS[f"SmolLM2-135M-Instruct.{_t}.gguf"] = (
        f"SmolLM2-135M-Instruct requantised from Q4_1 to {_t}", "<|im_end|>")
N_CTX = 512
N_THREADS = 1
N_UBATCH = 32
N_GREEDY = 64
TOP_K = 16
SEED = 1234

LONG_PARAGRAPH = (
    "The history of computing is often told as a sequence of machines, but it is "
    "just as much a history of ideas about how to organise work. Early mechanical "
    "calculators could add and multiply, yet every step of a longer computation "
    "had to be planned and carried out by a person who wrote intermediate results "
    "on paper. Charles Babbage's design for the Analytical Engine separated the "
    "store, where numbers were kept, from the mill, where they were transformed, "
    "and it was to be controlled by punched cards borrowed from the Jacquard loom. "
    "Ada Lovelace saw that such a machine could manipulate symbols of any kind, "
    "not only numbers, and she wrote what is often called the first program, a "
    "method for computing Bernoulli numbers. A century later, Alan Turing gave a "
    "precise meaning to the word computable with his abstract machine, and John "
    "von Neumann described a design in which instructions and data share one "
    "memory. That design, with a processor fetching instructions from memory one "
    "after another, still shapes the computers we use today, even though modern "
    "processors execute many instructions at once, predict branches, reorder "
    "operations and keep several levels of cache between the arithmetic units and "
    "main memory. The gap between how fast a processor can compute and how fast "
    "memory can deliver data has become one of the central problems of the field, "
    "and much of the engineering of a fast program today is about moving less data, "
    "or moving it at the right time, rather than about doing less arithmetic."
)

CHATML = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France? "
    "Answer in one sentence.<|im_end|>\n<|im_start|>assistant\n"
)

CHATML_MULTI = (
    "<|im_start|>user\nGive me three colours.<|im_end|>\n"
    "<|im_start|>assistant\nRed, green and blue.<|im_end|>\n"
    "<|im_start|>user\nNow three fruits, as a numbered list.<|im_end|>\n"
    "<|im_start|>assistant\n"
)

# (name, prompt): names are for the reader only; the file records the bytes.
PROMPTS = [
    ("prose", "The old lighthouse keeper climbed the spiral stairs every evening, "
              "counting the steps as the sea grew dark below him."),
    ("question", "Question: Why is the sky blue during the day but red at sunset?\nAnswer:"),
    ("c-code", "#include <stdio.h>\n\nint main(void)\n{\n\tint sum = 0;\n"
               "\tfor (int i = 0; i < 10; i++)\n\t\tsum += i;\n"
               "\tprintf(\"%d\\n\", sum);\n"),
    ("python-code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
                    "    if n < 2:\n        return n\n"),
    ("arithmetic", "12 + 35 = 47\n128 * 4 = 512\n3.14159 * 2 = 6.28318\n1000000 - 1 = 999999\n"
                   "2^10 = 1024\n7 * 8 ="),
    ("list", "Shopping list:\n- eggs\n- milk\n- 2 kg flour\n- butter (unsalted)\n-"),
    ("chinese", "人工智能是计算机科学的一个分支，它试图理解智能的实质，并生产出"),
    ("japanese", "東京は日本の首都です。今日はとても暑いので、"),
    ("korean", "안녕하세요, 오늘 날씨가 정말 좋네요."),
    ("emoji", "I love pizza 🍕 and tacos 🌮! Weekend plans: 🏖️ + 📚 = 😊👍🏽"),
    ("whitespace", "a    b        c\t\t\td\n\n\n\n    e" + " " * 40 + "f\n" + "\t" * 8 + "g"),
    ("chatml", CHATML),
    ("chatml-multi", CHATML_MULTI),
    ("one-word", "Hello"),
    ("one-char", "x"),
    ("long-paragraph", LONG_PARAGRAPH),
    ("punctuation", "Wait... what?!? (Really) -- yes; no: maybe. \"Quoted\" 'single' [brackets] {braces} <angle>"),
    ("french", "Le café était fermé, alors nous sommes allés à la bibliothèque où l'on"),
    ("german", "Die Donaudampfschifffahrtsgesellschaft veröffentlichte gestern ihre"),
    ("russian", "Москва — столица России, крупнейший по численности населения город"),
    ("arabic", "اللغة العربية هي إحدى أكثر اللغات انتشارا في العالم"),
    ("json", "{\"name\": \"pagoda\", \"version\": \"0.1.0\", \"layers\": 30, \"tags\": [\"llm\", "),
    ("markdown-table", "| model | params | speed |\n|---|---|---|\n| SmolLM2 | 135M | fast |\n|"),
    ("url-email", "Contact support@example.com or visit https://example.org/docs/v2/index.html?lang=en#install"),
    ("shell", "$ ls -la /tmp | grep -v '^total' | awk '{print $9}' | sort -u\n$ "),
    ("numbers", "0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 12345678901234567890 0xFF 1e-10 -42"),
    ("unicode-rare", "naïve café résumé — “smart quotes” … 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑∫√∞ ½ ©®™"),
    ("html", "<!DOCTYPE html>\n<html>\n<head><title>Test</title></head>\n<body>\n  <p>"),
    ("leading-space", "   indented text after three spaces, then\ttab"),
    ("story-start", "Once upon a time"),
]


def default_model():
    d = os.environ.get("PAGODA_MODEL_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "pagoda", "models")
    return os.path.join(d, MODEL_FILE)


def top_k(row, k):
    """The k (id, logit) pairs of a logit row, highest first, ties by lower id."""
    import numpy as np
    idx = np.argpartition(-row, k)[:k]
    return sorted(((int(i), float(row[i])) for i in idx), key=lambda p: (-p[1], p[0]))


def greedy(llm, llama_cpp, prompt_tokens):
    """Greedy completion by incremental decoding, stopping at an end-of-generation token.

    Returns (tokens, eos, rows): rows[j] are the logits after prompt token P-1+j,
    as this incremental decoding computed them (P-1 .. P+G-2)."""
    import numpy as np
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(prompt_tokens)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    out, eos = [], False
    for _ in range(N_GREEDY):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            eos = True
            break
        llm.eval([tok])
    p = len(prompt_tokens)
    return out, eos, llm.scores[p - 1:llm.n_tokens].copy()


def teacher_forced(llm, tokens):
    """Logits for every position of tokens, from one batched evaluation."""
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(tokens)
    return llm.scores[:len(tokens)].copy()


HEADER = """\
# {out_name} - llama.cpp's reference answers on {desc}.
# Generated by tests/ref/gen-model-ref.py; do not edit by hand.
#
# model: {model_file} (sha256 {sha})
{made_by}# reference: llama.cpp via llama-cpp-python {version}, built on an AVX2/FMA/F16C
#   CPU (x86-64 without AVX-512); n_ctx {n_ctx}, n_batch {n_ctx}, n_ubatch {n_ubatch},
#   n_threads {threads}, KV cache f16 (type_k = type_v = f16), flash attention on,
#   CPU backend, seed {seed} (unused: decoding is greedy).
# tokenizer: add_bos {add_bos} (as the model's GGUF says), special tokens parsed
#   (special=True), {special_note}.
#
# Format: lines starting with '#' are comments and may appear anywhere. Fields
# are separated by single spaces. One record per prompt:
#
#   prompt <hex>         the prompt's UTF-8 bytes, two lower-case hex digits each
#   tokens <n> <id>...   llama.cpp's tokens for the prompt (n = prompt length P)
#   greedy <n> <id>...   greedy completion: argmax at each step, the prompt in one
#                        batch then one token per llama_decode; at most {n_greedy} tokens;
#                        it ends early only on an end-of-generation token
#                        (llama_vocab_is_eog, e.g. {eog}), then the last id listed
#   eos <0|1>            1 when the completion ended on an end-of-generation token
#   mismatch <n> <i>...  positions i where the top id of the pos lines below differs
#                        from greedy token i+1: llama.cpp's batched and incremental
#                        evaluations round differently, and near ties flip
#   spread <x>           max |batched - incremental| logit over the ids of each pos
#                        line P-1 .. P+G-2: llama.cpp's own disagreement with itself,
#                        a floor for any tolerance used against these figures
#   pos <i> <id>:<logit> ...  ({top_k} pairs) for every position i from P-1 to P+G-1
{pos_doc}#                        highest logit first, ties by lower id; logits with 4 decimals
#   end
#
# Why this configuration: flash attention is llama.cpp's default where the
# backend has it (flash_attn "auto"), and with it, one thread and ubatches of
# fewer than 64 tokens, llama.cpp runs one attention loop for every token, so
# that its batched and one-token evaluations agree bit for bit (spread 0,
# mismatch empty): its greedy output and its teacher-forced logits are one
# computation. Without flash attention its one-token decode takes another
# attention path than a batch and the two drift apart by up to about 1 logit.
{spread_note}{numerics_note}
#
# Records: {n_records}; prompt tokens {n_prompt_tokens} in all; greedy tokens {n_greedy_tokens}
# in all; pos lines {n_pos}; largest spread {spread:.4f}.
"""


POS_DOC = {
    "batched": """\
#                        (G = greedy's n): the top-{top_k} logits after token i of the
#                        sequence prompt+greedy, i.e. predicting token i+1, from ONE
#                        batched evaluation of the whole sequence (teacher forcing);
""",
    "one-token": """\
#                        (G = greedy's n), except P+G-1 when eos is 1 (nothing is
#                        generated after an end-of-generation token): the top-{top_k}
#                        logits after token i of the sequence prompt+greedy, i.e.
#                        predicting token i+1, from the greedy run itself (teacher:
#                        one-token): the prompt in one batch, then one token per
#                        llama_decode, so mismatch is empty by construction;
""",
}

SPREAD_NOTE = {
    "batched": """\
# On this model they do not agree bit for bit even so (largest spread below):
# its matrix products of a batch take other kernels and roundings than those
# of one token for some of its tensor types.
""",
    "one-token": """\
# On this model they do not agree bit for bit even so (largest spread below):
# its matrix products of a batch take other kernels and roundings than those
# of one token for some of its tensor types. So here the pos lines are the
# greedy run's own logits, one computation with the greedy completion:
# teacher: one-token (gen-model-ref.py --teacher one-token); spread still
# measures one batched evaluation of prompt+greedy against them.
""",
}


def main():
    ap = argparse.ArgumentParser(
        description="Write llama.cpp's reference tokens and logits for the golden tests.")
    ap.add_argument("--model", default=default_model(),
                    help="the GGUF (default: scripts/fetch-model's SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden-smollm2.txt"),
        help="output file (default tests/data/golden-smollm2.txt)")
    ap.add_argument("--made-by", default="",
                    help="how the model file was made, for the header (e.g. scripts/requantize's command)")
    ap.add_argument("--teacher", choices=("batched", "one-token"), default="batched",
                    help="where the pos lines come from: one batched evaluation of prompt+greedy "
                         "(default), or the greedy run's own one-token evaluations")
    a = ap.parse_args()

    try:
        import llama_cpp
        import numpy as np  # noqa: F401 (llama-cpp-python depends on it)
    except ImportError:
        sys.exit("gen-model-ref: llama_cpp is not importable: pip install llama-cpp-python")
    if not os.path.isfile(a.model):
        sys.exit(f"gen-model-ref: no model at {a.model}: run scripts/fetch-model")

    import hashlib
    with open(a.model, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()

    llm = llama_cpp.Llama(model_path=a.model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_UBATCH, flash_attn=True,
                          n_threads=N_THREADS, n_threads_batch=N_THREADS,
                          logits_all=True, seed=SEED, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    model_file = os.path.basename(a.model)
    default_model_file = model_file == MODEL_FILE
    desc, eog = KNOWN_MODELS.get(model_file, (model_file, None))
    if eog is None:
        eog = llm.detokenize([llama_cpp.llama_vocab_eos(vocab)], special=True).decode("utf-8", "replace")
    if len(llm.tokenize(b"<|im_start|>", add_bos=False, special=True)) == 1:
        special_note = "so <|im_start|> and <|im_end|> in a prompt are single tokens"
    else:
        special_note = ("so the model's own control tokens in a prompt are single tokens\n"
                        "#   (it has no <|im_start|>: the ChatML prompts are plain text to it)")
    if default_model_file:
        numerics_note = ("# pagoda's llama.cpp numerics (daemon/engine/forward.h) reproduce this build's\n"
                         "# arithmetic and must match these figures to their 4 decimals.")
    else:
        numerics_note = ("# pagoda's llama.cpp numerics cover the default model's types only: on this\n"
                         "# model tests/test_golden checks pagoda's own numerics against these figures\n"
                         "# (near-ties and agreement, as for the default model's).")

    records, stats = [], dict(n_prompt_tokens=0, n_greedy_tokens=0, n_pos=0, spread=0.0)
    for name, text in PROMPTS:
        data = text.encode("utf-8")
        toks = llm.tokenize(data, add_bos=add_bos, special=True)
        comp, eos, inc = greedy(llm, llama_cpp, toks)
        seq = toks + comp
        if len(seq) > N_CTX:
            sys.exit(f"gen-model-ref: prompt {name} is too long: {len(seq)} > {N_CTX} tokens")
        logits = teacher_forced(llm, seq)
        p = len(toks)
        lines = [f"# {name}: {len(toks)} prompt tokens, {len(comp)} greedy, "
                 f"completion {llm.detokenize(comp, special=True)[:80]!r}",
                 f"prompt {data.hex()}",
                 f"tokens {len(toks)} " + " ".join(map(str, toks)),
                 f"greedy {len(comp)} " + " ".join(map(str, comp)),
                 f"eos {int(eos)}"]
        pos_lines, mism, spread = [], [], 0.0
        if a.teacher == "one-token":
            # The greedy run's rows: P-1 .. P+G-2, and P+G-1 unless it ended
            # on an end-of-generation token (then nothing was evaluated after).
            last, rows = p - 1 + len(inc), inc
        else:
            last, rows = len(seq), logits[p - 1:]
        for i in range(p - 1, last):
            top = top_k(rows[i - (p - 1)], TOP_K)
            if i + 1 < len(seq) and top[0][0] != seq[i + 1]:
                mism.append(i)
            if a.teacher == "one-token":
                spread = max([spread] + [abs(v - float(logits[i][t])) for t, v in top])
            elif i - (p - 1) < len(inc):
                row = inc[i - (p - 1)]
                spread = max([spread] + [abs(v - float(row[t])) for t, v in top])
            pos_lines.append(f"pos {i} " + " ".join(f"{t}:{v:.4f}" for t, v in top))
        lines.append(f"mismatch {len(mism)}" + "".join(f" {i}" for i in mism))
        lines.append(f"spread {spread:.4f}")
        stats["spread"] = max(stats["spread"], spread)
        lines += pos_lines
        lines.append("end")
        records.append("\n".join(lines) + "\n")
        stats["n_prompt_tokens"] += len(toks)
        stats["n_greedy_tokens"] += len(comp)
        stats["n_pos"] += len(pos_lines)
        print(f"gen-model-ref: {name}: {len(toks)} tokens, {len(comp)} greedy"
              f"{' (eos)' if eos else ''}, {len(mism)} mismatches, spread {spread:.4f}",
              file=sys.stderr)

    spread_note = "" if stats["spread"] == 0 else SPREAD_NOTE[a.teacher]
    pos_doc = POS_DOC[a.teacher].format(top_k=TOP_K)
    made_by = "".join(f"# made by: {l}\n" for l in a.made_by.splitlines() if l.strip())
    header = HEADER.format(out_name=os.path.basename(a.out), desc=desc, made_by=made_by,
                           special_note=special_note, spread_note=spread_note, pos_doc=pos_doc, eog=eog, numerics_note=numerics_note,
                           model_file=model_file, sha=sha, version=llama_cpp.__version__,
                           n_ctx=N_CTX, n_ubatch=N_UBATCH, threads=N_THREADS, seed=SEED, add_bos=int(add_bos),
                           n_greedy=N_GREEDY, top_k=TOP_K, n_records=len(records),
                           n_prompt_tokens=stats["n_prompt_tokens"],
                           n_greedy_tokens=stats["n_greedy_tokens"], n_pos=stats["n_pos"],
                           spread=stats["spread"])
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(header)
        for r in records:
            f.write("#\n" + r)
    os.replace(tmp, a.out)
    print(f"gen-model-ref: wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
