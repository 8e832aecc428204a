"""Per-shape errors in JSON answers on user scenes of 3-5 shapes (the training renderer, its own seed), by
what run 5 got wrong on the independent set: a shape's kind by radius at the model's input, JPEG and a
same-coloured neighbour; a small shape called large by its radius (fraction of the short side).
transformers greedy, bf16 on the CPU (about a minute for 160 pictures).

  python3 shape_probe.py MODEL_DIR [PICTURES]
"""
import json
import sys
from collections import Counter

import numpy as np

from golden import generate, load_model
from pil_resize import smart_resize
from user_dialogues import user_image_question
from user_raster import model_image, sample_look
from user_scenes import sample_size, sample_user_scene

PROBE_SEED = 77003


def buckets(scene, shape, look):
    model_short = min(smart_resize(scene["height"], scene["width"]))
    rpx = shape["r"] * model_short
    same = sum(s["color"] == shape["color"] for s in scene["shapes"]) > 1
    return ["all", f"kind={shape['kind']}", f"radius={'<8' if rpx < 8 else '8-12' if rpx < 12 else '>=12'} px",
            f"jpeg={'yes' if look['jpeg'] else 'no'}", f"same-colour neighbour={'yes' if same else 'no'}"]


def main():
    import torch
    torch.set_num_threads(1)
    model, tok = load_model(sys.argv[1], "cpu")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 160
    rng = np.random.default_rng(PROBE_SEED)
    reqs, meta = [], []
    for _ in range(n):
        scene = sample_user_scene(rng, sample_size(rng), int(rng.integers(3, 6)))
        look = sample_look(rng)
        _, q, _ = user_image_question(rng, scene, "json")
        reqs.append((q, model_image(scene, look)))
        meta.append((scene, look))
    outs = generate(model, tok, reqs, "cpu", batch_size=20)
    tot, bad, conf = Counter(), Counter(), Counter()
    small, called_large, unparsed = Counter(), Counter(), 0
    for (scene, look), out in zip(meta, outs):
        try:
            said = {g["position"]: g for g in json.loads(out)["shapes"]}
        except (ValueError, KeyError, TypeError):
            unparsed += 1
            continue
        for s in scene["shapes"]:
            g = said.get(s["position"])
            if g is None:
                continue
            wrong = g.get("kind") != s["kind"]
            conf[(s["kind"], g.get("kind"))] += wrong
            for b in buckets(scene, s, look):
                tot[b] += 1
                bad[b] += wrong
            if s["size"] == "small":
                band = "small r < 0.09" if s["r"] < 0.09 else "small r 0.09-0.105"
                small[band] += 1
                called_large[band] += g.get("size") != "small"
    for b in sorted(tot):
        print(f"kind wrong, {b:30s} {bad[b]:4d}/{tot[b]:<4d} = {bad[b] / tot[b]:.1%}")
    for b in sorted(small):
        print(f"called large, {b:27s} {called_large[b]:4d}/{small[b]:<4d} = {called_large[b] / small[b]:.1%}")
    print("kind confusions (true, said):", [(k, c) for k, c in conf.most_common() if c])
    print(f"answers that are not JSON with shapes: {unparsed}/{n}")


if __name__ == "__main__":
    main()
