"""Late-run stability: whether a policy, once learned, stays learned.

Of the greedy evaluations after the first one within `tolerance` of the run's best, the
fraction that are within `tolerance` of the best too. A run that reaches 500 on CartPole
and stays there scores 1.0; one that swings 500, 91, 230, 500 scores 1/3. The tolerance is
a fraction of |best|, so it applies to negative returns (Pendulum, Acrobot) as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

TOLERANCE = 0.05  # within 5% of the best counts as "at the best"


@dataclass(frozen=True)
class Stability:
    fraction: float | None  # None: no evaluation after the first one at the best
    best: float
    first_at: int  # index of the first evaluation within tolerance of the best
    later: int  # evaluations after it
    tolerance: float

    def as_dict(self) -> dict:
        return asdict(self)


def late_run_stability(returns: Sequence[float], tolerance: float = TOLERANCE
                       ) -> dict | None:
    """Stability of a run's evaluation means, in order (see the module's doc); None if the
    run has no evaluation."""
    if not returns:
        return None
    best = max(returns)
    floor = best - tolerance * abs(best)
    first_at = next(i for i, mean in enumerate(returns) if mean >= floor)
    later = returns[first_at + 1:]
    fraction = sum(mean >= floor for mean in later) / len(later) if later else None
    return Stability(fraction, float(best), first_at, len(later), tolerance).as_dict()
