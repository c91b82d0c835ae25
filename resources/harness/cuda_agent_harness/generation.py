# SPDX-License-Identifier: Apache-2.0
"""A KernelBench generation as a candidate: one ``model_new.py`` that builds its extension
with ``torch.utils.cpp_extension.load_inline`` (or ``load`` with source files), turned into
the workspace layout (``model_new.py`` importing ``cuda_extension``, sources under
``kernels/``) without running a line of it.

The generation is read as a syntax tree. The build call's arguments are resolved from what
the text alone fixes: string literals, their concatenation, ``textwrap.dedent``, ``str.join``
and ``.strip()`` of those, lists, tuples and dicts of them, and module-level names assigned
once to such values. Anything else (sources read from a file at run time, computed
in a loop, taken from the environment) cannot be known without running the file and is
refused with ``unresolved_sources``, naming the argument and the line. The sources are laid
out as ``load_inline`` lays them out (``main.cpp`` after ``#include <torch/extension.h>``,
with a generated ``PYBIND11_MODULE`` when ``functions`` is given; ``cuda.cu`` after the
torch and CUDA runtime includes), the call is replaced by the module it would have returned,
and the import of the build function is dropped. The result then goes through the same
checks as any other candidate: nothing here decides whether it is allowed.

Compiler and linker flags are not the candidate's to choose: the compile driver builds every
candidate the same way. They are reported, not applied.

Standard library only, so that it runs in a bare interpreter: the host runs it as a script
(``python3 -I -S``) with ``{"source": text}`` on standard input and reads one JSON object
from standard output.
"""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from typing import Any

#: The module the workspace's build produces, and the folder of its sources.
EXTENSION_MODULE = "cuda_extension"
KERNELS = "kernels"
#: What ``load_inline`` puts before the sources it is given.
CPP_PRELUDE = "#include <torch/extension.h>\n"
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
#: ``load_inline``'s and ``load``'s parameters, in order (for positional arguments).
LOAD_INLINE_PARAMETERS = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
                          "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
                          "build_directory", "verbose", "with_cuda", "is_python_module",
                          "with_pytorch_error_handling", "keep_intermediates", "use_pch", "no_implicit_headers")
LOAD_PARAMETERS = ("name", "sources", "extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags",
                   "extra_include_paths", "build_directory", "verbose", "with_cuda", "is_python_module",
                   "is_standalone", "keep_intermediates")
BUILD_FUNCTIONS = {"load_inline": LOAD_INLINE_PARAMETERS, "load": LOAD_PARAMETERS}
CPP_EXTENSION_MODULE = "torch.utils.cpp_extension"
#: Arguments that only tell the build how to run: reported, never applied.
FLAG_ARGUMENTS = ("extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths")
#: Arguments whose value does not change what is built here.
IGNORED_ARGUMENTS = ("name", "build_directory", "verbose", "with_cuda", "keep_intermediates", "use_pch",
                     "is_python_module", "with_pytorch_error_handling")


#: Expressions for the generation's own folder, against which ``load``'s source paths are read.
OWN_FOLDER = {"os.path.dirname(__file__)", "os.path.dirname(os.path.abspath(__file__))",
              "os.path.dirname(os.path.realpath(__file__))", "Path(__file__).parent", "Path(__file__).resolve().parent",
              "Path(__file__).absolute().parent", "pathlib.Path(__file__).parent",
              "pathlib.Path(__file__).resolve().parent"}


class _OwnFolder:
    """The folder of the generation itself."""


class _RelativePath(str):
    """A path below the generation's folder."""


class Unresolved(Exception):
    """The generation cannot be laid out without running it (a reason, a line, a message)."""

    def __init__(self, reason: str, line: int, message: str):
        super().__init__(message)
        self.reason = reason
        self.line = line


# -- values the text alone fixes ----------------------------------------------------------


class ConstantResolver:
    """Resolves expressions to Python values from literals and module-level names assigned once."""

    def __init__(self, tree: ast.Module):
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            value = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets, value = [node.target], None if isinstance(node, ast.AugAssign) else node.value
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                targets = [node.target]
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
            elif isinstance(node, ast.NamedExpr):
                targets, value = [node.target], node.value
            for target in targets:
                for name in _bound_names(target):
                    # Only `name = value` at one place counts; anything else makes the name unknown.
                    assigned.setdefault(name, []).append(value if isinstance(target, ast.Name) else None)
        self.module_level = {node.targets[0].id for node in tree.body
                             if isinstance(node, ast.Assign) and len(node.targets) == 1
                             and isinstance(node.targets[0], ast.Name)}
        self.assigned = assigned
        self.resolving: set[str] = set()
        #: Module-level names whose values went into the build.
        self.used: set[str] = set()

    def value(self, node: ast.expr, what: str) -> Any:
        if ast.unparse(node) in OWN_FOLDER:
            return _OwnFolder()
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, int, float, type(None))):
            return node.value
        if isinstance(node, ast.JoinedStr) and all(isinstance(part, ast.Constant) for part in node.values):
            return "".join(part.value for part in node.values)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(item, what) for item in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.value(key, what): self.value(value, what) for key, value in zip(node.keys, node.values)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left, what), self.value(node.right, what)
            if type(left) is type(right) and isinstance(left, (str, list)):
                return left + right
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = self.value(node.left, what), self.value(node.right, what)
            if isinstance(left, (_OwnFolder, _RelativePath)) and isinstance(right, str):
                return _RelativePath(right if isinstance(left, _OwnFolder) else f"{left}/{right}")
        if isinstance(node, ast.Name):
            return self._name(node, what)
        if isinstance(node, ast.Call) and not node.keywords:
            return self._call(node, what)
        raise Unresolved("unresolved_sources", node.lineno,
                         f"{what} (line {node.lineno}) is not fixed by the file's text: `{_text(node)}` needs the "
                         "file to run. Give the sources as string literals (or names assigned once to them).")

    def _name(self, node: ast.Name, what: str) -> Any:
        values = self.assigned.get(node.id, [])
        if node.id not in self.module_level or len(values) != 1 or values[0] is None or node.id in self.resolving:
            raise Unresolved("unresolved_sources", node.lineno,
                             f"{what} (line {node.lineno}) names `{node.id}`, which is not assigned exactly once at "
                             "module level to a value the text fixes.")
        self.resolving.add(node.id)
        self.used.add(node.id)
        try:
            return self.value(values[0], what)
        finally:
            self.resolving.discard(node.id)

    def _call(self, node: ast.Call, what: str) -> Any:
        function = _dotted(node.func)
        arguments = [self.value(argument, what) for argument in node.args]
        if function in ("textwrap.dedent", "dedent") and len(arguments) == 1 and isinstance(arguments[0], str):
            return textwrap.dedent(arguments[0])
        if function == "os.path.join" and arguments and isinstance(arguments[0], (_OwnFolder, _RelativePath)) and \
                all(isinstance(part, str) for part in arguments[1:]):
            parts = ([] if isinstance(arguments[0], _OwnFolder) else [arguments[0]]) + list(arguments[1:])
            return _RelativePath("/".join(parts))
        if function == "str" and len(arguments) == 1 and isinstance(arguments[0], _RelativePath):
            return arguments[0]
        if isinstance(node.func, ast.Attribute) and len(arguments) <= 1:
            method = node.func.attr
            receiver = self.value(node.func.value, what)
            if type(receiver) is str and method == "join" and len(arguments) == 1 and \
                    all(isinstance(item, str) for item in arguments[0]):
                return receiver.join(arguments[0])
            if isinstance(receiver, str) and method in ("strip", "lstrip", "rstrip") and not arguments:
                return getattr(receiver, method)()
        raise Unresolved("unresolved_sources", node.lineno,
                         f"{what} (line {node.lineno}) calls `{_text(node.func)}`, which the text alone cannot "
                         "evaluate (only textwrap.dedent, str.join and str.strip are read).")


def _bound_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for item in target.elts for name in _bound_names(item)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


# -- finding the build call ---------------------------------------------------------------


def _build_function_names(tree: ast.Module) -> dict[str, str]:
    """Dotted names under which the file reaches load_inline or load: {dotted name: function}."""
    names: dict[str, str] = {}
    for function in BUILD_FUNCTIONS:
        names[f"{CPP_EXTENSION_MODULE}.{function}"] = function
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == CPP_EXTENSION_MODULE and node.level == 0:
            for alias in node.names:
                if alias.name in BUILD_FUNCTIONS:
                    names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils" and node.level == 0:
            for alias in node.names:
                if alias.name == "cpp_extension":
                    for function in BUILD_FUNCTIONS:
                        names[f"{alias.asname or alias.name}.{function}"] = function
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == CPP_EXTENSION_MODULE and alias.asname:
                    for function in BUILD_FUNCTIONS:
                        names[f"{alias.asname}.{function}"] = function
    return names


def _build_calls(tree: ast.Module) -> list[tuple[ast.Call, str]]:
    names = _build_function_names(tree)
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in names:
            calls.append((node, names[_dotted(node.func)]))
    return sorted(calls, key=lambda call: (call[0].lineno, call[0].col_offset))


def _arguments(call: ast.Call, parameters: tuple[str, ...], function: str) -> dict[str, ast.expr]:
    bound: dict[str, ast.expr] = {}
    if any(isinstance(argument, ast.Starred) for argument in call.args) or any(k.arg is None for k in call.keywords):
        raise Unresolved("unresolved_sources", call.lineno,
                         f"the {function} call (line {call.lineno}) passes arguments with * or **, which the text "
                         "alone does not fix.")
    if len(call.args) > len(parameters):
        raise Unresolved("unresolved_sources", call.lineno,
                         f"the {function} call (line {call.lineno}) has more positional arguments than {function} takes.")
    for parameter, argument in zip(parameters, call.args):
        bound[parameter] = argument
    for keyword in call.keywords:
        if keyword.arg not in parameters:
            raise Unresolved("unresolved_sources", call.lineno,
                             f"the {function} call (line {call.lineno}) passes `{keyword.arg}`, which {function} "
                             "does not take.")
        bound[keyword.arg] = keyword.value
    return bound


def _strings(value: Any, what: str, line: int) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise Unresolved("unresolved_sources", line, f"{what} (line {line}) must be a string or a list of strings.")


# -- the layout ---------------------------------------------------------------------------


def _binding(functions: Any, line: int) -> str:
    """The PYBIND11_MODULE load_inline generates for ``functions``. load_inline wraps each
    function in torch's error translation (``torch::wrap_pybind_function``); here the
    function is bound itself, since the extension may not call into torch's internals:
    a C++ exception still reaches Python as a RuntimeError, with its message."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, list):
        functions = {name: name for name in functions}
    if not isinstance(functions, dict) or not all(isinstance(name, str) and name.isidentifier()
                                                  and isinstance(doc, str) for name, doc in functions.items()):
        raise Unresolved("unresolved_sources", line,
                         f"functions (line {line}) must name C++ functions: a name, a list of names, or a dict "
                         "of names to docstrings.")
    lines = ["", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for name, doc in functions.items():
        lines.append(f"m.def({json.dumps(name)}, &{name}, {json.dumps(doc)});")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _inline_files(arguments: dict[str, Any], line: int) -> dict[str, str]:
    cpp = _strings(arguments.get("cpp_sources"), "cpp_sources", line)
    cuda = _strings(arguments.get("cuda_sources"), "cuda_sources", line)
    if _strings(arguments.get("sycl_sources"), "sycl_sources", line):
        raise Unresolved("unresolved_sources", line, "SYCL sources are not built here: C++ and CUDA only.")
    implicit = not arguments.get("no_implicit_headers", False)
    main = (CPP_PRELUDE if implicit else "") + "\n".join(cpp)
    if arguments.get("functions") is not None:
        main += _binding(arguments["functions"], line)
    files = {f"{KERNELS}/main.cpp": main}
    if cuda:
        files[f"{KERNELS}/cuda.cu"] = (CUDA_PRELUDE if implicit else "") + "\n".join(cuda)
    return files


def _imports_only_the_build(node: ast.AST) -> bool:
    """Whether ``node`` imports nothing but the build functions (or their module)."""
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        if node.module == CPP_EXTENSION_MODULE:
            return all(alias.name in BUILD_FUNCTIONS for alias in node.names)
        if node.module == "torch.utils":
            return all(alias.name == "cpp_extension" for alias in node.names)
    if isinstance(node, ast.Import):
        return all(alias.name == CPP_EXTENSION_MODULE for alias in node.names)
    return False


class _Edits:
    """Replacements of spans of a source text, given by the syntax tree's positions."""

    def __init__(self, source: str):
        self.encoded = source.encode("utf-8")
        self.line_starts = [0]
        for text in source.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(text.encode("utf-8")))
        self.edits: list[tuple[int, int, str]] = []

    def at(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def replace(self, node: ast.AST, text: str) -> None:
        self.edits.append((self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset), text))

    def remove_statement(self, node: ast.stmt) -> None:
        """Removes a module-level statement with its lines where it has them to itself."""
        end = self.at(node.end_lineno, node.end_col_offset)
        line_end = self.line_starts[node.end_lineno] if node.end_lineno < len(self.line_starts) else len(self.encoded)
        rest = self.encoded[end:line_end].decode("utf-8").strip()
        if node.col_offset == 0 and (not rest or rest.startswith("#")):
            self.edits.append((self.at(node.lineno, 0), line_end, ""))
        else:
            self.replace(node, "pass")

    def insert(self, offset: int, text: str) -> None:
        self.edits.append((offset, offset, text))

    def applied(self) -> str:
        result = self.encoded
        for start, end, text in sorted(self.edits, key=lambda edit: edit[0], reverse=True):
            result = result[:start] + text.encode("utf-8") + result[end:]
        return result.decode("utf-8")


def _loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _bound_by_import(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    return [alias.asname or alias.name for alias in node.names]


def _rewritten_model(source: str, tree: ast.Module, call: ast.Call, build_names: set[str]) -> str:
    """The generation with the build call replaced by the built module, and without what only
    fed the build: the build function's import, the module-level names that held its
    sources, and the imports that nothing reads any more (os, textwrap, pathlib for the
    sources' paths; an import nothing reads does nothing a candidate may rely on)."""
    edits = _Edits(source)
    edits.replace(call, EXTENSION_MODULE)
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if _imports_only_the_build(node):
            edits.remove_statement(node) if id(node) in top_level else edits.replace(node, "pass")
    insert_at = 0
    for node in tree.body:
        is_docstring = node is tree.body[0] and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str)
        if is_docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            insert_at = edits.line_starts[node.end_lineno]
    edits.insert(insert_at, f"import {EXTENSION_MODULE}\n")
    text = edits.applied()

    while True:
        tree = ast.parse(text)
        read_now = _loaded_names(tree)
        edits = _Edits(text)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id in build_names and node.targets[0].id not in read_now:
                edits.remove_statement(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__" \
                    and not any(name in read_now for name in _bound_by_import(node)):
                edits.remove_statement(node)
        if not edits.edits:
            return text
        text = edits.applied()


def convert(source: str) -> dict:
    """The workspace files of a generation, or why there are none.

    Returns ``{"files": {path: text}, "source_files": [paths named by load], "build": {...},
    "notes": [...]}``; raises ``Unresolved``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise Unresolved("load_error", error.lineno or 0,
                         f"the generation is not valid Python: {error.msg} (line {error.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise Unresolved("load_error", 0, f"the generation cannot be parsed: {type(error).__name__}") from None
    calls = _build_calls(tree)
    if not calls:
        raise Unresolved("unresolved_sources", 0,
                         "the generation builds no extension: no call of torch.utils.cpp_extension.load_inline "
                         "or load was found.")
    if len(calls) > 1:
        raise Unresolved("unresolved_sources", calls[1][0].lineno,
                         f"the generation builds more than one extension (lines "
                         f"{', '.join(str(call.lineno) for call, _ in calls)}); one is built per candidate.")
    call, function = calls[0]
    resolver = ConstantResolver(tree)
    bound = _arguments(call, BUILD_FUNCTIONS[function], function)
    arguments = {name: resolver.value(node, name) for name, node in bound.items() if name not in IGNORED_ARGUMENTS}
    notes = []
    flags = {name: arguments[name] for name in FLAG_ARGUMENTS if arguments.get(name)}
    if flags:
        notes.append("build flags are not applied (every candidate is built the same way): " + json.dumps(flags))
    if arguments.get("is_standalone"):
        raise Unresolved("unresolved_sources", call.lineno, "load(is_standalone=True) builds a program, not a module.")
    source_files: list[str] = []
    if function == "load_inline":
        files = _inline_files(arguments, call.lineno)
    else:
        source_files = _strings(arguments.get("sources"), "sources", call.lineno)
        if not source_files:
            raise Unresolved("unresolved_sources", call.lineno, "load names no source files.")
        files = {}
    files["model_new.py"] = _rewritten_model(source, tree, call, resolver.used)
    return {"files": files, "source_files": source_files, "notes": notes,
            "build": {"function": function, "line": call.lineno}}


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        reply = {"ok": True, **convert(request["source"])}
    except Unresolved as error:
        reply = {"ok": False, "reason": error.reason, "line": error.line, "message": str(error)}
    sys.stdout.write(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
