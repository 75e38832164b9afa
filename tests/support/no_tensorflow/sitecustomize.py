"""Put this folder on PYTHONPATH and no Python process started with it can import TensorFlow
or its family, as on a board with only the base install (tests/test_bench_cli.py). Each
attempt is refused with ImportError and written to stderr, so an attempt that the code
catches and hides still shows."""

import sys

BLOCKED = ("tensorflow", "tf_agents", "tf_keras", "keras", "tensorflow_model_optimization",
           "tensorflow_probability")
REFUSED = "no-tensorflow: refused import of"


class NoTensorFlow:
    """A meta-path finder that refuses the BLOCKED packages and their submodules."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            sys.stderr.write(f"{REFUSED} {name}\n")
            raise ImportError(f"{name} is not installed here (tests/support/no_tensorflow)")
        return None


sys.meta_path.insert(0, NoTensorFlow())
