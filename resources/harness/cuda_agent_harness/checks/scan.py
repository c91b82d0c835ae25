# SPDX-License-Identifier: Apache-2.0
"""The ``scan`` handler: static checks of a candidate's sources, run in the trusted process
on the text alone (nothing is imported or compiled).

model_new.py is checked on its syntax tree against the grammar of grammar.py: an allowlist
of imports, names, attributes and calls, where anything the contract does not list is
rejected (strings and comments never trigger a rule). The C++/CUDA sources are checked on
their text. Each finding carries a reason code, the file and line, and what to do instead.
These checks come before any candidate code runs; the forward guard and the other dynamic
checks stand behind them for whatever they cannot see."""

from __future__ import annotations

from .grammar import check_model_new
from ..registry import handler

#: The check of model_new.py, under the name the scan has always given it.
scan_python = check_model_new


# -- C++ and CUDA sources -----------------------------------------------------------------
# The C++ scan lives in cpp_scan.py; its names are re-exported here.
from .cpp_scan import CPP_ALLOWED, CPP_FORBIDDEN, host_compiled_files, macro_definitions, scan_cpp, strip_cpp


def is_cpp(path: str) -> bool:
    """Whether a candidate file is scanned as C++ or CUDA: every file but Python. What an
    ``#include`` reads is the compiler's choice, not its name's, and the build's suffixes
    are compared without regard to case (``kernels/impl.hxx``, ``kernels/Tanh.H``)."""
    return not path.lower().endswith(".py")


@handler("scan")
def scan(args: dict, context) -> dict:
    """Args: files {relative path: text}, reference_source, policy {allow_cublas, allow_cudnn}."""
    policy = args.get("policy") or {}
    files = args.get("files") or {}
    findings: list[dict] = []
    if "model_new.py" not in files:
        findings.append({"reason": "interface_mismatch", "file": "model_new.py", "line": 0, "rule": "interface",
                         "message": "the candidate has no model_new.py"})
    host = host_compiled_files({path: text for path, text in files.items() if is_cpp(path)})
    # Every file's macros, for every file: a header may define what another file uses.
    macros: dict = {}
    for path, text in sorted(files.items()):
        if is_cpp(path):
            macros.update(macro_definitions(text))
    for path, text in sorted(files.items()):
        if path == "model_new.py":
            findings += check_model_new(text, path, args.get("reference_source"))
        elif path.lower().endswith(".py"):
            findings.append({"reason": "forbidden_module", "file": path, "line": 0, "rule": "files",
                             "message": f"{path}: the candidate consists of model_new.py and kernels/; other Python"
                                        " files are not used."})
        elif is_cpp(path):
            findings += scan_cpp(text, path, bool(policy.get("allow_cublas", True)), bool(policy.get("allow_cudnn", True)),
                                 host_compiled=path in host, macros=macros)
    unique, seen = [], set()
    for finding in findings:
        key = (finding["file"], finding["line"], finding["rule"], finding["reason"])
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return {"findings": unique, "files": sorted(files)}
