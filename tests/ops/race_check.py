"""What Triton's interpreter cannot show: races between the threads of a GPU launch.

The interpreter runs a launch's programs one after another and each program's operations on
whole blocks, so a kernel whose programs write the same address, or read what another program of
the same launch writes, or whose program reads back what it stored without a
``tl.debug_barrier()`` in between (on a GPU another thread of the program may have stored it),
passes under the interpreter and fails on a GPU.  :func:`detect_races` records, while the
interpreter runs, every address each program loads and stores and reports:

- ``store-store``: an address stored by two programs of one launch;
- ``store-load``: an address one program stores and another loads in the same launch;
- ``load-after-store``: a program loading an address it stored since its last barrier.

:func:`reversed_programs` runs each launch's programs last to first (a result that changes
depends on the programs' order, which a GPU does not keep), and :func:`poisoned_empties` fills
every fresh ``torch.empty``/``new_empty``/``empty_like`` float tensor with NaN (a GPU's caching
allocator hands back stale data where a CPU often gives zeros, so a read of memory nobody wrote
shows there only).

They patch the interpreter's builder and grid executor (Triton 3.x internals): test tools.
"""

from __future__ import annotations

import collections
import contextlib
import traceback
from collections.abc import Iterator

import numpy as np


@contextlib.contextmanager
def detect_races() -> Iterator[collections.Counter]:
    """Inside the block, every interpreted launch is checked; the yielded counter maps
    ``(kernel, kind)`` (kind as in the module docstring; for ``load-after-store`` the kernel's
    source line) to the number of conflicting addresses."""
    from triton.runtime import interpreter as interp

    report: collections.Counter = collections.Counter()
    launch: dict = {"loads": [], "stores": [], "since_barrier": set(), "prog": None}
    builder, executor = interp.InterpreterBuilder, interp.GridExecutor
    saved = (
        builder.create_masked_load,
        builder.create_masked_store,
        builder.create_barrier,
        executor.__call__,
    )
    orig_load, orig_store, orig_barrier, orig_call = saved

    def program() -> int:
        x, y, z = interp.interpreter_builder.grid_idx
        return (x * 100_003 + y) * 1_009 + z

    def addresses(ptrs, mask) -> np.ndarray:
        return ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)].ravel().astype(np.int64)

    def enter(p: int) -> None:
        if launch["prog"] != p:
            launch["prog"], launch["since_barrier"] = p, set()

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        p, a = program(), addresses(ptrs, mask)
        enter(p)
        launch["loads"].append((a, p))
        hit = launch["since_barrier"].intersection(a.tolist())
        if hit:
            # the kernel's own line: the innermost frame outside Triton and this module
            frames = [
                f for f in traceback.extract_stack()
                if "/triton/" not in f.filename and not f.filename.endswith("race_check.py")
            ]  # fmt: skip
            where = f"{frames[-1].filename.rsplit('/', 2)[-1]}:{frames[-1].lineno}" if frames else "?"
            report[(where, "load-after-store")] += len(hit)
        return orig_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        p, a = program(), addresses(ptrs, mask)
        enter(p)
        launch["stores"].append((a, p))
        launch["since_barrier"].update(a.tolist())
        return orig_store(self, ptrs, value, mask, cache_policy)

    def barrier(self):
        launch["since_barrier"] = set()
        return orig_barrier(self)

    def call(self, *args, **kwargs):
        launch.update(loads=[], stores=[], since_barrier=set(), prog=None)
        out = orig_call(self, *args, **kwargs)
        name = self.fn.__name__
        writers: dict[int, set[int]] = {}
        for a, p in launch["stores"]:
            for ad in set(a.tolist()):
                writers.setdefault(ad, set()).add(p)
        report[(name, "store-store")] += sum(len(ps) > 1 for ps in writers.values())
        crossing = set()
        for a, p in launch["loads"]:
            for ad in set(a.tolist()):
                ps = writers.get(ad)
                if ps and ps - {p}:
                    crossing.add(ad)
        report[(name, "store-load")] += len(crossing)
        return out

    builder.create_masked_load, builder.create_masked_store = load, store
    builder.create_barrier, executor.__call__ = barrier, call
    try:
        yield report
    finally:
        builder.create_masked_load, builder.create_masked_store, builder.create_barrier, executor.__call__ = (
            saved
        )
        for key in [k for k, n in report.items() if n == 0]:
            del report[key]


@contextlib.contextmanager
def reversed_programs() -> Iterator[None]:
    """Inside the block, every interpreted launch runs its programs from the last to the first."""
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    saved = builder.set_grid_idx

    def set_grid_idx(self, x, y, z):
        gx, gy, gz = self.grid_dim
        return saved(self, gx - 1 - x, gy - 1 - y, gz - 1 - z)

    builder.set_grid_idx = set_grid_idx
    try:
        yield
    finally:
        builder.set_grid_idx = saved


@contextlib.contextmanager
def poisoned_empties() -> Iterator[None]:
    """Inside the block, fresh uninitialised float tensors hold NaN."""
    import torch

    saved = (torch.Tensor.new_empty, torch.empty, torch.empty_like)
    new_empty, empty, empty_like = saved

    def fill(t):
        if t.is_floating_point():
            with torch.no_grad():
                t.fill_(float("nan"))
        return t

    torch.Tensor.new_empty = lambda self, *a, **k: fill(new_empty(self, *a, **k))
    torch.empty = lambda *a, **k: fill(empty(*a, **k))
    torch.empty_like = lambda *a, **k: fill(empty_like(*a, **k))
    try:
        yield
    finally:
        torch.Tensor.new_empty, torch.empty, torch.empty_like = saved
