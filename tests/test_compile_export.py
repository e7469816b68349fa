"""torch.compile, torch.export and ONNX over the registered layers (benchmarks/compile_check.py):
compiled forward+backward equals eager, export works with a dynamic batch and a fixed sequence
length, a dynamic sequence length is refused with memrnn's error, ONNX runs in onnxruntime."""

import pytest
import torch

from benchmarks.compile_check import check, check_export
from memrnn.core import list_layers

LAYERS = list_layers()


@pytest.mark.parametrize("name", LAYERS)
def test_export_with_a_dynamic_batch_and_a_clear_error_for_a_dynamic_length(name):
    from benchmarks.compile_check import Result

    r = Result(name)
    check_export(name, r)
    assert r.export_ok and r.export_err < 1e-5
    assert r.dynamic_t_refused


def _assert_all_work(name):
    r = check(name)
    assert not r.errors, r.errors
    assert r.compile_ok and r.compile_err < 1e-5
    assert r.onnx.startswith("ok"), r.onnx


@pytest.mark.parametrize("name", ["elman", "nnpda"])
def test_compile_and_onnx(name):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    _assert_all_work(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", LAYERS)
def test_compile_and_onnx_every_layer(name):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    _assert_all_work(name)


def test_the_export_error_names_the_fix():
    from torch.export import Dim, export

    from memrnn.layers import ElmanRNN

    with pytest.raises(ValueError, match=r"fixed sequence length.*Dim\('batch'\)"):
        export(ElmanRNN(3, 4), (torch.randn(2, 5, 3),), dynamic_shapes={"x": {1: Dim("T", min=2)}})
