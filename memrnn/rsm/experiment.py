"""The experiments of Paaßen et al. 2021 as library code: the nine tasks, the reservoir stack machine and echo
state network per task with memrnn's default hyperparameters, the error measure, and a Lightning
module that fits an RSM in closed form (``python train.py fit --config configs/rsm/….yaml``).

Tasks (section 4): ``latch``, ``copy``, ``repeat_copy`` and the six languages of Table 1
(``dyck1``, ``dyck2``, ``dyck3``, ``anbn``, ``palindrome``, ``json``).  Language words are
sampled by memrnn's samplers (non-empty, 1–50 symbols for training, 50–100 for testing); the
teacher signals come from the Table 1 automata (:func:`memrnn.rsm.teacher.lr_batch`), the
copy tasks use section 4's stack heuristic (:func:`memrnn.rsm.teacher.transduction_batch`).

Error (Tables 2 and 3): the mean absolute error over every scored output of the test set
(languages and latch: the ``T + 1`` outputs ``y_t = [w_<t ∈ L]`` of each word, binary
predictions; copy tasks: the ``T`` outputs, all 8 bits, raw values).
"""

from __future__ import annotations

import io
import pickle
from typing import Any, ClassVar, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from memrnn.core.checks import check_kwargs, nonnegative_int, positive_int
from memrnn.data.presets import get_preset
from memrnn.data.tasks import CopyTask, ListDataset, RepeatCopyTask
from memrnn.languages import AnBn, DyckN, JsonLite, Language, Latch, Palindrome
from memrnn.languages.lr import table1_automaton
from memrnn.layers.reservoir import Reservoir
from memrnn.rsm.esn import EchoStateNetwork
from memrnn.rsm.machine import ReservoirStackMachine
from memrnn.rsm.readouts import LogisticClassifier, RidgeClassifier, RidgeReadout, SVMClassifier
from memrnn.rsm.teacher import lr_batch, transduction_batch

LANGUAGE_TASKS = ("dyck1", "dyck2", "dyck3", "anbn", "palindrome", "json")
NTM_TASKS = ("latch", "copy", "repeat_copy")
TASKS = NTM_TASKS + LANGUAGE_TASKS
SPLITS = ("train", "val", "test")
ReservoirName = Literal["rand", "crj", "ldn"]
RESERVOIRS = ("rand", "crj", "ldn")
CLASSIFIERS = ("default", "svm", "ridge", "logistic")
#: the paper's protocol (section 4), kept once in :data:`memrnn.data.presets.PRESETS` (``"rsm"``):
#: sizes 100/100/100, words of 1–50 symbols for training and 50–100 for testing (the preset's
#: windows count ``END``; these count symbols)
PROTOCOL = get_preset("rsm")
TRAIN_LENGTHS = tuple(n - 1 for n in PROTOCOL.train_lengths)
TEST_LENGTHS = tuple(n - 1 for n in PROTOCOL.test_lengths)
FILL = 20  # copy heuristic: the stack is filled to 20 symbols at the end-of-sequence token


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"unknown Paaßen et al. 2021 task {task!r}; choose one of {', '.join(TASKS)}")
    return task


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose {', '.join(SPLITS)}")
    return split


def is_copy(task: str) -> bool:
    return check_task(task) in ("copy", "repeat_copy")


def task_language(task: str) -> Language:
    """The sampler of a language task (``latch`` included)."""
    langs = {
        "dyck1": lambda: DyckN(1),
        "dyck2": lambda: DyckN(2),
        "dyck3": lambda: DyckN(3),
        "anbn": AnBn,
        "palindrome": Palindrome,
        "json": JsonLite,
        "latch": Latch,
    }
    if check_task(task) not in langs:
        raise ValueError(f"{task!r} is a transduction task, not a language")
    return langs[task]()


def sample_words(
    language: Language, rng: np.random.Generator, n: int, lengths: tuple[int, int]
) -> list[list[str]]:
    """``n`` words of ``language`` with ``lengths[0] <= len <= lengths[1]`` symbols (``END`` not
    counted; the empty word is never drawn)."""
    lo, hi = max(lengths[0], 1), lengths[1]
    out: list[list[str]] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 1000 * n:
            raise RuntimeError(f"could not sample {n} words of {language} with {lo}..{hi} symbols")
        ids = language.sample(rng, (lo + 1, hi + 1))
        w = [language.symbols[i] for i in ids if i != language.end_id]
        if lo <= len(w) <= hi:
            out.append(w)
    return out


def near_misses(task: str, words: list[list[str]], rng: np.random.Generator) -> list[list[str]]:
    """One non-word per word: the word with one symbol replaced by another terminal, redrawn
    until the task's LR(1) automaton rejects it (a word of the same length that fails late
    as often as early, unlike a uniformly random string)."""
    automaton = table1_automaton(task)
    out = []
    for w in words:
        for _ in range(1000):
            i = int(rng.integers(len(w)))
            others = [a for a in automaton.terminals if a != w[i]]
            v = [*w[:i], others[int(rng.integers(len(others)))], *w[i + 1 :]]
            if not automaton.accepts(v):
                out.append(v)
                break
        else:
            raise RuntimeError(
                f"no one-symbol near miss of {''.join(w)!r} is rejected by the {task} automaton"
            )
    return out


def task_items(
    task: str, split: str, size: int, rng: np.random.Generator, negative_fraction: float = 0.0
) -> list[Any]:
    """``size`` raw items: words (lists of symbols) or copy samples.  ``val`` draws from the
    test distribution (longer words, more repeats), so validation measures generalization.

    ``negative_fraction`` (languages only): that share of the items are near misses
    (:func:`near_misses`), the rest words.  Paaßen et al. 2021 samples words only (0.0); then an RSM
    whose ``c_out`` just fires on the end step scores zero error while accepting every
    non-word, which the near misses expose."""
    check_split(split)
    nonnegative_int("size", size)
    if not 0.0 <= negative_fraction <= 1.0:
        raise ValueError(f"negative_fraction must be in [0, 1], got {negative_fraction}")
    if negative_fraction and task not in LANGUAGE_TASKS:
        raise ValueError(
            f"negative_fraction needs a language task ({', '.join(LANGUAGE_TASKS)}), got {task!r}"
        )
    window = "train" if split == "train" else "test"
    if task == "copy":
        t = CopyTask(bits=8, max_length=20)
        return [t.sample(rng, window) for _ in range(size)]
    if task == "repeat_copy":
        t = RepeatCopyTask(bits=8, max_length=10, max_repeats=10, test_max_repeats=20)
        return [t.sample(rng, window) for _ in range(size)]
    lengths = TEST_LENGTHS if window == "test" else TRAIN_LENGTHS
    n_neg = round(size * negative_fraction)
    words = sample_words(task_language(task), rng, size, lengths)
    return words[: size - n_neg] + near_misses(task, words[size - n_neg :], rng)


def task_batch(task: str, items: list[Any]) -> dict[str, Any]:
    """Collate items into the machine's batch: ``x`` (ids ``[B, T]`` or values ``[B, T, n]``),
    ``lengths``, ``pops``/``pushes``, ``shift``, ``outputs``, ``score_mask [B, T+1]`` and
    ``copy_mask`` (copy tasks)."""
    if is_copy(task):
        b = transduction_batch(items, fill=FILL)
        steps = torch.arange(b["outputs"].shape[1])[None] < b["lengths"][:, None]
        return {**b, "score_mask": steps, "copy_mask": b["loss_mask"]}
    b = lr_batch(table1_automaton(task), items)
    steps = torch.arange(b["outputs"].shape[1])[None] <= b["lengths"][:, None]
    return {**b, "x": b["ids"], "score_mask": steps}


def task_data(task: str, split: str, size: int, seed: int, negative_fraction: float = 0.0) -> dict[str, Any]:
    """``task_batch`` of ``size`` fresh items (seeded by ``(seed, split)``)."""
    check_task(task)
    positive_int("size", size)
    nonnegative_int("seed", seed)
    rng = np.random.default_rng([seed, SPLITS.index(check_split(split)), 2002])
    return task_batch(task, task_items(task, split, size, rng, negative_fraction))


def task_shape(task: str) -> dict[str, Any]:
    """``num_inputs``, ``num_nonterminals``, ``max_pop``, ``output_size``, ``out_mode``."""
    if is_copy(task):
        return {"num_inputs": 9, "num_nonterminals": 1, "max_pop": 1, "output_size": 8, "out_mode": "regress"}
    a = table1_automaton(task)
    return {
        "num_inputs": len(a.terminals),
        "num_nonterminals": len(a.nonterminals),
        "max_pop": max(r.pop for r in a.rules),
        "output_size": 1,
        "out_mode": "classify",
    }


def default_units(task: str) -> int:
    """256 neurons, 512 for the copy tasks (Paaßen et al. 2021, footnote 4)."""
    return 512 if is_copy(task) else 256


def make_reservoir(
    task: str,
    kind: ReservoirName,
    *,
    units: int | None = None,
    seed: int = 0,
    input_size: int | None = None,
    dtype: torch.dtype = torch.float64,
    **overrides: Any,
) -> Reservoir:
    """The reservoir with memrnn's defaults for ``task`` (not searched per task as in the paper):

    ========  ==========================================================================
    rand      spectral radius 0.9, input scaling 1 (Gaussian), tanh
    crj       cycle weight 0.5, jump weight 0.5, jump length 2, input weight 1, tanh
    ldn       θ = 2 steps for the languages and latch (the decisions read the stack's top),
              θ = 26 for copy / repeat copy (the copied symbol sits 21 below the top);
              order = units // input channels, linear
    ========  ==========================================================================
    """
    shape = task_shape(task)
    if kind not in RESERVOIRS:
        raise ValueError(f"unknown reservoir kind {kind!r}; choose {', '.join(RESERVOIRS)}")
    n = (
        shape["num_inputs"] + shape["num_nonterminals"]
        if input_size is None
        else positive_int("input_size", input_size)
    )
    units = default_units(task) if units is None else positive_int("units", units)
    check_kwargs("make_reservoir", Reservoir, overrides, given=("input_size", "units", "kind", "dtype"))
    args: dict[str, Any] = {
        "rand": {"spectral_radius": 0.9, "input_scaling": 1.0, "seed": seed},
        "crj": {"cycle_weight": 0.5, "jump_weight": 0.5, "jump_length": 2, "input_weight": 1.0},
        "ldn": {"theta": 26.0 if is_copy(task) else 2.0},
    }[kind]
    args.update(overrides)
    return Reservoir(n, units, kind, dtype=dtype, **args)


def make_machine(
    task: str,
    kind: ReservoirName = "ldn",
    *,
    units: int | None = None,
    seed: int = 0,
    classifier: Literal["default", "svm", "ridge", "logistic"] = "default",
    dtype: torch.dtype = torch.float64,
    max_inner: int = 100,
    **reservoir_args: Any,
) -> ReservoirStackMachine:
    """An untrained RSM for ``task``.

    Classifiers (``"default"``): languages: ridge classifiers on 1,024 random Fourier features of
    standardized states (``c_pop``, ``c_push``, ``c_out``); copy tasks: logistic regression for
    ``c_pop``/``c_push`` and linear ridge regression for ``c_out`` (Paaßen et al. 2021 uses a linear
    regression there too).  ``"svm"``: Paaßen et al.'s (2021) RBF-SVMs (scikit-learn) for every classifier;
    ``"ridge"``/``"logistic"``: that classifier everywhere (``c_out`` of the copy tasks stays
    a ridge regression).  ``c_shift`` is fitted like the others (its training targets are all 1).
    ``units``: reservoir neurons, a positive int (``None``: :func:`default_units`).
    """
    shape = task_shape(task)
    if classifier not in CLASSIFIERS:
        raise ValueError(f"unknown classifier {classifier!r}; choose {', '.join(CLASSIFIERS)}")
    nonnegative_int("seed", seed)
    res = make_reservoir(task, kind, units=units, seed=seed, dtype=dtype, **reservoir_args)

    def clf(which: int) -> Any:
        if classifier == "svm":
            return SVMClassifier()
        if classifier == "logistic" or (classifier == "default" and is_copy(task)):
            return LogisticClassifier(1e-4)
        return RidgeClassifier(1e-3, features=1024, seed=seed * 10 + which, standardize=True)

    out = RidgeReadout(1e-6) if is_copy(task) else clf(3)
    return ReservoirStackMachine(
        res,
        shape["num_inputs"],
        shape["num_nonterminals"],
        max_pop=shape["max_pop"],
        output_size=shape["output_size"],
        out_mode=shape["out_mode"],
        pop=clf(1),
        push=clf(2),
        shift=RidgeClassifier(1e-3),
        out=out,
        max_inner=max_inner,
        on_inner_limit="stop",
    )


def esn_inputs(task: str, batch: dict[str, Any], dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """``(x [B, T+1, n], steps [B, T+1])``: one-hot ids (or the copy vectors) and the zero end
    step, as the RSM sees them; ``steps`` marks each row's ``T + 1`` real steps."""
    x = batch["x"]
    n = task_shape(task)["num_inputs"]
    vec = torch.nn.functional.one_hot(x, n).to(dtype) if not x.is_floating_point() else x.to(dtype)
    B, T = vec.shape[:2]
    steps = torch.arange(T + 1)[None] <= batch["lengths"][:, None]
    ext = torch.zeros(B, T + 1, n, dtype=dtype)
    ext[:, :T] = vec * (torch.arange(T)[None] < batch["lengths"][:, None])[..., None]
    return ext, steps


def make_esn(
    task: str, kind: ReservoirName, *, units: int | None = None, seed: int = 0, alpha: float = 1e-6, **kw: Any
) -> EchoStateNetwork:
    """The ESN baseline: the same reservoir kind on the raw inputs, a ridge readout."""
    shape = task_shape(task)
    res = make_reservoir(task, kind, units=units, seed=seed, input_size=shape["num_inputs"], **kw)
    return EchoStateNetwork(res, shape["output_size"], alpha=alpha)


def predictions_error(task: str, pred: Tensor, batch: dict[str, Any]) -> dict[str, float]:
    """Paaßen et al.'s (2021) error: mean ``|ŷ − y|`` over the scored outputs (``mae``); copy tasks also
    ``mae_copy`` (the copy phase only); languages also ``word_accuracy`` (the share of
    sequences whose verdict on the whole word, the output of the end step, is right).
    ``pred``: ``[B, T+1, L]`` or ``[B, T+1]``."""
    y = batch["outputs"].to(torch.float64)
    pred = pred.to(torch.float64)
    if not is_copy(task):
        pred = pred.reshape(y.shape)
    err = (pred - y).abs()
    out = {"mae": float(err[batch["score_mask"]].mean())}
    if is_copy(task):
        out["mae_copy"] = float(err[batch["copy_mask"]].mean())
    else:
        rows = torch.arange(len(y))
        out["word_accuracy"] = float((err[rows, batch["lengths"]] < 0.5).double().mean())
    return out


def fit_machine(machine: ReservoirStackMachine, batch: dict[str, Any]) -> ReservoirStackMachine:
    return machine.fit(
        batch["x"], batch["lengths"], batch["pops"], batch["pushes"], batch["outputs"], batch["shift"]
    )


# -- Lightning -------------------------------------------------------------------------------------
class RSMDataModule(L.LightningDataModule):
    """Paaßen et al.'s (2021) data: ``train_size`` / ``val_size`` / ``test_size`` items of ``task`` (100 each
    in the paper), one batch per split (the fit is closed-form).  ``negative_fraction``: the
    share of near-miss non-words in every split (languages; see :func:`task_items`)."""

    def __init__(
        self,
        task: str = "dyck2",
        train_size: int = PROTOCOL.train_size,
        val_size: int = PROTOCOL.val_size,
        test_size: int = PROTOCOL.test_size,
        seed: int = 0,
        negative_fraction: float = 0.0,
    ) -> None:
        super().__init__()
        check_task(task)
        if negative_fraction:
            task_items(task, "train", 0, np.random.default_rng(0), negative_fraction)  # validates
        for name, v in (("train_size", train_size), ("val_size", val_size), ("test_size", test_size)):
            positive_int(name, v)
        nonnegative_int("seed", seed)
        self.task, self.seed, self.negative_fraction = task, seed, negative_fraction
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.save_hyperparameters()

    # the CLI links these into every model (SequenceModule needs them; RSMModule checks them)
    @property
    def vocab_size(self) -> int:
        return task_shape(self.task)["num_inputs"]

    @property
    def num_symbols(self) -> int:
        return task_shape(self.task)["num_inputs"]

    @property
    def bracket_types(self) -> int | None:
        return None

    def _loader(self, split: str) -> DataLoader:
        rng = np.random.default_rng([self.seed, SPLITS.index(split), 2002])
        items = task_items(self.task, split, self.sizes[split], rng, self.negative_fraction)
        return DataLoader(
            ListDataset([items]), batch_size=None, collate_fn=lambda it: task_batch(self.task, it)
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


class _MovedModules(pickle.Unpickler):
    """Unpickles classifiers pickled before the reservoir stack machine moved to ``memrnn.rsm``
    (checkpoints of memrnn 0.1 name ``memrnn.layers.readouts``)."""

    _MOVED: ClassVar[dict[str, str]] = {
        "memrnn.layers.readouts": "memrnn.rsm.readouts",
        "memrnn.layers.rsm": "memrnn.rsm.machine",
    }

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(self._MOVED.get(module, module), name)


class RSMModule(L.LightningModule):
    """A reservoir stack machine fitted in closed form inside Lightning: each training epoch runs
    Algorithm 4 on every batch and the classifiers are fitted on that epoch's pairs before the
    next validation, test or epoch (a later epoch refits from its own batches); validation and
    test run Algorithm 2 and log ``{split}/mae`` (= ``{split}/loss``, what checkpoints
    monitor), ``{split}/mae_copy`` (copy tasks) and ``{split}/inner_limit_hits``.  One epoch is
    all it needs (``trainer.max_epochs: 1``); no optimizer and no gradient are involved, so
    ``gradient_clip_val`` must be null.

    Args:
        task: the Paaßen et al. 2021 task (must match the data module's).
        reservoir: ``rand``, ``crj`` or ``ldn``.  units: reservoir neurons (default 256/512).
        classifier: see :func:`make_machine`.  seed: reservoir / feature seed.
        reservoir_args: overrides of :func:`make_reservoir`'s defaults (e.g. ``theta``).
        vocab_size, num_symbols, bracket_types: linked from the data module by the CLI (checked).
    """

    def __init__(
        self,
        task: str = "dyck2",
        reservoir: ReservoirName = "ldn",
        units: int | None = None,
        classifier: Literal["default", "svm", "ridge", "logistic"] = "default",
        seed: int = 0,
        reservoir_args: dict[str, Any] | None = None,
        vocab_size: int | None = None,
        num_symbols: int | None = None,
        bracket_types: int | None = None,
    ) -> None:
        super().__init__()
        check_task(task)
        if vocab_size is not None and vocab_size != task_shape(task)["num_inputs"]:
            raise ValueError(
                f"the data has vocab_size={vocab_size} but task {task!r} has {task_shape(task)['num_inputs']} inputs"
            )
        self.save_hyperparameters()
        self.task = task
        self.machine = make_machine(
            task, reservoir, units=units, seed=seed, classifier=classifier, **(reservoir_args or {})
        )
        self.automatic_optimization = False
        self._collected: list[tuple[dict[str, Tensor], Tensor]] = []
        self.fitted = False

    def configure_optimizers(self) -> None:
        return None

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        task = getattr(dm, "task", None)
        if task is not None and task != self.task:
            raise ValueError(f"the model is built for task {self.task!r} but the data module serves {task!r}")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        data = self.machine.collect(
            batch["x"], batch["lengths"], batch["pops"], batch["pushes"], batch["shift"]
        )
        self._collected.append((data, batch["outputs"]))
        self.log("train/pairs", float(len(data["action_x"])), batch_size=1)

    def on_train_epoch_start(self) -> None:
        self._collected = []

    def on_train_epoch_end(self) -> None:
        self._fit_pending()

    def on_validation_start(self) -> None:
        # Lightning validates inside the training epoch, before on_train_epoch_end
        self._fit_pending()

    def on_test_start(self) -> None:
        self._fit_pending()

    def _fit_pending(self) -> None:
        if not self._collected:
            return
        data = {k: torch.cat([d[k] for d, _ in self._collected]) for k in self._collected[0][0]}
        # step_index rows refer to each batch's own rows: gather the targets batch by batch
        ys = []
        for d, outputs in self._collected:
            idx = d["step_index"].to(outputs.device)
            ys.append(outputs[idx[:, 0], idx[:, 1]])
        y = torch.cat(ys)
        data["step_index"] = torch.stack([torch.arange(len(y)), torch.zeros(len(y), dtype=torch.long)], 1)
        self.machine.fit_collected(data, y[:, None] if y.dim() == 1 else y[:, None, :])
        self.fitted, self._collected = True, []

    def _eval(self, batch: dict[str, Any], split: str) -> None:
        if not self.fitted:
            if self.trainer.sanity_checking:
                return  # Lightning's sanity check runs before the fit
            raise RuntimeError(f"RSMModule: {split} before any training batch; run fit first")
        res = self.machine.run(batch["x"], batch["lengths"])
        n = len(batch["lengths"])
        errors = predictions_error(self.task, res.outputs, batch)
        for k, v in errors.items():
            self.log(f"{split}/{k}", v, batch_size=n, prog_bar=k == "mae")
        self.log(f"{split}/loss", errors["mae"], batch_size=n)
        self.log(f"{split}/inner_limit_hits", float(res.inner_limit_hits), batch_size=n)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval(batch, "test")

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return batch  # the machine moves what it needs; targets stay on the CPU

    _CLASSIFIERS = ("pop", "push", "shift", "out")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # torch classifiers live in the state_dict; scikit-learn ones (svm) are pickled
        checkpoint["rsm_fitted"] = self.fitted
        checkpoint["rsm_pickled"] = {
            name: pickle.dumps(getattr(self.machine, name))
            for name in self._CLASSIFIERS
            if not isinstance(getattr(self.machine, name), torch.nn.Module)
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.fitted = bool(checkpoint.get("rsm_fitted", False))
        for name, blob in checkpoint.get("rsm_pickled", {}).items():
            setattr(self.machine, name, _MovedModules(io.BytesIO(blob)).load())
