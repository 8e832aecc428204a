"""Procedural scenes of coloured shapes: sampling, rendering (numpy only), PNG I/O.

Rendering uses no PIL so the pixels are identical on every machine (training on the accelerator,
checking on a laptop): 2x supersampled masks averaged down, colours jittered per image.
"""
import struct
import zlib

import numpy as np

KINDS = ["circle", "square", "triangle", "diamond"]
COLORS = {
    "red": (215, 35, 35),
    "green": (40, 165, 60),
    "blue": (35, 75, 215),
    "yellow": (240, 210, 25),
    "orange": (245, 135, 25),
    "purple": (135, 50, 175),
}
COLOR_NAMES = list(COLORS)
BACKGROUNDS = {"white": (250, 250, 250), "black": (15, 15, 15), "gray": (128, 128, 128)}
BACKGROUND_NAMES = list(BACKGROUNDS)
SIZES = ["small", "large"]
# 3x3 grid cells, row-major; names are the answer strings.
POSITIONS = ["top left", "top", "top right", "left", "center", "right", "bottom left", "bottom", "bottom right"]
MAX_SHAPES = 4
# (width, height) choices: mostly 112x112 (4x4 merged tokens); some non-square grids.
IMAGE_SIZES = [(112, 112)] * 6 + [(168, 112), (112, 168)]


def sample_scene(rng, size=None):
    """A scene: background, image size and 1..4 shapes in distinct grid cells (reading order)."""
    w, h = size if size is not None else IMAGE_SIZES[rng.integers(len(IMAGE_SIZES))]
    n = int(rng.integers(1, MAX_SHAPES + 1))
    cells = sorted(rng.choice(9, size=n, replace=False).tolist())
    shapes = []
    for c in cells:
        shapes.append({
            "kind": KINDS[rng.integers(len(KINDS))],
            "color": COLOR_NAMES[rng.integers(len(COLOR_NAMES))],
            "size": SIZES[rng.integers(2)],
            "position": POSITIONS[c],
            "cell": c,
            # render jitter: centre offset in [-0.12, 0.12] of the cell, size and colour noise
            "dx": float(rng.uniform(-0.12, 0.12)),
            "dy": float(rng.uniform(-0.12, 0.12)),
            "scale": float(rng.uniform(0.9, 1.1)),
            "cj": rng.integers(-14, 15, size=3).tolist(),
        })
    return {
        "width": int(w), "height": int(h),
        "background": BACKGROUND_NAMES[rng.integers(len(BACKGROUND_NAMES))],
        "bj": rng.integers(-6, 7, size=3).tolist(),
        "shapes": shapes,
    }


def scene_signature(scene):
    """The discrete content of a scene (what the answers depend on), for held-out checks."""
    return (scene["width"], scene["height"], scene["background"],
            tuple((s["kind"], s["color"], s["size"], s["cell"]) for s in scene["shapes"]))


def _shape_mask(kind, cx, cy, r, xs, ys):
    dx, dy = xs - cx, ys - cy
    if kind == "circle":
        return dx * dx + dy * dy <= r * r
    if kind == "square":
        s = r * 0.88
        return (np.abs(dx) <= s) & (np.abs(dy) <= s)
    if kind == "diamond":
        return np.abs(dx) + np.abs(dy) <= r * 1.15
    if kind == "triangle":
        # upward isosceles: apex at top, base at bottom
        top, bot = cy - r, cy + r * 0.85
        t = (ys - top) / (bot - top)
        return (ys >= top) & (ys <= bot) & (np.abs(dx) <= t * r * 1.05)
    raise ValueError(kind)


def render(scene):
    """uint8 [H, W, 3] image of the scene."""
    w, h = scene["width"], scene["height"]
    ss = 2
    bg = np.clip(np.array(BACKGROUNDS[scene["background"]]) + np.array(scene["bj"]), 0, 255)
    img = np.empty((h * ss, w * ss, 3), np.float32)
    img[:] = bg
    cw, ch = w / 3.0, h / 3.0
    for s in scene["shapes"]:
        row, col = divmod(s["cell"], 3)
        cx = (col + 0.5 + s["dx"]) * cw
        cy = (row + 0.5 + s["dy"]) * ch
        base = 8.0 if s["size"] == "small" else 15.0
        r = base * s["scale"]
        # only the shape's bounding box (every mask lies within 1.15 r of the centre)
        x0, x1 = max(0, int((cx - 1.2 * r) * ss)), min(w * ss, int((cx + 1.2 * r) * ss) + 2)
        y0, y1 = max(0, int((cy - 1.2 * r) * ss)), min(h * ss, int((cy + 1.2 * r) * ss) + 2)
        ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        xs = (xs + 0.5) / ss
        ys = (ys + 0.5) / ss
        m = _shape_mask(s["kind"], cx, cy, r, xs, ys)
        col_rgb = np.clip(np.array(COLORS[s["color"]]) + np.array(s["cj"]), 0, 255)
        img[y0:y1, x0:x1][m] = col_rgb
    # 2x2 box filter; sums of four integer-valued floats are exact, so the order does not matter
    img = (img[0::2, 0::2] + img[1::2, 0::2] + img[0::2, 1::2] + img[1::2, 1::2]) * 0.25
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def write_png(path, img):
    """Writes an RGB uint8 [H, W, 3] array as a PNG (filter 0, zlib level 9)."""
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def read_png(path):
    """Reads an 8-bit RGB/RGBA non-interlaced PNG (all five filter types) into uint8 [H, W, 3]."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, tag = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if tag == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, "only 8-bit RGB(A) PNGs"
            ch = 3 if ctype == 2 else 4
        elif tag == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * ch
    out = np.zeros((h, stride), np.int32)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if ft == 0 or ft == 2:
            cur = line if ft == 0 else (line + prev) & 255
            out[y] = cur
            prev = cur
            continue
        cur = np.zeros(stride, np.int32)
        for x in range(stride):
            a = cur[x - ch] if x >= ch else 0
            b = prev[x]
            c = prev[x - ch] if x >= ch else 0
            if ft == 0:
                p = 0
            elif ft == 1:
                p = a
            elif ft == 2:
                p = b
            elif ft == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return out.reshape(h, w, ch)[:, :, :3].astype(np.uint8)


def kind_token_labels(scene, block=28, min_px=40, out=None):
    """Per merged image token (block x block pixels, row-major): 0 no shape, 1 + KINDS index of the shape
    covering the most of it, or -100 when shapes cover only 1..min_px-1 of its pixels (ambiguous). out: the
    (width, height) the picture is resized to before the tower (tokens and min_px are of that size).

    Training-only dense supervision for the vision tower (an auxiliary loss): run 2's merged vision
    features encoded shape kind barely above chance (linear probe 34%, chance 25%)."""
    w, h = scene["width"], scene["height"]
    tw, th = out or (w, h)
    sx, sy = tw / w, th / h
    bw, bh = tw // block, th // block
    counts = np.zeros((bh * bw, len(KINDS) + 1), np.int64)
    cw, ch = w / 3.0, h / 3.0
    for s in scene["shapes"]:
        row, col = divmod(s["cell"], 3)
        cx = (col + 0.5 + s["dx"]) * cw
        cy = (row + 0.5 + s["dy"]) * ch
        r = (8.0 if s["size"] == "small" else 15.0) * s["scale"]
        x0, x1 = max(0, int(cx - 1.2 * r)), min(w, int(cx + 1.2 * r) + 2)
        y0, y1 = max(0, int(cy - 1.2 * r)), min(h, int(cy + 1.2 * r) + 2)
        ys, xs = np.mgrid[y0:y1, x0:x1]
        m = _shape_mask(s["kind"], cx, cy, r, xs.astype(np.float32) + 0.5, ys.astype(np.float32) + 0.5)
        ty = ((ys[m] + 0.5) * sy).astype(np.int64) // block  # the pixel centre's token in the resized picture
        tx = ((xs[m] + 0.5) * sx).astype(np.int64) // block
        np.add.at(counts[:, KINDS.index(s["kind"]) + 1], ty * bw + tx, 1)
    covered = counts.sum(1)
    lab = np.where(covered == 0, 0, np.where(covered * sx * sy < min_px, -100, counts.argmax(1)))
    return lab.astype(np.int64)
