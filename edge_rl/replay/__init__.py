"""The replay stage, between the transport and the learner's updates.

    buffer  Replay: transitions in arrival order, n-step returns assembled at sample time
    rlx2    RLx2's schedule for it: when the n changes and when the oldest data goes

numpy only; the algorithms' defaults (edge_rl.algorithm) size the replay with rlx2's numbers.
"""
