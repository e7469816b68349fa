"""Stacking M modules of one structure into one module whose every parameter and buffer has a
leading member dimension ``[M, ...]``, and reading one member back out (issue "many runs, one
process"; ``docs/design.md``, "Members")."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.stateless import _reparametrize_module


def _tensors(module: nn.Module) -> dict[str, Tensor]:
    """Every parameter and buffer of ``module`` by its qualified name (persistent or not)."""
    return {**dict(module.named_parameters(remove_duplicate=False)), **dict(module.named_buffers())}


def _plain_tensor_attributes(module: nn.Module) -> dict[str, Tensor]:
    """Tensors that a module keeps as plain attributes (neither parameters nor buffers): they
    cannot be stacked, so members must agree on them."""
    found = {}
    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if isinstance(value, Tensor) and not isinstance(value, nn.Parameter):
                found[f"{prefix}.{key}" if prefix else key] = value
    return found


def check_same_structure(modules: Sequence[nn.Module]) -> None:
    """A ``ValueError`` unless every module has the type, the parameter and buffer names, shapes
    and dtypes of the first, and the same plain tensor attributes (which stacking would share)."""
    if not modules:
        raise ValueError("members need at least one module, got none")
    first = modules[0]
    ref = {k: (tuple(v.shape), v.dtype, isinstance(v, nn.Parameter)) for k, v in _tensors(first).items()}
    plain = _plain_tensor_attributes(first)
    for m, module in enumerate(modules[1:], 1):
        if type(module) is not type(first):
            raise ValueError(f"member {m} is a {type(module).__name__}, member 0 a {type(first).__name__}")
        got = {k: (tuple(v.shape), v.dtype, isinstance(v, nn.Parameter)) for k, v in _tensors(module).items()}
        if got != ref:
            diff = sorted(set(got.items()) ^ set(ref.items()))
            raise ValueError(f"member {m} differs from member 0 in its parameters or buffers: {diff[:4]}")
        for key, value in _plain_tensor_attributes(module).items():
            if key not in plain or not torch.equal(value, plain[key]):
                raise ValueError(
                    f"member {m} keeps a tensor attribute {key!r} (not a parameter or buffer) that differs "
                    "from member 0's; members can only differ in parameters and buffers"
                )


def stack_modules(modules: Sequence[nn.Module]) -> nn.Module:
    """One module of the members' structure whose every parameter and buffer is the members'
    stacked, ``[M, ...]`` (parameters stay parameters, with ``requires_grad`` as the first
    member's; buffers stay buffers, persistent or not).  The modules are not changed."""
    check_same_structure(modules)
    stacked = copy.deepcopy(modules[0])
    originals = [dict(_tensors(m)) for m in modules]
    for prefix, sub in list(stacked.named_modules()):
        dot = f"{prefix}." if prefix else ""
        for name, p in list(sub._parameters.items()):
            if p is None:
                continue
            value = torch.stack([o[dot + name].detach() for o in originals])
            setattr(sub, name, nn.Parameter(value, requires_grad=p.requires_grad))
        for name, b in list(sub._buffers.items()):
            if b is None:
                continue
            sub._buffers[name] = torch.stack([o[dot + name] for o in originals])
    for sub in stacked.modules():
        if isinstance(sub, nn.RNNBase):
            sub._init_flat_weights()  # torch's list of the weights it runs on: the stacked ones
    return stacked


def member_tensors(stacked: nn.Module, m: int) -> dict[str, Tensor]:
    """Member ``m``'s parameters and buffers: ``p[m]`` of each stacked tensor (views that carry
    gradients to the stacked parameters)."""
    return {name: t[m] for name, t in _tensors(stacked).items()}


@contextlib.contextmanager
def member_view(stacked: nn.Module, m: int) -> Iterator[nn.Module]:
    """Within the block ``stacked`` is member ``m``: every parameter and buffer replaced by its
    ``[m]`` slice (``torch.func.functional_call``'s mechanism), so that any method of the module
    (``forward``, ``initial_state``, ``outputs``, …) computes as member ``m`` alone would, and
    gradients reach the stacked parameters."""
    with _reparametrize_module(stacked, member_tensors(stacked, m), tie_weights=True):
        yield stacked


def unstack_module(stacked: nn.Module, m: int) -> nn.Module:
    """A plain module (no member dimension) with member ``m``'s parameters and buffers, detached
    copies: what member ``m`` is as an ordinary model (its ``state_dict`` loads into a module
    built with the same arguments)."""
    single = copy.deepcopy(stacked)
    for sub in list(single.modules()):
        for name, p in list(sub._parameters.items()):
            if p is not None:
                setattr(sub, name, nn.Parameter(p.detach()[m].clone(), requires_grad=p.requires_grad))
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = b[m].clone()
    for sub in single.modules():
        if isinstance(sub, nn.RNNBase):
            sub._init_flat_weights()
    return single
