# SPDX-License-Identifier: Apache-2.0
"""Python files imported as modules: the task's reference and the candidate's model_new.py.
Free of torch, so that the timing session can import it before it decides where torch
starts."""

from __future__ import annotations

import importlib.util
import sys


def load_module(path: str, name: str):
    """Imports the Python file at ``path`` as module ``name``, registered in sys.modules
    (what the file's own imports of itself, and pickling, look up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
