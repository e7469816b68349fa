"""The differentiable memories a :class:`memrnn.layers.StackRNN` controller drives.

Each memory is an ``nn.Module`` that owns its action head (one ``nn.Linear`` from the
controller's output ``h [B, hidden_size]``) and keeps its contents in a flat NamedTuple of
batch-first tensors.  A step reads the controller's output, turns the head's output into the
memory's actions and updates the structure; :meth:`Memory.read` is what the controller sees at the
next step (``[B, width]``).  The structures themselves are pure tensor functions in
:mod:`memrnn.ops` (``superposition``, ``stratification``, ``tape``), each tested against a literal
transcription of its paper.

======================  ======================================  ================================
memory                  actions from ``h``                      structure
======================  ======================================  ================================
``SuperpositionStack``  softmax(push, pop, no-op), pushed       Joulin & Mikolov 2015, eqs. 5–6
                        vector σ(W h + b) (``push_activation``)
``StratificationStack`` push ``d`` = σ, pop ``u`` = σ, value    Grefenstette et al. 2015, eqs. 1–3
                        tanh (DuSell & Chiang 2020's heads)
``NeuralQueue``         as the stratification stack             Grefenstette et al. 2015, §3.2
``NeuralDeque``         push and pop strengths σ and a tanh     Grefenstette et al. 2015, §3.3
                        value for each end (top, bottom)
``Tape``                softmax(stay, left, right), written     Delétang et al. 2023, Tape-RNN
                        vector W h + b (``write_activation``),  without its jumps
                        or an MLP of ``h`` (``write_mlp``)
``JumpTape``            the tape's actions and jumps left and   Delétang et al. 2023, Tape-RNN
                        right by each row's input length
``Nondeterministic``    log weights of every push, replace and  DuSell & Chiang 2020 (NS-RNN),
``Stack``               pop of a weighted PDA (Q states, S      2022 (RNS-RNN, memory-limited)
                        stack symbols)
``VectorNondeter-       the same, and a pushed vector           DuSell & Chiang 2023 (vector
ministicStack``         σ(W h + b) of ``vector_size``           RNS-RNN)
======================  ======================================  ================================

Bounded windows: the stacks and the queue keep ``depth`` cells (the DeQue ``depth`` per end); a step that moves content out of
the window reports the mass it dropped (``overflow [B]``); with ``depth ≥ T`` nothing is ever
dropped and the window equals the paper's unbounded structure.  The tape is circular and drops
nothing.  The nondeterministic stack keeps a window of ``depth`` start times and is exact for
``depth ≥ T`` (its memory-limited variant below that).
"""

from __future__ import annotations

from memrnn.layers.memories.base import VALUE_ACTIVATIONS, Memory, mlp_sizes
from memrnn.layers.memories.nondeterministic import (
    NondeterministicStack,
    NondeterministicState,
    VectorNondeterministicStack,
    VectorNondeterministicState,
)
from memrnn.layers.memories.stacks import (
    DequeState,
    NeuralDeque,
    NeuralQueue,
    StratificationStack,
    StratificationState,
    SuperpositionStack,
    SuperpositionState,
)
from memrnn.layers.memories.tape import JumpTape, JumpTapeState, Tape, TapeState

__all__ = [
    "MEMORIES",
    "VALUE_ACTIVATIONS",
    "DequeState",
    "JumpTape",
    "JumpTapeState",
    "Memory",
    "NeuralDeque",
    "NeuralQueue",
    "NondeterministicStack",
    "NondeterministicState",
    "StratificationStack",
    "StratificationState",
    "SuperpositionStack",
    "SuperpositionState",
    "Tape",
    "TapeState",
    "VectorNondeterministicStack",
    "VectorNondeterministicState",
    "mlp_sizes",
]

#: the memories by name, the one table of ``StackRNN(memory="…")``'s shortcuts (each ``kind``)
MEMORIES: dict[str, type[Memory]] = {
    m.kind: m
    for m in (
        SuperpositionStack,
        StratificationStack,
        NeuralQueue,
        NeuralDeque,
        Tape,
        JumpTape,
        NondeterministicStack,
        VectorNondeterministicStack,
    )
}
