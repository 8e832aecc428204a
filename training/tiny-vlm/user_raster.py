"""Draws user scenes (user_scenes.py) the way rapid will see them: at the picture's own size (capped at
twice the model's input, see below), through a JPEG round trip or not, then smart_resized with Pillow's
bicubic filter to the model's input size.

Two independent rasterisers: "ss" (binary masks supersampled 2-4x and box-filtered, shapes.py's method)
and "cov" (analytic anti-aliasing: pixel coverage from the signed distance to the shape's edge).
"""
import numpy as np

from jpeg_sim import jpeg_roundtrip
from pil_resize import pil_resize, smart_resize
from shapes import KINDS

# Pictures larger than this many times the model's input (per side) are drawn at this multiple: the
# bicubic downscale of a 1024-px drawing and of a 2x drawing differ by rounding, and a 1024x1024 raster
# per sample would starve the GPU of batches.
WORK_SCALE = 2.0


def shape_geometry(scene, w, h):
    """Per shape: (kind, cx, cy, r, params, rgb) in pixels of a w x h raster."""
    short = min(w, h)
    out = []
    for s in scene["shapes"]:
        out.append((s["kind"], s["cx"] * w, s["cy"] * h, s["r"] * short, s, np.array(s["rgb"], np.float32)))
    return out


def signed_distance(kind, cx, cy, r, s, xs, ys):
    """Distance in pixels to the shape's edge, negative inside (exact for circle and square sides; the
    polygons take the largest edge distance, exact near edges, which is all anti-aliasing needs)."""
    dx, dy = xs - cx, ys - cy
    if kind == "circle":
        return np.hypot(dx, dy) - r
    if kind == "square":
        a = r * s["sq"]
        return np.maximum(np.abs(dx) - a, np.abs(dy) - a)
    if kind == "diamond":
        a, b = r * s["dia"][0], r * s["dia"][1]
        return (np.abs(dx) / a + np.abs(dy) / b - 1) * (a * b / np.hypot(a, b))
    if kind == "triangle":
        top, bot, half = -r, r * 0.85, r * s["tri"]
        hgt = bot - top
        n = np.hypot(hgt, half)
        # edges: base (y = bot), and the two sides from the apex (0, top) to (+-half, bot)
        d_base = dy - bot
        d_side = (hgt * np.abs(dx) - half * (dy - top)) / n
        return np.maximum(d_base, d_side)
    raise ValueError(kind)


def paint_background(bg, w, h):
    img = np.empty((h, w, 3), np.float32)
    a = np.array(bg["rgb"], np.float32)
    if "rgb2" in bg:
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
        c, s = np.cos(bg["angle"]), np.sin(bg["angle"])
        t = (xs / max(1, w - 1) - 0.5) * c + (ys / max(1, h - 1) - 0.5) * s + 0.5
        t = np.clip(t, 0, 1)[..., None]
        img[:] = a * (1 - t) + np.array(bg["rgb2"], np.float32) * t
    else:
        img[:] = a
    return img


def add_noise(img, bg):
    if "noise" in bg:
        rng = np.random.default_rng(bg["noise_seed"])
        img += rng.normal(0, bg["noise"], img.shape[:2])[..., None].astype(np.float32)
    return img


def render_cov(scene, w, h):
    img = paint_background(scene["bg"], w, h)
    for kind, cx, cy, r, s, rgb in shape_geometry(scene, w, h):
        x0, x1 = max(0, int(cx - 1.4 * r) - 1), min(w, int(cx + 1.4 * r) + 2)
        y0, y1 = max(0, int(cy - 1.4 * r) - 1), min(h, int(cy + 1.4 * r) + 2)
        ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32) + 0.5
        cov = np.clip(0.5 - signed_distance(kind, cx, cy, r, s, xs, ys), 0, 1)[..., None]
        img[y0:y1, x0:x1] = img[y0:y1, x0:x1] * (1 - cov) + rgb * cov
    return add_noise(img, scene["bg"])


def render_ss(scene, w, h, ss):
    """Binary masks at ss x ss samples per pixel, box-filtered: the fraction of a pixel's samples inside
    the shape blends its colour over what is below (the background is smooth within a pixel)."""
    img = paint_background(scene["bg"], w, h)
    for kind, cx, cy, r, s, rgb in shape_geometry(scene, w, h):
        x0, x1 = max(0, int(cx - 1.4 * r) - 1), min(w, int(cx + 1.4 * r) + 2)
        y0, y1 = max(0, int(cy - 1.4 * r) - 1), min(h, int(cy + 1.4 * r) + 2)
        ys, xs = np.mgrid[y0 * ss:y1 * ss, x0 * ss:x1 * ss].astype(np.float32)
        m = signed_distance(kind, cx, cy, r, s, (xs + 0.5) / ss, (ys + 0.5) / ss) <= 0
        cov = m.reshape(y1 - y0, ss, x1 - x0, ss).mean((1, 3), dtype=np.float32)[..., None]
        img[y0:y1, x0:x1] = img[y0:y1, x0:x1] * (1 - cov) + rgb * cov
    return add_noise(img, scene["bg"])


def sample_look(rng):
    """How the picture reaches rapid: rasteriser, supersampling, JPEG quality (0: PNG)."""
    return {"raster": "cov" if rng.random() < 0.5 else "ss", "ss": int(rng.integers(2, 5)),
            "jpeg": int(rng.integers(30, 96)) if rng.random() < 0.5 else 0}


def model_image(scene, look):
    """uint8 [h, w, 3] at the model's input size (smart_resize of the picture's size)."""
    W0, H0 = scene["width"], scene["height"]
    th, tw = smart_resize(H0, W0)
    f = min(1.0, max(WORK_SCALE * tw / W0, WORK_SCALE * th / H0))
    w, h = max(1, int(round(W0 * f))), max(1, int(round(H0 * f)))
    img = render_cov(scene, w, h) if look["raster"] == "cov" else render_ss(scene, w, h, look["ss"])
    img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    if look["jpeg"]:
        img = jpeg_roundtrip(img, look["jpeg"])
    return pil_resize(img, tw, th)


def user_kind_labels(scene, block=28, min_px=40):
    """Per merged token of the model's input (row-major): 0 none, 1 + KINDS index of the shape covering most
    of it, -100 when shapes cover only 1..min_px-1 of its pixels (shapes.kind_token_labels' rule)."""
    th, tw = smart_resize(scene["height"], scene["width"])
    bw, bh = tw // block, th // block
    counts = np.zeros((bh * bw, len(KINDS) + 1), np.int64)
    ys, xs = np.mgrid[0:th, 0:tw].astype(np.float32) + 0.5
    tok = ((ys.astype(np.int64) // block) * bw + xs.astype(np.int64) // block)
    owner = np.full((th, tw), -1, np.int64)
    for kind, cx, cy, r, s, _ in shape_geometry(scene, tw, th):
        owner[signed_distance(kind, cx, cy, r, s, xs, ys) <= 0] = KINDS.index(kind)  # later shapes on top
    sel = owner >= 0
    np.add.at(counts, (tok[sel], owner[sel] + 1), 1)
    covered = counts[:, 1:].sum(1)
    lab = np.where(covered == 0, 0, np.where(covered < min_px, -100, counts[:, 1:].argmax(1) + 1))
    return lab.astype(np.int64)
