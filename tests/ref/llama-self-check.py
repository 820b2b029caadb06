#!/usr/bin/env python3
"""tests/ref/llama-self-check.py - llama.cpp held to test_golden's bounds against itself.

The golden data of Gemma 3 and of the requantised copies hold llama.cpp's
one-token logits (gen-model-ref.py --teacher one-token), because on those
models llama.cpp's batched evaluation differs from its one-token one. This
tool runs llama.cpp's *batched* teacher forcing of every record's prompt +
greedy completion (what pagoda's teacher forcing is) in the configuration
gen-model-ref.py used, and applies test_golden's checks to it against the
stored one-token logits:

  agreement     argmax = the stored top id, over the pos lines
  off-tie       disagreements where the stored top-2 gap is >= 0.5
  logit diff    max and mean |diff| over each pos line's 16 stored ids

So it says how far llama.cpp itself lands from test_golden's bars on a model:
a bar llama.cpp's own two evaluations miss does not tell a correct engine
from a wrong one there.

--exact also runs an exact forward pass of the model (llama architecture
only: its weights dequantised, float64 everywhere, no activation
quantisation) over the same sequences and reports how far each of
llama.cpp's two evaluations, and pagoda's teacher forcing (--pagoda DUMP,
written by PAGODA_GOLDEN_DUMP=DUMP tests/test_golden MODEL DATA), are from
it: mean |diff| over the stored ids, and argmax agreement with the exact
pass. An engine no farther from the exact pass than llama.cpp rounds no
worse than llama.cpp, whatever the two's disagreement.

A developer's tool (needs llama-cpp-python, numpy and gguf), not a test.

Usage: tests/ref/llama-self-check.py [--exact] [--pagoda DUMP] MODEL DATA
"""

import argparse
import importlib.util
import os
import sys

NEAR_TIE = 0.5


def load_ref_module():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "gen_model_ref", os.path.join(here, "gen-model-ref.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_records(path):
    """[(tokens, greedy, {pos: [(id, logit)...]})] from a golden file."""
    recs, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            w = line.split()
            if w[0] == "prompt":
                cur = {"tokens": [], "greedy": [], "pos": {}}
            elif w[0] == "tokens":
                cur["tokens"] = [int(x) for x in w[2:]]
            elif w[0] == "greedy":
                cur["greedy"] = [int(x) for x in w[2:]]
            elif w[0] == "pos":
                cur["pos"][int(w[1])] = [(int(p.split(":")[0]), float(p.split(":")[1]))
                                         for p in w[2:]]
            elif w[0] == "end":
                recs.append(cur)
    return recs


def read_dump(path):
    """{(record, pos): {id: logit}} from PAGODA_GOLDEN_DUMP's file."""
    out = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if w and w[0] == "dump":
                out[(int(w[1]), int(w[2]))] = {
                    int(p.split(":")[0]): float(p.split(":")[1]) for p in w[3:]}
    return out


class Exact:
    """The llama architecture in float64 from a GGUF file's dequantised weights."""

    def __init__(self, path):
        import gguf
        import numpy as np
        r = gguf.GGUFReader(path)

        def field(k):
            f = r.fields[k]
            return f.parts[f.data[0]][0]
        arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
        if arch != "llama":
            sys.exit(f"llama-self-check: --exact knows the llama architecture only, not {arch}")
        self.n_blocks = int(field("llama.block_count"))
        self.n_heads = int(field("llama.attention.head_count"))
        self.n_kv = int(field("llama.attention.head_count_kv"))
        self.eps = float(field("llama.attention.layer_norm_rms_epsilon"))
        self.base = float(field("llama.rope.freq_base"))
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            self.w[t.name] = np.asarray(a, dtype=np.float64).reshape(
                [int(x) for x in reversed(t.shape)])
        if "rope_freqs.weight" in self.w:
            sys.exit("llama-self-check: --exact does not apply rope_freqs")
        self.np = np

    def rms(self, x, w):
        np = self.np
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x):
        """Adjacent pairs (2i, 2i + 1) rotated by pos * base^(-2i/d); x: (n, h, d)."""
        np = self.np
        n, _, d = x.shape
        inv = self.base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    def logits(self, tokens):
        np, w = self.np, self.w
        emb = w["token_embd.weight"]
        x = emb[np.asarray(tokens)]
        n = len(tokens)
        hd = x.shape[1] // self.n_heads
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for b in range(self.n_blocks):
            p = f"blk.{b}."
            xn = self.rms(x, w[p + "attn_norm.weight"])
            q = self.rope((xn @ w[p + "attn_q.weight"].T).reshape(n, self.n_heads, hd))
            k = self.rope((xn @ w[p + "attn_k.weight"].T).reshape(n, self.n_kv, hd))
            v = (xn @ w[p + "attn_v.weight"].T).reshape(n, self.n_kv, hd)
            g = self.n_heads // self.n_kv
            att = np.empty((n, self.n_heads, hd))
            for h in range(self.n_heads):
                sc = q[:, h, :] @ k[:, h // g, :].T / np.sqrt(hd) + mask
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                att[:, h, :] = (sc / sc.sum(axis=1, keepdims=True)) @ v[:, h // g, :]
            x = x + att.reshape(n, -1) @ w[p + "attn_output.weight"].T
            xn = self.rms(x, w[p + "ffn_norm.weight"])
            gt = xn @ w[p + "ffn_gate.weight"].T
            up = xn @ w[p + "ffn_up.weight"].T
            x = x + (gt / (1.0 + np.exp(-gt)) * up) @ w[p + "ffn_down.weight"].T
        out = w.get("output.weight", emb)
        return self.rms(x, w["output_norm.weight"]) @ out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--pagoda", metavar="DUMP")
    ap.add_argument("model")
    ap.add_argument("data")
    a = ap.parse_args()
    model, data = a.model, a.data
    try:
        import llama_cpp
    except ImportError:
        sys.exit("llama-self-check: needs llama-cpp-python (pip install llama-cpp-python)")
    ref = load_ref_module()
    recs = read_records(data)
    pag = read_dump(a.pagoda) if a.pagoda else None
    ex = Exact(model) if a.exact else None
    llm = llama_cpp.Llama(model_path=model, n_ctx=ref.N_CTX, n_batch=ref.N_CTX,
                          n_ubatch=ref.N_UBATCH, flash_attn=True,
                          n_threads=ref.N_THREADS, n_threads_batch=ref.N_THREADS,
                          logits_all=True, seed=ref.SEED, verbose=False)
    n = agree = off_tie = 0
    max_d = sum_d = 0.0
    n_d = 0
    worst_gap = 0.0
    # vs the exact pass: name -> [sum |diff|, pairs, argmax agreements]
    vs = {k: [0.0, 0, 0] for k in ("llama.cpp one-token", "llama.cpp batched", "pagoda")}
    for ri, r in enumerate(recs):
        seq = r["tokens"] + r["greedy"]
        rows = ref.teacher_forced(llm, seq)
        exact = ex.logits(seq) if ex else None
        for i, top in sorted(r["pos"].items()):
            row = rows[i]
            ours = int(row.argmax())
            gap = top[0][1] - top[1][1]
            n += 1
            if ours == top[0][0]:
                agree += 1
            elif gap >= NEAR_TIE:
                off_tie += 1
                worst_gap = max(worst_gap, gap)
            for tid, lg in top:
                d = abs(float(row[tid]) - lg)
                max_d = max(max_d, d)
                sum_d += d
                n_d += 1
            if exact is None:
                continue
            e = exact[i]
            best = int(e.argmax())
            got = {"llama.cpp one-token": dict(top),
                   "llama.cpp batched": {tid: float(row[tid]) for tid, _ in top}}
            if pag is not None and (ri, i) in pag:
                got["pagoda"] = pag[(ri, i)]
            for name, lgs in got.items():
                acc = vs[name]
                for tid, lg in lgs.items():
                    acc[0] += abs(lg - e[tid])
                    acc[1] += 1
                acc[2] += max(lgs, key=lambda t: (lgs[t], -t)) == best
    print(f"llama-self-check: {os.path.basename(model)}: llama.cpp batched vs its one-token data: "
          f"agreement {agree}/{n} ({100.0 * agree / n:.2f}%), {off_tie} disagreements away from "
          f"near-ties (largest gap {worst_gap:.2f}), top-16 logits max |diff| {max_d:.3f} "
          f"mean {sum_d / n_d:.4f}")
    if ex:
        for name, (sd, nd, ag) in vs.items():
            if nd:
                print(f"llama-self-check: {os.path.basename(model)}: {name} vs the exact float64 pass: "
                      f"mean |diff| {sd / nd:.4f} over {nd} logits, argmax agrees at "
                      f"{ag}/{nd // 16} ({1600.0 * ag / nd:.2f}%)")


if __name__ == "__main__":
    main()
