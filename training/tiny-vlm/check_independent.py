"""Checks that no prompt of the independent set (models/tiny-vlm/independent) is one the training data
produces: every user-template expansion (exhaustive over slots and prefixes) and 200k sampled prompts of
the shipped generator (dialogues.py), compared after _vary's normalisation (case, end punctuation, prefixes).

  python3 check_independent.py [MODEL_DIR]      # exits 1 and lists the prompts training also produces
"""
import itertools
import json
import os
import re
import sys

import numpy as np

from dialogues import text_question, image_question
from shapes import COLOR_NAMES, KINDS, POSITIONS, sample_scene
from user_dialogues import (ARITH_FORMS, COL_WORDS, EMBED, FUTURE, IMG_WORDS, LEADS, MY_THINGS, OPS, PERSONAL, REFUSE,
                            REFUSE_FORMS, T, user_image_question, user_text_question)
from user_scenes import sample_user_scene
from dialogues import PLURAL, _where

PREFIX_RE = re.compile(r"^(please answer: |look at the (image|picture|photo|drawing)\. |question: )")


def norm(q):
    q = q.strip().lower()
    while PREFIX_RE.match(q):
        q = PREFIX_RE.sub("", q)
    return q.rstrip("?.! ")


def template_prompts():
    out = set()
    slots = {"img": IMG_WORDS, "col": COL_WORDS, "k": KINDS, "ks": list(PLURAL.values()), "c": COLOR_NAMES,
             "where": [_where(p) for p in POSITIONS]}
    embedded = [lead.replace("{x}", core) for cores in EMBED.values() for core in cores for lead in LEADS]
    for ts in list(T.values()) + [embedded]:
        for t in ts:
            names = sorted(set(re.findall(r"{(\w+)}", t)))
            for combo in itertools.product(*(slots[n] for n in names)):
                out.add(norm(t.format(**dict(zip(names, combo)))))
    for q in REFUSE + FUTURE + PERSONAL + [f.format(t=t) for f in REFUSE_FORMS for t in MY_THINGS]:
        out.add(norm(q))
    return out


def sampled_prompts(n=200_000):
    rng = np.random.default_rng(0)
    out = set()
    for i in range(n):
        if i % 4 == 0:
            out.add(norm(text_question(rng)[1]))
        elif i % 4 == 1:
            out.add(norm(image_question(rng, sample_scene(rng))[1]))
        elif i % 4 == 2:
            out.add(norm(user_text_question(rng)[1]))
        else:
            out.add(norm(user_image_question(rng, sample_user_scene(rng, (112, 112)))[1]))
    return out


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny-vlm")
    with open(os.path.join(model_dir, "independent", "golden.jsonl")) as f:
        items = [json.loads(line) for line in f if line.strip()]
    seen = template_prompts() | sampled_prompts()
    clash = [it["prompt"] for it in items if norm(it["prompt"]) in seen]
    # arithmetic: any "a op b" form of the templates with these numbers
    for it in items:
        if it["category"] != "arithmetic":
            continue
        m = re.search(r"(\d+) ?([-+*/x×]) ?(\d+)", it["prompt"])
        a, s, b = m.groups()
        for form in ARITH_FORMS:
            for sym in {s}:
                for w in sum((ws for _, ws in OPS.values()), []):
                    if norm(form.format(a=a, b=b, s=sym, w=w)) == norm(it["prompt"]):
                        clash.append(it["prompt"])
    print(f"{len(items)} independent prompts, {len(seen)} distinct training prompts; {len(clash)} shared")
    for q in clash:
        print("  SHARED:", q)
    sys.exit(1 if clash else 0)


if __name__ == "__main__":
    main()
