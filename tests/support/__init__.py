"""Code the tests plug into edge-rl as a user would: envs and algorithms defined outside it."""
