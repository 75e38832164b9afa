"""Sparse networks from the first update to the last (RigL-style topology evolution on TFMOT).

    distribution  how sparse each layer is: Erdős–Rényi (ERK) or uniform; `--tiny` widths
    masks         TFMOT PruneLowMagnitude wrappers that never prune on their own, and an Adam
                  that re-applies the masks after every step
    topology      the mask updater: rigl | set | static | prune (TFMOT's PolynomialDecay)
    flops         analytic FLOPs of training and inference, relative to dense (as RLx2 counts)
    size          how small the int8 policy gets on disk and on the wire, and its entropy bound

`distribution`, `flops` and `size` are numpy only; `masks` and `topology` import TensorFlow.
"""

TOPOLOGIES = ("rigl", "set", "static", "prune", "dense")
DISTRIBUTIONS = ("erk", "uniform")
