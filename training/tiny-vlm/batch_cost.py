"""CPU seconds per user batch (256 samples, with kind labels, collated) under run 4's pixel budget and
questions per picture against the current ones, in rounds, so a data-pipeline change is judged by a ratio
measured in the same process (the machine may be shared).

  python3 batch_cost.py [ROUNDS] [BATCHES]
"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as in a data worker

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

import pil_resize  # noqa: E402
import user_batches  # noqa: E402
import vlm  # noqa: E402
from batching import collate  # noqa: E402

RUN4 = (56 * 56, 168 * 112, 3)  # min_pixels, max_pixels, questions per picture
NOW = (vlm.MIN_PIXELS, vlm.MAX_PIXELS, user_batches.QUESTIONS_PER_PICTURE)


def seconds_per_batch(tok, setting, n):
    lo, hi, q = setting
    # smart_resize's defaults and patchify's bounds are read at call time, so both follow the setting
    pil_resize.smart_resize.__defaults__ = (vlm.PATCH * vlm.MERGE, lo, hi)
    vlm.MIN_PIXELS, vlm.MAX_PIXELS, user_batches.QUESTIONS_PER_PICTURE = lo, hi, q
    ids = vlm.special_ids(tok)
    t = time.time()
    for k in range(n):
        rng = np.random.default_rng([1234, 10000 + k])
        collate(tok, user_batches.sample_user_batch(rng, 256, True), ids["<|endoftext|>"], ids["<|image_pad|>"],
                512, True)
    return (time.time() - t) / n


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    tok = Tokenizer.from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                                           "tiny-vlm", "tokenizer.json"))
    for r in range(rounds):
        old, new = seconds_per_batch(tok, RUN4, n), seconds_per_batch(tok, NOW, n)
        print(f"round {r}: run 4 {old:.3f} s/batch, now {new:.3f} s/batch, now/run 4 {new / old:.2f}", flush=True)


if __name__ == "__main__":
    main()
