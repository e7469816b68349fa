"""Member paths: layers whose op runs all members in one pass (:data:`memrnn.members.layer.MEMBER_PATHS`),
one module per recurrence, each registering its layer classes on import:

* :mod:`~memrnn.members.paths.elman`: :class:`memrnn.layers.ElmanRNN`;
* :mod:`~memrnn.members.paths.gated`: :class:`memrnn.layers.LSTMLayer` and :class:`memrnn.layers.GRULayer`;
* :mod:`~memrnn.members.paths.stack_rnn`: :class:`memrnn.layers.StackRNN` (the fused memories).

Adding one: a module here that calls :func:`memrnn.members.layer.register_member_path`, imported
below."""

from memrnn.members.paths import elman, gated, stack_rnn  # noqa: F401  (registers the member paths)
