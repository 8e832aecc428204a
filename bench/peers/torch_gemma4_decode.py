#!/usr/bin/env python3
# PyTorch eager bf16 peer of `node bench/run.js gemma4 --device cuda`: a random-init transformers Gemma4ForCausalLM of
# the gemma-4-e2b text shape (src/bench/gemma4.ts GEMMA4_E2B: PLE, 20 KV-shared layers, double-wide MLP, 512-wide
# full layers) on one CUDA device (sdpa attention); a batch of random prompts prefilled in one forward, then a manual
# greedy loop over the model's own cache. Only decode steps are timed, between synchronizes. One JSON line per level:
# {"shape", "level", "tokS", "msPerStep", ...}; progress to stderr. --device cpu --shape tiny: a smoke test.
import argparse
import json
import os
import sys
import time

import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_decode import decode_seconds  # noqa: E402  (the same timed greedy loop as bench:cuda's peer)

SHAPES = {
    "e2b": dict(hidden_size=1536, num_hidden_layers=35, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                global_head_dim=512, intermediate_size=6144, hidden_size_per_layer_input=256, num_kv_shared_layers=20,
                vocab_size=262144, vocab_size_per_layer_input=262144, sliding_window=512, full_every=5),
    "tiny": dict(hidden_size=64, num_hidden_layers=10, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                 global_head_dim=64, intermediate_size=128, hidden_size_per_layer_input=16, num_kv_shared_layers=4,
                 vocab_size=512, vocab_size_per_layer_input=512, sliding_window=16, full_every=5),
}
WARMUP_STEPS = 4


def make_model(shape: str, device: torch.device) -> Gemma4ForCausalLM:
    s = dict(SHAPES[shape])
    every = s.pop("full_every")
    n = s["num_hidden_layers"]
    layer_types = ["full_attention" if (i + 1) % every == 0 or i == n - 1 else "sliding_attention" for i in range(n)]
    config = Gemma4TextConfig(
        **s,
        layer_types=layer_types,
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=131072,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        use_cache=True,
    )
    config._attn_implementation = "sdpa"
    with device:  # built on the device in bf16: a CPU fp32 init would dominate
        return Gemma4ForCausalLM._from_config(config, dtype=torch.bfloat16).eval()


def main() -> int:
    ap = argparse.ArgumentParser(description="PyTorch eager bf16 Gemma 4 E2B decode peer")
    ap.add_argument("--shape", default="e2b")
    ap.add_argument("--levels", default="1,8")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch gemma4 peer: CUDA is not available to this torch", file=sys.stderr)
        return 1
    gen = torch.Generator(device=device).manual_seed(1)
    t0 = time.perf_counter()
    model = make_model(a.shape, device)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"torch gemma4 peer: {a.shape} built in {time.perf_counter() - t0:.1f} s, {weight_bytes / 1e6:.1f} MB bf16",
          file=sys.stderr)
    for level in [int(x) for x in a.levels.split(",") if x.strip()]:
        decode_seconds(model, level, a.prompt, WARMUP_STEPS, gen)
        secs = decode_seconds(model, level, a.prompt, a.gen, gen)
        row = {"shape": a.shape, "level": level, "tokS": level * a.gen / secs, "msPerStep": 1000 * secs / a.gen,
               "prompt": a.prompt, "gen": a.gen, "weightBytes": weight_bytes, "torch": torch.__version__,
               "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
        print(json.dumps(row), flush=True)
        print(f"torch gemma4 peer: concurrency {level}: {row['tokS']:.1f} tok/s ({row['msPerStep']:.2f} ms/step)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
