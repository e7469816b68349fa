"""The house's rules, checked from the source: papers are cited by authors and year."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _text_files() -> list[Path]:
    files = [
        ROOT / "README.md",
        *sorted(p for p in (ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "memrnn").rglob("*.py")),
        *sorted((ROOT / "configs").rglob("*.yaml")),
    ]
    for sub in ("benchmarks", "scripts", "notebooks", "tests"):
        files += [p for p in sorted((ROOT / sub).rglob("*")) if p.suffix in {".py", ".ipynb", ".sh", ".md"}]
    return files


def test_papers_are_cited_by_name_not_by_file_number() -> None:
    """The seed papers' file numbers mean nothing to users: cite "Hewitt et al. 2020" instead."""
    pattern = re.compile("seed" + r"[ _]00\d", re.IGNORECASE)
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _text_files()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, f"cite papers by authors and year, not by seed file number: {hits}"


# -- floors: every import runs down (docs/design.md, "Data flows one way") ------------------------
#: a package may import only packages on lower floors (and itself); packages on one floor import
#: nothing of each other.  ``memrnn/__init__.py`` stands above them all.
FLOORS = {
    "core": 0,
    "ops": 1,
    "languages": 1,
    "layers": 2,
    "data": 2,
    "constructions": 3,
    "members": 3,
    "analysis": 4,
    "rsm": 4,
    "lit": 5,
    "suite": 6,
}
#: imports that may sit inside a function: optional dependencies, and imports whose cost only
#: some runs should pay (wandb loads in about a second; pyplot picks a backend when imported;
#: ``memrnn.ops.stack_rnn.opaque`` loads ``torch._dynamo``, about half of ``import memrnn``)
LAZY_OK = (
    "triton",
    "sklearn",
    "wandb",
    "matplotlib.pyplot",
    "torch.utils.cpp_extension",
    "memrnn.ops.stack_rnn.opaque",
    # Lightning and matplotlib, costly: the suite's --help, list and argument errors import
    # neither (tests/suite/test_suite.py checks it); only running cells and drawing tables do
    "memrnn.lit",
    "memrnn.data.members",  # Lightning: a shed group's parts reuse the data drawn (memrnn.suite.groups)
    "memrnn.suite.validation",
    "memrnn.suite.tables",  # memrnn.languages (the length floor), for collect's extra tables only
    "matplotlib",
)


def _module_imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every import of ``path``, skipping
    ``if TYPE_CHECKING:`` blocks; ``from memrnn.x import y`` counts as ``memrnn.x.y`` when
    ``memrnn/x/y`` exists, else as ``memrnn.x``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for a in child.names:
                    sub = f"{child.module}.{a.name}"
                    as_path = ROOT / sub.replace(".", "/")
                    is_module = as_path.with_suffix(".py").exists() or (as_path / "__init__.py").exists()
                    found.append((sub if is_module else child.module, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def _library_files() -> list[Path]:
    return sorted((ROOT / "memrnn").rglob("*.py"))


def _package(path: Path) -> str | None:
    parts = path.relative_to(ROOT / "memrnn").parts
    return parts[0] if len(parts) > 1 else None


def test_every_package_has_a_floor() -> None:
    packages = {_package(p) for p in _library_files()} - {None}
    assert packages == set(FLOORS), f"give each package of memrnn/ a floor: {packages ^ set(FLOORS)}"


def test_imports_run_down_the_floors() -> None:
    """No import from a package to one on its own or a higher floor (other than itself)."""
    bad = []
    for path in _library_files():
        here = _package(path)
        if here is None:
            continue
        for module, line, _ in _module_imports(path):
            parts = module.split(".")
            if parts[0] != "memrnn" or len(parts) < 2 or parts[1] == here:
                continue
            there = parts[1]
            if FLOORS[there] >= FLOORS[here]:
                bad.append(
                    f"{path.relative_to(ROOT)}:{line} ({here}, floor {FLOORS[here]}) imports {module} (floor {FLOORS[there]})"
                )
    assert not bad, "imports that run up or sideways:\n" + "\n".join(bad)


def test_no_import_hides_inside_a_function() -> None:
    """Imports sit at the top of their module (a function-level import hides a cycle or an
    upward import) unless they load an optional or costly dependency (``LAZY_OK``) or a
    Triton kernel module (Triton is optional)."""
    bad = []
    for path in _library_files():
        for module, line, in_function in _module_imports(path):
            lazy = module.startswith(LAZY_OK) or (module.startswith("memrnn.") and module.endswith(".triton"))
            if in_function and not lazy:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module} inside a function")
    assert not bad, "\n".join(bad)


def test_no_module_of_memrnn_loads_memrnn_by_name() -> None:
    """``importlib`` is for user class paths (the CLI), never a way around the floors."""
    bad = []
    for path in _library_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in {
                "importlib.import_module",
                "__import__",
            }:
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("memrnn"):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"memrnn modules loaded by name: {bad}"


def test_no_import_cycle_between_files() -> None:
    """The files of memrnn/ import each other without a cycle (package ``__init__`` files included)."""

    def file_of(module: str) -> Path | None:
        base = ROOT / module.replace(".", "/")
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.exists():
                return cand
        return None

    graph: dict[Path, set[Path]] = {}
    for path in _library_files():
        deps = set()
        for module, _, in_function in _module_imports(path):
            if in_function or not module.startswith("memrnn"):
                continue
            target = file_of(module)
            # importing memrnn.x.y runs memrnn/x/__init__.py first, unless the importer is inside
            # memrnn/x/ (then that __init__ is already running)
            parts = module.split(".")
            parents = [file_of(".".join(parts[:k])) for k in range(2, len(parts))]
            parents = [p for p in parents if p is not None and p.parent not in path.parents]
            deps |= {p for p in [target, *parents] if p is not None and p != path}
        graph[path] = deps
    # a package's __init__ importing its own submodules is the one expected direction; a submodule
    # importing its package's __init__ back closes a cycle, which this search reports
    state: dict[Path, int] = {}
    stack: list[Path] = []
    cycles: list[str] = []

    def dfs(node: Path) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loop = [*stack[stack.index(nxt) :], nxt]
                cycles.append(" -> ".join(str(p.relative_to(ROOT)) for p in loop))
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# -- gradients that tests compare -----------------------------------------------------------------
def _moved_leaves(tree: ast.AST) -> list[int]:
    """Lines of ``name.to(...).requires_grad_()``: on ``name``'s own device and dtype ``.to``
    returns ``name`` itself, so two runs made this way share one ``.grad`` (the second backward
    adds into the first run's result); once ``name`` requires grad, a copy on another device is
    no leaf (its ``.grad`` stays None)."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "requires_grad_"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Attribute)
            and node.func.value.func.attr == "to"
            and isinstance(node.func.value.func.value, (ast.Name, ast.Attribute, ast.Subscript))
            and not any(k.arg == "copy" for k in node.func.value.keywords)  # .to(..., copy=True)
        ):
            lines.append(node.lineno)
    return lines


def test_no_test_makes_a_leaf_by_moving_a_tensor_it_keeps() -> None:
    """``x.to(device).requires_grad_()`` on a tensor ``x`` that outlives the line made two GPU
    tests of the nondeterministic stack fail on an H200 (and their CPU runs compare a gradient
    with itself); a fresh leaf is ``x.detach().clone().to(device).requires_grad_()`` or
    ``x.to(device, copy=True).requires_grad_()``."""
    hits = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in _text_files()
        if p.suffix == ".py"
        for line in _moved_leaves(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert not hits, f"a leaf made by moving a kept tensor (clone it first): {hits}"


def test_the_moved_leaf_check_fires() -> None:
    bad = "xx = x.to(device).requires_grad_()\nst = [t.to('cuda', dtype).requires_grad_() for t in s]"
    good = (
        "xx = x.clone().to(device).requires_grad_()\nw = torch.randn(3).to(device).requires_grad_()\n"
        "y = x.to(device, copy=True).requires_grad_()"
    )
    assert _moved_leaves(ast.parse(bad)) == [1, 2] and _moved_leaves(ast.parse(good)) == []


def test_import_memrnn_leaves_torch_dynamo_unloaded() -> None:
    """``import memrnn`` does not load ``torch._dynamo``: when a module-level
    ``@torch.compiler.disable`` did, it took 4.2 s here, now 2.2 s.  Users who put a layer in
    their own model pay for Dynamo only when they compile, or run a stack RNN's hand-written
    loops."""
    code = "import sys, memrnn, memrnn.layers, memrnn.languages; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
