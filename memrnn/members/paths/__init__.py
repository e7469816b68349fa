"""Member paths: layers whose op runs all members in one pass (:data:`memrnn.members.layer.MEMBER_PATHS`),
one module per recurrence, each registering its layer classes on import:

* :mod:`~memrnn.members.paths.elman`: :class:`memrnn.layers.ElmanRNN`;
* :mod:`~memrnn.members.paths.gated`: :class:`memrnn.layers.LSTMLayer` and :class:`memrnn.layers.GRULayer`;
* :mod:`~memrnn.members.paths.counters`: :class:`memrnn.layers.CounterLSTM` and :class:`memrnn.layers.ReLUCounter`;
* :mod:`~memrnn.members.paths.jordan`: :class:`memrnn.layers.JordanRNN`;
* :mod:`~memrnn.members.paths.reservoir`: :class:`memrnn.layers.Reservoir`;
* :mod:`~memrnn.members.paths.second_order`: :class:`memrnn.layers.SecondOrderRNN`;
* :mod:`~memrnn.members.paths.nnpda`: :class:`memrnn.layers.NNPDA`;
* :mod:`~memrnn.members.paths.stack_rnn`: :class:`memrnn.layers.StackRNN` (the fused memories),
  which hands the nondeterministic stacks to :mod:`~memrnn.members.paths.nondeterministic`
  (:attr:`memrnn.members.layer.MemberPath.select`).

A subclass that computes as its base class declares ``member_path_from = Base`` and takes Base's
path (Hewitt et al.'s constructions: :func:`memrnn.members.layer.member_path_of`).  Adding one: a
module here that calls :func:`memrnn.members.layer.register_member_path`, imported
below."""

from memrnn.members.paths import (  # noqa: F401  (they register)
    counters,
    elman,
    gated,
    jordan,
    nnpda,
    reservoir,
    second_order,
    stack_rnn,
)
