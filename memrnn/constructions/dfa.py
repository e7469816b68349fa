"""DFA ↔ second-order RNN weights (Stogin et al. 2020 appendix A; Omlin & Giles's construction).

:func:`encode_dfa` sets ``W = `` the transition tensor of Definition A.3, ``b = −1/2`` and a
sensitivity ``H`` into a :class:`~memrnn.layers.SecondOrderRNN`:
``s^{t+1}_i = h_H(Σ_jk W_ijk s^t_j x_k − 1/2)`` is equation 3 with ``h_H(· − 1/2)`` applied,
which is Omlin & Giles's ``+H`` weights and ``−H/2`` bias in Stogin et al.'s (2020) notation; for large
``H`` it stays within ε of the DFA's one-hot state forever (the DFA case of Theorem 3.7).
:func:`extract_dfa` reads the transitions back, quantized at 1/2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.constructions._common import accepting, check_vocabulary, state_graph
from memrnn.constructions.result import AcceptingState, Construction
from memrnn.languages.automata import DFA
from memrnn.layers.second_order import SecondOrderRNN
from memrnn.ops.stack import h_sigmoid
from memrnn.ops.tensor import second_order


def encode_dfa(
    dfa: DFA,
    *,
    sensitivity: float = 10.0,
    vocabulary: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Construction:
    """A one-hot-input :class:`SecondOrderRNN` with one unit per DFA state (Definition A.3), as
    an acceptor :class:`~memrnn.constructions.Construction` (``source`` the DFA, ``units`` its
    states, acceptance by final state: :class:`~memrnn.constructions.result.AcceptingState`).

    Args:
        dfa: missing transitions give zero columns (the dead state is ``s = 0``).
        sensitivity: ``H``; vocabulary, ignore: as for :func:`encode_pda`.
    """
    vocab = check_vocabulary(dfa.alphabet, vocabulary, ignore)
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
    return Construction(
        layer,
        AcceptingState(accept),
        vocabulary=vocab,
        source=dfa,
        units=dfa.states,
        task="acceptor",
        bos=None,
    )


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

    names, codes, edges = state_graph(
        lambda codes: successors(codes)[:, keep],
        layer.start,
        method=method,
        threshold=threshold,
        names=states,
    )
    rules = [(names[j], alphabet[keep[move]], names[dst]) for j, move, dst in edges]
    if method == "basis":
        start_name = start if start is not None else names[int(layer.start.argmax())]
    else:
        start_name = names[0]
    return DFA(names, [alphabet[k] for k in keep], rules, start_name, accepting(names, codes, accept))
