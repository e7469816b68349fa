"""The model's other parts with a member dimension: :class:`MemberEmbedding` (``[M, V, E]``) and
:class:`MemberLinear` (heads, ``[M, out, in]``), each member exactly its ``nn.Embedding`` /
``nn.Linear`` (``docs/design.md``, "Members")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from memrnn.ops.members import member_rows


def _stack(modules: Sequence[nn.Module], cls: type, names: tuple[str, ...]) -> list[Tensor | None]:
    modules = list(modules)
    if not modules or any(type(m) is not cls for m in modules):
        got = sorted({type(m).__name__ for m in modules}) or ["nothing"]
        raise ValueError(f"stack {cls.__name__} modules, one per member; got {', '.join(got)}")
    out = []
    for name in names:
        ts = [getattr(m, name) for m in modules]
        if all(t is None for t in ts):
            out.append(None)
            continue
        shapes = {None if t is None else tuple(t.shape) for t in ts}
        if len(shapes) != 1:
            raise ValueError(f"the members' {cls.__name__}.{name} differ in shape: {sorted(shapes, key=str)}")
        out.append(torch.stack([t.detach() for t in ts]))
    return out


class _NarrowAffine(torch.autograd.Function):
    """``x [M, R, in]``, ``weight [M, out, in]``, ``bias [M, out]`` or None -> ``x wᵀ + b``
    ``[M, R, out]`` (contiguous), each product written with the long dimension ``R`` last on CPU.

    A head's output width is the vocabulary (5 to 30 in this field) and its rows are the batch's
    tokens (hundreds to thousands).  MKL's batched kernels for an output ``[R, out]`` that narrow
    run 2-5x slower than for its transpose ``[out, R]``: at the default job's M 10, R 816, in 16,
    out 5 (``python -m benchmarks.member_products``, one thread) the forward takes
    148 µs as ``baddbmm(b, x, wᵀ)`` and 67 µs as ``(w xᵀ + b)ᵀ`` copied contiguous, the weight
    gradient 178 µs as ``xᵀ g`` and 35 µs as ``(gᵀ x)ᵀ``.  The input gradient ``g w`` is already
    the fast orientation.  The same sums, in another order: within rounding of ``nn.Linear``.
    The backward is made of differentiable ops (double backward works)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        if bias is None:
            yt = torch.bmm(weight, x.transpose(1, 2))
        else:
            yt = torch.baddbmm(bias[:, :, None], weight, x.transpose(1, 2))
        return yt.transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        gx = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        gb = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


class MemberLinear(nn.Module):
    """M ``nn.Linear`` layers: ``weight [M, out, in]``, ``bias [M, out]`` (or none); ``x [M, ...,
    in]`` -> ``[M, ..., out]``, member ``m`` is ``F.linear(x[m], weight[m], bias[m])`` (one
    batched product)."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        if weight.dim() != 3 or (
            bias is not None and tuple(bias.shape) != (weight.shape[0], weight.shape[1])
        ):
            raise ValueError(
                f"MemberLinear needs weight [M, out, in] and bias [M, out], got {tuple(weight.shape)} and "
                f"{None if bias is None else tuple(bias.shape)}"
            )
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.members, self.out_features, self.in_features = weight.shape

    @classmethod
    def from_modules(cls, modules: Sequence[nn.Linear]) -> MemberLinear:
        """The members' ``nn.Linear`` layers, stacked (copies)."""
        weight, bias = _stack(modules, nn.Linear, ("weight", "bias"))
        return cls(weight, bias)

    def extra_repr(self) -> str:
        return f"members={self.members}, in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2 or x.shape[0] != self.members or x.shape[-1] != self.in_features:
            raise ValueError(
                f"MemberLinear takes [members, ..., in] = [{self.members}, ..., {self.in_features}], "
                f"got {tuple(x.shape)}"
            )
        flat = x.reshape(self.members, -1, self.in_features)
        if flat.device.type == "cpu":
            y = _NarrowAffine.apply(flat, self.weight, self.bias)
        elif self.bias is None:
            y = torch.bmm(flat, self.weight.transpose(1, 2))
        else:
            y = torch.baddbmm(self.bias[:, None], flat, self.weight.transpose(1, 2))
        return y.view(*x.shape[:-1], self.out_features)

    def member(self, m: int) -> nn.Linear:
        """Member ``m`` as an ``nn.Linear`` (copies)."""
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        out = out.to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.weight[m])
            if self.bias is not None:
                out.bias.copy_(self.bias[m])
        return out


class MemberEmbedding(nn.Module):
    """M ``nn.Embedding`` tables: ``weight [M, V, E]``; token ids ``[...]`` (shared by the members:
    the same batch for every member) or, with ``per_member=True``, ``[M, ...]`` (each member its
    own batch) -> ``[M, ..., E]``, member ``m`` is ``F.embedding(ids, weight[m])`` (one gather).  ``freeze``: the table is a buffer (a
    one-hot input's identity)."""

    def __init__(self, weight: Tensor, *, freeze: bool = False) -> None:
        super().__init__()
        if weight.dim() != 3:
            raise ValueError(f"MemberEmbedding needs weight [M, V, E], got {tuple(weight.shape)}")
        if freeze:
            self.register_buffer("weight", weight)
        else:
            self.weight = nn.Parameter(weight)
        self.members, self.num_embeddings, self.embedding_dim = weight.shape

    @classmethod
    def from_modules(cls, modules: Sequence[nn.Embedding]) -> MemberEmbedding:
        """The members' ``nn.Embedding`` tables, stacked (copies); frozen if the first is."""
        (weight,) = _stack(modules, nn.Embedding, ("weight",))
        return cls(weight, freeze=not modules[0].weight.requires_grad)

    def extra_repr(self) -> str:
        return f"members={self.members}, {self.num_embeddings}, {self.embedding_dim}"

    def forward(self, ids: Tensor, *, per_member: bool = False) -> Tensor:
        M, V = self.members, self.num_embeddings
        if per_member and (ids.dim() == 0 or ids.shape[0] != M):
            raise ValueError(f"per_member ids need the members first ({M}), got shape {tuple(ids.shape)}")
        if ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"MemberEmbedding takes integer token ids, got dtype {ids.dtype}")
        if ids.device.type == "cpu" or not self.training:
            # an id past V would read the next member's table, not fail: checked where it costs no
            # host sync (CPU) or outside training steps, as SequenceModule.checked_ids does
            bad = (ids < 0) | (ids >= V)
            if bool(bad.any()):
                raise ValueError(f"unknown token id {int(ids[bad][0])}; the embedding has ids 0..{V - 1}")
        # indexing, not F.embedding: the same gather, and its backward accumulates the rows in
        # token order (index_put_), where embedding_dense_backward sorts the ids first: the same
        # sums, 2x faster at the default job's M·B·T = 8,480 ids over 70 rows
        return member_rows(self.weight, ids, per_member=per_member)

    def member(self, m: int) -> nn.Embedding:
        """Member ``m`` as an ``nn.Embedding`` (copies; frozen like this one)."""
        return nn.Embedding.from_pretrained(
            self.weight[m].detach().clone(), freeze=not isinstance(self.weight, nn.Parameter)
        )
