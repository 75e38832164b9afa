"""Learner-side converters: Keras actor networks -> TFLite policy files, and their checks.

    from edge_rl.converters import convert, compare_policies
    flat = convert(model, "int8", calibration=observations, metadata=metadata)

Importing this package imports TensorFlow (legacy Keras, see edge_rl.tf_setup); the device
package (edge_rl.device) never does.
"""

from edge_rl.converters.contents import bias_dtypes, constant_tensors, weight_dtypes
from edge_rl.converters.tflite import PRECISIONS, attach_metadata, calibration_rows, convert
from edge_rl.converters.verify import compare_policies, verification_report

__all__ = [
    "PRECISIONS",
    "attach_metadata",
    "bias_dtypes",
    "calibration_rows",
    "compare_policies",
    "constant_tensors",
    "convert",
    "verification_report",
    "weight_dtypes",
]
