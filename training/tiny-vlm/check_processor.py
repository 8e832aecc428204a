"""Checks that this folder's preprocessing and prompts equal transformers' Qwen2.5-VL processor.

  python check_processor.py MODEL_DIR      # needs torchvision (the processor's video part imports it)

Compares, for images of each training size: the chat template text, input_ids (image pads expanded),
image_grid_thw and pixel_values; also AutoTokenizer against tokenizers on a mixed string.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from shapes import render, sample_scene  # noqa: E402
from vlm import expand_image_pads, n_image_tokens, preprocess, render_prompt  # noqa: E402


def main(d):
    from tokenizers import Tokenizer
    from transformers import AutoProcessor, AutoTokenizer
    proc = AutoProcessor.from_pretrained(d)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    rng = np.random.default_rng(3)
    ok = True
    for size in [(112, 112), (168, 112), (112, 168)]:
        img = render(sample_scene(rng, size))
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image as JSON."}]}]
        text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        o = proc(text=[text], images=[img], return_tensors="pt")
        pv, grid = preprocess(img)
        mine = tok.encode(expand_image_pads(render_prompt(msgs, True), n_image_tokens(grid)), add_special_tokens=False).ids
        same = (text == render_prompt(msgs, True) and tuple(o["image_grid_thw"][0].tolist()) == grid
                and o["input_ids"][0].tolist() == mine)
        diff = (o["pixel_values"].float() - torch.from_numpy(pv)).abs().max().item()
        print(f"{size}: template+ids+grid {'equal' if same else 'DIFFER'}, pixel max diff {diff:.2e}")
        ok = ok and same and diff < 1e-5
    at = AutoTokenizer.from_pretrained(d)
    s = '<|im_start|>user\nWhat is 17*23? {"count":3,"shapes":[{"kind":"circle"}]} héllo<|im_end|>'
    same = at(s)["input_ids"] == tok.encode(s, add_special_tokens=False).ids
    print("AutoTokenizer equal:", same)
    print("PROCESSOR CHECK", "OK" if ok and same else "FAILED")


if __name__ == "__main__":
    main(sys.argv[1])
