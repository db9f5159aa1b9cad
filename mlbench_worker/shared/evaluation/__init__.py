"""The evaluator and the predictions format: who grades a run, independently of its code.

- predictions.py: the format every implementation writes at each evaluation (numpy's .npz),
  its writer and reader;
- test_sets.py: which test set a run is graded on, and its labels, from
  generated_labels.py (regenerated from the seed) or file_labels.py (checksummed files);
- evaluator.py: the grade of a predictions file by the task's own metric;
- model_audit.py: the ONNX audit of a run's final model (onnxruntime), on the inputs of
  generated_inputs.py, file_inputs.py or, for task 1b, imagenet_inputs.py (the validation
  JPEG files decoded, resized and cropped with Pillow), refusing external data
  (onnx_external.py), run in a bounded child process (audit_process.py);
- perplexity.py: task 3's perplexity graded from the run's ONNX model (language_model.py: its
  contract and the look-ahead probe) over the token stream token_streams.py regenerates or
  reads from the checksummed archive (not yet called by the master: docs/checking.rst).

Numpy, onnxruntime, Pillow and the standard library only (and scipy, imported only to read
ImageNet's meta.mat, through shared/imagenet_devkit.py), and nothing of any implementation,
trainer, model or framework (tests/test_worker_rooms.py), so the master can run it and no
trainer's code can touch a grade. docs/checking.rst says what is built and what is not yet.
"""

# The evaluator's grades are stored on the master beside what the run reports itself, under
# the reported metric's name with this prefix ("evaluated_val_accuracy"): both are kept,
# and the results read the evaluated one where a run has it (docs/checking.rst).
GRADED_PREFIX = "evaluated_"


def graded_name(metric: str) -> str:
    """The stored name of the evaluator's grade of `metric`."""
    return GRADED_PREFIX + metric
