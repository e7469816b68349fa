"""Grefenstette et al.'s (2015, section 3.2) neural queue: the stratification stack popped and read
from the oldest end.  Its batched step is :func:`memrnn.ops.stratification.stratification_step`
with ``order="queue"``, and its CPU kernel, C++ step and Triton step are the stratification
stack's with that one direction flipped (``covered`` summed from the other end), so they live in
:mod:`memrnn.ops.stratification`; this folder holds only its :data:`~memrnn.ops.queue.spec.SPEC`."""
