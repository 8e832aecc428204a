"""What rapid does to an image before the vision tower: smart_resize to the model's pixel budget, then
Pillow's bicubic resize in its fixed-point arithmetic (src/vision/pil-resample.ts, ported to numpy).

Training resizes with this, so it sees the pixels rapid's preprocessor produces for a 64-1024 px picture.
"""
import functools
import math

import numpy as np

from vlm import MAX_PIXELS, MIN_PIXELS, MERGE, PATCH

PRECISION_BITS = 22  # Pillow's Resample.c: 32 - 8 - 2


def smart_resize(height, width, factor=PATCH * MERGE, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    """transformers' smart_resize (and rapid's smartResize): (h, w), multiples of factor."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _bicubic(x):
    """Pillow's bicubic_filter (a = -0.5), elementwise, same operation order."""
    a = -0.5
    x = np.abs(x)
    inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    outer = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, inner, np.where(x < 2.0, outer, 0.0))


def _coeff_matrix(in_size, out_size):
    """[in_size, out_size] int64 fixed-point weights: precompute_coeffs + normalize_coeffs_8bpc,
    vectorised over output pixels with the taps summed in Pillow's order (so every double rounds alike)."""
    scale = in_size / out_size
    filterscale = max(1.0, scale)
    support = 2.0 * filterscale
    ss = 1.0 / filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    xmin = np.maximum(0, np.trunc(center - support + 0.5).astype(np.int64))
    xmax = np.minimum(in_size, np.trunc(center + support + 0.5).astype(np.int64)) - xmin
    taps = np.arange(ksize)
    k = _bicubic((taps[None, :] + xmin[:, None] - center[:, None] + 0.5) * ss)  # [out, ksize]
    k = np.where(taps[None, :] < xmax[:, None], k, 0.0)
    ww = np.zeros(out_size)
    for t in range(ksize):
        ww = ww + k[:, t]
    v = np.where(ww[:, None] != 0.0, k / np.where(ww == 0.0, 1.0, ww)[:, None], k)
    one = float(1 << PRECISION_BITS)
    wq = np.where(v < 0, np.trunc(-0.5 + v * one), np.trunc(0.5 + v * one)).astype(np.int64)
    m = np.zeros((in_size, out_size), np.int64)
    rows = xmin[:, None] + taps[None, :]
    ok = taps[None, :] < xmax[:, None]
    cols = np.broadcast_to(np.arange(out_size)[:, None], rows.shape)
    m[rows[ok], cols[ok]] = wq[ok]
    return m


@functools.lru_cache(maxsize=256)
def _coeffs(in_size, out_size):
    # bounded: picture sizes are continuous, and 14 workers each caching every pair would hold gigabytes
    return _coeff_matrix(in_size, out_size).astype(np.float64)


def _clip8(acc):
    return np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)


def pil_resize(img, out_w, out_h):
    """uint8 [H, W, 3] -> uint8 [out_h, out_w, 3], Pillow's Image.resize(..., BICUBIC) bit for bit:
    horizontal pass (rounded to uint8) then vertical, each skipped when that side is unchanged."""
    h, w, _ = img.shape
    cur = img
    half = 1 << (PRECISION_BITS - 1)
    # float64 matmuls are exact here: every sum of uint8 x 22-bit weights stays far below 2^53
    if out_w != w:
        m = _coeffs(w, out_w)  # [w, out_w]
        rows = np.ascontiguousarray(cur.transpose(0, 2, 1), np.float64).reshape(h * 3, w)
        acc = (rows @ m).reshape(h, 3, out_w)
        cur = _clip8(acc.astype(np.int64).transpose(0, 2, 1) + half)
    if out_h != h:
        m = _coeffs(h, out_h)  # [h, out_h]
        acc = m.T @ cur.astype(np.float64).reshape(h, -1)  # [out_h, out_w * 3]
        cur = _clip8(acc.astype(np.int64).reshape(out_h, -1, 3) + half)
    return cur


def to_model_input(img):
    """uint8 [H, W, 3] -> uint8 at smart_resize's size, as rapid's preprocessor resizes (unchanged when it fits)."""
    h, w, _ = img.shape
    th, tw = smart_resize(h, w)
    return img if (th, tw) == (h, w) else pil_resize(img, tw, th)
