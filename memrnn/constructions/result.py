"""The one result every encoder returns: :class:`Construction`.

``encode_dfa``, ``encode_pda``, ``encode_pfsa`` (Minsky's construction), ``encode_counter_machine``
and ``encode_dyck`` (Hewitt et al.'s stacks) each program a recurrent layer with an automaton.
Each returns a :class:`Construction`: the layer, the vocabulary it reads, the readout, the source
automaton and the names of the hidden units, with one set of methods:

* ``ids(words)``: symbol strings -> right-padded ids ``[B, T]`` and mask ``[B, T]`` (``BOS`` first
  where the construction reads one);
* ``forward(ids, state=None, mask=None)``: ``(out, state)``, ``out`` the accept score ``[B, T]``
  of an acceptor (positive: the prefix read up to ``t`` is accepted) or the next-symbol logits
  ``[B, T, len(outputs)]`` of a generator;
* ``accepts(words)``; ``log_prob(words)`` for generators;
* ``to_torch()``: the same network as ``nn.Embedding -> nn.RNN / nn.LSTM -> readout`` where plain
  torch has the layer.

Construction-specific readings are functions of their module that take a :class:`Construction`:
``counter_values`` (counter machines), ``ideal_pda_run`` (nnPDA), ``extract_pfsa`` and so on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer

Task = Literal["acceptor", "generator"]
BOS = "BOS"
END = "END"
#: time steps per chunk when running long strings: memory ``O(B · chunk)``, not ``O(B · T)``
CHUNK = 4096


class AcceptingState(nn.Module):
    """Acceptance by final state from one unit per automaton state (Stogin, Mali & Giles 2020,
    Definition 3.6: the state is read as its largest unit, quantized at 1/2).

    ``h [..., >= num_states]`` (the first ``num_states`` units are read) -> score ``[...]``:
    ``max(s) − 1/2`` when the largest unit is an accepting state, ``−max(s) − 1/2`` otherwise, so
    the score is positive exactly when the largest unit exceeds 1/2 and is accepting.
    """

    def __init__(self, accept: Tensor) -> None:
        super().__init__()
        self.register_buffer("accept", accept)

    def forward(self, h: Tensor) -> Tensor:
        s = h[..., : self.accept.shape[0]]
        top, best = s.max(-1)
        return torch.where(self.accept[best] > 0.5, top - 0.5, -top - 0.5)


def one_hot_embedding(vocab_size: int, *, dtype: torch.dtype | None, device: Any) -> nn.Embedding:
    """A frozen identity ``nn.Embedding``: id ``i`` -> ``e_i`` ``[vocab_size]``."""
    return nn.Embedding.from_pretrained(torch.eye(vocab_size, dtype=dtype, device=device), freeze=True)


class Construction(nn.Module):
    """A recurrent layer programmed with an automaton, ready to run on symbol strings.

    Attributes:
        layer: the :class:`~memrnn.core.MemoryLayer` carrying the construction.
        embedding: ids ``[B, T]`` -> the layer's inputs ``[B, T, input_size]`` (one-hot unless the
            construction has its own token features).
        readout: the layer's outputs ``[B, T, H]`` -> accept scores ``[B, T]`` (acceptors) or
            next-symbol logits ``[B, T, len(outputs)]`` (generators).
        vocabulary: the input symbol of each input id.
        outputs: the symbol of each logit (generators: the vocabulary without ``BOS``, ending in
            ``END``); empty for acceptors.
        source: the automaton the weights encode (a DFA, DPDA, PFSA, counter machine or
            Dyck-(k,m) language).
        units: a name for each of the layer's output units, in order.
        task: ``"acceptor"`` or ``"generator"``.
        bos: the symbol fed before every string (``None``: none is).
        min_log_prob: generators: a symbol whose log-probability is below this is impossible
            (Hewitt et al. 2020 Definition 5's ``log ε``; Minsky's ``log_zero / 2``).
    """

    def __init__(
        self,
        layer: nn.Module,
        readout: nn.Module,
        *,
        vocabulary: Sequence[str],
        source: Any,
        units: Sequence[str],
        task: Task,
        embedding: nn.Module | None = None,
        bos: str | None = BOS,
        min_log_prob: float | None = None,
    ) -> None:
        super().__init__()
        if task not in ("acceptor", "generator"):
            raise ValueError(f"task must be 'acceptor' or 'generator', got {task!r}")
        vocabulary = tuple(vocabulary)
        if bos is not None and bos not in vocabulary:
            raise ValueError(f"bos={bos!r} is not in the vocabulary {vocabulary}")
        width = getattr(layer, "output_size", None)
        if width is not None and len(units) != width:
            raise ValueError(f"{len(units)} unit names for a layer with {width} outputs")
        if task == "generator" and (bos is None or vocabulary[-2:] != (END, bos) or min_log_prob is None):
            raise ValueError(
                f"a generator reads (*symbols, {END!r}, {bos!r}) and needs min_log_prob; got "
                f"vocabulary {vocabulary}, bos={bos!r}, min_log_prob={min_log_prob}"
            )
        p = next(layer.parameters())
        self.layer = layer
        self.embedding = (
            one_hot_embedding(len(vocabulary), dtype=p.dtype, device=p.device)
            if embedding is None
            else embedding
        )
        self.readout = readout
        self.vocabulary = vocabulary
        self.outputs = vocabulary[:-1] if task == "generator" else ()
        self.source = source
        self.units = tuple(units)
        self.task = task
        self.bos = bos
        self.min_log_prob = min_log_prob

    def extra_repr(self) -> str:
        return f"task={self.task!r}, vocabulary={self.vocabulary}, source={type(self.source).__name__}"

    # -- ids ---------------------------------------------------------------------------------------
    @property
    def bos_id(self) -> int:
        """The input id of ``bos``."""
        if self.bos is None:
            raise ValueError("this construction reads no BOS symbol")
        return self.vocabulary.index(self.bos)

    def ids(self, words: Sequence[Sequence[str]], *, bos: bool | None = None) -> tuple[Tensor, Tensor]:
        """Right-padded ids ``[B, T]`` and mask ``[B, T]`` of symbol strings, ``BOS`` first when
        ``bos`` (default: when the construction reads one).  An unknown symbol raises, naming the
        string and position."""
        self._check_words(words, "ids")
        lead = [self.bos_id] if (self.bos is not None if bos is None else bos) else []
        index = {a: i for i, a in enumerate(self.vocabulary)}
        rows = []
        for b, w in enumerate(words):
            row = list(lead)
            for t, a in enumerate(w):
                if a not in index:
                    raise ValueError(
                        f"unknown symbol {a!r} in string {b} at position {t}; known: {self.vocabulary}"
                    )
                row.append(index[a])
            rows.append(row)
        longest = max((len(r) for r in rows), default=0)
        # padded lists made tensors once (not an assignment per row: 10^5 words take a second)
        out = torch.tensor([r + [0] * (longest - len(r)) for r in rows], dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        mask = torch.arange(longest)[None, :] < lengths[:, None]
        return out.reshape(len(rows), longest), mask

    def _check_words(self, words: Any, what: str) -> None:
        """Refuse what is not a list of words: a single string, or ids (a tensor or an array,
        whose truth value torch and numpy refuse deep inside), naming what ``what`` takes."""
        takes = (
            f"Construction.{what} takes words, a list of symbol sequences over the vocabulary "
            f"{self.vocabulary} (e.g. [{list(self.vocabulary[:2])}])"
        )
        if isinstance(words, str):
            raise ValueError(f"{takes}; got the single string {words!r} (a list of one word: [{words!r}])")
        if isinstance(words, (Tensor, np.ndarray)):
            raise ValueError(
                f"{takes}; got a {type(words).__name__} of shape {list(words.shape)} ({words.dtype}). For ids "
                f"[B, T] in this vocabulary, run the construction: out, _ = construction(ids, mask=mask) "
                f"(position t scores the prefix up to t); Construction.ids(words) makes such ids"
            )

    def inputs(self, ids: Tensor) -> Tensor:
        """The layer's inputs ``[B, T, input_size]`` for ids ``[B, T]``; an id outside the
        vocabulary raises, naming it and its position."""
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 2:
            raise ValueError(
                f"ids must be an integer tensor [batch, time], got {ids.dtype} {tuple(ids.shape)}"
            )
        bad = (ids < 0) | (ids >= len(self.vocabulary))
        if bool(bad.any()):
            b, t = (int(v) for v in bad.nonzero()[0])
            raise ValueError(
                f"unknown token id {int(ids[b, t])} at [{b}, {t}]; the vocabulary is {self.vocabulary} "
                f"(ids 0..{len(self.vocabulary) - 1})"
            )
        return self.embedding(ids.long().to(self.embedding.weight.device))

    # -- running -----------------------------------------------------------------------------------
    def hidden(self, ids: Tensor, state: Any = None, mask: Tensor | None = None) -> tuple[Tensor, Any]:
        """The layer's outputs ``[B, T, H]`` after every position, and its final state."""
        x = self.inputs(ids)
        return self.layer(x, state, mask=None if mask is None else mask.to(x.device))

    def forward(self, ids: Tensor, state: Any = None, mask: Tensor | None = None) -> tuple[Tensor, Any]:
        """``ids [B, T]`` -> ``(out, state)``: accept scores ``[B, T]`` (acceptors; position ``t``
        decides the prefix read up to ``t``) or next-symbol logits ``[B, T, len(outputs)]``
        (generators; ``t`` gives ``p(w_{t+1} | w_{≤t})``)."""
        h, state = self.hidden(ids, state, mask)
        return self.readout(h), state

    def _chunks(self, ids: Tensor, mask: Tensor, visit: Callable[[Tensor, int], None]) -> None:
        """Run ``ids`` in time chunks of :data:`CHUNK`, carrying the state; ``visit(out, start)``."""
        state = None
        for start in range(0, ids.shape[1], CHUNK):
            sl = slice(start, start + CHUNK)
            out, state = self(ids[:, sl], state, mask[:, sl])
            visit(out, start)

    @torch.no_grad()
    def final_state(self, words: Sequence[Sequence[str]]) -> Any:
        """The layer's state after each word's last symbol (rows stop at their own length)."""
        ids, mask = self.ids(words)
        _, state = self.hidden(ids, mask=mask)
        return state

    @torch.no_grad()
    def accepts(self, words: Sequence[Sequence[str]]) -> list[bool]:
        """Whether each word is accepted.

        Acceptors: the accept score after the word's last symbol is positive.  Generators
        (Hewitt et al. 2020 Definition 5): every symbol of the word, then ``END``, has
        log-probability at least ``min_log_prob``.  Long strings run in time chunks.
        ``words``: a list of symbol sequences (``[["(", ")", "END"]]``), not ids; ids
        ``[B, T]`` run through :meth:`forward`."""
        self._check_words(words, "accepts")
        if not words:
            return []
        if self.task == "generator":
            return (self._step_log_probs(words).amin(1) >= self.min_log_prob).tolist()
        ids, mask = self.ids(words)
        last = mask.sum(1) - 1
        out = torch.zeros(len(words), dtype=torch.bool)
        if bool(
            (last < 0).any()
        ):  # the empty word without BOS: the start state decides (its first field: s, Q)
            p = self.embedding.weight
            start = self.layer.initial_state(1, device=p.device, dtype=p.dtype)[0]
            out[last < 0] = bool(self.readout(start)[0] > 0)

        def visit(score: Tensor, start: int) -> None:
            here = ((last >= start) & (last < start + score.shape[1])).nonzero()[:, 0]
            out[here] = score.cpu()[here, last[here] - start] > 0

        self._chunks(ids, mask, visit)
        return out.tolist()

    def _step_log_probs(self, words: Sequence[Sequence[str]]) -> Tensor:
        """``[B, T]`` float64: ``log p`` of each symbol of ``word END`` (``+inf`` past the end)."""
        if self.task != "generator":
            raise ValueError("log_prob needs a generator; an acceptor's readout is an accept score")
        ids, mask = self.ids(words)  # BOS w_1 .. w_n
        end = self.vocabulary.index(END)
        target = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1)
        target[torch.arange(len(words)), mask.sum(1) - 1] = end
        out = torch.full(ids.shape, float("inf"), dtype=torch.float64)

        def visit(logits: Tensor, start: int) -> None:
            n = logits.shape[1]
            lp = logits.double().log_softmax(-1).cpu()
            got = lp.gather(-1, target[:, start : start + n, None])[..., 0]
            out[:, start : start + n] = torch.where(
                mask[:, start : start + n], got, out[:, start : start + n]
            )

        self._chunks(ids, mask, visit)
        return out

    @torch.no_grad()
    def log_prob(self, words: Sequence[Sequence[str]]) -> Tensor:
        """``log p(word END)`` under the network, ``[len(words)]`` float64 (generators only)."""
        lp = self._step_log_probs(words)
        return torch.where(torch.isinf(lp), 0.0, lp).sum(1)

    # -- plain torch -------------------------------------------------------------------------------
    def to_torch(self) -> TorchConstruction:
        """The same network with plain torch modules: ``nn.Embedding`` -> ``nn.RNN`` (``relu``,
        ``tanh``, or ``sigmoid`` rewritten as ``tanh``) or ``nn.LSTM`` -> a copy of the readout.

        A sigmoid Elman layer becomes a ``tanh`` ``nn.RNN`` exactly: with ``h_σ = (1 + h_τ)/2``,
        ``σ(z) = (1 + tanh(z/2))/2`` gives ``W_τ = W/4``, ``U_τ = U/2``, ``b_τ = b/2 + W·1/4``, and
        a linear readout ``V_τ = V/2``, ``b_v,τ = b_v + V·1/2``; the zero start state ``h_σ = 0``
        is ``h_τ = −1``, which the returned module passes as ``h_0``.
        """
        layer = self.layer
        p = next(layer.parameters())
        fk = {"device": p.device, "dtype": p.dtype}
        emb = nn.Embedding.from_pretrained(self.embedding.weight.detach().clone(), freeze=False)
        readout = copy.deepcopy(self.readout)
        h0 = None
        if isinstance(layer, LSTMLayer):
            rnn = copy.deepcopy(layer.rnn)  # batch first, like every memrnn layer's
        elif isinstance(layer, ElmanRNN) and layer.activation in ("relu", "tanh", "sigmoid"):
            sig = layer.activation == "sigmoid"
            rnn = nn.RNN(layer.input_size, layer.hidden_size, nonlinearity="tanh" if sig else layer.activation,
                         batch_first=True, **fk)  # fmt: skip
            w, u = layer.weight_hh.detach(), layer.weight_ih.detach()
            b = layer.bias.detach() if layer.bias is not None else torch.zeros(layer.hidden_size, **fk)
            with torch.no_grad():
                rnn.weight_hh_l0.copy_(w / 4 if sig else w)
                rnn.weight_ih_l0.copy_(u / 2 if sig else u)
                rnn.bias_ih_l0.copy_(b / 2 + w.sum(1) / 4 if sig else b)
                rnn.bias_hh_l0.zero_()
            if sig:
                if not isinstance(readout, nn.Linear):
                    raise ValueError(
                        "a sigmoid layer becomes a tanh nn.RNN only with a linear readout; "
                        f"this readout is {type(readout).__name__}"
                    )
                with torch.no_grad():
                    v = self.readout.weight.detach()
                    readout.weight.copy_(v / 2)
                    readout.bias.copy_(self.readout.bias.detach() + v.sum(1) / 2)
                h0 = -torch.ones(layer.hidden_size, **fk)
        else:
            what = getattr(layer, "activation", None)
            raise ValueError(
                f"plain torch has no counterpart of {type(layer).__name__}"
                + (f" with activation {what!r}" if isinstance(what, str) else "")
                + "; to_torch covers LSTM layers and relu, tanh and sigmoid Elman layers"
            )
        return TorchConstruction(emb, rnn, readout, h0)


class TorchConstruction(nn.Module):
    """``readout(rnn(embedding(ids)))`` with plain torch modules (batch first), from
    :meth:`Construction.to_torch`; ``h0`` ``[hidden]`` is the start state (``None``: zeros)."""

    def __init__(
        self, embedding: nn.Embedding, rnn: nn.RNNBase, readout: nn.Module, h0: Tensor | None = None
    ) -> None:
        super().__init__()
        self.embedding, self.rnn, self.readout = embedding, rnn, readout
        self.register_buffer("h0", h0)

    def forward(self, ids: Tensor) -> Tensor:
        """``ids [B, T]`` -> the construction's ``out`` (accept scores ``[B, T]`` or logits
        ``[B, T, len(outputs)]``)."""
        x = self.embedding(ids)
        hx = None if self.h0 is None else self.h0.expand(1, ids.shape[0], -1).contiguous()
        y, _ = self.rnn(x, hx)
        return self.readout(y)
