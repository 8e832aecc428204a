"""A JPEG round trip in numpy: what a baseline JPEG of quality q does to the pixels, without the
(lossless) entropy coding. RGB -> YCbCr (JFIF), 4:2:0 chroma by 2x2 averaging, 8x8 DCT, the standard
IJG tables scaled by quality, then the inverse with libjpeg's "fancy" (triangle) chroma upsampling.

No Pillow, so the training workers need nothing beyond numpy and the result is the same on every
machine; it differs from libjpeg-turbo (what rapid's decoder, sharp, uses) by a unit or two of rounding.
"""
import numpy as np

_LUMA = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99], np.float64).reshape(8, 8)
_CHROMA = np.array([
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32, np.float64).reshape(8, 8)


def _table(base, quality):
    """IJG's jpeg_quality_scaling + jpeg_add_quant_table (baseline: 1..255)."""
    q = min(100, max(1, int(quality)))
    scale = 5000 // q if q < 50 else 200 - 2 * q
    return np.clip((base * scale + 50) // 100, 1, 255)


def _dct_matrix():
    k = np.arange(8)
    c = np.cos((2 * k[None, :] + 1) * k[:, None] * np.pi / 16) * 0.5
    c[0] *= 1 / np.sqrt(2)
    return c  # [8 freq, 8 space], orthonormal


_D = _dct_matrix()


def _blocks_roundtrip(plane, table):
    """plane float [H, W] (multiples of 8), values in 0..255 -> quantised and reconstructed."""
    h, w = plane.shape
    b = (plane - 128.0).reshape(h // 8, 8, w // 8, 8).transpose(0, 2, 1, 3)  # [bh, bw, 8, 8]
    coef = _D @ b @ _D.T
    coef = np.round(coef / table) * table
    rec = _D.T @ coef @ _D
    return rec.transpose(0, 2, 1, 3).reshape(h, w) + 128.0


def _pad_to(x, mh, mw):
    h, w = x.shape
    return np.pad(x, ((0, (-h) % mh), (0, (-w) % mw)), mode="edge")


def _upsample2(c, h, w):
    """libjpeg's h2v2 fancy upsampling: each output is 3/4 the nearer and 1/4 the farther sample, per axis."""
    p = np.pad(c, 1, mode="edge")
    # rows: out row 2i = .75 c[i] + .25 c[i-1], 2i+1 = .75 c[i] + .25 c[i+1]
    up_r = np.empty((2 * c.shape[0], c.shape[1] + 2))
    up_r[0::2] = 0.75 * p[1:-1] + 0.25 * p[:-2]
    up_r[1::2] = 0.75 * p[1:-1] + 0.25 * p[2:]
    out = np.empty((up_r.shape[0], 2 * c.shape[1]))
    out[:, 0::2] = 0.75 * up_r[:, 1:-1] + 0.25 * up_r[:, :-2]
    out[:, 1::2] = 0.75 * up_r[:, 1:-1] + 0.25 * up_r[:, 2:]
    return out[:h, :w]


def jpeg_roundtrip(img, quality):
    """uint8 [H, W, 3] -> uint8 [H, W, 3] as decoded from a baseline 4:2:0 JPEG of this quality."""
    h, w, _ = img.shape
    x = img.astype(np.float64)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
    cr = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
    y = np.round(_pad_to(y, 16, 16))  # the encoder's samples are 8-bit
    cb, cr = (_pad_to(c, 16, 16) for c in (cb, cr))
    ch, cw = y.shape[0] // 2, y.shape[1] // 2
    cb = np.round(cb.reshape(ch, 2, cw, 2).mean((1, 3)))
    cr = np.round(cr.reshape(ch, 2, cw, 2).mean((1, 3)))
    lt, ct = _table(_LUMA, quality), _table(_CHROMA, quality)
    y = np.clip(np.round(_blocks_roundtrip(y, lt)), 0, 255)[:h, :w]
    cb = _upsample2(np.clip(np.round(_blocks_roundtrip(_pad_to(cb, 8, 8), ct)), 0, 255)[:ch, :cw], h, w)
    cr = _upsample2(np.clip(np.round(_blocks_roundtrip(_pad_to(cr, 8, 8), ct)), 0, 255)[:ch, :cw], h, w)
    cb, cr = cb - 128, cr - 128
    out = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], -1)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)
