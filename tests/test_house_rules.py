"""The rules a machine checks, as CI runs them: the import layers of docs/architecture.md and no
import cycles (import-linter, `[tool.importlinter]` in pyproject.toml), the format and the lint set
(ruff, `[tool.ruff]`). Each tool runs from the repository root on this tree's sources.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("src", "tests", "benchmarks")


def _tool(name: str) -> str:
    """The tool installed beside this Python (the test extra), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; pip install -e '.[test]' brings it")
    return found


@pytest.mark.parametrize(
    "command",
    [
        ("lint-imports",),
        ("ruff", "format", "--check", *CHECKED),
        ("ruff", "check", *CHECKED),
    ],
    ids=["lint-imports", "ruff-format", "ruff-check"],
)
def test_house_rule_holds(command: tuple[str, ...]) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [_tool(command[0]), *command[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"`{' '.join(command)}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )


def test_every_listed_slow_and_exactness_test_exists() -> None:
    """A renamed test would silently join the fast subset, or leave the exactness run: each name
    must be a test its file defines (a file marked whole must exist and define tests)."""
    # tests/conftest.py by its path: `import conftest` may find another folder's conftest.
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    missing = []
    tables = [*conftest.SLOW_TESTS.items(), *conftest.EXACTNESS_TESTS.items()]
    for rel, names in tables:
        path = ROOT / "tests" / rel
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else ast.Module([], [])
        defined = {
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
        }
        if names == conftest.ALL:
            missing += [] if defined else [f"tests/{rel} (marked whole)"]
            continue
        missing += [f"tests/{rel}::{name}" for name in sorted(names - defined)]
    assert not missing, f"tests/conftest.py names tests that do not exist: {missing}"


def test_the_architecture_names_every_module() -> None:
    """docs/architecture.md is the contract: each module of src/roofline is named there (in a code
    span or the layer diagram), so a new module comes with its line."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    fenced = re.compile(r"```.*?```", re.S)
    words = {w for block in fenced.findall(doc) for w in re.findall(r"\w+", block)}
    for span in re.findall(r"`([^`\n]+)`", fenced.sub("", doc)):
        words.update(re.findall(r"\w+", span))
    modules = sorted((ROOT / "src" / "roofline").rglob("*.py"))
    missing = [
        str(p.relative_to(ROOT))
        for p in modules
        if p.stem not in ("__init__", "__main__") and p.stem not in words
    ]
    assert len(modules) > 100 and not missing, missing
