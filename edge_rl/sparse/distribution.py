"""How many connections each layer keeps: Erdős–Rényi (ERK) or uniform, and `--tiny` widths.

ERK (Evci et al., 2020; used by RLx2) gives layer l a density proportional to
(n_in + n_out) / (n_in * n_out): small layers stay dense, big square ones get sparse. The
scale is chosen so the network as a whole keeps (1 - sparsity) of its weights; a layer ERK
would make denser than 1 is made dense and the rest rescaled. Biases are always dense.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from edge_rl.device.errors import UserError
from edge_rl.sparse import DISTRIBUTIONS

Shape = tuple[int, int]  # a Dense kernel: (inputs, outputs)


def layer_densities(shapes: Sequence[Shape], sparsity: float, distribution: str = "erk"
                    ) -> list[float]:
    """The fraction of each kernel's weights that stays active."""
    if not 0.0 <= sparsity < 1.0:
        raise UserError(f"sparsity must be in [0, 1), not {sparsity}")
    if distribution not in DISTRIBUTIONS:
        raise UserError(f"--distribution must be one of {', '.join(DISTRIBUTIONS)}")
    if sparsity == 0.0:
        return [1.0] * len(shapes)
    if distribution == "uniform":
        return [1.0 - sparsity] * len(shapes)
    sizes = np.array([n_in * n_out for n_in, n_out in shapes], np.float64)
    raw = np.array([(n_in + n_out) / (n_in * n_out) for n_in, n_out in shapes], np.float64)
    budget = (1.0 - sparsity) * sizes.sum()
    dense = np.zeros(len(shapes), bool)
    while True:
        # Dense layers spend their whole size; the others share what is left in ERK ratios.
        scale = (budget - sizes[dense].sum()) / (raw[~dense] * sizes[~dense]).sum()
        densities = np.where(dense, 1.0, scale * raw)
        too_dense = ~dense & (densities > 1.0)
        if not too_dense.any():
            return [float(d) for d in densities]
        dense |= too_dense


def active_counts(shapes: Sequence[Shape], densities: Sequence[float]) -> list[int]:
    """Connections each kernel keeps (at least one)."""
    return [max(1, int(round(d * n_in * n_out)))
            for (n_in, n_out), d in zip(shapes, densities, strict=True)]


def parameter_count(shapes: Sequence[Shape], densities: Sequence[float] | None = None) -> int:
    """Nonzero parameters: the active kernel weights plus every bias."""
    if densities is None:
        densities = [1.0] * len(shapes)
    return sum(active_counts(shapes, densities)) + sum(n_out for _, n_out in shapes)


def tiny_hidden(shapes_for: Callable[[tuple[int, ...]], list[Shape]], hidden: tuple[int, ...],
                target_parameters: int) -> tuple[int, ...]:
    """Hidden sizes, `hidden` scaled by one factor, whose dense network has about
    `target_parameters` parameters (the sparse network's count): the `--tiny` baseline."""
    widest = max(hidden)
    best, best_gap = hidden, None
    for width in range(1, widest + 1):
        candidate = tuple(max(1, int(round(h * width / widest))) for h in hidden)
        gap = abs(parameter_count(shapes_for(candidate)) - target_parameters)
        if best_gap is None or gap < best_gap:
            best, best_gap = candidate, gap
    return best
