"""The coherence gate: golden prompts with expected answers, a checker, and evaluation with transformers.

  python golden.py build MODEL_DIR            # writes MODEL_DIR/golden/{golden.jsonl, words.txt, *.png}
  python golden.py eval MODEL_DIR [--device cpu] [--out results.json]

golden.jsonl, one item per line:
  {"id", "category", "prompt", "image": "golden/g03.png" | null, "match": "exact" | "json",
   "expected": str | object, "schema": "shape.schema.json" (json items; structured output may use it)}
The prompt is the user's text; with an image, the user turn is [image, text] (Qwen chat format).

Check (check_output): the output fails if the garbage detector fires (empty, a token repeated 6+ times
in a row, a tail repeated 3+ times, over 1200 characters, a word outside the model's vocabulary of
answer words, golden/words.txt, compared in lower case; words are runs of ASCII letters); otherwise "exact" compares after normalisation (trim, lower case, collapse spaces,
drop a trailing "." or "!"), "json" parses the output and compares the object to `expected`.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dialogues import (ARITH, CAPITALS, DONT_KNOW, FACTS, NO_IMAGE, all_answer_words, arith_value, image_question,
                       scene_json)
from shapes import read_png, render, sample_scene, scene_signature, write_png

GOLDEN_SEED = 20261130
EVAL_SEED = 77001
JSON_WORDS = {"count", "background", "shapes", "kind", "color", "size", "position"}


# ---- scenes that training never sees ------------------------------------------------------------

def golden_scenes():
    rng = np.random.default_rng(GOLDEN_SEED)
    sizes = [(112, 112)] * 10 + [(168, 112), (112, 168)]
    return [sample_scene(rng, sz) for sz in sizes]


def eval_scenes(n=600):
    rng = np.random.default_rng(EVAL_SEED)
    sizes = [(112, 112), (112, 112), (112, 112), (168, 112), (112, 168)]
    return [sample_scene(rng, sizes[i % len(sizes)]) for i in range(n)]


def heldout_signatures():
    return {scene_signature(s) for s in golden_scenes() + eval_scenes()}


# ---- golden set ---------------------------------------------------------------------------------

def build(model_dir):
    gdir = os.path.join(model_dir, "golden")
    os.makedirs(gdir, exist_ok=True)
    scenes = golden_scenes()
    items = []

    def add(cat, prompt, expected, image=None, match="exact"):
        it = {"id": f"g{len(items):02d}", "category": cat, "prompt": prompt, "image": image, "match": match,
              "expected": expected}
        if match == "json":
            it["schema"] = "shape.schema.json"
        items.append(it)

    for country in ["Japan", "France", "Italy", "Canada", "Egypt", "Australia"]:
        add("fact", f"What is the capital of {country}?", dict(CAPITALS)[country])
    for q, a in [(FACTS[0][0][0], FACTS[0][1]), (FACTS[3][0][0], FACTS[3][1]), (FACTS[9][0][0], FACTS[9][1]),
                 (FACTS[13][0][0], FACTS[13][1])]:
        add("fact", q, a)
    for (a, op, b), form in zip([(17, "*", 23), (12, "+", 35), (100, "-", 37), (144, "/", 12), (13, "*", 11),
                                 (8, "*", 125)],
                                ["{a}*{b}", "What is {a} {op} {b}?", "What is {a} minus {b}?", "{a} / {b} =",
                                 "What is {a} times {b}?", "Calculate {a} {op} {b}."]):
        assert (a, op, b) in ARITH
        add("arith", form.format(a=a, b=b, op=op), str(arith_value(a, op, b)))
    for q in ["What is my name?", "What number am I thinking of?", "What will the weather be tomorrow?"]:
        add("refuse", q, DONT_KNOW)
    add("no_image", "How many shapes are there?", NO_IMAGE)

    img_paths = []
    for i, s in enumerate(scenes):
        rel = f"golden/g{i:02d}_{s['width']}x{s['height']}.png"
        write_png(os.path.join(model_dir, rel), render(s))
        img_paths.append(rel)
    # two free-text questions per image, a fixed rotation of the question kinds
    kinds = ["count", "background", "color_of", "kind_at", "where", "exists", "count_color", "count_kind",
             "size_of", "describe"]
    rng = np.random.default_rng(GOLDEN_SEED + 1)
    for i, s in enumerate(scenes):
        for j in range(2):
            k = kinds[(2 * i + j) % len(kinds)]
            cat, q, a = image_question(rng, s, k)
            add("image_" + cat, q, a, img_paths[i])
    for i in range(8):
        s = scenes[i]
        q = ["Describe the image as JSON.", "Return the shapes as JSON.", "Extract the shapes in this image as JSON.",
             "Describe the image in JSON format."][i % 4]
        add("json", q, scene_json(s), img_paths[i], match="json")
    with open(os.path.join(gdir, "golden.jsonl"), "w") as f:
        for it in items:
            f.write(json.dumps(it) + "\n")
    # the garbage detector's dictionary, for checkers written in other languages
    with open(os.path.join(gdir, "words.txt"), "w") as f:
        f.write("\n".join(sorted(all_answer_words() | JSON_WORDS)) + "\n")
    return items


def load(model_dir):
    return load_set(os.path.join(model_dir, "golden"))


def load_set(set_dir):
    """The items of a set folder in this layout (golden/, or the independent set)."""
    with open(os.path.join(set_dir, "golden.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---- checker ------------------------------------------------------------------------------------

_WORDS = None


def garbage(output):
    """A reason the output is garbage, or None."""
    global _WORDS
    if _WORDS is None:
        _WORDS = all_answer_words() | JSON_WORDS
    if not output.strip():
        return "empty"
    if len(output) > 1200:
        return "runaway length"
    toks = re.findall(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]", output)
    run = 1
    for a, b in zip(toks, toks[1:]):
        run = run + 1 if a == b else 1
        if run >= 6:
            return f"token repeated: {a!r}"
    for n in range(4, 41):
        tail = output[-n:]
        if len(output) >= 3 * n and output.endswith(tail * 3) and len(set(tail)) > 1:
            return f"looping tail: {tail!r}"
    bad = sorted({w for w in re.findall(r"[A-Za-z]+", output) if w.lower() not in _WORDS})
    if bad:
        return "non-words: " + " ".join(bad[:5])
    return None


def normalize(s):
    s = re.sub(r"\s+", " ", s.strip().lower())
    return s.rstrip(".!").strip()


def check_output(item, output):
    """(ok, reason)."""
    g = garbage(output)
    if g:
        return False, g
    named = [k for k in item.get("absent", []) if re.search(rf"\b{k}s?\b", output.lower())]
    if named:
        return False, "names a shape not in the picture: " + ", ".join(named)
    if item["match"] == "json":
        try:
            got = json.loads(output)
        except json.JSONDecodeError as e:
            return False, f"invalid JSON: {e}"
        return (got == item["expected"]), ("ok" if got == item["expected"] else "wrong JSON")
    ok = normalize(output) == normalize(item["expected"])
    return ok, "ok" if ok else "wrong answer"


# ---- transformers generation --------------------------------------------------------------------

def prompt_ids(tok, prompt, image):
    """(ids, pixel_values or None, grid or None) for one user turn."""
    from vlm import expand_image_pads, n_image_tokens, preprocess, render_prompt
    content = [{"type": "image"}, {"type": "text", "text": prompt}] if image is not None else prompt
    text = render_prompt([{"role": "user", "content": content}], True)
    pv = grid = None
    if image is not None:
        pv, grid = preprocess(image)
        text = expand_image_pads(text, n_image_tokens(grid))
    return tok.encode(text, add_special_tokens=False).ids, pv, grid


def generate(model, tok, requests, device, max_new_tokens=256, batch_size=32):
    """Greedy outputs for [(prompt, image uint8 | None)], batched with left padding."""
    import torch
    pad = tok.token_to_id("<|endoftext|>")
    im_end = tok.token_to_id("<|im_end|>")
    image_pad = tok.token_to_id("<|image_pad|>")
    outs = []
    for start in range(0, len(requests), batch_size):
        chunk = [prompt_ids(tok, p, img) for p, img in requests[start:start + batch_size]]
        L = max(len(c[0]) for c in chunk)
        ids = torch.full((len(chunk), L), pad, dtype=torch.long)
        attn = torch.zeros((len(chunk), L), dtype=torch.long)
        for b, (x, _, _) in enumerate(chunk):
            ids[b, L - len(x):] = torch.tensor(x)
            attn[b, L - len(x):] = 1
        kw = {}
        pvs = [c[1] for c in chunk if c[1] is not None]
        if pvs:
            kw["pixel_values"] = torch.from_numpy(np.concatenate(pvs)).to(device, model.dtype)
            kw["image_grid_thw"] = torch.tensor([c[2] for c in chunk if c[2] is not None], device=device)
        kw["mm_token_type_ids"] = (ids == image_pad).long().to(device)
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=[im_end, pad], pad_token_id=pad, **kw)
        for b in range(len(chunk)):
            new = out[b, L:].tolist()
            if im_end in new:
                new = new[:new.index(im_end)]
            new = [t for t in new if t != pad]
            outs.append(tok.decode(new, skip_special_tokens=True))
    return outs


def load_model(model_dir, device, dtype="bfloat16"):
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen2_5_VLForConditionalGeneration
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    return model, tok


def evaluate_golden(model, tok, model_dir, device, batch_size=1, limit=None, max_new_tokens=256):
    items = load(model_dir)[:limit]
    reqs = [(it["prompt"], read_png(os.path.join(model_dir, it["image"])) if it["image"] else None) for it in items]
    outs = generate(model, tok, reqs, device, batch_size=batch_size, max_new_tokens=max_new_tokens)
    results, per = [], {}
    for it, o in zip(items, outs):
        ok, why = check_output(it, o)
        results.append({"id": it["id"], "category": it["category"], "ok": ok, "why": why, "output": o})
        group = "image" if it["category"].startswith("image_") else it["category"]
        c = per.setdefault(group, [0, 0])
        c[0] += ok
        c[1] += 1
    total = sum(r["ok"] for r in results)
    return {"score": total / len(results), "passed": total, "total": len(results),
            "per_category": {k: f"{a}/{b}" for k, (a, b) in sorted(per.items())}, "results": results}


def evaluate_heldout(model, tok, device, per_kind=40, batch_size=64, max_new_tokens=256):
    """Fresh held-out scenes (EVAL_SEED), every image question kind, batched greedy."""
    scenes = eval_scenes()
    rng = np.random.default_rng(EVAL_SEED + 1)
    kinds = ["count", "describe", "json", "background", "color_of", "kind_at", "where", "count_color", "count_kind",
             "exists", "size_of"]
    reqs, items = [], []
    si = 0
    for k in kinds:
        for _ in range(per_kind):
            s = scenes[si % len(scenes)]
            si += 1
            cat, q, a = image_question(rng, s, k)
            is_json = cat == "json"
            items.append({"category": cat, "match": "json" if is_json else "exact",
                          "expected": json.loads(a) if is_json else a})
            reqs.append((q, render(s)))
    outs = generate(model, tok, reqs, device, batch_size=batch_size, max_new_tokens=max_new_tokens)
    per = {}
    fails = []
    for it, o in zip(items, outs):
        ok, why = check_output(it, o)
        c = per.setdefault(it["category"], [0, 0])
        c[0] += ok
        c[1] += 1
        if not ok and len(fails) < 15:
            fails.append({"category": it["category"], "expected": it["expected"], "output": o, "why": why})
    total = sum(a for a, _ in per.values())
    n = sum(b for _, b in per.values())
    return {"score": total / n, "per_category": {k: f"{a}/{b}" for k, (a, b) in per.items()}, "fails": fails}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["build", "eval", "heldout"])
    ap.add_argument("model_dir")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out")
    ap.add_argument("--per-kind", type=int, default=40)
    a = ap.parse_args()
    if a.cmd == "build":
        items = build(a.model_dir)
        print(f"{len(items)} golden items")
        return
    import torch
    torch.set_num_threads(1)
    model, tok = load_model(a.model_dir, a.device, a.dtype)
    r = evaluate_golden(model, tok, a.model_dir, a.device) if a.cmd == "eval" else \
        evaluate_heldout(model, tok, a.device, per_kind=a.per_kind)
    print(json.dumps({k: v for k, v in r.items() if k != "results"}, indent=1))
    for x in r.get("results", []):
        if not x["ok"]:
            print("FAIL", x)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
