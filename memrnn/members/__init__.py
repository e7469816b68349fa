"""Many runs, one process: a member dimension through layers, heads and optimisation
(``docs/design.md``, "Members").

M members (seeds, learning rates, other scalar hyperparameters) train as one model: every
parameter is ``[M, ...]`` (member ``m``'s is ``p[m]``), inputs ``[M, B, T, ...]``.  The members
share no parameter, so the gradient of the sum of their losses is each member's own gradient, and
each member equals the run it would have been alone (same initial weights, learning rate and
batches) to rounding.

* :class:`MemberLayer`: M members of any :class:`~memrnn.core.layer.MemoryLayer` (a pass over all
  members where the layer has a member path, else a loop over them; ``member_path`` says which).
* :class:`MemberEmbedding`, :class:`MemberLinear`: the token embedding ``[M, V, E]`` and the
  heads ``[M, out, in]``.
* :class:`MemberAdam`, :class:`MemberAdamW`, :class:`MemberSGD`, :func:`clip_grad_norm_per_member_`,
  :class:`MemberScheduler`: optimisation per member (learning rate, weight decay, clipping,
  schedules, frozen members), each member exactly torch's optimizer on it alone.
* :func:`stack_modules`, :func:`unstack_module`, :func:`member_view`: stacking any modules and
  reading one member back out.
"""

from memrnn.members import paths as _paths  # noqa: F401  (registers the member paths)
from memrnn.members.layer import MEMBER_PATHS, MemberLayer, MemberPath, register_member_path
from memrnn.members.modules import MemberEmbedding, MemberLinear
from memrnn.members.optim import (
    MemberAdam,
    MemberAdamW,
    MemberOptimizer,
    MemberSGD,
    clip_grad_norm_per_member_,
)
from memrnn.members.schedule import MemberScheduler
from memrnn.members.stacking import member_view, stack_modules, unstack_module

__all__ = [
    "MEMBER_PATHS",
    "MemberAdam",
    "MemberAdamW",
    "MemberEmbedding",
    "MemberLayer",
    "MemberLinear",
    "MemberOptimizer",
    "MemberPath",
    "MemberSGD",
    "MemberScheduler",
    "clip_grad_norm_per_member_",
    "member_view",
    "register_member_path",
    "stack_modules",
    "unstack_module",
]
