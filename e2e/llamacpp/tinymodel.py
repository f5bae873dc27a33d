"""Writes the tiny llama-architecture model vigil's llama.cpp tests run on.

Random weights (seeded, so every machine writes the same file), four layers,
and a byte-level BPE vocabulary of about 400 tokens learnt from the text
below: enough for llama-server to load it, tokenize any prompt and generate
(garbage) text at a pace a 2-core machine keeps up with. About 14 MB.

Usage: PYTHONPATH=<llama.cpp>/gguf-py /usr/bin/python3 tinymodel.py OUT.gguf
"""
import sys
from collections import Counter

import numpy as np
import gguf

N_VOCAB_MERGES = 140
N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 256, 4, 768, 4, 2048

CORPUS = """
the engine serves requests from a queue and the watchdog reads its counters
when the counters stop while work is pending the engine is hung and it is
restarted; when they advance under a deep queue the engine is saturated and
the operator is paged. the limiter caps the work in flight at the slots the
engine has, and answers the rest with a retry after that tells the truth.
"""


def bytes_to_unicode():
    """GPT-2's reversible map of the 256 bytes onto printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def learn_merges(text, byte_map, n):
    """A few rounds of BPE over the corpus's words (leading space kept, as GPT-2 does)."""
    words = Counter()
    for i, w in enumerate(text.split()):
        w = ("" if i == 0 else " ") + w
        words[tuple(byte_map[b] for b in w.encode())] += 1
    merges = []
    for _ in range(n):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        merges.append((a, b))
        merged = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


def main(path):
    byte_map = bytes_to_unicode()
    tokens = [byte_map[b] for b in range(256)]
    merges = learn_merges(CORPUS, byte_map, N_VOCAB_MERGES)
    tokens += [a + b for a, b in merges]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    bos, eos = len(tokens), len(tokens) + 1
    tokens += specials
    types += [gguf.TokenType.CONTROL] * len(specials)
    # Round the vocabulary up with unused tokens so its size is a multiple of 64.
    while len(tokens) % 64:
        tokens.append(f"<|unused_{len(tokens)}|>")
        types.append(gguf.TokenType.UNUSED)
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("vigil-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    rng = np.random.default_rng(38)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + name + ".weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", rand(n_vocab, N_EMBD))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tinymodel.py OUT.gguf")
    main(sys.argv[1])
