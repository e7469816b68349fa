"""Reused CPU buffers for the fused loops' per-call history.

A fused training call allocates its history afresh each time: the stack RNN's gates, states and
memory checkpoints (``memrnn.ops.stack_rnn.cpu``) are tens of MB at T 256 (an LSTM controller of
64 units, batch 64).  glibc serves blocks that large from ``mmap`` or returns them to the system
when they are freed, so the next call takes a page fault on every 4 KiB of them again.  Measured
on this project's 2-core CPU (``python -m benchmarks.scratch_buffers``, one thread, the two
settings alternating), a superposition stack RNN's training call at T 256, depth 256: median
82.4 ms and 9,287 minor faults a call without the buffers below, 64.2 ms and none with them
(about what glibc's tunables ``glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=
4000000000`` give); the best calls differ little (62.5 against 61.0 ms).  The outputs of the
forward without history come from here too (Delétang et al.'s Stack-RNN, hidden 256, batch 128,
T 256: 84.9 → 66.1 ms).

:func:`empty` hands out such a buffer from storage held here when no tensor uses that storage any
more (its use count is 1: only this module holds it), so the pages stay mapped between calls; a
buffer still referenced (saved for a backward not yet run, an output the caller keeps) is never
handed out twice.  Contents are uninitialised, as with :func:`torch.empty`.  Only CPU tensors of
at least :data:`MIN_BYTES` go through here; sizes are rounded up to an eighth of their power of
two, so that batches of nearby lengths share buffers.  At most ``MEMRNN_SCRATCH_MIB`` MiB (default 1024;
0 turns this off) are held: past it, the least recently used free buffers are let go, and when
the buffers in use alone fill it (outputs a caller keeps, say) a new buffer is torch's own.

``MEMRNN_SCRATCH_POISON=1`` fills every buffer handed out with NaN, so that a loop that reads a
buffer before writing it shows up (the tests run the stack RNNs that way).
"""

from __future__ import annotations

import math
import os
import threading

import torch
from torch import Tensor

#: buffers smaller than this come from torch's allocator as usual (glibc keeps them in its heap)
MIN_BYTES = 1 << 20

_lock = threading.Lock()
_held: list[list] = []  # [storage, dtype, numel, last use]
_clock = 0


def limit_bytes() -> int:
    """The most bytes held (``MEMRNN_SCRATCH_MIB``, default 1024 MiB; 0: nothing is held)."""
    return int(float(os.environ.get("MEMRNN_SCRATCH_MIB", "1024")) * (1 << 20))


def _poison() -> bool:
    return os.environ.get("MEMRNN_SCRATCH_POISON", "") not in ("", "0")


def _rounded(n: int) -> int:
    """``n`` rounded up to a multiple of an eighth of the power of two at or below it (less than
    12.5% more)."""
    step = max(1, (1 << max(0, n.bit_length() - 1)) // 8)
    return -(-n // step) * step


#: how many references a storage has (a private torch function; without it nothing is held)
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _free(storage: torch.UntypedStorage) -> bool:
    return _use_count(storage._cdata) == 1


def empty(like: Tensor, *shape: int) -> Tensor:
    """An uninitialised contiguous tensor of ``shape`` with ``like``'s dtype and device, as
    ``like.new_empty(shape)``; on CPU, at least :data:`MIN_BYTES`, from storage held between
    calls (module docstring)."""
    global _clock
    n = math.prod(shape)
    limit = limit_bytes()
    size = _rounded(n)
    if (
        _use_count is None
        or like.device.type != "cpu"
        or not MIN_BYTES <= n * like.element_size() <= size * like.element_size() <= limit
    ):
        return like.new_empty(shape)
    with _lock:
        _clock += 1
        entry = next((e for e in _held if e[1] == like.dtype and e[2] == size and _free(e[0])), None)
        if entry is None:
            if _shrink(limit - size * like.element_size()):
                entry = [torch.empty(size, dtype=like.dtype).untyped_storage(), like.dtype, size, 0]
                _held.append(entry)
            else:  # the buffers held are in use up to the limit (e.g. outputs a caller keeps)
                return like.new_empty(shape)
        entry[3] = _clock
        out = like.new_empty(0).set_(entry[0], 0, shape)
    if _poison():
        out.fill_(float("nan"))
    return out


def _shrink(limit: int) -> bool:
    """Let go of the least recently used free buffers until at most ``limit`` bytes are held
    (buffers in use stay: they are their tensors' memory until those are freed); whether that
    was reached."""
    held = sum(e[0].nbytes() for e in _held)
    for e in sorted(_held, key=lambda e: e[3]):
        if held <= limit:
            break
        if _free(e[0]):
            _held.remove(e)
            held -= e[0].nbytes()
    return held <= limit


def held_bytes() -> int:
    """Bytes of storage held now (in use or free)."""
    with _lock:
        return sum(e[0].nbytes() for e in _held)


def clear() -> None:
    """Let go of every held buffer (those in use are freed when their tensors are)."""
    with _lock:
        _held.clear()
