"""Model-side pieces: tokenizer training, chat template, config, image preprocessing, sample encoding.

Preprocessing reimplements Qwen2-VL's image processor for images whose sides are already multiples
of 28 within [min_pixels, max_pixels] (smart_resize is then the identity): rescale, CLIP
normalisation, and the (H/28, W/28, 2, 2, C, T=2, 14, 14) patch order. check_preprocessing() compares
it against transformers' processor.
"""
import json
import os

import numpy as np

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
# Qwen2's pre-tokenizer regex (digits are split one by one).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2.5-VL-Instruct's chat template, verbatim.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PATCH, MERGE, TEMPORAL = 14, 2, 2
# Run 8: at least 196x196 (49 tokens), at most 336x224 (96 tokens): run 7's misses were small shapes 5.5-8 px
# across at its 112x112 floor (run 5-7: 112x112 to 224x168). preprocessor_config.json comes from here.
MIN_PIXELS, MAX_PIXELS = 196 * 196, 336 * 224
IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]


# ---- tokenizer ---------------------------------------------------------------------------------

def train_tokenizer(texts, vocab_size):
    """Byte-level BPE with Qwen2's pre-tokenizer; special tokens appended after the BPE vocabulary."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def special_ids(tok):
    return {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}


def write_tokenizer_files(tok, out_dir):
    """tokenizer.json, tokenizer_config.json (Qwen2Tokenizer), chat_template.jinja/json."""
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    ids = special_ids(tok)
    cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "unk_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "errors": "replace",
        "model_max_length": 2048, "split_special_tokens": False, "clean_up_tokenization_spaces": False,
        "extra_special_tokens": [],
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for t, i in ids.items()},
        "chat_template": CHAT_TEMPLATE,
        "processor_class": "Qwen2_5_VLProcessor",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(), f, indent=2)


def preprocessor_config():
    return {
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": IMAGE_MEAN, "image_std": IMAGE_STD, "rescale_factor": 1 / 255, "resample": 3,
        "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": PATCH, "temporal_patch_size": TEMPORAL, "merge_size": MERGE,
    }


# ---- model config -------------------------------------------------------------------------------

def make_config(tok, text_hidden=256, text_layers=4, text_heads=4, text_kv_heads=2, text_ffn=768,
                vis_hidden=128, vis_depth=4, vis_heads=4, vis_ffn=512):
    from transformers import Qwen2_5_VLConfig
    ids = special_ids(tok)
    head_dim = text_hidden // text_heads
    half = head_dim // 2
    # Qwen's [16, 24, 24] of 64 scaled to this head_dim: T gets a quarter, H and W the rest split evenly.
    t = half // 4
    hw = (half - t) // 2
    section = [half - 2 * hw, hw, hw]
    vocab = tok.get_vocab_size()
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=vocab, hidden_size=text_hidden, intermediate_size=text_ffn,
                         num_hidden_layers=text_layers, num_attention_heads=text_heads,
                         num_key_value_heads=text_kv_heads, max_position_embeddings=2048, rms_norm_eps=1e-6,
                         hidden_act="silu", tie_word_embeddings=True, use_sliding_window=False,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=section),
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"]),
        vision_config=dict(depth=vis_depth, hidden_size=vis_hidden, intermediate_size=vis_ffn, num_heads=vis_heads,
                           out_hidden_size=text_hidden, patch_size=PATCH, spatial_merge_size=MERGE,
                           temporal_patch_size=TEMPORAL, window_size=112, in_channels=3, hidden_act="silu",
                           fullatt_block_indexes=[i for i in range(vis_depth) if i % 2 == 1],
                           tokens_per_second=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    return cfg


def generation_config_dict(tok):
    ids = special_ids(tok)
    return {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"], "do_sample": False, "max_new_tokens": 256}


# ---- preprocessing ------------------------------------------------------------------------------

def patchify(img):
    """uint8 [H, W, 3] -> (uint8 patches [n_patches, 1176], grid (1, H/14, W/14)) in Qwen2-VL's order."""
    h, w, _ = img.shape
    assert h % 28 == 0 and w % 28 == 0 and MIN_PIXELS <= h * w <= MAX_PIXELS, "image must already be smart_resized"
    x = img.transpose(2, 0, 1)  # [C, H, W]
    x = np.stack([x, x], 0)  # [T=2, C, H, W]: a still image is its own second frame
    gh, gw = h // PATCH, w // PATCH
    x = x.reshape(1, TEMPORAL, 3, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # [1, gh/2, gw/2, 2, 2, C, T, 14, 14]
    return np.ascontiguousarray(x.reshape(gh * gw, 3 * TEMPORAL * PATCH * PATCH)), (1, gh, gw)


def _norm_vectors():
    # column c of a patch row belongs to channel c // (T*14*14)
    ch = np.arange(3 * TEMPORAL * PATCH * PATCH) // (TEMPORAL * PATCH * PATCH)
    return np.array(IMAGE_MEAN, np.float32)[ch], np.array(IMAGE_STD, np.float32)[ch]


def normalize_patches(u8):
    """uint8 patches -> float32 pixel_values: rescale 1/255, CLIP mean/std (numpy or torch input)."""
    mean, std = _norm_vectors()
    if isinstance(u8, np.ndarray):
        return (u8.astype(np.float32) * np.float32(1 / 255) - mean) / std
    import torch
    x = u8.to(torch.float32) * torch.tensor(np.float32(1 / 255))
    return (x - torch.from_numpy(mean).to(u8.device)) / torch.from_numpy(std).to(u8.device)


def preprocess(img):
    """uint8 [H, W, 3], any size -> (pixel_values [n_patches, 1176] float32, grid (1, h/14, w/14)) at the model's
    input size (rapid's smart_resize and Pillow bicubic)."""
    from pil_resize import to_model_input  # pil_resize reads this module's pixel budget
    u8, grid = patchify(to_model_input(img))
    return normalize_patches(u8), grid


def n_image_tokens(grid):
    return grid[0] * grid[1] * grid[2] // (MERGE * MERGE)


# ---- prompts and samples ------------------------------------------------------------------------

def messages_for(sample, upto_turn=None, include_last_answer=True):
    """Chat messages (Qwen content-list format) for a sample's turns."""
    msgs = []
    if sample["system"] is not None and sample["system"] != "You are a helpful assistant.":
        msgs.append({"role": "system", "content": sample["system"]})
    turns = sample["turns"] if upto_turn is None else sample["turns"][:upto_turn + 1]
    for i, (q, a) in enumerate(turns):
        if i == 0 and sample["image"] is not None:
            parts = [{"type": "text", "text": q}, {"type": "image"}] if sample["image_after_text"] else \
                    [{"type": "image"}, {"type": "text", "text": q}]
            msgs.append({"role": "user", "content": parts})
        else:
            msgs.append({"role": "user", "content": q})
        if i < len(turns) - 1 or include_last_answer:
            msgs.append({"role": "assistant", "content": a})
    return msgs


_TEMPLATE = None


def render_prompt(messages, add_generation_prompt):
    global _TEMPLATE
    if _TEMPLATE is None:
        from jinja2 import Environment
        _TEMPLATE = Environment().from_string(CHAT_TEMPLATE)
    return _TEMPLATE.render(messages=messages, add_generation_prompt=add_generation_prompt)


def expand_image_pads(text, n_tokens):
    return text.replace("<|image_pad|>", "<|image_pad|>" * n_tokens, 1)


def encode_sample(tok, sample, n_img_tokens):
    """(input_ids, labels): labels are the answer tokens and their <|im_end|>; everything else -100.

    Encoded in segments split at each assistant answer, exactly as inference tokenizes the prompt
    (the rendered template up to "<|im_start|>assistant\\n") and then generates.
    """
    ids, labels = [], []
    n = len(sample["turns"])
    for i in range(n):
        prefix = render_prompt(messages_for(sample, upto_turn=i, include_last_answer=False), True)
        if i > 0:  # only the part after the previous answer's <|im_end|>
            prev = render_prompt(messages_for(sample, upto_turn=i - 1, include_last_answer=True), False)
            assert prefix.startswith(prev)
            prefix = prefix[len(prev) - 1:]  # keep the "\n" that follows <|im_end|>
        if i == 0 and sample["image"] is not None:
            prefix = expand_image_pads(prefix, n_img_tokens)
        p = tok.encode(prefix, add_special_tokens=False).ids
        a = tok.encode(sample["turns"][i][1] + "<|im_end|>", add_special_tokens=False).ids
        ids += p + a
        labels += [-100] * len(p) + a
    return ids, labels
