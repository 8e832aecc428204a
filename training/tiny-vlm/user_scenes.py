"""Scenes as users draw them: any size 64-1024 px and aspect up to 4:1, white/gray/black backgrounds
with tints, gradients and noise, 1-5 shapes of varied size, proportions, colour and overlap.

A scene keeps its geometry in fractions of the picture (centre in x/y of the width/height, radius of the
short side), so it can be drawn at any resolution; the answers depend only on its discrete content
(kind, colour name, size class, 3x3 cell, background class), the same keys as shapes.py's scenes.
"""
import numpy as np

from pil_resize import smart_resize
from shapes import BACKGROUND_NAMES, COLOR_NAMES, KINDS, POSITIONS
from vlm import MIN_PIXELS

MAX_USER_SHAPES = 5
# Hue ranges (degrees), saturation and value ranges per colour name, HSV: covers the shipped palette,
# CSS's named colours and what a drawing program's swatches give.
HSV_RANGES = {
    "red": ((-10, 8), (0.7, 1.0), (0.65, 1.0)),
    "orange": ((20, 40), (0.8, 1.0), (0.88, 1.0)),
    "yellow": ((48, 62), (0.7, 1.0), (0.88, 1.0)),
    "green": ((95, 150), (0.6, 1.0), (0.4, 0.85)),
    "blue": ((205, 245), (0.65, 1.0), (0.55, 1.0)),
    "purple": ((265, 305), (0.45, 1.0), (0.4, 0.85)),
}
# Background classes: (low, high) of the mean level, and the largest per-channel tint.
BG_LEVELS = {"white": (228, 255, 10), "gray": (105, 165, 8), "black": (0, 40, 8)}
# Radius of a shape as a fraction of the picture's short side. Run 6: the classes meet halfway (small up to
# 0.105, large from 0.12); run 5's small stopped at 0.09, so a small shape drawn at 0.09-0.1 of a small or
# narrow picture's short side fell in an untrained gap and was read "large" (4 of its 5 size misreads).
SMALL_R = (0.05, 0.105)
LARGE_R = (0.12, 0.2)
LARGE_R_FEW = (0.12, 0.3)  # one or two shapes: users draw them big
# Smallest radius in pixels of the model's input: below about 5 px (at run 5-7's 112-px floor) a shape covers
# under a 14-px patch and its kind cannot be seen. Pixel radii are given at that floor and scaled to the current
# one (run 8: 196 px), so the relative sizes stay those runs' while the model sees them larger.
PX = MIN_PIXELS ** 0.5 / 112
MIN_R_PX = {"small": 5.5 * PX, "large": 8.5 * PX}
# Run 6: this share of small shapes is drawn at 5.5-8 px of radius at the model's input (within SMALL_R),
# where run 5's weights get 15-19% of kinds wrong among 3-5 shapes (3-5% at 12 px and more; shape_probe.py).
P_TINY = 0.3  # run 7: 0.3 (run 6: 0.2); its misses were still small shapes' kinds
TINY_R_PX = 8.0 * PX
# Run 7: this share of shapes is drawn within 0.015 of the small/large boundary (0.09-0.105 small, 0.12-0.135
# large): run 6 still read a small shape near 0.1 of the short side as large.
P_EDGE = 0.25
EDGE_W = 0.015
# Shapes per scene (1-5): single shapes are what a first-time user shows, but describe and JSON fail on 3-5.
N_SHAPES_P = [0.3, 0.16, 0.18, 0.18, 0.18]
# Run 6: multi-shape scenes where colour does not tell shapes apart (run 5 read a small shape as its
# same-coloured neighbour's kind): this share takes colours from 1-2 names, and this share kinds from 2.
P_FEW_COLORS = 0.35
P_TWO_KINDS = 0.35  # run 7: 0.35 (run 6: 0.25); run 6 still read a diamond beside a triangle as a triangle


def hsv_to_rgb(h, s, v):
    h = (h % 360) / 60.0
    i = int(h) % 6
    f = h - int(h)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    r, g, b = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]
    return [int(round(255 * c)) for c in (r, g, b)]


def sample_size(rng):
    """(width, height) of the picture as the user has it: long side 64-1024 (log-uniform), aspect <= 4:1."""
    long_side = float(np.exp(rng.uniform(np.log(64), np.log(1024))))
    aspect = float(np.exp(rng.uniform(0, np.log(4)))) if rng.random() < 0.6 else 1.0
    short = max(64.0, long_side / aspect)
    w, h = (long_side, short) if rng.random() < 0.5 else (short, long_side)
    return int(round(w)), int(round(h))


def sample_background(rng):
    name = BACKGROUND_NAMES[int(rng.integers(len(BACKGROUND_NAMES)))]
    lo, hi, tint = BG_LEVELS[name]
    level = rng.uniform(lo, hi)
    base = np.clip(level + rng.uniform(-tint, tint, 3), 0, 255)
    kind = ["flat", "flat", "gradient", "noise", "gradient_noise"][int(rng.integers(5))]
    bg = {"name": name, "rgb": base.tolist(), "kind": kind}
    if "gradient" in kind:
        # the far end stays inside the class: at most 25 levels away, clamped to the class range
        end = np.clip(base + rng.uniform(-25, 25), max(0, lo - 10), min(255, hi + 10))
        bg["rgb2"] = end.tolist()
        bg["angle"] = float(rng.uniform(0, 2 * np.pi))
    if "noise" in kind:
        bg["noise"] = float(rng.uniform(1.5, 7))
        bg["noise_seed"] = int(rng.integers(1 << 30))
    return bg


def _cell_of(cx, cy):
    return min(2, int(cy * 3)) * 3 + min(2, int(cx * 3))


def sample_user_scene(rng, size=None, n=None):
    """A user-like scene; `size` (w, h) fixes the picture size, `n` the shape count."""
    w, h = size if size is not None else sample_size(rng)
    n = int(rng.choice(MAX_USER_SHAPES, p=N_SHAPES_P)) + 1 if n is None else n
    colors = COLOR_NAMES
    if n >= 2 and rng.random() < P_FEW_COLORS:
        colors = [COLOR_NAMES[i] for i in rng.choice(len(COLOR_NAMES), size=int(rng.integers(1, 3)), replace=False)]
    kinds = KINDS
    if n >= 2 and rng.random() < P_TWO_KINDS:
        kinds = [KINDS[i] for i in rng.choice(len(KINDS), size=2, replace=False)]
    short = min(w, h)
    model_short = min(smart_resize(h, w))
    cells = sorted(rng.choice(9, size=n, replace=False).tolist())
    if n == 1 and rng.random() < 0.4:
        cells = [4]  # a single shape is most often centred
    shapes = []
    for c in cells:
        for _ in range(20):
            row, col = divmod(c, 3)
            # centre within the middle 60% of its cell, so the cell (the answer) is unambiguous
            cx = (col + 0.5 + rng.uniform(-0.3, 0.3)) / 3
            cy = (row + 0.5 + rng.uniform(-0.3, 0.3)) / 3
            size_name = "small" if rng.random() < 0.5 else "large"
            lo, hi = SMALL_R if size_name == "small" else (LARGE_R_FEW if n <= 2 else LARGE_R)
            if rng.random() < P_EDGE:
                lo, hi = (SMALL_R[1] - EDGE_W, SMALL_R[1]) if size_name == "small" else (LARGE_R[0], LARGE_R[0] + EDGE_W)
            r = max(rng.uniform(lo, hi), MIN_R_PX[size_name] / model_short)
            if size_name == "small" and rng.random() < P_TINY:
                r = min(rng.uniform(MIN_R_PX["small"], TINY_R_PX) / model_short, SMALL_R[1])
            # stay inside the picture, and overlap a neighbour by at most a quarter of the radii
            rp = r * short
            inside = rp <= cx * w and rp <= (1 - cx) * w and rp <= cy * h and rp <= (1 - cy) * h
            clear = all(np.hypot((cx - s["cx"]) * w, (cy - s["cy"]) * h) >= 0.75 * (rp + s["r"] * short) for s in shapes)
            if inside and clear:
                break
        else:
            continue
        name = colors[int(rng.integers(len(colors)))]
        (h0, h1), (s0, s1), (v0, v1) = HSV_RANGES[name]
        shapes.append({
            "kind": kinds[int(rng.integers(len(kinds)))], "color": name, "size": size_name,
            "position": POSITIONS[_cell_of(cx, cy)], "cell": _cell_of(cx, cy),
            "cx": float(cx), "cy": float(cy), "r": float(r),
            "rgb": hsv_to_rgb(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1)),
            # proportions: square half-side, triangle half-base, diamond half-width/half-height (of r)
            "sq": float(rng.uniform(0.75, 0.92)), "tri": float(rng.uniform(0.85, 1.1)),
            "dia": (float(rng.uniform(0.8, 1.05)), float(rng.uniform(1.0, 1.3))),
        })
    if not shapes:  # no placement fitted (a tiny, very narrow picture): draw again
        return sample_user_scene(rng, size, n)
    shapes.sort(key=lambda s: s["cell"])
    bg = sample_background(rng)
    return {"width": int(w), "height": int(h), "background": bg["name"], "bg": bg, "shapes": shapes, "user": True}


def user_scene_signature(scene):
    return ("user", scene["background"],
            tuple((s["kind"], s["color"], s["size"], s["cell"]) for s in scene["shapes"]))
