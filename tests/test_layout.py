"""The shape of the tree: what may import what, how long a module may grow, every
benchmark starts as a script, and tests/ follows the packages.

The core's parts (a package of `gateway/`, or a module at its root) stand in the
pipeline's order, from the bottom up (`ORDER`): a part imports only the parts at or below
it, so a part can be read, and tested, with only what is under it.

Imports are read from the source (every `import`, including those inside functions and
under `TYPE_CHECKING`: a circle hidden there is still a circle).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "adapters")
# The core's parts from the bottom up, as docs/architecture.md draws them.
ORDER = (
    "errors",
    "backoff",
    "messages",
    "logs",
    "ports",
    "state",
    "settings",
    "metrics",
    "models",
    "tools",
    "spend",
    "media",
    "context",
    "delivery",
    "approvals",
    "feedback",
    "inbound",
    "platform",
    "http",
    "console",
    "turn",
    "answers",
    "shutdown",
    "worker",
    "cli",
)
# The composition root: the one module of the core that wires adapters to it.
COMPOSITION_ROOT = "gateway.cli.main"
# A module past LONG lines says why in its docstring; none grows past CEILING.
LONG, CEILING = 420, 600
# tests/<side>/ folders that are not packages of the code: whole-flow tests (tests/README.md).
FLOWS = "flows"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from gateway import errors` names a module; `from gateway.x import y` a name in x
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: set(_imports(name, path, known)) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _without_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's `__init__` that re-exports its modules is not a circle with them."""
    return {
        name: {other for other in targets if not name.startswith(other + ".")}
        for name, targets in graph.items()
    }


def test_no_module_imports_itself_through_others() -> None:
    assert _circles(_without_packages(_graph())) == []


def _part(name: str) -> str | None:
    """The part of the core `name` belongs to; None outside the core, and for the
    `gateway` package itself (its `__init__` holds only the version)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "gateway" and len(parts) > 1 else None


def _adapters_in_core(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    found = {
        name: sorted(other for other in targets if other.split(".")[0] == "adapters")
        for name, targets in graph.items()
        if name.split(".")[0] == "gateway" and name != COMPOSITION_ROOT
    }
    return {name: adapters for name, adapters in found.items() if adapters}


def _upward(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each core module's imports of a part above its own in ORDER."""
    found: dict[str, list[str]] = {}
    for name, targets in graph.items():
        part = _part(name)
        if part not in ORDER:
            continue
        above = sorted(
            other
            for other in targets
            if (target := _part(other)) in ORDER and ORDER.index(target) > ORDER.index(part)
        )
        if above:
            found[name] = above
    return found


def test_the_core_imports_nothing_from_the_adapters() -> None:
    assert _adapters_in_core(_graph()) == {}


def test_every_module_of_the_core_belongs_to_a_part() -> None:
    unplaced = sorted(
        name
        for name in _modules()
        if name != "gateway" and name.startswith("gateway.")
        if _part(name) not in ORDER
    )
    assert unplaced == []


def test_a_part_imports_only_the_parts_at_or_below_it() -> None:
    assert _upward(_graph()) == {}


def _why_long(source: str) -> str | None:
    """The docstring's paragraph that opens with "Long because:", if it gives a reason
    that names (in backticks) something the module defines; None otherwise."""
    tree = ast.parse(source)
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for paragraph in (ast.get_docstring(tree) or "").split("\n\n"):
        text = " ".join(paragraph.split())
        named = {name.split(".")[0] for name in re.findall(r"`([\w.]+)", text)}
        if text.startswith("Long because: ") and len(text.split()) >= 12 and named & defined:
            return text
    return None


def _too_long(sources: dict[str, str]) -> dict[str, int]:
    """Modules past LONG lines without a reason, and any past CEILING: their lengths."""
    found = {}
    for name, source in sources.items():
        lines = len(source.splitlines())
        if lines > CEILING or (lines > LONG and _why_long(source) is None):
            found[name] = lines
    return found


def test_a_long_module_says_why_in_its_docstring() -> None:
    """Long modules are allowed where splitting would part what belongs together; then
    the module's docstring has a paragraph "Long because: ..." about what it defines."""
    sources = {name: path.read_text() for name, path in _modules().items()}
    assert _too_long(sources) == {}


def test_the_length_check_sees_a_long_module_without_a_reason() -> None:
    body = "\n".join(f"x{i} = {i}" for i in range(LONG)) + "\n\n\nclass Store:\n    pass\n"
    reason = "Long because: every script has its one method on `Store`, beside the keys."
    planted = {
        "silent": f'"""A store."""\n{body}',
        "vague": f'"""A store.\n\nLong because: it is, and that is all there is to it."""\n{body}',
        "said": f'"""A store.\n\n{reason}"""\n{body}',
        "huge": f'"""A store.\n\n{reason}"""\n{body}' + "y = 0\n" * CEILING,
        "short": '"""A store."""\nx = 1\n',
    }
    assert sorted(_too_long(planted)) == ["huge", "silent", "vague"]


def test_the_circle_check_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_circle_check_sees_a_circle_through_a_package() -> None:
    planted = {
        "gateway.state.session": {"gateway.turn.claims"},
        "gateway.turn.claims": {"gateway.state.session"},
        "gateway.turn": {"gateway.turn.claims"},
    }
    assert _circles(_without_packages(planted)) == [
        ["gateway.state.session", "gateway.turn.claims"]
    ]


def test_the_adapters_check_sees_the_core_import_an_adapter() -> None:
    planted = {
        COMPOSITION_ROOT: {"adapters.slack.platform"},
        "gateway.delivery.stream": {"gateway.state.keys", "adapters.slack.render"},
        "adapters.slack.render": {"gateway.ports"},
    }
    assert _adapters_in_core(planted) == {"gateway.delivery.stream": ["adapters.slack.render"]}


def test_the_direction_check_sees_an_upward_import() -> None:
    planted = {
        "gateway.state.session": {"gateway.errors", "gateway.turn.claims"},
        "gateway.turn.claims": {"gateway.state.session"},
        "gateway.settings.env": {"gateway.settings.values", "gateway"},
        "gateway.cli.main": {"adapters.console", "gateway.worker"},
    }
    assert _upward(planted) == {"gateway.state.session": ["gateway.turn.claims"]}


def _scripts() -> list[str]:
    """bench/'s scripts: each module that runs as `python bench/X.py` (has a `__main__`)."""
    return sorted(
        path.stem
        for path in (ROOT / "bench").glob("*.py")
        if re.search(r"""^if __name__ == ["']__main__["']:""", path.read_text(), re.M)
    )


def test_the_benchmarks_the_readme_names_are_scripts() -> None:
    named = set(re.findall(r"bench/(\w+)\.py", (ROOT / "README.md").read_text()))
    assert named and named <= set(_scripts())


@pytest.mark.parametrize("script", _scripts())
def test_every_benchmark_starts_as_a_script(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{script}.py"), "--help"],
        cwd=ROOT / "bench",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _unmirrored(tests: Path, code: Path) -> list[str]:
    """Test folders and files under `tests` that name no package or module under `code`.

    A folder names a package (or is FLOWS); a `test_<x>.py` names module `x` of the
    package its folder mirrors, or `x` is `<module>_<aspect>`; FLOWS holds what it likes.
    """
    wrong = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(tests)
        if FLOWS in relative.parts:
            continue
        if not (code / relative / "__init__.py").is_file():
            wrong.append(f"{relative}/")
    for test in sorted(tests.rglob("test_*.py")):
        relative = test.relative_to(tests)
        if FLOWS in relative.parts or f"{relative.parent}/" in wrong:
            continue
        package = code / relative.parent
        modules = {p.stem for p in package.glob("*.py")} | {
            p.name for p in package.iterdir() if (p / "__init__.py").is_file()
        }
        subject = test.stem.removeprefix("test_")
        if not any(subject == m or subject.startswith(f"{m}_") for m in modules - {"__init__"}):
            wrong.append(str(relative))
    return wrong


def test_tests_mirror_the_packages() -> None:
    for side in PACKAGES:
        assert _unmirrored(ROOT / "tests" / side, ROOT / side) == []


def test_the_mirror_check_sees_a_test_of_nothing(tmp_path: Path) -> None:
    code, tests = tmp_path / "code", tmp_path / "tests"
    for path in ("state/__init__.py", "state/jobs.py", "worker.py"):
        (code / path).parent.mkdir(parents=True, exist_ok=True)
        (code / path).touch()
    for path in (
        "state/test_jobs.py",
        "state/test_jobs_retries.py",
        "state/test_lease.py",
        "test_worker.py",
        "test_state.py",
        "turn/test_runner.py",
        "flows/test_crash.py",
    ):
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).touch()
    assert _unmirrored(tests, code) == ["turn/", "state/test_lease.py"]


def test_a_worker_loads_the_mcp_sdk_and_pypdf_only_when_it_needs_them() -> None:
    """The MCP SDK takes seconds to import and about 30 MB, pypdf about 16 MB: only
    configured tools, and the first PDF, pay for them."""
    check = (
        "import sys, gateway.cli.main, gateway.worker, gateway.turn.runner, "
        "gateway.turn.tool_loop; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'pypdf')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
