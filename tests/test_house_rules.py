"""The rules a machine checks, as CI runs them: the import layers of docs/architecture.md and no
import cycles (import-linter, `[tool.importlinter]` in pyproject.toml), the format and the lint set
(ruff, `[tool.ruff]`). Each tool runs from the repository root on this tree's sources.
"""

from __future__ import annotations

import os
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
