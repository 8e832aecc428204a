#!/usr/bin/env python3
# llama.cpp input of `npm run bench:cuda -- --peer-llama DIR --gguf-0.5b F --gguf-3b F`: a random-weight Q4_0 GGUF
# of the Qwen2.5-0.5B / 3B shape (the shapes of src/bench/random-checkpoint.ts: tied embeddings, q/k/v biases,
# rope theta 1e6), or (--gguf-30b-a3b) of the Qwen3-30B-A3B MoE decoder as llama.cpp's qwen3moe architecture (the
# shape of src/bench/moe.ts: 128 experts top-8, expert FFN 768, q/k norms, untied head; --layers as bench:cuda's
# --moe-layers; the router gate f32 as llama.cpp's converter writes it). Q4_0 blocks are random bytes under one small f16 scale, so every weight is finite; speed does
# not depend on the values. The vocabulary is llama.cpp's "no_vocab" (ids only): llama-batched-bench feeds random
# ids and never detokenizes. Needs numpy and llama.cpp's gguf-py (its checkout's gguf-py folder, or pip's `gguf`).
#   python3 bench/peers/random_gguf.py 3b /tmp/qwen2.5-3b-q4_0.gguf --gguf-py ~/llama.cpp/gguf-py
#   python3 bench/peers/random_gguf.py 30b-a3b /tmp/qwen3-30b-a3b-q4_0.gguf --layers 48 --gguf-py ~/llama.cpp/gguf-py
import argparse
import sys

import numpy as np

SHAPES = {
    # hidden, layers, heads, kv heads, head dim, ffn
    "0.5b": dict(h=896, layers=24, heads=14, kv=2, hd=64, ffn=4864),
    "3b": dict(h=2048, layers=36, heads=16, kv=2, hd=128, ffn=11008),
}
MOE_SHAPES = {
    # hidden, layers, heads, kv heads, head dim, dense ffn (unused by its layers), experts, top-k, expert ffn
    "30b-a3b": dict(h=2048, layers=48, heads=32, kv=4, hd=128, ffn=6144, experts=128, top_k=8, moe_ffn=768),
}
VOCAB = 151936
Q4_0_BLOCK = 32  # weights per block: an f16 scale and 16 bytes of nibbles


def main() -> int:
    ap = argparse.ArgumentParser(description="Writes a random-weight Q4_0 GGUF of a bench:cuda shape.")
    ap.add_argument("shape", choices=sorted(SHAPES) + sorted(MOE_SHAPES))
    ap.add_argument("out")
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py folder (default: the installed gguf package)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, help="decoder layers of a MoE shape (default: all)")
    a = ap.parse_args()
    if a.gguf_py:
        sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402  (after the path above)

    moe = a.shape in MOE_SHAPES
    s = dict(MOE_SHAPES[a.shape] if moe else SHAPES[a.shape])
    if a.layers:
        s["layers"] = a.layers
    rng = np.random.default_rng(a.seed)
    scale = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    q4 = gguf.GGMLQuantizationType.Q4_0

    def q4_0(rows: int, cols: int, stack: int = 0) -> np.ndarray:
        lead = (stack, rows) if stack else (rows,)
        b = rng.integers(0, 256, size=(*lead, cols // Q4_0_BLOCK, 2 + Q4_0_BLOCK // 2), dtype=np.uint8)
        b[..., 0:2] = scale
        return b.reshape(*lead, -1)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    def bias(n: int) -> np.ndarray:
        return rng.standard_normal(n).astype(np.float32) * 0.02

    if moe:
        return write_moe(gguf, a.out, s, q4_0, ones, rng)
    w = header(gguf, a.out, "qwen2", s, 1e6)
    h, qd, kd = s["h"], s["heads"] * s["hd"], s["kv"] * s["hd"]
    w.add_tensor("token_embd.weight", q4_0(VOCAB, h), raw_dtype=q4)  # tied: also the output head
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(h))
        for name, rows in (("attn_q", qd), ("attn_k", kd), ("attn_v", kd)):
            w.add_tensor(p + name + ".weight", q4_0(rows, h), raw_dtype=q4)
            w.add_tensor(p + name + ".bias", bias(rows))
        w.add_tensor(p + "attn_output.weight", q4_0(h, qd), raw_dtype=q4)
        w.add_tensor(p + "ffn_norm.weight", ones(h))
        w.add_tensor(p + "ffn_gate.weight", q4_0(s["ffn"], h), raw_dtype=q4)
        w.add_tensor(p + "ffn_up.weight", q4_0(s["ffn"], h), raw_dtype=q4)
        w.add_tensor(p + "ffn_down.weight", q4_0(h, s["ffn"]), raw_dtype=q4)
    w.add_tensor("output_norm.weight", ones(h))
    return finish(w, a.out)


def header(gguf, out: str, arch: str, s: dict, rope_base: float):
    """A GGUFWriter with the keys both architectures take (ids-only vocabulary, Q4_0)."""
    w = gguf.GGUFWriter(out, arch)
    w.add_context_length(32768)
    w.add_embedding_length(s["h"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("no_vocab")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    return w


def write_moe(gguf, out: str, s: dict, q4_0, ones, rng) -> int:
    """The qwen3moe GGUF (llama.cpp src/models/qwen3moe.cpp's tensors and keys)."""
    q4 = gguf.GGMLQuantizationType.Q4_0
    w = header(gguf, out, "qwen3moe", s, 5e6)
    w.add_key_length(s["hd"])
    w.add_value_length(s["hd"])
    w.add_expert_count(s["experts"])
    w.add_expert_used_count(s["top_k"])
    w.add_expert_feed_forward_length(s["moe_ffn"])
    h, qd, kd, E, I = s["h"], s["heads"] * s["hd"], s["kv"] * s["hd"], s["experts"], s["moe_ffn"]
    w.add_tensor("token_embd.weight", q4_0(VOCAB, h), raw_dtype=q4)
    for i in range(s["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(h))
        for name, rows in (("attn_q", qd), ("attn_k", kd), ("attn_v", kd)):
            w.add_tensor(p + name + ".weight", q4_0(rows, h), raw_dtype=q4)
        w.add_tensor(p + "attn_q_norm.weight", ones(s["hd"]))
        w.add_tensor(p + "attn_k_norm.weight", ones(s["hd"]))
        w.add_tensor(p + "attn_output.weight", q4_0(h, qd), raw_dtype=q4)
        w.add_tensor(p + "ffn_norm.weight", ones(h))
        w.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((E, h)) * 0.02).astype(np.float32))
        w.add_tensor(p + "ffn_gate_exps.weight", q4_0(I, h, E), raw_dtype=q4)  # [E, I, H]
        w.add_tensor(p + "ffn_up_exps.weight", q4_0(I, h, E), raw_dtype=q4)
        w.add_tensor(p + "ffn_down_exps.weight", q4_0(h, I, E), raw_dtype=q4)  # [E, H, I]
    w.add_tensor("output_norm.weight", ones(h))
    w.add_tensor("output.weight", q4_0(VOCAB, h), raw_dtype=q4)
    return finish(w, out)


def finish(w, out: str) -> int:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
