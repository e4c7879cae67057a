"""Measuring models: wall-clock timing on ONNX Runtime (:mod:`.timing`), the inputs models run on (:mod:`.inputs`),
the original's outputs and a candidate's compared with them (:mod:`.outputs`), and the CuPy device runtime
(:mod:`.cupy_runtime`). The pipeline's check and guard, the cost models and the bench measure here."""

from .inputs import InputDrawer, check_sizes, describe_sizes, load_inputs, random_array, random_input_sets, random_inputs
from .outputs import Comparison, Reference, ReferenceFailure, ReferenceRun, compare_models, compare_outputs, compare_with, run_reference

__all__ = ["InputDrawer", "random_array", "random_inputs", "random_input_sets", "check_sizes", "describe_sizes", "load_inputs",
           "Comparison", "Reference", "ReferenceRun", "ReferenceFailure", "run_reference", "compare_with", "compare_outputs", "compare_models"]
