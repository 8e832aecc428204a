#!/usr/bin/env python3
# PyTorch peer of `npm run bench:vision -- --torch PY` and of scripts/device/tower-check.sh: a random-init
# transformers vision tower built from the vision_config of the checkpoint rapid runs. Qwen2.5-VL (patch embed,
# window/full sdpa blocks, merger; the default), Qwen3-VL (with its DeepStack mergers) or Gemma 3 (SigLIP + the multi-modal projector). On the CPU in f32
# with rapid's thread count, or on CUDA (--device cuda, --dtype bf16: sdpa on the GPU). --images N runs N images
# per forward (Qwen: one forward over N grids, as transformers batches them; Gemma 3: a batch of N). Timing does
# not depend on the weight values, so none are loaded. Reads one line per round on stdin ("run"), runs the
# forward under torch.inference_mode, answers {"ms": wall, "cpuMs": process CPU} on stdout; progress on stderr.
import argparse
import json
import sys
import time

import torch


def qwen_classes(family):
    """transformers' vision config and model classes of a Qwen-VL family (both take pixels + grid_thw)."""
    if family == "qwen3_vl":
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel
        return Qwen3VLVisionConfig, Qwen3VLVisionModel
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    return Qwen2_5_VLVisionConfig, Qwen2_5_VisionTransformerPretrainedModel


def build_qwen(family, vc, grid, images, device, dtype):
    config_cls, model_cls = qwen_classes(family)
    cfg = config_cls(**{k: v for k, v in vc.items() if k != "model_type"})
    cfg._attn_implementation = "sdpa"
    model = model_cls(cfg).to(device=device, dtype=dtype).eval()
    t, h, w = grid
    row = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size
    pixels = torch.randn(images * t * h * w, row, dtype=dtype, device=device)
    grid_thw = torch.tensor([[t, h, w]] * images, device=device)
    return lambda: model(pixels, grid_thw=grid_thw)


def build_gemma3(config, images, device, dtype):
    from transformers import Gemma3Config
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector
    from transformers.models.siglip.modeling_siglip import SiglipVisionModel

    cfg = Gemma3Config(vision_config=config["vision_config"], text_config=config.get("text_config", {}),
                       mm_tokens_per_image=config.get("mm_tokens_per_image", 256))
    cfg.vision_config._attn_implementation = "sdpa"
    tower = SiglipVisionModel(cfg.vision_config).to(device=device, dtype=dtype).eval()
    proj = Gemma3MultiModalProjector(cfg).to(device=device, dtype=dtype).eval()
    size = cfg.vision_config.image_size
    pixels = torch.randn(images, 3, size, size, dtype=dtype, device=device)
    return lambda: proj(tower(pixel_values=pixels).last_hidden_state)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="the checkpoint's config.json (its vision_config is used)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--grid", type=int, nargs=3, default=[1, 32, 32], help="Qwen: t h w patches (448x448: 1 32 32 at patch 14, 1 28 28 at 16)")
    ap.add_argument("--family", choices=["qwen2_5_vl", "gemma3", "qwen3_vl"], default="qwen2_5_vl")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--images", type=int, default=1, help="images per forward")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    with open(a.config) as f:
        config = json.load(f)
    with torch.inference_mode():
        if a.family == "gemma3":
            forward = build_gemma3(config, a.images, a.device, dtype)
        else:
            forward = build_qwen(a.family, config["vision_config"], a.grid, a.images, a.device, dtype)
        sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
        print(f"torch {torch.__version__}, {a.family} on {a.device} {a.dtype}, {torch.get_num_threads()} threads, "
              f"{a.images} image(s), grid {a.grid}", file=sys.stderr)
        for _ in range(2 if a.device == "cuda" else 1):  # warm-up: allocations, kernel selection (CUDA: twice)
            forward()
        sync()
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            t0, c0 = time.perf_counter(), time.process_time()
            forward()
            sync()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(json.dumps({"ms": wall * 1000.0, "cpuMs": cpu * 1000.0}), flush=True)


if __name__ == "__main__":
    main()
