"""Late-run stability: whether a policy, once learned, stays learned.

Of the greedy evaluations after the first one within `tolerance` of the run's best, the
fraction that are within `tolerance` of the best too. A run that reaches 500 on CartPole
and stays there scores 1.0; one that swings 500, 91, 230, 500 scores 1/3. The tolerance is
a fraction of |best|, so it applies to negative returns (Pendulum, Acrobot) as well.
"""

from __future__ import annotations

from collections.abc import Sequence

TOLERANCE = 0.05  # within 5% of the best counts as "at the best"


def late_run_stability(returns: Sequence[float], tolerance: float = TOLERANCE
                       ) -> dict | None:
    """Stability of a run's evaluation means, in order (see the module's doc): fraction (None
    when no evaluation follows the first at the best), best, first_at (index of the first
    evaluation at the best), later (evaluations after it) and tolerance. None if the run has
    no evaluation."""
    if not returns:
        return None
    best = max(returns)
    floor = best - tolerance * abs(best)
    first_at = next(i for i, mean in enumerate(returns) if mean >= floor)
    later = returns[first_at + 1:]
    fraction = sum(mean >= floor for mean in later) / len(later) if later else None
    return {"fraction": fraction, "best": float(best), "first_at": first_at,
            "later": len(later), "tolerance": tolerance}
