"""Full-size parity of one catalog model: transformers vs rapid on a random replica at the real dimensions.

    python scripts/replicas/parity_full.py <catalog-name> [--device cpu,cuda] [--quant 4|none] [--out DIR]
        [--threads N] [--jobs N] [--cache-gib G] [--keep] [--resume] [--step replica|reference|rapid|compare]
        [--config FILE] [--ref-dtype float32|float64] [--cases NAME,...]

Steps (each a child process, so every step's time and peak memory are its own; --step runs one):
  replica    random weights at full size from scripts/replicas/configs/<name>.json, written as the hub
             checkpoint is laid out (mlx-vlm keys and conv layout, text Linear/Embedding 4-bit affine g64,
             tower bf16; --quant none: the same keys, every tensor bf16). Streamed tensor by tensor, never all
             in memory; --jobs N writes N tensor sets at once (each a process).
  reference  transformers (eager, float32 activations) on exactly the stored weights: quantized Linear /
             Embedding modules keep the packed codes and dequantize on the fly, the rest is the bf16 values
             upcast (--cache-gib keeps dequantized weights). 8 text prompts (one batch), a one-image and a
             two-image prompt at the family's real image size; logits at chosen positions and greedy tokens
             (KV cache) with their top-1/top-2 margins.
  rapid      scripts/replicas/parity_rapid.mjs: the native addon (dist/ + build/) on the same directory and
             prompts, exact precision; its own image preprocessing, compared with the processor's rows. Once per
             --device (a comma list: one replica and one reference serve both backends).
  compare    per device: logits within TOL * max(1, max|ref|) and greedy tokens equal; writes report.json.
--resume skips the steps an earlier run of the same command finished (OUT/steps.json), and the cases a rapid step
finished, so a run cut short by a time limit goes on where it stopped (the replica must still be there: --keep).
--cases one_image,two_images: the rapid steps run and compare only those cases (text0..text7, one_image,
two_images), for a case an earlier run could not finish in a device call; the reference runs them all.
--ref-dtype float64 runs the reference in float64 as well and reports its float32 spread (how well the random
replica is conditioned: a spread near TOL cannot tell a bug from rounding).

Needs torch, transformers 5.18, safetensors, numpy, Pillow. Writes under --out (default /work/big/replicas);
the replica is deleted at the end unless --keep. See docs/full-size-parity.md.
"""
import argparse
import contextlib
import gc
import json
import os
import resource
import signal
import subprocess
import sys
import time
import zlib

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures", "vision"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import mlx_quant as mq  # noqa: E402
import images as imgs  # noqa: E402

TOL = 1e-3  # logits: max |rapid - transformers| <= TOL * max(1, max |transformers|), as the tiny q4 fixtures
N_GREEDY = 8
N_TEXT, TEXT_LEN = 8, 24
GROUP, BITS = 64, 4  # mlx-community's 4-bit conversions: mlx_lm/mlx_vlm default group size 64
SEED = 20261205
DEQUANT_CHUNK = 1 << 22  # elements of a weight dequantized at once (16 MiB of float32)
CACHE = {"left": 0}  # bytes of dequantized float32 weights QLinear may keep (--cache-gib): fewer dequant passes
DRAW_CHUNK = 1 << 24  # elements drawn and quantized at once when writing the replica
# Real-size test images (drawn like the tiny fixtures' images): 4:3 landscape and 3:4 portrait photos.
IMAGES = {"photo_1024x768.png": (1024, 768), "portrait_720x960.png": (720, 960)}


# ---------------------------------------------------------------------------------------------
# Families: how a config becomes a transformers model, where its tensors go in the hub layout, which
# modules are quantized, and how an image becomes pixel rows + placeholder tokens.


# transformers' stacked MoE parameters (Gemma 4, Qwen3-VL-MoE): gate_up_proj [E, 2I, H] and down_proj [E, H, I].
EXPERT_PARAMS = (".experts.gate_up_proj", ".experts.down_proj")


def expert_entries(name: str, shape: tuple, base: str) -> list:
    """(draw name, hub key, shape) of a stacked expert parameter as mlx-vlm stores it under the switch module `base`:
    gate_up_proj split into gate_proj and up_proj [E, I, H] (each drawn on its own), down_proj [E, H, I] as is."""
    if name.endswith(".experts.gate_up_proj"):
        e, two_i, h = shape
        return [(name + "#gate", base + "gate_proj.weight", (e, two_i // 2, h)),
                (name + "#up", base + "up_proj.weight", (e, two_i // 2, h))]
    return [(name, base + "down_proj.weight", shape)]


class Gemma4:
    name = "gemma4"

    def __init__(self, layout: dict | None = None):
        import transformers
        from transformers.models.gemma4 import image_processing_pil_gemma4 as pil
        sys.modules.setdefault("transformers.models.gemma4.image_processing_gemma4", pil)
        import gen_gemma4 as g4  # the tiny fixtures' init rules and MLX key layout
        self.g4, self.pil = g4, pil
        self.config_cls = transformers.Gemma4Config
        self.model_cls = transformers.Gemma4ForConditionalGeneration

    def hf_config(self, cfg: dict):
        cfg = {k: v for k, v in cfg.items() if k not in ("quantization", "quantization_config")}
        cfg["audio_config"] = None  # rapid ignores the audio tower; the replica leaves it out
        return self.config_cls(**cfg)

    def draw(self, name: str, shape: tuple, rng) -> np.ndarray:
        w = self.g4.draw_tensor(name, shape, rng)
        # Gemma 4 attends with scaling 1 after the q/k RMS norms: with norm weights ~1 the scores have std
        # sqrt(head_dim) (16-23), and 35 random layers turn chaotic (transformers in float32 and float64 disagree
        # by ~1 relative at every image row). Trained norms keep scores O(1); head_dim**-0.25 on each does too.
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            w = w * shape[-1] ** -0.25
        return w

    def hub_key(self, name: str) -> str:
        (key, _), = self.g4.mlx_entries(name, np.zeros(1))
        return key

    def hub_entries(self, name: str, shape: tuple) -> list:
        """(draw name, hub key, shape) per stored tensor; MoE experts under mlx-vlm's switch_glu."""
        if name.endswith(EXPERT_PARAMS):
            return expert_entries(name, shape, self.expert_base(name))
        return [(name, self.hub_key(name), shape)]

    def expert_base(self, name: str) -> str:
        """language_model.model.layers.N.experts.switch_glu. for an HF experts parameter or module name."""
        mod = name[: name.index(".experts") + len(".experts")]
        return "language_model.model." + mod[len("model.language_model."):] + ".switch_glu."

    def quantized(self, name: str, module: torch.nn.Module) -> bool:
        # mlx-vlm: every text Linear/Embedding and embed_vision; the SigLIP tower stays bf16.
        return isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and not name.startswith("model.vision_tower.")

    def qspec(self, name: str, module: torch.nn.Module) -> tuple | None:
        """(group, bits) of a stored parameter, or None for bf16. mlx-vlm's Gemma 4 predicate: routers 8-bit g64,
        the experts (3-D parameters, not Linear modules) quantized like the other text linears."""
        if name.endswith(EXPERT_PARAMS):
            return GROUP, BITS
        mod_name, leaf = name.rsplit(".", 1)
        if leaf != "weight" or not self.quantized(mod_name, module):
            return None
        return (64, 8) if mod_name.endswith("router.proj") else (GROUP, BITS)

    def is_conv(self, name: str, shape: tuple) -> bool:
        return False  # Gemma 4's patch embedder is a Linear; 3-D parameters are MoE experts

    def quant_overrides(self, cfg: dict) -> dict:
        """Per-module entries of config.json's quantization (mlx-vlm writes one per router)."""
        t = cfg["text_config"]
        if not t.get("enable_moe_block"):
            return {}
        return {f"language_model.model.layers.{i}.router.proj": {"group_size": 64, "bits": 8, "mode": "affine"}
                for i in range(t["num_hidden_layers"])}

    def bos(self, cfg: dict) -> int:
        return cfg["text_config"].get("bos_token_id", 2)

    def plain_ids(self) -> tuple:
        return 300, 255000  # below the multimodal specials (255999..), above the control tokens

    def prepare_images(self, files: dict, cfg: dict, pil_images: list) -> dict:
        ip = {k: v for k, v in image_config(files).items()
              if k not in ("image_processor_type", "processor_class", "image_seq_length", "size")}
        out = self.pil.Gemma4ImageProcessorPil(**ip)(images=[pil_images], return_tensors="pt")
        pos = out["image_position_ids"]
        pool = cfg["vision_config"].get("pooling_kernel_size", 3)
        per = []
        for i in range(len(pil_images)):
            real = int((pos[i] != -1).all(-1).sum())
            per.append({"n_patches": real, "tokens": real // (pool * pool),
                        "pixels": out["pixel_values"][i, :real].float().numpy()})
        return {"kwargs": {"pixel_values": out["pixel_values"], "image_position_ids": pos}, "images": per}

    def image_block(self, cfg: dict, im: dict) -> list:
        return [cfg["boi_token_id"]] + [cfg["image_token_id"]] * im["tokens"] + [cfg["eoi_token_id"]]

    def image_token_id(self, cfg: dict) -> int:
        return cfg["image_token_id"]

    def extra_forward(self, cfg: dict, ids: torch.Tensor) -> dict:
        return {"mm_token_type_ids": (ids == cfg["image_token_id"]).long()}

    def bidirectional(self, cfg: dict) -> bool:
        return cfg.get("text_config", {}).get("use_bidirectional_attention") == "vision"

    def embed_scale(self, module) -> float | None:
        return getattr(module, "scalar_embed_scale", None)

    def to_hub(self, name: str, w: np.ndarray) -> np.ndarray:
        return w

    def from_hub(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return t


class GvFamily:
    """A family of the tiny VLM generators (generate_vlm.py): their draw rules and MLX keys; text Linear/Embedding
    quantized, tower and projector bf16 (mlx-vlm's predicate), patch convolutions stored [O, P, P, C]."""
    gv_name = ""

    def __init__(self, config_cls, model_cls, layout: dict | None):
        import gen_mistral3  # noqa: F401  registers mistral3 with generate_vlm and stubs a torchvision-only module
        import generate_vlm as gv
        self.gv, self.config_cls, self.model_cls = gv, config_cls, model_cls
        self.layout = layout or {}

    def hf_config(self, cfg: dict):
        return self.config_cls(**{k: v for k, v in cfg.items() if k not in ("quantization", "quantization_config")})

    def draw(self, name: str, shape: tuple, rng) -> np.ndarray:
        return self.gv.draw_tensor(self.gv_name, name, shape, rng)

    def hub_key(self, name: str) -> str:
        return self.gv.mlx_key(self.gv_name, name)

    def quantized(self, name: str, module: torch.nn.Module) -> bool:
        """mlx-vlm's predicate: text Linear/Embedding; the projector and an untied lm_head where the repo's
        conversion predates keeping them bf16 (the layout's projectorQuantized / lmHeadQuantized)."""
        if not isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            return False
        return (name.startswith("model.language_model.")
                or (self.layout.get("projectorQuantized", False) and name.startswith("model.multi_modal_projector."))
                or (self.layout.get("lmHeadQuantized", False) and name == "lm_head"))

    def hub_entries(self, name: str, shape: tuple) -> list:
        return [(name, self.hub_key(name), shape)]

    def qspec(self, name: str, module: torch.nn.Module) -> tuple | None:
        mod_name, leaf = name.rsplit(".", 1)
        return (GROUP, BITS) if leaf == "weight" and self.quantized(mod_name, module) else None

    def is_conv(self, name: str, shape: tuple) -> bool:
        return len(shape) > 2

    def quant_overrides(self, cfg: dict) -> dict:
        return {}

    def to_hub(self, name: str, w: np.ndarray) -> np.ndarray:
        return self.gv.to_mlx_conv(w) if self.gv.is_conv(name) else w

    def from_hub(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return t.movedim(-1, 1).contiguous() if self.gv.is_conv(name) else t  # [O, (T,) kH, kW, C] -> [O, C, ...]

    def embed_scale(self, module) -> float | None:
        return getattr(module, "scalar_embed_scale", None)


class Mistral3(GvFamily):
    """Ministral 3 / Mistral Small 3.1 text + Pixtral tower (which of projector and untied lm_head are quantized:
    the layout). Tekken control ids: [IMG] 10,
    [IMG_BREAK] 12, [IMG_END] 13."""
    gv_name = "mistral3"
    BREAK, END = 12, 13

    def __init__(self, layout: dict | None = None):
        import transformers
        from transformers.models.pixtral import image_processing_pil_pixtral as pix
        super().__init__(transformers.Mistral3Config, transformers.Mistral3ForConditionalGeneration, layout)
        self.pix = pix

    def bos(self, cfg: dict) -> int:
        return cfg["text_config"].get("bos_token_id", 1)

    def plain_ids(self) -> tuple:
        return 1000, 1 << 30  # tekken: the first 1000 ids are control tokens

    def prepare_images(self, files: dict, cfg: dict, pil_images: list) -> dict:
        ip = {k: v for k, v in image_config(files).items() if k not in ("image_processor_type", "processor_class")}
        proc = files.get("processor_config.json", {})
        cell = proc.get("patch_size", cfg["vision_config"]["patch_size"]) * cfg.get("spatial_merge_size", 1)
        # PixtralProcessor resizes to cells of patch * merge pixels (it overrides the image processor's patch_size)
        ip["patch_size"] = {"height": cell, "width": cell}
        out = self.pix.PixtralImageProcessorPil(**ip)(images=pil_images, return_tensors="pt")
        per = []
        for i in range(len(pil_images)):
            h, w = out["image_sizes"][i].tolist()
            per.append({"rows": h // cell, "cols": w // cell, "tokens": (h // cell) * (w // cell),
                        "pixels": out["pixel_values"][i, :, :h, :w].float().numpy()})
        return {"kwargs": {"pixel_values": out["pixel_values"], "image_sizes": out["image_sizes"]}, "images": per}

    def image_block(self, cfg: dict, im: dict) -> list:
        img = self.image_token_id(cfg)
        out = []
        for r in range(im["rows"]):
            out += [img] * im["cols"] + [self.END if r == im["rows"] - 1 else self.BREAK]
        return out

    def image_token_id(self, cfg: dict) -> int:
        return cfg.get("image_token_index", cfg.get("image_token_id"))

    def extra_forward(self, cfg: dict, ids: torch.Tensor) -> dict:
        return {}

    def bidirectional(self, cfg: dict) -> bool:
        return False


class Gemma3(GvFamily):
    """Gemma 3 text + SigLIP. Images: fixed size, mm_tokens_per_image soft tokens between boi and eoi."""
    gv_name = "gemma3"

    def __init__(self, layout: dict | None = None):
        import transformers
        from transformers.models.gemma3 import image_processing_pil_gemma3 as pil
        super().__init__(transformers.Gemma3Config, transformers.Gemma3ForConditionalGeneration, layout)
        self.pil = pil

    def bos(self, cfg: dict) -> int:
        return cfg.get("text_config", {}).get("bos_token_id", 2)

    def plain_ids(self) -> tuple:
        return 300, 255000  # below the image specials (255999..), above the control tokens

    def prepare_images(self, files: dict, cfg: dict, pil_images: list) -> dict:
        ip = {k: v for k, v in image_config(files).items()
              if k not in ("image_processor_type", "processor_class", "image_seq_length") and v is not None}
        out = self.pil.Gemma3ImageProcessorPil(**ip)(images=pil_images, return_tensors="pt")
        n = cfg.get("mm_tokens_per_image", 256)
        per = [{"tokens": n, "pixels": out["pixel_values"][i].float().numpy()} for i in range(len(pil_images))]
        return {"kwargs": {"pixel_values": out["pixel_values"]}, "images": per}

    def image_block(self, cfg: dict, im: dict) -> list:
        return [cfg.get("boi_token_index", 255999)] + [self.image_token_id(cfg)] * im["tokens"] + \
            [cfg.get("eoi_token_index", 256000)]

    def image_token_id(self, cfg: dict) -> int:
        return cfg.get("image_token_index", cfg.get("image_token_id", 262144))

    def extra_forward(self, cfg: dict, ids: torch.Tensor) -> dict:
        return {"token_type_ids": (ids == self.image_token_id(cfg)).long()}  # image blocks attend both ways

    def bidirectional(self, cfg: dict) -> bool:
        return True


class QwenVL(GvFamily):
    """Qwen2.5-VL and Qwen3-VL (dense): patch rows [n, C*T*P*P] with image_grid_thw, one <|image_pad|> per merged
    patch between <|vision_start|> and <|vision_end|>, 3-axis mRoPE positions (transformers computes them; rapid
    from the grid, as its engine does). Qwen3-VL also adds DeepStack features after early decoder layers."""

    def __init__(self, layout: dict | None = None, gv_name: str = "", classes: tuple = ()):
        from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil
        super().__init__(*classes, layout)
        self.gv_name, self.pil = gv_name, pil

    def bos(self, cfg: dict) -> int:
        return 151644  # <|im_start|>: Qwen prompts have no BOS; any plain first token will do

    def plain_ids(self) -> tuple:
        return 1000, 150000  # below the control tokens (151643..)

    def prepare_images(self, files: dict, cfg: dict, pil_images: list) -> dict:
        ip = {k: v for k, v in image_config(files).items() if k not in ("image_processor_type", "processor_class")}
        out = self.pil.Qwen2VLImageProcessorPil(**ip)(images=pil_images, return_tensors="pt")
        merge = cfg["vision_config"]["spatial_merge_size"]
        per, off = [], 0
        for g in out["image_grid_thw"].tolist():
            n = g[0] * g[1] * g[2]
            per.append({"n_patches": n, "tokens": n // (merge * merge), "grid": g,
                        "pixels": out["pixel_values"][off:off + n].float().numpy()})
            off += n
        return {"kwargs": {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}, "images": per}

    def image_block(self, cfg: dict, im: dict) -> list:
        return [cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * im["tokens"] + [cfg["vision_end_token_id"]]

    def image_token_id(self, cfg: dict) -> int:
        return cfg["image_token_id"]

    def extra_forward(self, cfg: dict, ids: torch.Tensor) -> dict:
        return {"mm_token_type_ids": (ids == cfg["image_token_id"]).long()}  # 1: image (the processor's output)

    def bidirectional(self, cfg: dict) -> bool:
        return False


def qwen2_5_vl(layout: dict | None = None) -> QwenVL:
    import transformers
    return QwenVL(layout, "qwen2_5_vl", (transformers.Qwen2_5_VLConfig, transformers.Qwen2_5_VLForConditionalGeneration))


def qwen3_vl(layout: dict | None = None) -> QwenVL:
    import transformers
    return QwenVL(layout, "qwen3_vl", (transformers.Qwen3VLConfig, transformers.Qwen3VLForConditionalGeneration))


class Qwen3VLMoe(QwenVL):
    """Qwen3-VL-MoE (30B-A3B): Qwen3-VL with a sparse MLP in every layer (but mlp_only_layers). transformers'
    experts are [E, 2I, H] (gate rows, then up rows) and [E, H, I], stored as mlx-vlm's switch_mlp.{gate,up,down}_proj
    [E, out, in] at the catalog's bits; the router (mlp.gate, a bare [E, H] parameter) 8-bit g64 with a per-layer
    quantization entry, as the tiny fixture (scripts/fixtures/vision/gen_qwen3_vl_moe.py)."""

    def __init__(self, layout: dict | None = None):
        import transformers
        super().__init__(layout, "qwen3_vl",  # the dense Qwen3-VL draw rules and keys for everything else
                         (transformers.Qwen3VLMoeConfig, transformers.Qwen3VLMoeForConditionalGeneration))

    def draw(self, name: str, shape: tuple, rng) -> np.ndarray:
        # Each expert matrix drawn with its own fan-in (H or I, not E*out*in); a decisive router, as the fixture.
        if ".mlp.experts." in name:
            return rng.normal(0.0, 1.7 / np.sqrt(shape[-1]), shape)
        if name.endswith(".mlp.gate.weight"):
            return rng.normal(0.0, 3.0 / np.sqrt(shape[-1]), shape)
        return super().draw(name, shape, rng)

    def hub_entries(self, name: str, shape: tuple) -> list:
        if name.endswith(EXPERT_PARAMS):
            return expert_entries(name, shape, self.expert_base(name))
        return super().hub_entries(name, shape)

    def expert_base(self, name: str) -> str:
        """language_model.model.layers.N.mlp.switch_mlp. for an HF experts parameter or module name."""
        return self.hub_key(name[: name.index(".experts")] + ".x.weight")[: -len("x.weight")] + "switch_mlp."

    def qspec(self, name: str, module: torch.nn.Module) -> tuple | None:
        if name.endswith(EXPERT_PARAMS):
            return GROUP, BITS
        if name.endswith(".mlp.gate.weight") and name.startswith("model.language_model."):
            return 64, 8
        return super().qspec(name, module)

    def quant_overrides(self, cfg: dict) -> dict:
        t = cfg["text_config"]
        sparse = [i for i in range(t["num_hidden_layers"]) if i not in t.get("mlp_only_layers", [])
                  and (i + 1) % t.get("decoder_sparse_step", 1) == 0]
        return {f"language_model.model.layers.{i}.mlp.gate": {"group_size": 64, "bits": 8, "mode": "affine"}
                for i in sparse}


class TextLM:
    """A text decoder as mlx-lm stores it (Qwen2/2.5, Qwen3, Llama, Mistral, Gemma 3 text): transformers' own
    parameter names, every Linear and Embedding quantized (an untied lm_head too), the text fixtures' draw rules
    (scripts/fixtures/generate.py). No images."""
    has_images = False
    mapping = "MODEL_FOR_CAUSAL_LM_MAPPING"  # transformers' table the model class comes from

    def __init__(self, layout: dict | None = None):
        import transformers
        import generate as textgen  # the text fixtures' draw rules
        self.tf, self.textgen = transformers, textgen

    def hf_config(self, cfg: dict):
        self.model_type = cfg["model_type"]  # the draw rules differ for Gemma
        rest = {k: v for k, v in cfg.items() if k not in ("quantization", "quantization_config", "model_type")}
        return self.tf.AutoConfig.for_model(cfg["model_type"], **rest)

    @property
    def model_cls(self):
        fam = self

        class _Auto:
            @staticmethod
            def _from_config(config, **kw):
                return getattr(fam.tf, fam.mapping)[type(config)]._from_config(config, **kw)
        return _Auto

    def draw(self, name: str, shape: tuple, rng) -> np.ndarray:
        return self.textgen.draw_tensor(name, shape, rng, gemma="gemma" in self.model_type)

    def hub_key(self, name: str) -> str:
        return name

    def hub_entries(self, name: str, shape: tuple) -> list:
        return [(name, name, shape)]

    def qspec(self, name: str, module: torch.nn.Module) -> tuple | None:
        mod_name, leaf = name.rsplit(".", 1)
        ok = leaf == "weight" and isinstance(module, (torch.nn.Linear, torch.nn.Embedding))
        return (GROUP, BITS) if ok else None

    def is_conv(self, name: str, shape: tuple) -> bool:
        return False

    def quant_overrides(self, cfg: dict) -> dict:
        return {}

    def to_hub(self, name: str, w: np.ndarray) -> np.ndarray:
        return w

    def from_hub(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return t

    def embed_scale(self, module) -> float | None:
        return getattr(module, "scalar_embed_scale", None)

    def bos(self, cfg: dict) -> int:
        return cfg.get("bos_token_id") or 1

    def plain_ids(self) -> tuple:
        return 1000, 120000

    def image_token_id(self, cfg: dict) -> None:
        return None

    def extra_forward(self, cfg: dict, ids: torch.Tensor) -> dict:
        return {}

    def bidirectional(self, cfg: dict) -> bool:
        return False


class EmbeddingLM(TextLM):
    """Qwen3-Embedding as Qwen publishes it: transformers' Qwen3Model saved in bf16 (no "model." prefix, no head,
    not quantized). Compared on what /v1/embeddings pools: the last token's hidden state after the final norm."""
    pooling = True
    mapping = "MODEL_MAPPING"  # the bare decoder, no head


# By catalog family (EmbeddingLM for the embedding entries, chosen in main).
FAMILIES = {"gemma3-vl": Gemma3, "gemma4": Gemma4, "mistral3": Mistral3, "qwen2.5-vl": qwen2_5_vl, "qwen3-vl": qwen3_vl,
            "qwen3-vl-moe": Qwen3VLMoe, "qwen2": TextLM, "qwen3": TextLM, "llama": TextLM, "gemma3": TextLM}


# ---------------------------------------------------------------------------------------------
# Helpers


@contextlib.contextmanager
def params_on_meta():
    """Parameters are created on the meta device (no memory), buffers for real (rotary tables, clamps)."""
    old = torch.nn.Module.register_parameter

    def register(module, name, param):
        old(module, name, param)
        if param is not None:
            p = module._parameters[name]
            module._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=False)

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = old


def skeleton(fam, cfg: dict):
    with params_on_meta():
        model = fam.model_cls._from_config(fam.hf_config(cfg), attn_implementation="eager", dtype=torch.float32)
    return model.eval()


def catalog_entry(name: str) -> dict:
    cat = json.load(open(os.path.join(ROOT, "src", "models", "catalog.json")))
    for e in cat["models"]:
        if e["alias"] == name:
            return e
    raise SystemExit(f"{name}: not a catalog alias (src/models/catalog.json)")


def vlm_layout(name: str, cfg: dict) -> dict:
    """The catalog entry's mlx-vlm layout from scripts/replicas/vlm-layouts.mjs (the one table the JS replicas use
    too): processorFrom, and which modules the repo's older mlx-vlm quantized (projectorQuantized, lmHeadQuantized)."""
    script = ("const [lay, cat, name, cfg] = process.argv.slice(1);"
              "const { vlmLayoutOf } = await import(lay);"
              "const entry = JSON.parse((await import('node:fs')).readFileSync(cat, 'utf8')).models"
              ".find((m) => m.alias === name);"
              "console.log(JSON.stringify(vlmLayoutOf(entry, JSON.parse(cfg)) ?? {}));")
    out = subprocess.run(["node", "--input-type=module", "-e", script, os.path.join(_HERE, "vlm-layouts.mjs"),
                          os.path.join(ROOT, "src", "models", "catalog.json"), name, json.dumps(cfg)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def read_configs(name: str, config: str | None) -> tuple:
    """config.json, the processor files of the family's processorFrom entry (configs/<alias>.processor.json ->
    processor_config.json, ...) and the layout (vlm_layout)."""
    d = os.path.join(_HERE, "configs")
    cfg = json.load(open(config or os.path.join(d, f"{name}.json")))
    layout = vlm_layout(name, cfg)
    files = {}
    for suffix in ("processor", "preprocessor"):
        p = os.path.join(d, f"{layout.get('processorFrom', name)}.{suffix}.json")
        if os.path.exists(p):
            files[f"{suffix}_config.json"] = json.load(open(p))
    return cfg, files, layout


def image_config(files: dict) -> dict:
    """The image processor's settings: preprocessor_config.json, else processor_config.json's image_processor
    (as rapid's readProcessorFiles)."""
    return files.get("preprocessor_config.json") or files.get("processor_config.json", {}).get("image_processor", {})


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


def f32_file(path: str, arr: np.ndarray) -> None:
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


# ---------------------------------------------------------------------------------------------
# Step 1: the replica checkpoint


def tied(model) -> bool:
    """The text config's tie_word_embeddings, else the top level's (Qwen2.5-VL keeps it only there)."""
    v = getattr(model.config.get_text_config(), "tie_word_embeddings", None)
    return bool(getattr(model.config, "tie_word_embeddings", False) if v is None else v)


def plan_tensors(fam, model, quant: bool) -> list:
    """[(draw name, hub_key, (group, bits) or None, shape)] for every stored tensor (a tied lm_head is not
    stored; one parameter may be stored as several tensors, as Gemma 4's experts)."""
    modules = dict(model.named_modules())
    plan = []
    for name, t in model.state_dict(keep_vars=True).items():
        if name == "lm_head.weight" and tied(model):
            continue
        q = fam.qspec(name, modules[name.rsplit(".", 1)[0]]) if quant else None
        if q is not None and t.shape[-1] % q[0] != 0:
            q = None
        for vname, key, shape in fam.hub_entries(name, tuple(t.shape)):
            plan.append((vname, key, q, shape))
    # n-d tensors (convolutions) are stored in the hub's axis order
    return sorted(plan, key=lambda p: p[1])


def header_for(fam, plan: list) -> tuple:
    header, off = {}, 0

    def add(key, dtype, shape, nbytes):
        nonlocal off
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes

    for name, key, q, shape in plan:
        n = int(np.prod(shape))
        if q:
            group, bits = q
            base = key[: -len(".weight")]
            rows, cols = int(np.prod(shape[:-1])), shape[-1]
            add(base + ".weight", "U32", (*shape[:-1], cols * bits // 32), rows * cols * bits // 8)
            add(base + ".scales", "BF16", (*shape[:-1], cols // group), rows * cols // group * 2)
            add(base + ".biases", "BF16", (*shape[:-1], cols // group), rows * cols // group * 2)
        else:
            hub_shape = fam.to_hub(name, np.zeros(shape, dtype=np.uint8)).shape if fam.is_conv(name, shape) else shape
            add(key, "BF16", hub_shape, n * 2)
    return header, off


def draw_units(fam, plan: list) -> list:
    """(tensor index, first row, end row) pieces of at most DRAW_CHUNK elements: the replica's units of work."""
    units = []
    for i, (name, _, _, shape) in enumerate(plan):
        if fam.is_conv(name, shape):  # small: drawn whole, fan-in from every input axis
            units.append((i, 0, 0))
            continue
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        step = max(1, DRAW_CHUNK // (shape[-1] if shape else 1))
        units += [(i, r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]
    return units


def write_units(fam, path: str, base: int, header: dict, plan: list, units: list) -> None:
    """Draws and writes the given pieces into the preallocated file. Each piece has its own seed (the tensor's
    name, and its first row after the first piece), so the file does not depend on how the work is split."""
    with open(path, "r+b") as f:
        for n, (i, r0, r1) in enumerate(units):
            hf_name, key, q, shape = plan[i]
            rng = rng_for(hf_name if r0 == 0 else f"{hf_name}@{r0}")
            if fam.is_conv(hf_name, shape):
                data = mq.f32_to_bf16_bits(fam.to_hub(hf_name, mq.round_bf16(fam.draw(hf_name, shape, rng))))
                f.seek(base + header[key]["data_offsets"][0])
                f.write(np.ascontiguousarray(data).tobytes())
                continue
            cols = shape[-1] if shape else 1
            part_shape = (r1 - r0, cols) if len(shape) > 1 else shape  # draw rules read fan-in from [-1]
            w = mq.round_bf16(fam.draw(hf_name, part_shape, rng).reshape(r1 - r0, cols))
            if q:
                packed, scales, biases = mq.affine_quantize(w, q[0], q[1])
                kb = key[: -len(".weight")]
                for k, data in ((kb + ".weight", packed.astype("<u4")),
                                (kb + ".scales", mq.f32_to_bf16_bits(scales)),
                                (kb + ".biases", mq.f32_to_bf16_bits(biases))):
                    f.seek(base + header[k]["data_offsets"][0] + r0 * data[0].nbytes)
                    f.write(np.ascontiguousarray(data).tobytes())
            else:
                data = mq.f32_to_bf16_bits(w)
                f.seek(base + header[key]["data_offsets"][0] + r0 * data[0].nbytes)
                f.write(data.tobytes())
            if n % 200 == 0:
                print(f"  replica piece {n + 1}/{len(units)} {key} {shape}", flush=True)


def build_replica(fam, name: str, cfg: dict, proc: dict, out: str, quant: bool, jobs: int = 1) -> dict:
    os.makedirs(out, exist_ok=True)
    model = skeleton(fam, cfg)
    plan = plan_tensors(fam, model, quant)
    del model
    header, total = header_for(fam, plan)
    hb = json.dumps({"__metadata__": {"format": "mlx"}, **header}, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    base = 8 + len(hb)
    path = os.path.join(out, "model.safetensors")
    with open(path, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        f.truncate(base + total)
    units = draw_units(fam, plan)
    if jobs <= 1:
        write_units(fam, path, base, header, plan, units)
    else:  # round-robin over pieces of similar size: the processes finish together
        import multiprocessing as mp
        fork = mp.get_context("fork")
        procs = [fork.Process(target=write_units, args=(fam, path, base, header, plan, units[j::jobs]))
                 for j in range(jobs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad:
            raise SystemExit(f"replica: {len(bad)} writer processes failed ({bad})")
    hub_cfg = dict(cfg)
    hub_cfg.pop("quantization_config", None)
    if quant:
        hub_cfg["quantization"] = {"group_size": GROUP, "bits": BITS, "mode": "affine", **fam.quant_overrides(cfg)}
        hub_cfg["quantization_config"] = dict(hub_cfg["quantization"])
    else:
        hub_cfg.pop("quantization", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub_cfg, f, indent=2)
    for fname, obj in proc.items():
        with open(os.path.join(out, fname), "w") as f:
            json.dump(obj, f, indent=2)
    return {"tensors": len(plan), "bytes": base + total}


# ---------------------------------------------------------------------------------------------
# Step 2: transformers on the stored weights


def dequant(packed: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor, bits: int) -> torch.Tensor:
    """MLX affine: w = scale * q + bias per group along the last axis (as mlx_quant.dequantize); packed [rows,
    cols * bits / 32] -> [rows, cols], the group size being cols / scales' columns."""
    per = 32 // bits
    shifts = torch.arange(per, dtype=torch.int32, device=packed.device) * bits
    codes = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    codes = codes.reshape(packed.shape[0], scales.shape[-1], -1).to(scales.dtype)
    return (codes * scales.unsqueeze(-1) + biases.unsqueeze(-1)).reshape(packed.shape[0], -1)


def bits_of(packed: torch.Tensor, cols: int) -> int:
    return packed.shape[-1] * 32 // cols


class QLinear(torch.nn.Module):
    """A Linear on stored MLX codes, dequantized in row chunks at each call (exact weights, little memory), plus
    the module's own bias where it has one (Qwen's q/k/v)."""

    def __init__(self, packed, scales, biases, cols: int, bias: torch.Tensor | None = None):
        super().__init__()
        self.packed, self.scales, self.biases, self.bias = packed, scales, biases, bias
        self.bits = bits_of(packed, cols)
        self.cached = None

    def forward(self, x):
        y = self.matmul(x)
        return y if self.bias is None else y + self.bias

    def matmul(self, x):
        if self.cached is not None:
            return torch.nn.functional.linear(x, self.cached)
        rows, cols = self.packed.shape[0], self.packed.shape[1] * 32 // self.bits
        step = max(1, DEQUANT_CHUNK // cols)
        if rows * cols * 4 <= CACHE["left"]:
            CACHE["left"] -= rows * cols * 4
            self.cached = torch.empty(rows, cols, device=self.packed.device, dtype=self.scales.dtype)
            for r in range(0, rows, step):  # in chunks: no full-size temporaries
                self.cached[r:r + step] = dequant(self.packed[r:r + step], self.scales[r:r + step],
                                                  self.biases[r:r + step], self.bits)
            return torch.nn.functional.linear(x, self.cached)
        outs = [torch.nn.functional.linear(x, dequant(self.packed[r:r + step], self.scales[r:r + step],
                                                      self.biases[r:r + step], self.bits))
                for r in range(0, self.packed.shape[0], step)]
        return torch.cat(outs, dim=-1)


class QEmbedding(torch.nn.Module):
    """An Embedding on stored MLX codes (only the looked-up rows are dequantized), times the module's scale."""

    def __init__(self, packed, scales, biases, scale, cols: int, scale_dtype: torch.dtype):
        super().__init__()
        self.packed, self.scales, self.biases = packed, scales, biases
        self.bits = bits_of(packed, cols)
        # transformers casts the scale to the weight dtype (and mlx-lm to bf16), so a bf16 checkpoint sees
        # sqrt(hidden) rounded: at hidden 2560, 50.5 for 50.596, a 2e-3 logit shift if the f32 reference kept it
        self.embed_scale = None if scale is None else torch.tensor(scale).to(scale_dtype).float()

    @property
    def weight(self):  # transformers reads single rows (Gemma 4: the pad row for image positions' PLE)
        return _Rows(self)

    def forward(self, ids):
        flat = ids.reshape(-1)
        w = dequant(self.packed[flat], self.scales[flat], self.biases[flat], self.bits).reshape(*ids.shape, -1)
        return w if self.embed_scale is None else w * self.embed_scale.to(w.device)


class _Rows:
    """weight[row, :] of a QEmbedding: that row dequantized (unscaled, as Embedding.weight)."""

    def __init__(self, emb):
        self.emb = emb

    def __getitem__(self, idx):
        row = idx[0] if isinstance(idx, tuple) else idx
        e = self.emb
        return dequant(e.packed[row:row + 1], e.scales[row:row + 1], e.biases[row:row + 1], e.bits)[0]


class QExperts(torch.nn.Module):
    """Gemma 4's or Qwen3-VL-MoE's experts on stored MLX codes (gate/up/down, [E, out, in/8] each): transformers'
    eager loop, each expert's weights dequantized when a token routes to it (or kept, within --cache-gib)."""

    def __init__(self, gate: tuple, up: tuple, down: tuple, hidden: int, inter: int, act_fn):
        super().__init__()
        self.parts = {"gate": (*gate, bits_of(gate[0], hidden)), "up": (*up, bits_of(up[0], hidden)),
                      "down": (*down, bits_of(down[0], inter))}
        self.num_experts = gate[0].shape[0]
        self.act_fn = act_fn
        self.cached = {}

    def weight(self, part: str, e: int) -> torch.Tensor:
        if (part, e) in self.cached:
            return self.cached[(part, e)]
        p, s, b, bits = self.parts[part]
        w = dequant(p[e], s[e], b[e], bits)
        if w.numel() * w.element_size() <= CACHE["left"]:
            CACHE["left"] -= w.numel() * w.element_size()
            self.cached[(part, e)] = w
        return w

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
            if e == self.num_experts:  # transformers' padding class
                continue
            top_k_pos, token_idx = torch.where(mask[e])
            x = hidden_states[token_idx]
            h = self.act_fn(torch.nn.functional.linear(x, self.weight("gate", e))) * \
                torch.nn.functional.linear(x, self.weight("up", e))
            h = torch.nn.functional.linear(h, self.weight("down", e)) * top_k_weights[token_idx, top_k_pos, None]
            out.index_add_(0, token_idx, h.to(out.dtype))
        return out


def checkpoint_dtype(cfg: dict) -> torch.dtype:
    """The checkpoint's stored dtype as rapid reads it (text_config first, then the top level; float32 if none)."""
    for c in (cfg.get("text_config") or {}, cfg):
        name = c.get("torch_dtype") or c.get("dtype")
        if name:
            return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.float32)
    return torch.float32


def load_reference_model(fam, cfg: dict, d: str, device: str, dtype: torch.dtype):
    from safetensors import safe_open
    model = skeleton(fam, cfg)
    st = safe_open(os.path.join(d, "model.safetensors"), framework="pt")
    keys = set(st.keys())

    def get(k):
        t = st.get_tensor(k)
        return t.view(torch.int32).to(device) if t.dtype == torch.uint32 else t.to(device=device, dtype=dtype)

    modules = dict(model.named_modules())
    quantized = {}
    for mod_name, mod in modules.items():
        if type(mod).__name__ in ("Gemma4TextExperts", "Qwen3VLMoeTextExperts"):
            base = fam.expert_base(mod_name)
            if base + "down_proj.scales" not in keys:
                continue
            trio = {k: tuple(get(f"{base}{k}_proj.{leaf}") for leaf in ("weight", "scales", "biases"))
                    for k in ("gate", "up", "down")}
            new = QExperts(trio["gate"], trio["up"], trio["down"], mod.hidden_dim, mod.intermediate_dim, mod.act_fn)
            parent, _, child = mod_name.rpartition(".")
            setattr(model.get_submodule(parent), child, new)
            quantized[mod_name] = new
            continue
        if not isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)) or (mod_name == "lm_head" and tied(model)):
            continue
        kb = fam.hub_key(mod_name + ".weight")[: -len(".weight")]
        if kb + ".scales" not in keys:
            continue
        p, s, b = get(kb + ".weight"), get(kb + ".scales"), get(kb + ".biases")
        if isinstance(mod, torch.nn.Embedding):
            new = QEmbedding(p, s, b, fam.embed_scale(mod), mod.embedding_dim, checkpoint_dtype(cfg))
        else:
            bias = get(fam.hub_key(mod_name + ".bias")) if mod.bias is not None else None
            new = QLinear(p, s, b, mod.in_features, bias)
        parent, _, child = mod_name.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
        quantized[mod_name] = new
    for name, t in list(model.state_dict(keep_vars=True).items()):
        if (name == "lm_head.weight" and tied(model)) or any(name.startswith(m + ".") for m in quantized):
            continue
        mod_name, leaf = name.rsplit(".", 1)
        mod = model.get_submodule(mod_name)
        entries = fam.hub_entries(name, tuple(t.shape))  # bf16 experts (--quant none) are stored split, as mlx-vlm
        kb = entries[0][1][: -len(".weight")]
        if len(entries) == 1 and kb + ".scales" in keys:  # a quantized bare parameter (Qwen3-VL-MoE's router)
            packed = get(kb + ".weight")
            v = dequant(packed, get(kb + ".scales"), get(kb + ".biases"), bits_of(packed, t.shape[-1]))
        elif len(entries) > 1:
            v = torch.cat([fam.from_hub(name, get(k)) for _, k, _ in entries], dim=1)
        else:
            v = fam.from_hub(name, get(entries[0][1]))
        v = v.reshape(t.shape)
        if leaf in mod._parameters:
            mod._parameters[leaf] = torch.nn.Parameter(v, requires_grad=False)
        else:
            mod._buffers[leaf] = v
    emb = model.get_input_embeddings()
    if not tied(model) or getattr(fam, "pooling", False):  # an embedding model has no head to tie
        pass
    elif isinstance(emb, QEmbedding):  # tied head = the quantized embedding as a linear (mlx as_linear)
        model.lm_head = QLinear(emb.packed, emb.scales, emb.biases, emb.packed.shape[-1] * 32 // emb.bits)
    else:
        model.lm_head.weight = emb.weight
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    assert not left, f"parameters not loaded: {left[:5]}"
    return model.to(device=device, dtype=dtype).eval()


def logits_positions(n: int, runs: list) -> list:
    pos = set(range(n - 4, n))
    for off, k in runs:  # the image blocks' edges
        pos.update(range(max(0, off - 1), off + 3))
        pos.update(range(off + k - 2, min(n, off + k + 1)))
    return sorted(pos)


def make_cases(fam, cfg: dict, files_cfg: dict, out: str) -> tuple:
    rng = np.random.default_rng(SEED)
    lo, hi = fam.plain_ids()
    hi = min(hi, fam.hf_config(cfg).get_text_config().vocab_size)
    bos = fam.bos(cfg)
    text = [[bos] + rng.integers(lo, hi, TEXT_LEN - 1).tolist() for _ in range(N_TEXT)]
    if not getattr(fam, "has_images", True):
        return text, []
    img_dir = os.path.join(out, "images")
    os.makedirs(img_dir, exist_ok=True)
    pil = {}
    for f, (w, h) in IMAGES.items():
        im = imgs.draw(f, w, h)
        im.save(os.path.join(img_dir, f))
        pil[f] = im
    image_cases = []
    two = ["photo_1024x768.png", "portrait_720x960.png"]
    for cname, files in (("one_image", two[:1]), ("two_images", two)):
        prep = fam.prepare_images(files_cfg, cfg, [pil[f] for f in files])
        ids = [bos] + rng.integers(lo, hi, 8).tolist()
        placed = []
        for f, im in zip(files, prep["images"]):
            block = fam.image_block(cfg, im)
            first = block.index(fam.image_token_id(cfg))
            placed.append({"file": f, "offset": len(ids) + first, "span": len(block) - first, "tokens": im["tokens"]})
            ids += block + rng.integers(lo, hi, 6).tolist()
        image_cases.append((cname, ids, placed, prep))
    return text, image_cases


@torch.no_grad()
def greedy(model, inputs: dict, n_prompt: int) -> tuple:
    gen = model.generate(**inputs, max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY, do_sample=False,
                         return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    toks = gen.sequences[:, n_prompt:].tolist()
    margins = []
    for b in range(gen.sequences.shape[0]):
        m = []
        for lg in gen.logits:
            top = torch.topk(lg[b].float(), 2).values
            m.append(round(float(top[0] - top[1]), 6))
        margins.append(m)
    return toks, margins


@torch.no_grad()
def run_reference(fam, cfg: dict, proc: dict, d: str, out: str, device: str, dtype: torch.dtype) -> dict:
    torch.backends.cudnn.allow_tf32 = False  # a float32 reference on the GPU: no TF32 convolutions or matmuls
    torch.backends.cuda.matmul.allow_tf32 = False
    model = load_reference_model(fam, cfg, d, device, dtype)
    text, image_cases = make_cases(fam, cfg, proc, out)
    cases = []
    ids = torch.tensor(text, device=device)
    kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **fam.extra_forward(cfg, ids)}
    t0 = time.time()
    if getattr(fam, "pooling", False):
        return pooled_reference(model, kw, text, out)
    pos = logits_positions(TEXT_LEN, [])
    logits = model(**kw, logits_to_keep=torch.tensor(pos, device=device)).logits  # only the compared rows
    toks, margins = greedy(model, kw, TEXT_LEN)
    for i in range(N_TEXT):
        f = f"text{i}.logits.f32"
        f32_file(os.path.join(out, f), logits[i].float().cpu().numpy())
        cases.append({"name": f"text{i}", "input_ids": text[i], "images": [], "logits": f, "logits_positions": pos,
                      "greedy": toks[i], "margins": margins[i]})
    del logits
    print(f"  text batch: {time.time() - t0:.1f}s", flush=True)
    for cname, ids_l, placed, prep in image_cases:
        t0 = time.time()
        ids = torch.tensor([ids_l], device=device)
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **fam.extra_forward(cfg, ids),
              **{k: v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device)
                 for k, v in prep["kwargs"].items()}}
        pos = logits_positions(len(ids_l), [(p["offset"], p["span"]) for p in placed])
        logits = model(**kw, logits_to_keep=torch.tensor(pos, device=device)).logits
        f = f"{cname}.logits.f32"
        f32_file(os.path.join(out, f), logits[0].float().cpu().numpy())
        del logits
        toks, margins = greedy(model, kw, len(ids_l))
        for i, (p, im) in enumerate(zip(placed, prep["images"])):
            p["pixel_values"] = f"{cname}.img{i}.pixels.f32"
            p["pixel_values_shape"] = list(im["pixels"].shape)
            f32_file(os.path.join(out, p["pixel_values"]), im["pixels"])
        cases.append({"name": cname, "input_ids": ids_l, "images": placed, "logits": f, "logits_positions": pos,
                      "greedy": toks[0], "margins": margins[0]})
        print(f"  {cname}: {len(ids_l)} tokens, {time.time() - t0:.1f}s", flush=True)
    vocab = model.config.get_text_config().vocab_size
    ref = {"vocab_size": vocab, "images_dir": "images", "n_greedy": N_GREEDY, "cases": cases,
           "image_token_id": fam.image_token_id(cfg),
           "bidirectional": fam.bidirectional(cfg)}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    return {"cases": len(cases)}


def pooled_reference(model, kw: dict, text: list, out: str) -> dict:
    """An embedding model's reference: each prompt's last hidden state (after the final norm), as "hidden"."""
    hidden = model(**kw).last_hidden_state[:, -1]
    cases = []
    for i in range(N_TEXT):
        f = f"text{i}.hidden.f32"
        f32_file(os.path.join(out, f), hidden[i].float().cpu().numpy())
        cases.append({"name": f"text{i}", "input_ids": text[i], "images": [], "hidden": f})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"pooling": True, "images_dir": "images", "n_greedy": 0, "cases": cases, "image_token_id": None,
                   "bidirectional": False}, f, indent=1)
    return {"cases": len(cases)}


# ---------------------------------------------------------------------------------------------
# Step 4: compare


def read_f32(path: str) -> np.ndarray:
    return np.fromfile(path, dtype="<f4")


def logit_err(want: np.ndarray, have: np.ndarray) -> float:
    return float(np.abs(want - have).max()) / max(1.0, float(np.abs(want).max()))


def compare(out: str, device: str, cases: str | None = None) -> dict:
    """cases: the comma list a --cases run was limited to; any other missing case fails the comparison."""
    only = set(cases.split(",")) if cases else None
    ref = json.load(open(os.path.join(out, "reference.json")))
    got = json.load(open(os.path.join(out, f"rapid-{device}.json")))
    rows, ok = [], True
    for c in ref["cases"]:
        g = got["cases"].get(c["name"])
        if g is None:
            if only is not None and c["name"] not in only:
                continue  # not asked for (--cases)
            ok = False
            rows.append({"case": c["name"], "tokens": len(c["input_ids"]), "logit_err": float("inf"),
                         "greedy_equal": False, "error": "rapid did not run this case"})
            continue
        if ref.get("pooling"):  # embeddings: the pooled vector, same relative measure; no tokens to compare
            err = logit_err(read_f32(os.path.join(out, c["hidden"])), read_f32(os.path.join(out, g["hidden"])))
            ok = ok and err <= TOL
            rows.append({"case": c["name"], "tokens": len(c["input_ids"]), "hidden_err": err, "logit_err": err,
                         "greedy_equal": True})
            continue
        want = read_f32(os.path.join(out, c["logits"]))
        err = logit_err(want, read_f32(os.path.join(out, g["logits"])))
        same = g["greedy"] == c["greedy"]
        first = next((i for i, (a, b) in enumerate(zip(g["greedy"], c["greedy"])) if a != b), None)
        row = {"case": c["name"], "tokens": len(c["input_ids"]), "logit_err": err, "greedy_equal": same,
               "min_margin": min(c["margins"]), "pixels_err": g.get("pixels_err")}
        if first is not None:
            row["first_diff"] = {"step": first, "ref_margin": c["margins"][first]}
        ok = ok and err <= TOL and same
        rows.append(row)
    if not rows:
        return {"ok": False, "device": got["device"], "error": "no case was run"}
    return {"ok": ok, "device": got["device"], "device_name": got.get("device_name"), "load_s": got["load_s"],
            "tol": TOL, "worst_logit_err": max(r["logit_err"] for r in rows),
            "cases_run": f"{len(rows)} of {len(ref['cases'])}",
            "greedy_equal": sum(r["greedy_equal"] for r in rows), "cases": rows}


def reference_spread(out: str) -> dict | None:
    """The float32 reference against the float64 one (--ref-dtype float64): the replica's conditioning."""
    p64 = os.path.join(out, "ref64", "reference.json")
    if not os.path.exists(p64):
        return None
    r32 = json.load(open(os.path.join(out, "reference.json")))
    r64 = {c["name"]: c for c in json.load(open(p64))["cases"]}
    cases = {}
    for c in r32["cases"]:
        c64 = r64[c["name"]]
        rows = "hidden" if r32.get("pooling") else "logits"
        cases[c["name"]] = {"logit_err": logit_err(read_f32(os.path.join(out, "ref64", c64[rows])),
                                                   read_f32(os.path.join(out, c[rows]))),
                            "greedy_equal": c.get("greedy") == c64.get("greedy")}
    return {"worst_logit_err": max(v["logit_err"] for v in cases.values()), "cases": cases}


# ---------------------------------------------------------------------------------------------
# Driver


def step_label(step: str, extra: list) -> str:
    """The step's name in timings and steps.json: reference-float64, rapid-cuda, ..."""
    return step + ("-float64" if "float64" in extra else "") + (f"-{extra[1]}" if step == "rapid" else "")


def run_step(args, step: str, fam, cfg: dict, proc: dict, model_dir: str, out: str) -> dict:
    if step == "replica":
        return build_replica(fam, args.name, cfg, proc, model_dir, args.quant == "4", args.jobs)
    if step == "reference":
        torch.set_num_threads(args.threads)
        CACHE["left"] = int(args.cache_gib * (1 << 30))
        if args.ref_dtype == "float64":
            out = os.path.join(out, "ref64")
            os.makedirs(out, exist_ok=True)
        dtype = torch.float64 if args.ref_dtype == "float64" else torch.float32
        return run_reference(fam, cfg, proc, model_dir, out, args.ref_device, dtype)
    if step == "rapid":
        cmd = ["node", os.path.join(_HERE, "parity_rapid.mjs"), "--dir", model_dir, "--out", out,
               "--device", args.device, "--threads", str(args.threads)] + (["--resume"] if args.resume else []) \
            + (["--cases", args.cases] if args.cases else [])
        subprocess.run(cmd, check=True)
        return {}
    if step == "compare":
        return compare(out, args.device, args.cases)
    raise SystemExit(f"unknown step {step}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--device", default="cpu", help="rapid's backends, a comma list of cpu and cuda")
    ap.add_argument("--ref-device", choices=["cpu", "cuda"], help="where transformers runs (default: cuda when "
                    "--device lists it and torch sees a GPU, else cpu)")
    ap.add_argument("--quant", choices=["4", "none"], default="4")
    ap.add_argument("--out", default="/work/big/replicas")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--jobs", type=int, default=1, help="replica: processes writing tensors at once")
    ap.add_argument("--keep", action="store_true", help="keep the replica checkpoint")
    ap.add_argument("--resume", action="store_true", help="skip the steps OUT/steps.json records as finished")
    ap.add_argument("--cases", help="the rapid steps run and compare only these cases (a comma list)")
    ap.add_argument("--step", choices=["replica", "reference", "rapid", "compare"])
    ap.add_argument("--ref-dtype", choices=["float32", "float64"], default="float32",
                    help="float64: also run the reference in float64 and report the float32 spread")
    ap.add_argument("--cache-gib", type=float, default=0.0,
                    help="reference: keep up to this many GiB of dequantized weights (faster where memory allows)")
    ap.add_argument("--config", help="another config.json for the model (a shrunken one to try the script quickly)")
    args = ap.parse_args()
    devices = [d for d in args.device.split(",") if d]
    if not devices or any(d not in ("cpu", "cuda") for d in devices):
        raise SystemExit(f"--device: a comma list of cpu and cuda, not {args.device!r}")
    if args.ref_device is None:
        args.ref_device = "cuda" if "cuda" in devices and torch.cuda.is_available() else "cpu"
    entry = catalog_entry(args.name)
    global BITS
    BITS = 8 if entry.get("quantization", "").startswith("8-bit") else 4  # the catalog's bits (mlx group 64 either way)
    if entry.get("quantization") == "bf16":
        args.quant = "none"  # the repo is bf16 (Qwen's embedding models): so is the replica
    fam_cls = EmbeddingLM if "embedding" in args.name else FAMILIES.get(entry["family"])
    if fam_cls is None:
        raise SystemExit(f"{args.name}: family {entry['family']} has no full-size replica here yet")
    cfg, proc, layout = read_configs(args.name, args.config)
    out = os.path.join(args.out, f"{args.name}-q{args.quant}")
    model_dir = os.path.join(out, "model")
    os.makedirs(out, exist_ok=True)
    if args.step:
        if args.step in ("rapid", "compare") and len(devices) != 1:
            raise SystemExit(f"--step {args.step} takes one --device")
        res = run_step(args, args.step, fam_cls(layout), cfg, proc, model_dir, out)
        res["peak_rss_gib"] = round(peak_rss_gib(), 2)
        print("RESULT " + json.dumps(res), flush=True)
        return
    base = [sys.executable, os.path.abspath(__file__), args.name, "--quant", args.quant, "--out", args.out,
            "--threads", str(args.threads), "--jobs", str(args.jobs), "--ref-device", args.ref_device]
    if args.config:
        base += ["--config", args.config]
    if args.cache_gib:
        base += ["--cache-gib", str(args.cache_gib)]
    if args.cases:
        base += ["--cases", args.cases]
    if args.resume:
        base += ["--resume"]  # the rapid step also goes on from its last finished case
    runs = [("replica", []), ("reference", [])]
    if args.ref_dtype == "float64":
        runs.append(("reference", ["--ref-dtype", "float64"]))
    runs += [("rapid", ["--device", d]) for d in devices]
    steps_file = os.path.join(out, "steps.json")
    timings = {}
    if args.resume and os.path.exists(steps_file):
        with open(steps_file) as f:
            timings = {k: v for k, v in json.load(f).items() if "failed" not in v}
        if not os.path.isdir(model_dir) and any(step_label(s, e) not in timings for s, e in runs):
            timings = {}  # the replica is gone and a step still needs it: start over
        if timings:
            print(f"resuming: {', '.join(timings)} done earlier", flush=True)
    for step, extra in runs:
        label = step_label(step, extra)
        if label in timings:
            continue
        t0 = time.time()
        # its own process group, so that a time limit on this script (SIGTERM) also stops the step's children
        p = subprocess.Popen(base + ["--step", step] + extra, start_new_session=True)
        signal.signal(signal.SIGTERM, lambda *_: (os.killpg(p.pid, signal.SIGKILL), os._exit(143)))
        _, status, ru = os.wait4(p.pid, 0)
        timings[label] = {"seconds": round(time.time() - t0, 1), "peak_rss_gib": round(ru.ru_maxrss / (1 << 20), 2)}
        print(f"{label}: {timings[label]}", flush=True)
        if status != 0:  # a backend that fails still leaves the others' results
            timings[label]["failed"] = status
        with open(steps_file, "w") as f:
            json.dump(timings, f, indent=1)
        if status != 0 and step != "rapid":
            raise SystemExit(f"step {label} failed ({status})")
        gc.collect()
    report = {"model": args.name, "quant": args.quant, "ref_device": args.ref_device, "steps": timings,
              "torch": torch.__version__, "reference_spread": reference_spread(out), "devices": {}}
    for d in devices:
        if "failed" in timings[f"rapid-{d}"]:
            report["devices"][d] = {"ok": False, "error": "the rapid step failed (see its output)"}
        else:
            report["devices"][d] = compare(out, d, args.cases)
    report["ok"] = all(r["ok"] for r in report["devices"].values())
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    if not args.keep:
        import shutil
        shutil.rmtree(model_dir, ignore_errors=True)
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
