"""Trains the tiny Qwen2.5-VL-style model on procedural shape scenes and exports it.

  python train.py tokenizer OUT_DIR            # trains the BPE tokenizer, writes tokenizer files to OUT_DIR
  python train.py train --model-dir DIR --out OUT [--steps N] [--time-budget S] ...

`train` reads the tokenizer from --model-dir (shipped, so every run uses the same ids), trains with
deterministic seeds, saves the bf16 checkpoint plus tokenizer/processor files to OUT, then runs the
held-out eval and the golden gate with transformers greedy on the bf16 checkpoint.
"""
import argparse
import copy
import json
import math
import os
import shutil
import sys
import time

# before numpy loads: 14 data workers each with a multi-threaded BLAS would thrash the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dialogues import sample_dialogue  # noqa: E402
from golden import evaluate_golden, evaluate_heldout, heldout_signatures  # noqa: E402
from vlm import (MAX_PIXELS, MIN_PIXELS, encode_sample, generation_config_dict, make_config,  # noqa: E402
                 messages_for, normalize_patches, preprocessor_config, render_prompt, special_ids, train_tokenizer,
                 write_tokenizer_files)

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]


def cmd_tokenizer(a):
    from batching import fresh_scene_fn
    rng = np.random.default_rng(a.seed)
    fn = fresh_scene_fn(heldout_signatures())
    texts = []
    for _ in range(a.samples):
        s = sample_dialogue(rng, fn)
        texts.append(render_prompt(messages_for(s), False).replace("<|image_pad|>", " "))
    tok = train_tokenizer(texts, a.vocab)
    os.makedirs(a.out_dir, exist_ok=True)
    write_tokenizer_files(tok, a.out_dir)
    lens = []
    for _ in range(2000):
        s = sample_dialogue(rng, fn)
        lens.append(len(encode_sample(tok, s, 24)[0]))
    print(f"vocab {tok.get_vocab_size()} ids {special_ids(tok)}; sample length mean {np.mean(lens):.0f} "
          f"max {max(lens)}")


def lr_at(step, total, peak, warmup, floor=0.05):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def cmd_train(a):
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen2_5_VLForConditionalGeneration

    from batching import BatchStream, patch_vision_attention

    t0 = time.time()
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    patch_vision_attention()
    tok_path = os.path.join(a.model_dir, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    ids = special_ids(tok)
    cfg = make_config(tok)
    if a.init:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(a.init, dtype=torch.float32)
    else:
        model = Qwen2_5_VLForConditionalGeneration(cfg)
    model.config._attn_implementation = "sdpa"
    model.to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    n_vis = sum(p.numel() for p in model.model.visual.parameters())
    print(f"params {n_params} (vision {n_vis}); mrope {cfg.text_config.rope_parameters['mrope_section']}", flush=True)

    # Auxiliary kind loss (training only, not exported): a linear head on the merged vision tokens
    # predicts which shape kind covers each token, so the vision tower gets a direct gradient for kinds.
    aux_head, captured = None, {}
    if a.aux_weight > 0:
        aux_head = torch.nn.Linear(model.config.vision_config.out_hidden_size, 5).to(dev)
        model.model.visual.register_forward_hook(lambda mod, inp, out: captured.__setitem__("merged", out.pooler_output))
    heldout = heldout_signatures()
    stream = BatchStream(tok_path, a.batch, a.seed, heldout, ids["<|endoftext|>"], ids["<|image_pad|>"],
                         start=a.start_batch, kind_labels=aux_head is not None, user_frac=a.user_frac)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=a.workers,
                                         prefetch_factor=4 if a.workers else None, persistent_workers=False)
    groups = []
    named = list(model.named_parameters()) + ([("visual.aux." + n, p) for n, p in aux_head.named_parameters()]
                                              if aux_head is not None else [])
    for is_vis in (False, True):
        for decay in (True, False):
            ps = [p for n, p in named if ("visual." in n) == is_vis and (p.ndim >= 2) == decay]
            if ps:
                groups.append({"params": ps, "weight_decay": a.wd if decay else 0.0,
                               "lr_mult": a.vis_lr_mult if is_vis else 1.0})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    step, t_train, losses = 0, time.time(), []
    skipped, bad_run, good = 0, 0, None
    total = a.steps if a.steps > 0 else 10 ** 9
    assert a.steps > 0 or a.time_budget > 0, "give --steps or --time-budget"
    t20 = None
    it = iter(loader)
    # The rate is measured over steps rate_from..rate_from+100, inside the warmup (which does not depend on the
    # schedule's length, so --steps total reproduces the run). Run 4's rate rose from 4.3 step/s at step 250 to
    # 7 at step 1200, so a later window sizes the schedule closer to the budget.
    rate_end = a.rate_from + 100
    assert a.steps > 0 or rate_end <= a.warmup, "--rate-from + 100 must be within --warmup"
    while step < total:
        if step == a.rate_from:
            t20 = time.time()
        if a.steps == 0 and step == rate_end:
            # Fix the schedule length from the rate measured after the prefetch queue has drained.
            rate = 100 / (time.time() - t20)
            total = rate_end + int(rate * (a.time_budget - (time.time() - t_train)))
            print(f"AUTO STEPS: {total} ({rate:.2f} step/s)", flush=True)
        if a.time_budget and time.time() - t_train > 1.25 * a.time_budget:
            print(f"STOPPED EARLY at step {step}: over 1.25x the time budget", flush=True)
            break
        if a.hard_stop and time.time() - t0 > a.hard_stop:
            print(f"STOPPED EARLY at step {step}: {a.hard_stop:.0f}s since start (--hard-stop)", flush=True)
            break
        batch = next(it)
        batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}
        klab = batch.pop("kind_labels", None)
        if "pixel_values" in batch:
            batch["pixel_values"] = normalize_patches(batch["pixel_values"])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr, a.warmup) * g["lr_mult"]
        captured.clear()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            out = model(**batch)
        loss = out.loss
        aux_loss = aux_logits = None
        if klab is not None and "merged" in captured:
            merged = captured["merged"]  # [n merged tokens of all images, text hidden]
            assert merged.shape[0] == klab.shape[0], (merged.shape, klab.shape)
            aux_logits = aux_head(merged.float())  # [n, 5]
            aux_loss = torch.nn.functional.cross_entropy(aux_logits, klab, ignore_index=-100)
            loss = loss + a.aux_weight * aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # A non-finite loss or gradient skips the update (the first run went NaN at step ~2100);
        # repeated ones restore the last good snapshot (taken every 250 steps).
        if not torch.isfinite(gnorm):
            skipped += 1
            bad_run += 1
            print(f"step {step}: non-finite loss/grad, update skipped ({skipped} so far)", flush=True)
            if bad_run >= 3 and good is not None:
                model.load_state_dict(good[0])
                opt.load_state_dict(good[1])
                print(f"step {step}: restored the snapshot of step {good[2]}", flush=True)
                bad_run = 0
            step += 1
            continue
        bad_run = 0
        opt.step()
        step += 1
        if step % 250 == 0:
            good = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                    copy.deepcopy(opt.state_dict()), step)
        if step % a.log_every == 0 or step == 1:
            losses.append(out.loss.item())
            el = time.time() - t_train
            aux_s = ""
            if aux_loss is not None:
                sel = klab > 0
                acc = (aux_logits.argmax(-1)[sel] == klab[sel]).float().mean().item()
                aux_s = f" aux {aux_loss.item():.4f} kind-acc {acc:.3f}"
            print(f"step {step} loss {losses[-1]:.4f}{aux_s} gnorm {gnorm.item():.2f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"{el:.0f}s ({step / el:.2f} step/s)", flush=True)
    del it, loader
    train_s = time.time() - t_train
    print(f"trained {step} steps in {train_s:.0f}s", flush=True)

    # ---- export: bf16 safetensors + tokenizer/processor/template files ----
    os.makedirs(a.out, exist_ok=True)
    model.eval()
    model.to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    for sub in (model.config.text_config, model.config.vision_config):
        sub.dtype = None  # --init loads float32: keep the sub-configs' dtype out of config.json (bf16 is top-level)
    model.save_pretrained(a.out, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(a.model_dir, f), os.path.join(a.out, f))
    # the pixel budget the model was trained on (vlm.py), not the model dir's: after_run.sh installs it
    with open(os.path.join(a.out, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(), f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(generation_config_dict(tok), f, indent=2)
    meta = {"steps": step, "skipped_steps": skipped, "train_seconds": round(train_s), "batch": a.batch, "lr": a.lr, "seed": a.seed,
            "init": a.init, "start_batch": a.start_batch, "warmup": a.warmup, "aux_weight": a.aux_weight,
            "vis_lr_mult": a.vis_lr_mult, "user_frac": a.user_frac, "workers": a.workers,
            "params": n_params, "vision_params": n_vis, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
            "final_loss": losses[-1]}
    with open(os.path.join(a.out, "training_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("saved", a.out, meta, flush=True)

    # ---- evaluation on the saved bf16 checkpoint ----
    if a.eval:
        try:
            run_eval(a, dev)
        except Exception:  # the checkpoint is already saved; a failing eval must not lose it
            import traceback
            traceback.print_exc()
    print(f"total {time.time() - t0:.0f}s", flush=True)


def run_eval(a, dev):
    """Held-out eval and golden gate with transformers greedy on the saved bf16 checkpoint."""
    from golden import load_model
    shutil.copytree(os.path.join(a.model_dir, "golden"), os.path.join(a.out, "golden"), dirs_exist_ok=True)
    m2, tok2 = load_model(a.out, dev, "bfloat16")
    t1 = time.time()
    h = evaluate_heldout(m2, tok2, dev, per_kind=a.eval_per_kind)
    print("HELDOUT", json.dumps(h, indent=1), f"({time.time() - t1:.0f}s)", flush=True)
    t1 = time.time()
    from user_eval import evaluate_user_heldout
    u = evaluate_user_heldout(m2, tok2, dev, per_intent=a.eval_per_kind // 2)
    print("USER HELDOUT", json.dumps(u, indent=1), f"({time.time() - t1:.0f}s)", flush=True)
    t1 = time.time()
    g = evaluate_golden(m2, tok2, a.out, dev, batch_size=1)
    print("GOLDEN", json.dumps({k: v for k, v in g.items() if k != "results"}), f"({time.time() - t1:.0f}s)")
    for r in g["results"]:
        if not r["ok"]:
            print("GOLDEN FAIL", r)
    with open(os.path.join(a.out, "eval_results.json"), "w") as f:
        json.dump({"heldout": h, "user_heldout": u, "golden": g}, f, indent=1)
    shutil.rmtree(os.path.join(a.out, "golden"))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("out_dir")
    t.add_argument("--vocab", type=int, default=2048)
    t.add_argument("--samples", type=int, default=40000)
    t.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("train")
    r.add_argument("--model-dir", required=True, help="folder with the tokenizer files and golden/")
    r.add_argument("--out", required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--steps", type=int, default=0, help="total steps (0: derive from --time-budget)")
    r.add_argument("--time-budget", type=float, default=0, help="with --steps 0: size the run to about this many seconds")
    r.add_argument("--batch", type=int, default=256)
    r.add_argument("--lr", type=float, default=1.5e-3)
    r.add_argument("--wd", type=float, default=0.05)
    r.add_argument("--warmup", type=int, default=300)
    r.add_argument("--workers", type=int, default=14)
    r.add_argument("--seed", type=int, default=1234)
    r.add_argument("--start-batch", type=int, default=0, help="first batch index (to continue a run)")
    r.add_argument("--init", help="continue from this checkpoint")
    r.add_argument("--log-every", type=int, default=100)
    r.add_argument("--aux-weight", type=float, default=0.0, help="weight of the auxiliary kind loss (0: off)")
    r.add_argument("--vis-lr-mult", type=float, default=1.0, help="learning-rate multiplier of the vision tower")
    r.add_argument("--user-frac", type=float, default=0.0,
                   help="share of batches drawn from user scenes (user_batches.py: any size, two rasterisers, JPEG)")
    r.add_argument("--rate-from", type=int, default=150,
                   help="with --time-budget: measure the step rate over this step and the next 100 (within --warmup)")
    r.add_argument("--hard-stop", type=float, default=0, help="stop training this many seconds after start")
    r.add_argument("--eval", action="store_true")
    r.add_argument("--eval-per-kind", type=int, default=40)
    a = ap.parse_args()
    cmd_tokenizer(a) if a.cmd == "tokenizer" else cmd_train(a)


if __name__ == "__main__":
    main()
