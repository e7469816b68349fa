"""Forward-only throughput of Delétang et al.'s (2023) Stack-RNN and Tape-RNN (issue "pay only for
the memory that can still matter", its third "Done when"): memrnn's ``StackRNN.outputs`` under
``torch.no_grad`` (the fused path without history: the C++ loop on CPU) against the same model
written as a plain per-step torch loop, and against that loop's step jitted by ``torch.compile``.

    python benchmarks/deletang_forward.py [--hidden 64 256] [--lengths 64 256 1024] [--batch 32]
        [--repeats 5] [--configs stack_rnn tape_rnn] [--no-compile] [--smoke]

The models are configs/chomsky/stack_rnn.yaml's and tape_rnn.yaml's layers at hidden 64 (the CPU
suite's, configs/suites/chomsky_cpu.yaml) and 256 (the paper's): a ReLU Elman controller (haiku's
``hk.VanillaRNN``) reading ``[x_t ; r_{t−1}]``, and

* Stack-RNN: Joulin & Mikolov's (2015) superposition stack, 30 cells of width 8, actions
  ``softmax(push, pop, no-op)``, the pushed vector ``Linear(h)`` unsquashed;
* Tape-RNN: a circular tape of 40 cells of width 8, actions ``softmax(stay, left, right, jump
  left, jump right)`` (jumps by the row's input length: ``T // 2`` here, a transduction's input
  half), the written vector ``MLP(h)`` (64, 64, ReLU between).

Inputs: one-hot symbols of reverse_string's input vocabulary (its 2 symbols and the blank, 3
inputs; the configs' default task), the weights drawn as the configs draw them (``init: haiku``:
memrnn.lit.init.haiku_init_).  Batch 32: the CPU suite's (configs/suites/chomsky_cpu.yaml; the paper
trains at 128, ``--batch 128``; it evaluates 512 sequences per length).  One thread.

Columns (milliseconds, best of ``--repeats``, the three interleaved after a warm-up each):

* ``memrnn``: ``layer.outputs(x)`` under ``torch.no_grad`` (on CPU the C++ loop when built,
  ``memrnn.ops.dispatch``'s default; ``--impl cpu`` for the Python one);
* ``loop``: :class:`PlainLoop`, the same model as a readable loop of torch ops (the controller's
  two linears and ReLU, the head, the memory's update with ``torch.cat``/``torch.roll``/
  ``gather``), its weights copied from the layer;
* ``compiled``: the same loop with its step function ``torch.compile``d (mode default,
  ``dynamic=False``; the Python loop over ``t`` stays, every step one call of the compiled
  graph).  Compiling the whole loop would unroll ``T`` steps.  The compile time (the first call,
  once per model and shape) is printed apart and excluded.

Before timing, every row checks that the loop's and the compiled loop's outputs equal memrnn's
to 1e-5 (float32; relative to the outputs' largest magnitude when that exceeds 1), and the
loop's final memory ``forward``'s, else raises (the outputs alone hardly see a tape moved the
wrong way: swapping left and right changed them by 4e-6 at hidden 64, T 64).  The memory head's
action rows are haiku's draw times 10 (:data:`ACTION_SCALE`), decisive actions as a trained model's.
``--smoke``: one tiny row of each config (hidden 8, T 8, batch 2, one repeat), every check, for a
test.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import subprocess
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from memrnn.languages.chomsky import chomsky_task
from memrnn.layers import StackRNN
from memrnn.lit.init import haiku_init_
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import cpu_description

#: configs/chomsky/stack_rnn.yaml's and tape_rnn.yaml's layer arguments (but hidden_size)
CONFIGS: dict[str, dict] = {
    "stack_rnn": {
        "memory": "superposition",
        "controller": "elman",
        "controller_args": {"activation": "relu"},
        "memory_args": {"push_activation": "identity"},
        "width": 8,
        "depth": 30,
    },
    "tape_rnn": {
        "memory": "tape_jump",
        "controller": "elman",
        "controller_args": {"activation": "relu"},
        "memory_args": {"write_mlp": [64, 64]},
        "width": 8,
        "depth": 40,
    },
}
#: how close the loops' outputs must be to memrnn's (float32)
TOLERANCE = 1e-5
#: the memory head's action logits scaled up after haiku's draw, so that the actions are decisive as
#: a trained model's (at the draw itself they are near uniform); same ops, same times
ACTION_SCALE = 10.0


class PlainLoop(nn.Module):
    """The Stack-RNN or Tape-RNN of :data:`CONFIGS` as a plain per-step loop of torch ops, with
    the weights of a built :class:`memrnn.layers.StackRNN` (copied, so the two share nothing).

    ``step(x_t [B, I], h [B, H], memory [B, cells, width], shift_index)`` -> ``(h, memory)``:
    the controller ``h = relu(W_x x_t + W_r memory[:, 0] + b + W_h h)``, the head's actions
    (softmax) and value, then the memory's update.  ``forward(x [B, T, I], jump [B])`` -> the
    outputs ``h_t`` ``[B, T, H]`` (and the final memory with ``final=True``); ``step_fn``
    replaces :meth:`step` (its compiled version)."""

    def __init__(self, layer: StackRNN) -> None:
        super().__init__()
        self.kind = layer.memory.kind
        if self.kind not in ("superposition", "tape_jump"):
            raise ValueError(f"PlainLoop runs the superposition stack and the jump tape, got {self.kind!r}")
        c, m = layer.controller, layer.memory
        n_x = layer.input_size
        self.w_x = nn.Parameter(c.weight_ih[:, :n_x].detach().clone())
        self.w_r = nn.Parameter(c.weight_ih[:, n_x:].detach().clone())
        self.w_h = nn.Parameter(c.weight_hh.detach().clone())
        self.b = nn.Parameter(c.bias.detach().clone())
        self.head = nn.Linear(m.head.in_features, m.head.out_features)
        self.head.load_state_dict(m.head.state_dict())
        self.n_actions = len(m.actions)
        self.value_mlp = None
        if m.value_mlp is not None:
            self.value_mlp = nn.ModuleList(
                nn.Linear(lin.in_features, lin.out_features) for lin in m.value_mlp
            )
            self.value_mlp.load_state_dict(m.value_mlp.state_dict())
        self.hidden, self.cells, self.width = layer.hidden_size, m.depth, m.width

    def value(self, h: Tensor, head: Tensor) -> Tensor:
        """The pushed or written vector ``[B, width]``: the head's last rows, or the write MLP's."""
        if self.value_mlp is None:
            return head[:, self.n_actions :]
        v = h
        for i, lin in enumerate(self.value_mlp):
            v = lin(v if i == 0 else torch.relu(v))
        return v

    def step(self, x_t: Tensor, h: Tensor, memory: Tensor, shift_index: Tensor) -> tuple[Tensor, Tensor]:
        """One step (class docstring); ``shift_index [2, B, cells, width]``: the tape's cells after a
        jump left and right (unused by the stack)."""
        h = torch.relu(x_t @ self.w_x.t() + memory[:, 0] @ self.w_r.t() + self.b + h @ self.w_h.t())
        head = self.head(h)
        actions = torch.softmax(head[:, : self.n_actions], -1)
        v = self.value(h, head)
        a = [actions[:, i, None, None] for i in range(self.n_actions)]
        if self.kind == "superposition":  # push, pop, no-op (Joulin & Mikolov 2015, eqs. 5-6)
            pushed = torch.cat([v[:, None], memory[:, :-1]], 1)
            popped = torch.cat([memory[:, 1:], torch.zeros_like(memory[:, :1])], 1)
            return h, a[0] * pushed + a[1] * popped + a[2] * memory
        # the tape: write into the head's cell, then stay, left, right, jump left, jump right
        written = torch.cat([v[:, None], memory[:, 1:]], 1)
        return h, (
            a[0] * written
            + a[1] * torch.roll(written, -1, 1)
            + a[2] * torch.roll(written, 1, 1)
            + a[3] * written.gather(1, shift_index[0])
            + a[4] * written.gather(1, shift_index[1])
        )

    def shift_index(self, jump: Tensor) -> Tensor:
        """``[2, B, cells, width]``: for each row, the cell read after a jump left (``i + L``) and
        right (``i − L``), modulo the tape's length."""
        i = torch.arange(self.cells)
        by = torch.stack([jump, -jump])[:, :, None]  # [2, B, 1]
        return ((i + by) % self.cells)[..., None].expand(-1, -1, -1, self.width).contiguous()

    def forward(
        self, x: Tensor, jump: Tensor, step_fn: Callable | None = None, final: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        step = self.step if step_fn is None else step_fn
        B = x.shape[0]
        h = x.new_zeros(B, self.hidden)
        memory = x.new_zeros(B, self.cells, self.width)
        index = self.shift_index(jump)
        outputs = []
        for x_t in x.transpose(0, 1).contiguous():  # each step's input contiguous, whatever T
            h, memory = step(x_t, h, memory, index)
            outputs.append(h)
        return (torch.stack(outputs, 1), memory) if final else torch.stack(outputs, 1)


def check_close(name: str, got: Tensor, want: Tensor) -> float:
    """The largest difference of ``got`` from ``want``, relative to ``want``'s largest magnitude
    when it exceeds 1; raises when it is over :data:`TOLERANCE`."""
    err = float((got - want).abs().max()) / max(1.0, float(want.abs().max()))
    if not err <= TOLERANCE:
        raise AssertionError(f"{name}: differs from memrnn's by {err:.3g} > {TOLERANCE}")
    return err


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best time of each of ``fns`` over ``repeats`` rounds (one call of each per round, in turn),
    after one warm-up call each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(_timed(fn))
    return {k: min(v) for k, v in times.items()}


def build(config: str, hidden: int, inputs: int, seed: int, action_scale: float = ACTION_SCALE) -> StackRNN:
    """The config's layer at ``hidden`` units, drawn as the configs draw it (``init: haiku``), the
    memory head's action rows times ``action_scale`` (:data:`ACTION_SCALE`)."""
    layer = StackRNN(inputs, hidden, **CONFIGS[config])
    haiku_init_(layer, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        layer.memory.head.weight[: len(layer.memory.actions)] *= action_scale
    return layer.eval()


def one_hot_inputs(batch: int, T: int, inputs: int, gen: torch.Generator) -> Tensor:
    """``[batch, T, inputs]`` one-hot symbols, uniform."""
    return nn.functional.one_hot(torch.randint(inputs, (batch, T), generator=gen), inputs).float()


def compiled_step(loop: PlainLoop) -> tuple[Callable, str]:
    """``torch.compile(loop.step)`` (mode default, static shapes), or ``(None, why)`` when it fails."""
    import torch._inductor.config

    # compile in this process: no pool of compile workers left beside the timings on a shared CPU
    torch._inductor.config.compile_threads = 1
    try:
        return torch.compile(loop.step, dynamic=False), ""
    except Exception as e:  # reported in the table, not hidden
        return None, f"{type(e).__name__}: {e}"


def build_models(config: str, hidden: int, args) -> dict:
    """The layer, its plain loop and (unless ``--no-compile``) the loop's compiled step, with the
    compile's time or why it failed: one of each per (config, hidden), shared by every T (a step's
    shapes do not depend on T)."""
    inputs = len(chomsky_task("reverse_string").input_symbols) + 1
    layer = build(config, hidden, inputs, seed=args.seed)
    loop = PlainLoop(layer).eval()
    models = {"layer": layer, "loop": loop, "inputs": inputs, "step": None, "why": "", "compile_s": 0.0}
    if args.no_compile:
        return models
    step, why = compiled_step(loop)
    t0 = time.perf_counter()
    if step is not None:
        x = one_hot_inputs(args.batch, 2, inputs, torch.Generator().manual_seed(args.seed))
        try:
            with torch.no_grad():
                loop(x, torch.ones(args.batch, dtype=torch.long), step)  # the first call compiles
        except Exception as e:  # reported
            step, why = None, f"{type(e).__name__}: {str(e).splitlines()[0]}"
    models.update(step=step, why=why, compile_s=time.perf_counter() - t0)
    return models


def run_row(models: dict, config: str, hidden: int, T: int, args, gen: torch.Generator) -> dict:
    """Check and time one (config, hidden, T) with ``models`` (:func:`build_models`)."""
    layer, loop, step = models["layer"], models["loop"], models["step"]
    x = one_hot_inputs(args.batch, T, models["inputs"], gen)
    jump = torch.full((args.batch,), T // 2, dtype=torch.long)
    state = layer.initial_state(args.batch, input_lengths=jump.float())

    def memrnn_fn() -> Tensor:
        return layer.outputs(x, state)

    def loop_fn() -> Tensor:
        return loop(x, jump)

    def compiled_fn() -> Tensor:
        return loop(x, jump, step)

    row = {"config": config, "hidden": hidden, "T": T}
    fns = {"memrnn": memrnn_fn, "loop": loop_fn}
    chosen = contextlib.nullcontext() if args.impl is None else implementation(args.impl)
    with torch.no_grad(), chosen:
        want = memrnn_fn()
        row["err_loop"] = check_close(f"{config} h{hidden} T{T} loop", loop_fn(), want)
        # the final memories too: the outputs alone hardly tell a tape moved left from one moved right
        memory = loop(x, jump, final=True)[1]
        check_close(f"{config} h{hidden} T{T} loop's final memory", memory, layer(x, state)[1][-1])
        if step is not None:
            row["err_compiled"] = check_close(f"{config} h{hidden} T{T} compiled", compiled_fn(), want)
            fns["compiled"] = compiled_fn
        times = interleaved(fns, args.repeats)
    row.update({k: 1e3 * v for k, v in times.items()})
    return row


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout
        return out.stdout.strip() + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def fmt(row: dict) -> str:
    """The row as a markdown table line."""

    def ms(k: str) -> str:
        return f"{row[k]:.1f}" if k in row else "-"

    def ratio(k: str) -> str:
        return f"{row[k] / row['memrnn']:.2f}" if k in row else "-"

    return (
        f"| {row['config']} | {row['hidden']} | {row['T']} | {ms('memrnn')} | {ms('loop')} | "
        f"{ms('compiled')} | {ratio('loop')} | {ratio('compiled')} |"
    )


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--impl", default=None, choices=["native", "cpu"], help="memrnn's path (default: its own)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    ap.add_argument("--smoke", action="store_true", help="one tiny row per config, every check (a test)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.hidden, args.lengths, args.batch, args.repeats = [8], [8], 2, 1
    for name in ("batch", "repeats", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    for v in (*args.hidden, *args.lengths):
        if v < 1:
            raise ValueError(f"--hidden and --lengths must be >= 1, got {v}")
    torch.set_num_threads(args.threads)
    print(
        f"<!-- {cpu_description()} ({platform.processor() or platform.machine()}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), batch {args.batch}, best of {args.repeats}, commit {_commit()}, "
        f"load average at start {_load()} -->"
    )
    print(
        "| config | hidden | T | memrnn ms | loop ms | compiled ms | memrnn/loop | memrnn/compiled |\n"
        "|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    gen = torch.Generator().manual_seed(args.seed)
    rows: list[dict] = []
    notes = []
    for config in args.configs:
        for hidden in args.hidden:
            models = build_models(config, hidden, args)
            if not args.no_compile:
                notes.append(
                    f"compile {config} h{hidden}: "
                    + (
                        f"{models['compile_s']:.1f} s (excluded)"
                        if models["step"]
                        else f"failed, {models['why']}"
                    )
                )
            for T in args.lengths:
                row = run_row(models, config, hidden, T, args, gen)
                rows.append(row)
                print(fmt(row), flush=True)
    if not args.no_compile:  # one graph per (config, hidden) expected: none recompiled for another T
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        notes.append(f"torch.compile graphs: {graphs} for {len(args.configs) * len(args.hidden)} models")
    err = max(max(r.get("err_loop", 0.0), r.get("err_compiled", 0.0)) for r in rows)
    notes.append(f"largest output difference from memrnn's (relative): {err:.2g}")
    notes.append(f"load average at end {_load()}")
    for n in notes:
        print(f"<!-- {n} -->")
    return rows


if __name__ == "__main__":
    main()
