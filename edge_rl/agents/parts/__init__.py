"""Pieces the algorithms share (networks, specs, the actor-critic wiring). A package, so that
edge_rl.agents never mistakes it for an algorithm."""
