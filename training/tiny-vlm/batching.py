"""Training batches: samples -> padded ids, labels, mRoPE position ids, pixel values; a fast vision attention.

Position ids follow transformers' Qwen2.5-VL get_rope_index (text runs count up; an image run of
merged grid h' x w' gets T = cur, H = cur + row, W = cur + col, then cur += max(h', w')), computed in
numpy inside the data workers so the training loop never loops over rows in Python.
"""
import numpy as np
import torch

from dialogues import sample_dialogue
from user_batches import sample_user_batch
from shapes import kind_token_labels, render, sample_scene, scene_signature
from pil_resize import to_model_input
from vlm import MERGE, PATCH, encode_sample, n_image_tokens, patchify


def rope_positions(ids, image_pad_id, grids):
    """[3, len] position ids of one unpadded sequence; grids: (t, gh, gw) per image, in order."""
    ids = np.asarray(ids)
    pos = np.zeros((3, len(ids)), np.int64)
    cur, i, g = 0, 0, 0
    while i < len(ids):
        if ids[i] == image_pad_id:
            t, gh, gw = grids[g]
            g += 1
            hh, ww = gh // MERGE, gw // MERGE
            n = t * hh * ww
            tt, rr, cc = np.meshgrid(np.arange(t), np.arange(hh), np.arange(ww), indexing="ij")
            pos[0, i:i + n] = cur + tt.reshape(-1)
            pos[1, i:i + n] = cur + rr.reshape(-1)
            pos[2, i:i + n] = cur + cc.reshape(-1)
            cur += max(hh, ww)
            i += n
        else:
            j = i
            while j < len(ids) and ids[j] != image_pad_id:
                j += 1
            pos[:, i:j] = cur + np.arange(j - i)
            cur += j - i
            i = j
    return pos


def fresh_scene_fn(heldout, size=None):
    """Scenes whose discrete content is not in `heldout` (the gate's and the eval's scenes)."""
    def fn(rng):
        while True:
            s = sample_scene(rng, size)
            if scene_signature(s) not in heldout:
                return s
    return fn


def collate(tok, samples, pad_id, image_pad_id, max_len=None, kind_labels=False):
    """kind_labels: also return "kind_labels", one per merged image token in the vision tower's output order
    (images in batch order, merged tokens row-major), for the auxiliary kind loss."""
    seqs, pixels, grids, klabels = [], [], [], []
    patched = {}  # id(pixels) -> patches: a user picture is shared by several samples, patchified once
    for s in samples:
        grid = None
        if s["image"] is not None:
            # uint8: 4x less to move; normalised on the device. User scenes come drawn and resized.
            if "pixels" in s:
                key = id(s["pixels"])
                if key not in patched:
                    patched[key] = patchify(s["pixels"])
                pv, grid = patched[key]
            else:
                pv, grid = patchify(to_model_input(render(s["image"])))
            pixels.append(pv)
            grids.append(grid)
            if kind_labels:
                klabels.append(s["kind_labels"] if "pixels" in s else
                               kind_token_labels(s["image"], PATCH * MERGE, out=(grid[2] * PATCH, grid[1] * PATCH)))
        ids, labels = encode_sample(tok, s, n_image_tokens(grid) if grid else 0)
        if max_len is not None and len(ids) > max_len:  # never expected; keeps a bad sample from blowing up memory
            ids, labels = ids[:max_len], labels[:max_len]
        seqs.append((ids, labels, [grid] if grid else []))
    L = max(len(x[0]) for x in seqs)
    B = len(seqs)
    input_ids = np.full((B, L), pad_id, np.int64)
    labels = np.full((B, L), -100, np.int64)
    attn = np.zeros((B, L), np.int64)
    pos = np.zeros((3, B, L), np.int64)
    for b, (ids, lab, g) in enumerate(seqs):
        n = len(ids)
        input_ids[b, :n] = ids
        labels[b, :n] = lab
        attn[b, :n] = 1
        pos[:, b, :n] = rope_positions(ids, image_pad_id, g)
    out = {
        "input_ids": torch.from_numpy(input_ids), "labels": torch.from_numpy(labels),
        "attention_mask": torch.from_numpy(attn), "position_ids": torch.from_numpy(pos),
        "mm_token_type_ids": torch.from_numpy((input_ids == image_pad_id).astype(np.int64)),
    }
    if pixels:
        out["pixel_values"] = torch.from_numpy(np.concatenate(pixels, 0))
        out["image_grid_thw"] = torch.tensor(grids, dtype=torch.long)
        if kind_labels:
            out["kind_labels"] = torch.from_numpy(np.concatenate(klabels))
    return out


class BatchStream(torch.utils.data.IterableDataset):
    """Endless deterministic batches: batch k is drawn from np.random.default_rng([seed, k]).

    With DataLoader(num_workers=W, batch_size=None), worker w yields batches w, w+W, ... and the
    loader interleaves them round-robin, so the order is the same for any run with the same seed.
    """

    def __init__(self, tokenizer_path, batch_size, seed, heldout, pad_id, image_pad_id, start=0, kind_labels=False,
                 user_frac=0.0):
        self.tokenizer_path, self.batch_size, self.seed = tokenizer_path, batch_size, seed
        self.user_frac = user_frac  # share of batches drawn from user scenes (user_batches.py)
        self.kind_labels = kind_labels
        self.heldout, self.pad_id, self.image_pad_id, self.start = heldout, pad_id, image_pad_id, start

    def __iter__(self):
        from tokenizers import Tokenizer
        torch.set_num_threads(1)  # numpy/torch in 14 workers: one thread each, or they thrash the cores
        tok = Tokenizer.from_file(self.tokenizer_path)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        k = self.start + wid
        while True:
            rng = np.random.default_rng([self.seed, k])
            if self.user_frac > 0 and rng.random() < self.user_frac:
                samples = sample_user_batch(rng, self.batch_size, self.kind_labels)
                yield collate(tok, samples, self.pad_id, self.image_pad_id, max_len=512, kind_labels=self.kind_labels)
                k += nw
                continue
            # one image size per batch keeps the vision attention chunks equal-length (batched sdpa)
            size = [(112, 112), (112, 112), (112, 112), (168, 112), (112, 168)][int(rng.integers(5))]
            fn = fresh_scene_fn(self.heldout, size)
            samples = [sample_dialogue(rng, fn) for _ in range(self.batch_size)]
            yield collate(tok, samples, self.pad_id, self.image_pad_id, max_len=512, kind_labels=self.kind_labels)
            k += nw


def patch_vision_attention():
    """Replaces the per-chunk Python loop of Qwen2.5-VL's vision attention (non-flash path) with one
    sdpa call per distinct chunk length (chunks = images or windows). Same maths, no masks, and
    thousands fewer kernel launches per step. (A padded, masked variant gave NaN gradients on CUDA
    for the windowed blocks of non-square images.)"""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    def forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
        S = hidden_states.shape[0]
        q, k, v = self.qkv(hidden_states).reshape(S, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = m.apply_rotary_pos_emb_vision(q, k, cos, sin)  # [S, heads, hd]
        starts = cu_seqlens[:-1].tolist()
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        if len(set(lengths)) == 1:
            n, ln = len(lengths), lengths[0]

            def split(t):
                return t.reshape(n, ln, self.num_heads, -1).transpose(1, 2)  # [n, heads, L, hd]
            o = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), scale=self.scaling)
            o = o.transpose(1, 2).reshape(S, -1)
        else:
            o = torch.empty_like(q)  # [S, heads, hd]
            dev = hidden_states.device
            for ln in sorted(set(lengths)):
                st = torch.tensor([a for a, b in zip(starts, lengths) if b == ln], device=dev)
                idx = (st[:, None] + torch.arange(ln, device=dev)[None, :]).reshape(-1)  # rows of these chunks

                def split(t):
                    return t[idx].reshape(-1, ln, self.num_heads, t.shape[-1]).transpose(1, 2)
                og = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v),
                                                                      scale=self.scaling)
                o = o.index_copy(0, idx, og.transpose(1, 2).reshape(-1, self.num_heads, q.shape[-1]))
            o = o.reshape(S, -1)
        return self.proj(o)

    m.Qwen2_5_VLVisionAttention.forward = forward
