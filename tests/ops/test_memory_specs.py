"""The stack RNN's memory registry (:mod:`memrnn.ops.stack_rnn.specs`): one spec per memory, and every
other table of the fused paths derived from it."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch

from memrnn.ops import stack_rnn
from memrnn.ops.memory import MemorySpec
from memrnn.ops.stack_rnn import cpu, specs
from memrnn.ops.stratification.cpu import StratificationKernel


def test_every_memory_has_one_spec_with_its_own_code() -> None:
    assert list(specs.SPECS) == ["superposition", "stratification", "queue", "tape", "tape_jump", "deque"]
    assert [s.code for s in specs.SPECS.values()] == list(range(len(specs.SPECS)))
    for name, s in specs.SPECS.items():
        assert s.name == name and s.kernel.n_actions == s.n_actions


def test_the_tables_derive_from_the_specs() -> None:
    assert tuple(specs.SPECS) == stack_rnn._MEMORIES
    assert tuple(n for n, s in specs.SPECS.items() if s.triton) == stack_rnn._TRITON_MEMORIES
    assert tuple(n for n, s in specs.SPECS.items() if s.native) == stack_rnn._NATIVE_MEMORIES
    assert {n: s.kernel for n, s in specs.SPECS.items()} == specs.KERNELS
    assert cpu._NATIVE_CODES["memory"] == {n: s.code for n, s in specs.SPECS.items()}
    assert stack_rnn.fused_kinds() == {(c, m) for c in ("lstm", "elman") for m in specs.SPECS}


def test_the_triton_codes_are_the_specs() -> None:
    pytest.importorskip("triton")
    from memrnn.ops.stack_rnn import triton as kernels

    assert {n: s.code for n, s in specs.SPECS.items() if s.triton} == kernels.MEMORY_CODES
    assert {s.code: s.n_actions for s in specs.SPECS.values() if s.triton} == kernels.N_ACTIONS
    named = {"superposition": kernels.SUPERPOSITION, "stratification": kernels.STRATIFICATION,
             "queue": kernels.QUEUE, "tape": kernels.TAPE, "tape_jump": kernels.TAPE_JUMP,
             "deque": kernels.DEQUE}  # fmt: skip
    assert {n: c.value for n, c in named.items()} == kernels.MEMORY_CODES


def test_the_cpp_enum_is_generated_from_the_specs() -> None:
    """``memory_kinds.h`` (the C++ loops' ``MemoryKind``) is what the specs write: regenerate it
    with ``python -m memrnn.ops.stack_rnn.specs`` after changing a code."""
    assert specs.HEADER.read_text() == specs.memory_kinds_header()
    assert "kSuperposition = 0" in specs.HEADER.read_text()
    assert "kTapeJump = 4" in specs.HEADER.read_text()


def test_a_spec_must_agree_with_its_kernel() -> None:
    good = specs.SPECS["stratification"]
    with pytest.raises(ValueError, match="disagrees with its kernel"):
        dataclasses.replace(good, actions=("push", "pop", "noop"))
    with pytest.raises(ValueError, match="disagrees with its kernel"):
        dataclasses.replace(good, action_activation="softmax")


def test_adding_a_spec_is_what_a_new_memory_needs(monkeypatch) -> None:
    """A new memory registered in :data:`~memrnn.ops.stack_rnn.specs.SPECS` is covered by the fused
    paths' tables without another edit (here a renamed copy of the stratification stack)."""
    new = MemorySpec(
        name="my_stack", code=len(specs.SPECS), actions=("push", "pop"), action_activation="sigmoid",
        reads=1, fields=("values", "strengths", "reading"), value_activation="tanh", triton=False,
        native=False, kernel=StratificationKernel, step=specs.SPECS["stratification"].step,
        read=specs.SPECS["stratification"].read,
    )  # fmt: skip
    monkeypatch.setitem(specs.SPECS, "my_stack", new)
    monkeypatch.setitem(specs.KERNELS, "my_stack", new.kernel)
    assert specs.spec("my_stack") is new
    assert "kMyStack = 6" in specs.memory_kinds_header()
    with pytest.raises(ValueError, match="unknown memory 'nope'"):
        specs.spec("nope")


def test_each_native_memory_keeps_its_cpp_steps_in_its_folder() -> None:
    """Each memory the C++ loops cover has its forward and backward steps in its kernel's folder
    (``memrnn/ops/<memory>/native.h``; the queue's kernel, hence its steps, are the stratification
    stack's), included by the shared loop (``stack_rnn/native.cpp``), which names no memory outside
    its one switch on ``MemoryKind``."""
    loop = (Path(specs.__file__).parent / "native.cpp").read_text()
    for name, s in specs.SPECS.items():
        if not s.native:
            continue
        header = Path(inspect.getfile(s.kernel)).parent / "native.h"
        assert header.is_file(), f"{name}: no {header}"
        text = header.read_text()
        assert "static void forward(" in text and "static void backward(" in text, header
        assert f'#include "{header.parent.name}/native.h"' in loop, header
    start = loop.index("switch (static_cast<MemoryKind>(memory))")
    switch = loop[start : loop.index("\n  }", start)]  # to the switch's closing brace
    enumerators = [specs._enumerator(n) for n, s in specs.SPECS.items() if s.native]
    assert all(f"case {e}:" in switch for e in enumerators)
    outside = loop[:start] + loop[start + len(switch) :]
    assert [e for e in enumerators if re.search(rf"\b{e}\b", outside)] == []


def test_the_layers_memories_take_their_names_actions_and_defaults_from_the_specs() -> None:
    """Each fused memory's layer class (:data:`memrnn.layers.memories.MEMORIES`) is declared with
    its spec: its kind, actions, action activation and the default of its value activation are the
    spec's, and its state's fields are the spec's fields."""
    from memrnn.layers.memories import MEMORIES

    for name, s in specs.SPECS.items():
        cls = MEMORIES[name]
        assert (cls.kind, cls.actions, cls.action_activation) == (s.name, s.actions, s.action_activation)
        assert cls.State._fields == s.fields, name
        value_param = list(inspect.signature(cls).parameters.values())[3]  # hidden, width, depth, value
        assert value_param.name.endswith("_activation") and value_param.default == s.value_activation, name
        layer = cls(4, width=2, depth=3)
        acts, _ = layer.heads(torch.randn(5, 4, generator=torch.Generator().manual_seed(0)))
        if s.action_activation == "softmax":
            assert torch.allclose(acts.sum(-1), torch.ones(5)), name
        else:
            assert ((acts > 0) & (acts < 1)).all() and not torch.allclose(acts.sum(-1), torch.ones(5)), name
