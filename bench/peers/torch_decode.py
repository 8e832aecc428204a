#!/usr/bin/env python3
# PyTorch eager bf16 peer of `npm run bench:cuda`: a random-init transformers Qwen2ForCausalLM of the
# Qwen2.5-0.5B / 3B shape on one CUDA device (sdpa attention), a batch of random prompts prefilled in
# one forward, then a manual greedy loop over the model's own KV cache (DynamicCache): no generate()
# overhead. Only the decode steps are timed, between torch.cuda.synchronize() calls. Prints one JSON
# object per (shape, level) line: {"shape", "level", "tokS", "msPerStep", ...}; progress goes to stderr.
import argparse
import json
import sys
import time

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {
    # hidden, layers, heads, kv heads, ffn, vocab; tied embeddings, rope theta 1e6 (Qwen2.5)
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864, vocab_size=151936),
    "3b": dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2, intermediate_size=11008, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, vocab_size=512),
}
WARMUP_STEPS = 4


def make_model(shape: str, device: torch.device) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        **SHAPES[shape],
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        use_cache=True,
    )
    config._attn_implementation = "sdpa"
    # Built directly on the device in bf16: a CPU fp32 init of 3B parameters would dominate the run.
    torch.set_default_dtype(torch.bfloat16)
    try:
        with device:
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(torch.float32)
    return model.to(device=device, dtype=torch.bfloat16).eval()


@torch.inference_mode()
def decode_seconds(model: Qwen2ForCausalLM, batch: int, prompt: int, steps: int, gen: torch.Generator) -> float:
    """Prefills `batch` random prompts, then times `steps` greedy decode steps of all rows together."""
    device = model.device
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), device=device, generator=gen)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    if type(cache).__name__ != "DynamicCache":
        raise RuntimeError(f"expected a DynamicCache from the prefill, got {type(cache).__name__}")
    nxt = out.logits[:, -1:, :].argmax(-1)  # [batch, 1]
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1:, :].argmax(-1)
    sync(device)
    elapsed = time.perf_counter() - t0
    if cache.get_seq_length() != prompt + steps:
        raise RuntimeError(f"KV cache holds {cache.get_seq_length()} tokens, expected {prompt + steps}")
    return elapsed


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> int:
    ap = argparse.ArgumentParser(description="PyTorch eager bf16 decode peer of bench:cuda")
    ap.add_argument("--shapes", default="0.5b,3b")
    ap.add_argument("--levels", default="1,8,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--device", default="cuda", help="cuda (the bench) or cpu (a smoke test of this script)")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch peer: CUDA is not available to this torch", file=sys.stderr)
        return 1
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    gen = torch.Generator(device=device).manual_seed(1)
    for shape in [s.strip() for s in a.shapes.split(",") if s.strip()]:
        if shape not in SHAPES:
            print(f"torch peer: unknown shape {shape}", file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        model = make_model(shape, device)
        # Tied head: parameters() yields the shared embedding once, and a decode step reads it once.
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"torch peer: {shape} built in {time.perf_counter() - t0:.1f} s, {weight_bytes / 1e6:.1f} MB bf16, "
              f"attention {model.config._attn_implementation}", file=sys.stderr)
        for level in levels:
            decode_seconds(model, level, a.prompt, WARMUP_STEPS, gen)
            secs = decode_seconds(model, level, a.prompt, a.gen, gen)
            row = {
                "shape": shape,
                "level": level,
                "tokS": level * a.gen / secs,
                "msPerStep": 1000 * secs / a.gen,
                "prompt": a.prompt,
                "gen": a.gen,
                "weightBytes": weight_bytes,
                "attention": model.config._attn_implementation,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "device": device_name,
            }
            print(json.dumps(row), flush=True)
            print(f"torch peer: {shape} concurrency {level}: {row['tokS']:.1f} tok/s ({row['msPerStep']:.2f} ms/step)", file=sys.stderr)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
