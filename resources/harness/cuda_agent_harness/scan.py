# SPDX-License-Identifier: Apache-2.0
"""The ``scan`` handler: static checks of a candidate's sources, run in the trusted process
on the text alone (nothing is imported or compiled).

model_new.py is checked on its syntax tree, so that strings and comments never trigger a
rule. The C++/CUDA sources are checked on their text with comments and string literals
removed. Each finding carries a reason code, the file and line, and what to do instead.
These checks come before any candidate code runs; the forward guard and the other dynamic
checks stand behind them for whatever they cannot see."""

from __future__ import annotations

import ast
import re

from .registry import handler

#: Modules model_new.py may import (and their submodules where listed).
ALLOWED_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.cuda", "cuda_extension", "math", "typing", "__future__",
    "collections", "collections.abc", "functools", "dataclasses", "enum", "abc", "numbers", "itertools", "operator",
})

#: torch names that create tensors or describe them, usable anywhere.
TORCH_ALLOWED = frozenset({
    "Tensor", "Size", "device", "dtype", "Generator", "no_grad", "inference_mode", "enable_grad", "empty",
    "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "tensor",
    "as_tensor", "is_tensor", "is_floating_point", "is_complex", "finfo", "iinfo", "get_default_dtype", "nn", "cuda",
    "strided", "channels_last", "contiguous_format", "preserve_format", "memory_format", "layout",
    "float32", "float", "float16", "half", "bfloat16", "float64", "double", "int8", "int16", "short", "int32", "int",
    "int64", "long", "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "cfloat", "complex128", "cdouble",
    "float8_e4m3fn", "float8_e5m2",
})
#: torch.nn names other than layer classes (which are allowed; calling them is checked at run time).
NN_ALLOWED = frozenset({"Module", "Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict",
                        "Sequential", "Buffer", "Identity", "init", "functional", "parameter", "modules"})
CUDA_ALLOWED = frozenset({
    "current_stream", "default_stream", "Stream", "ExternalStream", "Event", "stream", "StreamContext", "synchronize",
    "graph", "CUDAGraph", "graph_pool_handle", "is_available", "current_device", "device", "device_count",
    "get_device_properties", "get_device_capability", "get_device_name", "set_stream", "is_current_stream_capturing",
})
#: Python builtins that execute strings, walk frames or reach the interpreter's internals.
FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "open", "input",
                                "breakpoint", "memoryview", "help", "exit", "quit"})
FORBIDDEN_ATTRIBUTES = frozenset({
    "__dict__", "__class__", "__globals__", "__builtins__", "__subclasses__", "__bases__", "__base__", "__mro__",
    "__code__", "__closure__", "__func__", "__self__", "__getattribute__", "__setattr__", "__delattr__",
    "__import__", "__loader__", "__spec__", "__reduce__", "__reduce_ex__", "__torch_function__",
    "__torch_dispatch__", "f_back", "f_globals", "f_locals", "f_builtins", "gi_frame", "tb_frame", "cr_frame",
    "co_code", "_modules_to_patch",
})
REFLECTIVE_CALLS = frozenset({"getattr", "setattr", "delattr", "hasattr"})


class Findings:
    def __init__(self, file: str):
        self.file = file
        self.items: list[dict] = []

    def add(self, reason: str, node_or_line, message: str, rule: str) -> None:
        line = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", 0)
        self.items.append({"reason": reason, "file": self.file, "line": line, "rule": rule,
                           "message": f"{self.file} line {line}: {message}"})


class _PythonScanner(ast.NodeVisitor):
    """Resolves names bound to torch modules and checks every use."""

    def __init__(self, findings: Findings, tree: ast.AST):
        self.findings = findings
        self.aliases: dict[str, str] = {}
        self.function_stack: list[str] = []
        #: Names the file binds itself (parameters, variables, functions), which shadow builtins.
        self.bound_names = _bound_names(tree)

    # -- helpers -------------------------------------------------------------------
    def resolve(self, node) -> str | None:
        """The dotted torch path an expression names, if it names one."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def in_init(self) -> bool:
        return bool(self.function_stack) and self.function_stack[-1] == "__init__"

    def check_torch_path(self, path: str, node) -> None:
        parts = path.split(".")
        if parts[0] == "builtins":
            return
        if parts[0] != "torch" or len(parts) == 1:
            if parts[0] == "cuda_extension":
                return
            return
        head = parts[1]
        if head.startswith("_"):
            self.findings.add("forbidden_construct", node, f"{path} reaches torch's private internals.", "torch-private")
            return
        if head in ("ops",):
            self.findings.add("forbidden_operation", node,
                              f"{path}: torch.ops runs torch operators; implement the computation in cuda_extension.",
                              "torch-ops")
            return
        if head in ("compile", "jit", "fx", "export", "library", "backends", "utils", "autograd", "profiler",
                    "testing", "multiprocessing", "distributed", "overrides", "hub", "onnx", "set_num_threads",
                    "set_num_interop_threads", "set_default_dtype", "set_default_device", "set_float32_matmul_precision",
                    "set_flush_denormal", "use_deterministic_algorithms", "manual_seed", "seed", "set_rng_state",
                    "set_printoptions", "set_grad_enabled", "set_anomaly_enabled", "set_warn_always"):
            self.findings.add("forbidden_construct", node,
                              f"{path} is outside the candidate contract (no compilation, tracing, global settings,"
                              " profilers or harness utilities).", "torch-global")
            return
        if head == "nn":
            if len(parts) == 2:
                return
            sub = parts[2]
            if sub == "functional":
                if len(parts) > 3 and not self.in_init():
                    self.findings.add("forbidden_operation", node,
                                      f"{path} is torch compute; inside ModelNew only cuda_extension and tensor"
                                      " creation/metadata operations may run.", "torch-functional")
                return
            if sub[:1].isupper() or sub in NN_ALLOWED:
                return
            self.findings.add("forbidden_construct", node, f"{path} is not part of the candidate contract.", "torch-nn")
            return
        if head == "cuda":
            if len(parts) == 2 or parts[2] in CUDA_ALLOWED:
                return
            self.findings.add("forbidden_construct", node,
                              f"{path} is not allowed; streams, events, CUDA graphs and device queries are.",
                              "torch-cuda")
            return
        if head in TORCH_ALLOWED:
            return
        if self.in_init():
            return
        self.findings.add("forbidden_operation", node,
                          f"{path} is torch compute; inside ModelNew only cuda_extension and tensor creation/metadata"
                          " operations (torch.empty, zeros, ones, full, ... ) may run. Implement it in your kernels.",
                          "torch-compute")

    # -- imports ---------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            if name not in ALLOWED_MODULES:
                self._forbidden_import(node, name)
                continue
            if alias.asname:
                self.aliases[alias.asname] = name
            else:
                self.aliases[name.split(".")[0]] = name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.findings.add("forbidden_module", node, "relative imports are not allowed: the candidate is model_new.py"
                              " and the cuda_extension module only.", "import")
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if module not in ALLOWED_MODULES and full not in ALLOWED_MODULES:
                self._forbidden_import(node, module)
                return
            if alias.name == "*":
                self.findings.add("forbidden_construct", node, f"'from {module} import *' hides what is used.", "import")
                continue
            bound = alias.asname or alias.name
            if module.split(".")[0] == "torch":
                self.aliases[bound] = full
                self.check_torch_path(full, node)
            elif module == "cuda_extension":
                self.aliases[bound] = full

    def _forbidden_import(self, node, name: str) -> None:
        self.findings.add("forbidden_module", node,
                          f"imports {name}; model_new.py may import only torch (torch.nn, torch.nn.functional,"
                          " torch.cuda), cuda_extension and the standard modules math, typing, collections,"
                          " functools, dataclasses, enum, abc, numbers, itertools and operator.", "import")

    # -- definitions -------------------------------------------------------------------
    def visit_FunctionDef(self, node) -> None:
        if node.name == "__del__":
            self.findings.add("forbidden_construct", node, "__del__ runs code at unpredictable times; remove it.",
                              "finalizer")
        self.function_stack.append(node.name)
        self.generic_visit(node)
        self.function_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.resolve(base)
            if path in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"):
                self.findings.add("forbidden_construct", node,
                                  f"class {node.name} subclasses torch.Tensor; outputs must be plain tensors.",
                                  "tensor-subclass")
            elif isinstance(base, ast.Name) and base.id == "Model":
                self.findings.add("forbidden_construct", node,
                                  f"class {node.name} inherits from the reference Model; implement ModelNew itself.",
                                  "delegation")
        self.generic_visit(node)

    # -- statements ----------------------------------------------------------------------
    def visit_Try(self, node) -> None:
        if node.handlers:
            self.findings.add("forbidden_construct", node,
                              "try/except can hide a failing kernel behind a fallback; let errors propagate.",
                              "try-except")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _check_target(self, target) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            base = target.value if isinstance(target, ast.Subscript) else target
            path = self.resolve(base) if isinstance(base, ast.Attribute) else self.resolve(base)
            if path and path.split(".")[0] in ("torch", "cuda_extension", "builtins"):
                self.findings.add("forbidden_construct", target,
                                  f"assigns to {path}: replacing functions or settings of torch is not allowed.",
                                  "monkeypatch")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_target(element)

    def visit_Assign(self, node: ast.Assign) -> None:
        bound = self.resolve(node.value)
        for target in node.targets:
            self._check_target(target)
            if isinstance(target, ast.Name):
                if bound:
                    self.aliases[target.id] = bound
                else:
                    self.aliases.pop(target.id, None)
        self.generic_visit(node)

    def visit_AugAssign(self, node) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_Global(self, node) -> None:
        self.generic_visit(node)

    # -- expressions ---------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.findings.add("forbidden_construct", node,
                              f"accesses .{node.attr}, which reaches interpreter or harness internals.", "introspection")
        path = self.resolve(node)
        if path is not None and not isinstance(getattr(node, "_parent_attribute", None), ast.Attribute):
            self.check_torch_path(path, node)
        # Check the outermost chain only: mark inner attributes.
        inner = node.value
        while isinstance(inner, ast.Attribute):
            inner._parent_attribute = node
            inner = inner.value
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        path = self.aliases.get(node.id)
        if path and "." in path and path.split(".")[0] == "torch":
            self.check_torch_path(path, node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_BUILTINS and \
                node.func.id not in self.bound_names:
            self.findings.add("forbidden_construct", node,
                              f"calls {node.func.id}(), which runs code from strings, opens files or reaches"
                              " interpreter internals.", "builtin")
        if isinstance(node.func, ast.Name) and node.func.id in REFLECTIVE_CALLS:
            name_argument = node.args[1] if len(node.args) > 1 else None
            target = self.resolve(node.args[0]) if node.args else None
            on_self = bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
            if not (isinstance(name_argument, ast.Constant) and isinstance(name_argument.value, str)) and not on_self:
                self.findings.add("forbidden_construct", node,
                                  f"{node.func.id}() with a computed attribute name hides what is accessed; name"
                                  " attributes directly.", "reflection")
            elif target and target.split(".")[0] in ("torch", "cuda_extension"):
                if node.func.id in ("setattr", "delattr"):
                    self.findings.add("forbidden_construct", node,
                                      f"{node.func.id}() on {target} replaces functions or settings of torch.",
                                      "monkeypatch")
                else:
                    self.check_torch_path(f"{target}.{name_argument.value}", node)
        self.generic_visit(node)


def _bound_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def scan_python(source: str, file: str = "model_new.py", reference_source: str | None = None) -> list[dict]:
    findings = Findings(file)
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as error:
        findings.add("load_error", error.lineno or 0, f"syntax error: {error.msg}", "syntax")
        return findings.items
    _PythonScanner(findings, tree).visit(tree)
    model_new = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew"), None)
    if model_new is None:
        findings.add("interface_mismatch", 0, "defines no class ModelNew at module level.", "interface")
    elif reference_source:
        want = _init_parameters(reference_source, "Model")
        have = _init_parameters(source, "ModelNew")
        if want is not None and have is not None and want != have:
            findings.add("interface_mismatch", model_new,
                         f"ModelNew.__init__ takes ({', '.join(['self'] + have)}) but Model.__init__ takes"
                         f" ({', '.join(['self'] + want)}); keep Model's constructor signature and parameter names.",
                         "interface")
    return findings.items


def _init_parameters(source: str, class_name: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = item.args
                    names = [a.arg for a in arguments.posonlyargs + arguments.args][1:]
                    names += [a.arg for a in arguments.kwonlyargs]
                    return names
            return []
    return None


# -- C++ and CUDA sources -----------------------------------------------------------------

#: at::/torch::/c10:: names a candidate's C++ may use: tensors, their creation and metadata,
#: dtypes, devices, streams, guards, events and handles. Matched as prefixes of the full name.
CPP_ALLOWED = (
    "at::Tensor", "torch::Tensor", "at::TensorOptions", "torch::TensorOptions", "at::ScalarType", "torch::ScalarType",
    "c10::ScalarType", "at::Scalar", "torch::Scalar", "c10::Scalar", "at::IntArrayRef", "torch::IntArrayRef",
    "c10::IntArrayRef", "at::ArrayRef", "c10::ArrayRef", "at::Device", "torch::Device", "c10::Device",
    "at::DeviceType", "torch::DeviceType", "c10::DeviceType", "at::Layout", "torch::Layout", "at::MemoryFormat",
    "torch::MemoryFormat", "c10::MemoryFormat", "at::Half", "c10::Half", "at::BFloat16", "c10::BFloat16",
    "at::complex", "c10::complex", "c10::optional", "at::optional", "c10::nullopt", "at::nullopt", "c10::irange",
    "c10::Error", "c10::ValueError", "c10::IndexError", "c10::TypeError", "c10::NotImplementedError",
    "at::empty", "at::empty_like", "at::empty_strided", "at::zeros", "at::zeros_like", "at::ones", "at::ones_like",
    "at::full", "at::full_like", "at::from_blob", "at::scalar_tensor", "at::arange",
    "torch::empty", "torch::empty_like", "torch::empty_strided", "torch::zeros", "torch::zeros_like", "torch::ones",
    "torch::ones_like", "torch::full", "torch::full_like", "torch::from_blob", "torch::arange", "torch::tensor",
    "torch::dtype", "torch::device", "torch::requires_grad", "torch::layout", "at::device", "at::dtype",
    "at::cuda::getCurrentCUDAStream", "at::cuda::getDefaultCUDAStream", "at::cuda::getStreamFromPool",
    "at::cuda::getStreamFromExternal", "at::cuda::CUDAStream", "at::cuda::CUDAStreamGuard",
    "at::cuda::OptionalCUDAStreamGuard", "at::cuda::CUDAGuard", "at::cuda::OptionalCUDAGuard", "at::cuda::CUDAEvent",
    "at::cuda::getCurrentCUDABlasHandle", "at::cuda::getCurrentCUDABlasLtHandle", "at::cuda::getCurrentDeviceProperties",
    "at::cuda::getDeviceProperties", "at::cuda::warp_size", "at::cuda::getCurrentCUDASolverDnHandle",
    "at::native::getCudnnHandle", "at::cuda::CUDAGraph", "at::cuda::graph_pool_handle",
    "at::cuda::ATenCUDAGeneral",
    "c10::cuda::", "at::acc_type", "at::opmath_type", "at::ScalarTypeToCPPType", "c10::impl::ScalarTypeToCPPType",
    "at::kByte", "at::kChar", "at::kShort", "at::kInt", "at::kLong", "at::kHalf", "at::kFloat", "at::kDouble",
    "at::kBool", "at::kBFloat16", "at::kComplexFloat", "at::kComplexDouble", "at::kCUDA", "at::kCPU", "at::kStrided",
    "torch::k", "c10::k", "at::elementSize", "c10::elementSize", "at::toString", "c10::toString",
    "at::isFloatingType", "c10::isFloatingType", "at::isComplexType", "at::isReducedFloatingType",
    "at::TensorArg", "at::checkAllSameGPU", "at::checkSameType", "at::CheckedFrom",
)
CPP_FORBIDDEN = [
    (re.compile(r"\bstd\s*::\s*(thread|jthread|async)\b"), "forbidden_construct",
     "starts a thread; forward must finish all its work before it returns"),
    (re.compile(r"(?<![.>\w])(pthread_create|fork|vfork|posix_spawnp?|clone|system|popen|execv|execvp|execve|execl|"
                r"execlp)\s*\("),
     "forbidden_construct", "starts a thread or a process, or runs a command"),
    (re.compile(r"#\s*include\s*<\s*(thread|future|pthread\.h|dlfcn\.h|sys/ptrace\.h|pybind11/embed\.h|spawn\.h)\s*>"),
     "forbidden_construct", "includes a header for threads, processes, dynamic loading, tracing or an embedded"
                            " interpreter"),
    (re.compile(r"\b(dlopen|dlsym|ptrace|mprotect|process_vm_writev|process_vm_readv)\b"), "forbidden_construct",
     "loads code or touches other memory at run time"),
    (re.compile(r"/proc/"), "forbidden_construct", "reads or writes /proc"),
    (re.compile(r"\b(Py[A-Z][A-Za-z]*_[A-Za-z]+|Py_[A-Za-z]+)\s*\("), "forbidden_construct",
     "calls the Python C API; the extension must only compute"),
    (re.compile(r"\b(py|pybind11)\s*::\s*(module_?\s*::\s*import|exec|eval|eval_file|globals)\b"),
     "forbidden_construct", "imports Python modules or runs Python code from C++"),
    (re.compile(r"\b(DispatchKey|DispatchKeySet|redispatch|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|"
                r"AutoDispatchBelow\w*|TorchDispatchModeTLS|PythonTorchFunctionTLS|PythonDispatcher\w*|"
                r"impl\s*::\s*tls_\w+)\b"),
     "forbidden_construct", "manipulates torch's dispatcher, which would hide operators from the evaluation"),
    (re.compile(r"\bat\s*::\s*(native\s*::\s*(?!getCudnnHandle\b)|_ops\b)|\bc10\s*::\s*impl\s*::\s*(?!ScalarTypeToCPPType)"), "forbidden_construct",
     "calls torch's internal operator implementations"),
    (re.compile(r"\b(cudaCtxResetPersistingL2Cache|cudaLimitPersistingL2CacheSize|accessPolicyWindow|"
                r"cudaStreamAttributeAccessPolicyWindow|cudaKernelNodeAttributeAccessPolicyWindow|"
                r"cudaDeviceReset|cudaDeviceSetLimit|cudaDeviceSetCacheConfig)\b"),
     "forbidden_construct", "changes device-wide state (persisting L2 cache, limits, reset)"),
    (re.compile(r"(?<![.>\w])(getenv|setenv|putenv|unsetenv|fopen|freopen|socket|connect)\s*\(|\bstd\s*::\s*[io]?fstream\b"),
     "forbidden_construct", "reads the environment or files, or opens connections"),
    (re.compile(r"##"), "forbidden_construct", "token pasting can assemble names the scan would otherwise see"),
    (re.compile(r"\bglobalContext\s*\("), "forbidden_construct", "changes torch's global settings"),
]
_QUALIFIED = re.compile(r"\b(at|torch|c10)\s*::\s*((?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)")


def strip_cpp(text: str) -> str:
    """Removes comments and string and character literals, keeping line breaks."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            chunk = text[i: n if end < 0 else end + 2]
            out.append("\n" * chunk.count("\n"))
            i = n if end < 0 else end + 2
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:i + 24]) if c in 'RuUL' else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            closing = ")" + raw.group(1) + '"'
            end = text.find(closing, i + raw.end())
            chunk = text[i: n if end < 0 else end + len(closing)]
            out.append('""' + "\n" * chunk.count("\n"))
            i = n if end < 0 else end + len(closing)
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def scan_cpp(source: str, file: str, allow_cublas: bool = True, allow_cudnn: bool = True) -> list[dict]:
    findings = Findings(file)
    code = strip_cpp(source)
    lines = code.split("\n")
    for number, line in enumerate(lines, start=1):
        for pattern, reason, why in CPP_FORBIDDEN:
            match = pattern.search(line)
            if match:
                findings.add(reason, number, f"'{match.group(0).strip()}' {why}.", "cpp-construct")
        for match in _QUALIFIED.finditer(line):
            name = re.sub(r"\s+", "", match.group(0))
            if any(name == allowed or name.startswith(allowed + "::") or
                   (allowed.endswith("::") and name.startswith(allowed)) or
                   (allowed in ("torch::k", "c10::k") and re.match(re.escape(allowed) + r"[A-Z]", name))
                   for allowed in CPP_ALLOWED):
                continue
            findings.add("forbidden_operation", number,
                         f"{name} is torch's own computation or internals; the extension may use torch only to"
                         " create tensors, read their metadata and get streams, guards and library handles."
                         " Write the computation as your own kernels (cuBLAS/cuDNN called directly are allowed).",
                         "cpp-torch")
        if not allow_cublas and re.search(r"\bcublas\w*", line):
            findings.add("forbidden_module", number, "cuBLAS is not allowed by this evaluation's policy.", "library")
        if not allow_cudnn and re.search(r"\bcudnn\w*", line):
            findings.add("forbidden_module", number, "cuDNN is not allowed by this evaluation's policy.", "library")
    return findings.items


CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".hh", ".inl")


@handler("scan")
def scan(args: dict, context) -> dict:
    """Args: files {relative path: text}, reference_source, policy {allow_cublas, allow_cudnn}."""
    policy = args.get("policy") or {}
    files = args.get("files") or {}
    findings: list[dict] = []
    if "model_new.py" not in files:
        findings.append({"reason": "interface_mismatch", "file": "model_new.py", "line": 0, "rule": "interface",
                         "message": "the candidate has no model_new.py"})
    for path, text in sorted(files.items()):
        if path == "model_new.py":
            findings += scan_python(text, path, args.get("reference_source"))
        elif path.endswith(".py"):
            findings.append({"reason": "forbidden_module", "file": path, "line": 0, "rule": "files",
                             "message": f"{path}: the candidate consists of model_new.py and kernels/; other Python"
                                        " files are not used."})
        elif path.endswith(CPP_SUFFIXES):
            findings += scan_cpp(text, path, bool(policy.get("allow_cublas", True)), bool(policy.get("allow_cudnn", True)))
    unique, seen = [], set()
    for finding in findings:
        key = (finding["file"], finding["line"], finding["rule"], finding["reason"])
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return {"findings": unique, "files": sorted(files)}
