"""Held-out user scenes (their own seed, drawn by the training pipeline): per-intent accuracy with
transformers greedy, and hallucinated kinds on single-shape pictures. The independent set (drawn by
another renderer, in models/tiny-vlm/independent) is scored by `rapid doctor --coherence`."""
import json
import re

import numpy as np

from golden import check_output, generate
from shapes import KINDS
from user_dialogues import user_image_question
from user_raster import model_image, sample_look
from user_scenes import sample_size, sample_user_scene

USER_EVAL_SEED = 77002
INTENTS = ["count", "describe", "json", "background", "color_of", "kind_of_color", "kind_at", "where", "count_color",
           "count_kind", "exists", "exists_kind", "size_of", "color_one", "kind_one", "where_one"]


def named_absent_kinds(output, scene):
    """Shape kinds the output names (singular or plural) that are not in the picture."""
    present = {s["kind"] for s in scene["shapes"]}
    said = {k for k in KINDS if re.search(rf"\b{k}s?\b", output.lower())}
    return sorted(said - present)


def evaluate_user_heldout(model, tok, device, per_intent=20, batch_size=64):
    rng = np.random.default_rng(USER_EVAL_SEED)
    reqs, items = [], []
    for intent in INTENTS:
        for _ in range(per_intent):
            one = intent.endswith("_one")
            scene = sample_user_scene(rng, sample_size(rng), 1 if one or rng.random() < 0.3 else None)
            cat, q, a = user_image_question(rng, scene, intent)
            is_json = cat == "json"
            items.append({"intent": intent, "scene": scene, "match": "json" if is_json else "exact",
                          "expected": json.loads(a) if is_json else a})
            reqs.append((q, model_image(scene, sample_look(rng))))
    outs = generate(model, tok, reqs, device, batch_size=batch_size)
    per, fails, halluc = {}, [], 0
    for it, o in zip(items, outs):
        ok, why = check_output(it, o)
        if len(it["scene"]["shapes"]) == 1 and named_absent_kinds(o, it["scene"]):
            halluc += 1
        c = per.setdefault(it["intent"], [0, 0])
        c[0] += ok
        c[1] += 1
        if not ok and len(fails) < 20:
            fails.append({"intent": it["intent"], "expected": it["expected"], "output": o, "why": why})
    total = sum(a for a, _ in per.values())
    n = sum(b for _, b in per.values())
    return {"score": total / n, "per_intent": {k: f"{a}/{b}" for k, (a, b) in per.items()},
            "single_shape_hallucinations": halluc, "fails": fails}
