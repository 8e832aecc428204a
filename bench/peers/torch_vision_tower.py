#!/usr/bin/env python3
# PyTorch f32 peer of `npm run bench:vision -- --torch PY`: a random-init transformers Qwen2.5-VL vision
# tower (patch embed, 32 blocks of window/full sdpa attention, merger) built from the vision_config of
# the checkpoint rapid runs, on the CPU with the same thread count. Timing does not depend on the weight
# values, so none are loaded. Reads one line per round on stdin ("run"), runs one image of the given
# grid through the tower under torch.inference_mode, answers {"ms": wall, "cpuMs": process CPU} on stdout;
# progress on stderr.
import argparse
import json
import sys
import time

import torch
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="the checkpoint's config.json (its vision_config is used)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--grid", type=int, nargs=3, default=[1, 32, 32], help="t h w patches (448x448: 1 32 32)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        vc = json.load(f)["vision_config"]
    cfg = Qwen2_5_VLVisionConfig(**{k: v for k, v in vc.items() if k != "model_type"})
    cfg._attn_implementation = "sdpa"
    model = Qwen2_5_VisionTransformerPretrainedModel(cfg).float().eval()
    t, h, w = a.grid
    row = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size
    pixels = torch.randn(t * h * w, row, dtype=torch.float32)
    grid = torch.tensor([[t, h, w]])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, grid {a.grid}", file=sys.stderr)
    with torch.inference_mode():
        model(pixels, grid_thw=grid)  # warm-up: first-call allocations and kernel selection
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            t0, c0 = time.perf_counter(), time.process_time()
            model(pixels, grid_thw=grid)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(json.dumps({"ms": wall * 1000.0, "cpuMs": cpu * 1000.0}), flush=True)


if __name__ == "__main__":
    main()
