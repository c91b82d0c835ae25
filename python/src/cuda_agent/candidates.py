# SPDX-License-Identifier: Apache-2.0
"""A candidate's files from a model's reply, for single-turn use (a reward function scoring
one completion): every fenced block whose info string names a candidate path.

    ```python model_new.py            ```cuda kernels/relu.cu
    ...                               ...
    ```                               ```

Candidate paths are `model_new.py` and sources or headers under `kernels/` (the server checks
them again). A later block of the same path replaces an earlier one, as a model's corrected
version would.
"""

import re
from typing import Dict

__all__ = ["files_from_reply"]

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_SOURCE = re.compile(r"^kernels/(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|hxx|inl)$")


def _is_candidate_path(path: str) -> bool:
    return path == "model_new.py" or (_SOURCE.match(path) is not None and ".." not in path.split("/"))


def files_from_reply(reply: str) -> Dict[str, str]:
    """The candidate files the fenced blocks of `reply` name (empty when none does)."""
    files: Dict[str, str] = {}
    for block in _FENCE.finditer(reply):
        for word in block.group("info").split():
            path = word.strip("`'\":")
            if path.startswith("./"):
                path = path[2:]
            if _is_candidate_path(path):
                files[path] = block.group("body")
                break
    return files
