"""DFA ↔ second-order RNN weights (seed 001 appendix A; Omlin & Giles's construction).

:func:`encode_dfa` sets ``W = `` the transition tensor of Definition A.3, ``b = −1/2`` and a
sensitivity ``H`` into a :class:`~memrnn.layers.SecondOrderRNN`:
``s^{t+1}_i = h_H(Σ_jk W_ijk s^t_j x_k − 1/2)`` is equation 3 with ``h_H(· − 1/2)`` applied,
which is Omlin & Giles's ``+H`` weights and ``−H/2`` bias in seed 001's notation; for large
``H`` it stays within ε of the DFA's one-hot state forever (the DFA case of Theorem 3.7).
:func:`extract_dfa` reads the transitions back, quantized at 1/2.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.constructions.pda import _vocabulary
from memrnn.languages.automata import DFA
from memrnn.layers.second_order import SecondOrderRNN
from memrnn.ops.stack import h_sigmoid
from memrnn.ops.tensor import second_order


@dataclass
class EncodedDFA:
    """A second-order RNN programmed with a DFA (``layer``), the DFA, the input symbol of each
    input id (``vocabulary``) and ``accept`` ``[num_states]`` (1.0 on accepting states)."""

    layer: SecondOrderRNN
    dfa: DFA
    vocabulary: tuple[str, ...]
    accept: Tensor = field(repr=False)

    def accepts(self, words: Sequence[Sequence[str]]) -> list[bool]:
        """Acceptance read from the final state: its largest unit exceeds 1/2 and is accepting."""
        index = {a: i for i, a in enumerate(self.vocabulary)}
        longest = max((len(w) for w in words), default=0)
        ids = torch.zeros(len(words), longest, dtype=torch.long)
        for b, w in enumerate(words):
            for t, a in enumerate(w):
                if a not in index:
                    raise ValueError(
                        f"unknown symbol {a!r} in string {b} at position {t}; known: {self.vocabulary}"
                    )
                ids[b, t] = index[a]
        mask = torch.arange(longest)[None] < torch.tensor([len(w) for w in words])[:, None]
        p = self.layer.weight
        x = torch.nn.functional.one_hot(ids, len(self.vocabulary)).to(p)
        with torch.no_grad():
            _, state = self.layer(x, mask=mask.to(p.device))
        s = state.s
        return ((s.amax(-1) > 0.5) & (self.accept.to(s.device)[s.argmax(-1)] > 0.5)).tolist()


def encode_dfa(
    dfa: DFA,
    *,
    sensitivity: float = 10.0,
    vocabulary: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> EncodedDFA:
    """A one-hot-input :class:`SecondOrderRNN` with one unit per DFA state (Definition A.3).

    Args:
        dfa: missing transitions give zero columns (the dead state is ``s = 0``).
        sensitivity: ``H``; vocabulary, ignore: as for :func:`encode_pda`.
    """
    vocab = _vocabulary(dfa.alphabet, vocabulary, ignore)
    t = dfa.transition_tensor()
    n = len(dfa.states)
    w = np.zeros((n, n, len(vocab)))
    for k, a in enumerate(vocab):
        if a in dfa.a_index:
            w[:, :, k] = t[:, :, dfa.a_index[a]]
        else:
            w[np.arange(n), np.arange(n), k] = 1.0
    layer = SecondOrderRNN(
        len(vocab), n, sensitivity=sensitivity, bias=True, one_hot_input=True, dtype=dtype, device=device
    )
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(w))
        layer.bias.fill_(-0.5)
        layer.start.zero_()
        layer.start[dfa.q_index[dfa.start]] = 1.0
    accept = torch.tensor([1.0 if q in dfa.accept else 0.0 for q in dfa.states], dtype=dtype, device=device)
    return EncodedDFA(layer, dfa, vocab, accept)


def extract_dfa(
    layer: SecondOrderRNN,
    *,
    alphabet: Sequence[str],
    states: Sequence[str] | None = None,
    start: str | None = None,
    accept: Iterable[str] | Callable[[Tensor], bool] = (),
    ignore: Iterable[str] = (),
    method: Literal["basis", "reachable"] = "basis",
    threshold: float = 0.5,
) -> DFA:
    """Read a DFA back from a second-order RNN: its step at every one-hot state (``"basis"``)
    or at the states reachable from ``layer.start`` with ``s`` rounded at ``threshold``
    (``"reachable"``, for trained networks; states named ``s0, s1, ...`` breadth-first).
    A next state whose largest unit does not exceed ``threshold`` is a missing transition.
    """
    if len(alphabet) != layer.input_size:
        raise ValueError(
            f"alphabet has {len(alphabet)} symbols but the layer has input_size={layer.input_size}"
        )
    ignore = set(ignore)
    keep = [k for k, a in enumerate(alphabet) if a not in ignore]
    n = layer.hidden_size
    w = layer.weight.detach()

    def successors(codes: Tensor) -> Tensor:
        """``[S, m, n]``: the next state of each code under each input id."""
        s_count = codes.shape[0]
        j, k = torch.meshgrid(torch.arange(s_count), torch.arange(layer.input_size), indexing="ij")
        with torch.no_grad():
            z = second_order(w, codes[j.flatten()].to(w), tokens=k.flatten().to(w.device))
            if layer.bias is not None:
                z = z + layer.bias
            s = h_sigmoid(z, layer.sensitivity)
        return s.reshape(s_count, layer.input_size, n).cpu()

    if method == "basis":
        names = list(states) if states is not None else [f"q{i}" for i in range(n)]
        if len(names) != n:
            raise ValueError(f"states has {len(names)} names but the layer has hidden_size={n}")
        codes = torch.eye(n, dtype=torch.float64)
        nxt = successors(codes)
        rules = [
            (names[j], alphabet[k], names[int(nxt[j, k].argmax())])
            for j, k in itertools.product(range(n), keep)
            if float(nxt[j, k].max()) > threshold
        ]
        start_name = start if start is not None else names[int(layer.start.argmax())]
        acc = [a for i, a in enumerate(names) if (accept(codes[i]) if callable(accept) else a in set(accept))]
        return DFA(names, [alphabet[k] for k in keep], rules, start_name, acc)
    if method != "reachable":
        raise ValueError(f"unknown method {method!r}; choose 'basis' or 'reachable'")
    start_code = (layer.start.detach().cpu() > threshold).to(torch.float64)
    codes, index, rules, frontier = [start_code], {tuple(start_code.tolist()): 0}, [], [0]
    while frontier:
        nxt = successors(torch.stack([codes[i] for i in frontier]))
        new_frontier = []
        for f, j in enumerate(frontier):
            for k in keep:
                code = (nxt[f, k] > threshold).to(torch.float64)
                if not bool(code.any()):
                    continue
                key = tuple(code.tolist())
                if key not in index:
                    index[key] = len(codes)
                    codes.append(code)
                    new_frontier.append(index[key])
                rules.append((f"s{j}", alphabet[k], f"s{index[key]}"))
        frontier = new_frontier
    names = [f"s{i}" for i in range(len(codes))]
    acc = (
        [names[i] for i, c in enumerate(codes) if accept(c)]
        if callable(accept)
        else [a for a in accept if a in names]
    )
    return DFA(names, [alphabet[k] for k in keep], rules, "s0", acc)
