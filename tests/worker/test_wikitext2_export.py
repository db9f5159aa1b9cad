"""Task 3's models in ONNX (tasks/wikitext2/export.py): onnxruntime gives torch's logits, in
evaluation mode, at batches and lengths other than the export's, and the AWD-LSTM's state
carries a column on as torch's does; the model is left in the mode it was in."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from mlbench_worker.models import build_language_model
from mlbench_worker.tasks.wikitext2.export import EXAMPLE, RecurrentModel, onnx_bytes

VOCAB = 60
# onnxruntime's LSTM and MatMul sum in another order than torch's kernels: float32 rounding,
# relative to the outputs' size. Measured here: at most 7e-7 of it (4.6e-6 on the GPT's
# logits of size 6.4, 1.9e-6 on the LSTM's states).
TOLERANCE = 1e-5


def close(got: np.ndarray, expected: np.ndarray) -> bool:
    return float(np.abs(got - expected).max()) <= TOLERANCE * max(
        1.0, float(np.abs(expected).max())
    )


SHAPES = [(3, 11), (1, 29)]  # (batch, length), neither the export's EXAMPLE


def session(data: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def trained_looking(name: str) -> torch.nn.Module:
    """A tiny model whose weights are far from their initialisation (sharp logits), in
    training mode as a trainer holds it."""
    torch.manual_seed(0)
    model = build_language_model(name, VOCAB)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.train()


@pytest.mark.parametrize("shape", SHAPES)
def test_the_gpt_gives_torchs_logits_at_other_shapes(shape):
    model = trained_looking("gpt-tiny")
    data = onnx_bytes(model)
    assert model.training  # its own mode back
    tokens = torch.randint(0, VOCAB, shape)
    with torch.no_grad():
        expected = model.eval()(tokens).numpy()
    (got,) = session(data).run(None, {"tokens": tokens.numpy()})
    assert shape != EXAMPLE and got.shape == (*shape, VOCAB)
    assert close(got, expected)
    assert np.abs(expected).max() > 1  # sharp logits, not all near zero


@pytest.mark.parametrize("shape", SHAPES)
def test_the_lstm_gives_torchs_logits_and_states_at_other_shapes(shape):
    model = trained_looking("awd-lstm-tiny")
    data = onnx_bytes(model)
    assert model.training
    batch, length = shape
    tokens = torch.randint(0, VOCAB, (batch, length))
    module = RecurrentModel(model).eval()
    state = torch.randn(batch, module.state_size) * 0.5
    with torch.no_grad():
        logits, next_state = module(tokens, state)
        # The wrapper is the model itself: the same as its own forward on columns.
        hidden = []
        at = 0
        for size in module.sizes:
            hidden.append(
                (state[None, :, at : at + size], state[None, :, at + size : at + 2 * size])
            )
            at += 2 * size
        own, _, _, _ = model(tokens.t(), hidden)
    assert torch.equal(logits, own.transpose(0, 1))
    got_logits, got_state = session(data).run(
        None, {"tokens": tokens.numpy(), "state": state.numpy()}
    )
    assert shape != EXAMPLE
    assert close(got_logits, logits.numpy()) and close(got_state, next_state.numpy())


def test_the_lstm_state_carries_a_column_on_as_one_pass_does():
    model = trained_looking("awd-lstm-tiny")
    run = session(onnx_bytes(model))
    tokens = np.random.default_rng(1).integers(0, VOCAB, (4, 23))
    zeros = np.zeros((4, RecurrentModel(model).state_size), np.float32)
    whole, _ = run.run(None, {"tokens": tokens, "state": zeros})
    first, state = run.run(None, {"tokens": tokens[:, :9], "state": zeros})
    second, _ = run.run(None, {"tokens": tokens[:, 9:], "state": state})
    assert close(np.concatenate([first, second], axis=1), whole)


def test_the_contract_names_and_dynamic_axes():
    for name, inputs, outputs in (
        ("gpt-tiny", ["tokens"], ["logits"]),
        ("awd-lstm-tiny", ["tokens", "state"], ["logits", "next_state"]),
    ):
        run = session(onnx_bytes(build_language_model(name, VOCAB)))
        assert [i.name for i in run.get_inputs()] == inputs
        assert [o.name for o in run.get_outputs()] == outputs
        assert run.get_inputs()[0].type == "tensor(int64)"
        assert [isinstance(d, str) for d in run.get_inputs()[0].shape] == [True, True]
        assert run.get_outputs()[0].shape[2] == VOCAB


def test_only_task_3s_models_are_exported():
    with pytest.raises(TypeError, match="task 3's models only"):
        onnx_bytes(torch.nn.Linear(3, 2))


def test_an_evaluated_model_stays_in_evaluation_mode():
    # torch.onnx.export puts the module it is given back into that module's mode: a wrapper
    # made in training mode once switched the evaluated LSTM to training (docs/results.rst).
    model = trained_looking("awd-lstm-tiny").eval()
    onnx_bytes(model)
    assert not model.training and not any(m.training for m in model.modules())
