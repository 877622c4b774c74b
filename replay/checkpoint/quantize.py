"""Check-N-Run's b-bit row quantization: bytes per row and the error of restored rows.

Each row of `dim` fp32 values is stored as `dim` unsigned b-bit codes plus its minimum
and scale as two fp32 (asymmetric uniform quantization, Check-N-Run, Eisenman et al.,
NSDI 2022): q = round((x − min) / scale), scale = (max − min) / (2^b − 1), restored
x̂ = min + q × scale. The optimizer state is stored unquantized.

The expected error is measured, not assumed: on `SAMPLE_ROWS` rows drawn from a stated
distribution (standard normal, the usual shape of trained embedding values; the relative
error does not depend on the scale), it is the mean over rows of ‖x − x̂‖₂ / ‖x‖₂.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_ROWS = 4096
SAMPLE_SEED = 20221
DISTRIBUTION = "normal(0, 1), 4096 rows, seed 20221"
ROW_META_BYTES = 8  # fp32 minimum and fp32 scale per row


def quantized_row_bytes(dim: int, bits: int) -> int:
    """Bytes of one row's values: 4 × dim unquantized (bits 0), else packed codes + meta."""
    if bits == 0:
        return 4 * dim
    return -(-dim * bits // 8) + ROW_META_BYTES


def quantize_rows(x: np.ndarray, bits: int) -> np.ndarray:
    """Quantize and restore each row of x (float64 in, float64 out)."""
    lo = x.min(axis=1, keepdims=True)
    hi = x.max(axis=1, keepdims=True)
    levels = (1 << bits) - 1
    scale = (hi - lo) / levels
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint((x - lo) / safe), 0, levels)
    # the stored min and scale are fp32
    lo32 = lo.astype(np.float32).astype(np.float64)
    scale32 = scale.astype(np.float32).astype(np.float64)
    return lo32 + q * scale32


@lru_cache(maxsize=64)
def quantization_error(dim: int, bits: int) -> float:
    """Mean relative L2 error of restored rows on the stated sample (0 for bits 0)."""
    if bits == 0:
        return 0.0
    rng = np.random.default_rng(SAMPLE_SEED)
    x = rng.standard_normal((SAMPLE_ROWS, dim)).astype(np.float32).astype(np.float64)
    err = np.linalg.norm(x - quantize_rows(x, bits), axis=1)
    norm = np.linalg.norm(x, axis=1)
    return float(np.mean(err / np.where(norm > 0, norm, 1.0)))
