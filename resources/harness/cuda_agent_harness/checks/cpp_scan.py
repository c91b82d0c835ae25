# SPDX-License-Identifier: Apache-2.0
"""The static check of a candidate's C++ and CUDA sources, on their text alone.

The text is first brought to what the compiler's tokenizer sees: backslash-newline
continuations joined (a name split over two lines is one name), the ``%:`` digraphs
spelled as ``#``, comments and string literals blanked out (so that they never trigger a
rule). Rules then run over the whole text, so that a qualified name broken over lines is
still seen; each finding carries the line of the original file.

This is the first and fastest message, not the boundary: what the built module links is
checked symbol by symbol afterwards (include/cuda_agent/verify/link_policy.hpp), and that
check sees every call however the source spells it. The rules here aim at the spellings
that hide a call from a reader: ``using`` directives and namespace aliases of torch's
namespaces, functions taken by their address, headers named through macros, inline
assembly in host code and raw system calls."""

from __future__ import annotations

import bisect
import posixpath
import re

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

#: Functions with no other meaning: any use of the name (a call, its address, a pointer
#: to it) is a finding.
_UNAMBIGUOUS_FUNCTIONS = (
    "pthread_create", "pthread_detach", "pthread_join", "thrd_create", "posix_spawn", "posix_spawnp", "vfork",
    "execv", "execvp", "execvpe", "execve", "execl", "execlp", "execle", "fexecve", "popen", "dlopen", "dlmopen",
    "dlsym", "dlvsym", "getenv", "secure_getenv", "setenv", "putenv", "unsetenv", "syscall", "ptrace", "mprotect",
    "process_vm_writev", "process_vm_readv", "fopen", "freopen", "cudaLaunchHostFunc", "cudaStreamAddCallback",
    "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion", "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuLaunchHostFunc", "cuStreamAddCallback",
)
#: Names that are also ordinary words: a call or the address of one is a finding.
_CALLED_FUNCTIONS = ("fork", "clone", "system", "socket", "connect", "open", "openat", "creat")

#: Headers for threads, processes, dynamic loading, tracing, system calls, files, sockets
#: or an embedded interpreter, however they are named (a macro can hold the name).
_FORBIDDEN_HEADERS = (
    "thread", "future", "pthread.h", "dlfcn.h", "sys/ptrace.h", "pybind11/embed.h", "spawn.h", "sys/syscall.h",
    "syscall.h", "asm/unistd.h", "sys/mman.h", "sys/socket.h", "fcntl.h", "link.h", "omp.h", "fstream", "filesystem",
    "sys/wait.h", "sys/prctl.h", "ucontext.h", "setjmp.h", "csetjmp", "threads.h", "elf.h", "sys/auxv.h",
)
_HEADER_ALTERNATIVES = "|".join(re.escape(name) for name in _FORBIDDEN_HEADERS)
_TORCH_NAMESPACES = r"(?:at|torch|c10|caffe2|aten)"
_TORCH_AND_PYBIND = r"(?:at|torch|c10|caffe2|aten|py|pybind11)"

#: The pybind11 names a binding needs: argument names and defaults, the GIL guards, return
#: policies, overload selection, the module a helper adds functions to, and the exceptions
#: that become Python's ValueError, IndexError, TypeError and KeyError.
_PYBIND11_ALLOWED = (
    "arg", "arg_v", "none", "call_guard", "gil_scoped_release", "gil_scoped_acquire", "return_value_policy",
    "overload_cast", "kw_only", "pos_only", "module_", "value_error", "index_error", "type_error", "key_error",
)
#: pybind11's free functions on Python objects (attributes, casts, evaluation), which
#: argument-dependent lookup finds unqualified.
_PYBIND11_FUNCTIONS = (
    "getattr", "setattr", "hasattr", "delattr", "isinstance", "reinterpret_borrow", "reinterpret_steal", "globals",
    "eval", "exec", "eval_file", "cast", "len", "iter", "repr", "print",
)

#: (pattern, reason, why) over the whole prepared text.
CPP_FORBIDDEN = [
    (re.compile(r"\bstd\s*::\s*(?:__\w+\s*::\s*)?(thread|jthread|async)\b"), "forbidden_construct",
     "starts a thread; forward must finish all its work before it returns"),
    (re.compile(r"(?<![.>\w])(?:::\s*)?(" + "|".join(_UNAMBIGUOUS_FUNCTIONS) + r")\b"), "forbidden_construct",
     "names a function that starts threads or processes, loads code, reads the environment or files, makes raw"
     " system calls or runs host code from a stream (calling it, or taking its address, is the same)"),
    (re.compile(r"(?:(?<![.>\w:])(" + "|".join(_CALLED_FUNCTIONS) + r")\s*\(|&\s*(?:::\s*)?(" +
                "|".join(_CALLED_FUNCTIONS) + r")\b)"),
     "forbidden_construct", "starts a process, runs a command or opens files or connections"),
    (re.compile(r"#\s*include\s*[<\"]\s*(?:[\w./]*/)?(" + _HEADER_ALTERNATIVES + r")\s*[>\"]|<\s*(" + _HEADER_ALTERNATIVES +
                r")\s*>"),
     "forbidden_construct", "includes a header for threads, processes, dynamic loading, tracing, system calls, files"
                            " or an embedded interpreter"),
    (re.compile(r"/proc/"), "forbidden_construct", "reads or writes /proc"),
    (re.compile(r"\b(SYS_\w+|__NR_\w+)\b"), "forbidden_construct", "names a raw system call"),
    (re.compile(r"\b(Py[A-Z][A-Za-z]*_\w+|Py_(?!ssize_t\b|hash_t\b|buffer\b)\w+|_Py\w+)\b"), "forbidden_construct",
     "uses the Python C API; the extension must only compute"),
    (re.compile(r"\b(py|pybind11)\s*::\s*(module_?\s*::\s*import|exec|eval|eval_file|globals)\b|"
                r"(?<![\w:])module_?\s*::\s*import\b"),
     "forbidden_construct", "imports Python modules or runs Python code from C++"),
    (re.compile(r"(?:\.|->)\s*attr\s*\("), "forbidden_construct",
     "reaches Python attributes from C++ (and with them any Python code); the extension must only compute"),
    (re.compile(r"\b(DispatchKey|DispatchKeySet|redispatch|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|"
                r"AutoDispatchBelow\w*|TorchDispatchModeTLS|PythonTorchFunctionTLS|PythonDispatcher\w*|"
                r"impl\s*::\s*tls_\w+|tls_set_dispatch_key_\w+|tls_local_dispatch_key_set|"
                r"_force_tls_local_dispatch_key_set|parseDispatchKey)\b"),
     "forbidden_construct", "manipulates torch's dispatcher, which would hide operators from the evaluation"),
    (re.compile(r"\bat\s*::\s*(native\s*::\s*(?!getCudnnHandle\b)|_ops\b)|\bc10\s*::\s*impl\s*::\s*(?!ScalarTypeToCPPType)"),
     "forbidden_construct", "calls torch's internal operator implementations"),
    (re.compile(r"\busing\s+namespace\s+(?:::\s*)?" + _TORCH_NAMESPACES + r"\b[\w:\s]*"), "forbidden_construct",
     "brings a torch namespace into scope, so that unqualified calls (relu(x), cpu::relu(x)) escape this check;"
     " qualify what you use (torch::empty, at::Tensor)"),
    (re.compile(r"\bnamespace\s+\w+\s*=\s*(?:::\s*)?" + _TORCH_NAMESPACES + r"\b[\w:\s]*"), "forbidden_construct",
     "gives a torch namespace another name, so that its functions escape this check; qualify what you use"),
    (re.compile(r"\bnamespace\s+" + _TORCH_NAMESPACES + r"\s*(?:::\s*\w+\s*)*\{"), "forbidden_construct",
     "reopens a torch namespace, where unqualified names are torch's own; put your code in your own namespace"),
    (re.compile(r"\b(cudaCtxResetPersistingL2Cache|cudaLimitPersistingL2CacheSize|accessPolicyWindow|"
                r"cudaStreamAttributeAccessPolicyWindow|cudaKernelNodeAttributeAccessPolicyWindow|"
                r"cudaLaunchAttributeAccessPolicyWindow|cudaDeviceReset|cudaDeviceSetLimit|cudaDeviceSetCacheConfig|"
                r"cudaStreamSetAttribute|cudaThreadExit)\b"),
     "forbidden_construct", "changes device-wide state (persisting L2 cache, limits, reset)"),
    (re.compile(r"(?<![.>\w])(secure_getenv|getenv|setenv|putenv|unsetenv|fopen|freopen|socket|connect)\s*\(|"
                r"\bstd\s*::\s*(?:__\w+\s*::\s*)?[io]?fstream\b|\bstd\s*::\s*(?:__\w+\s*::\s*)?filesystem\b"),
     "forbidden_construct", "reads the environment or files, or opens connections"),
    (re.compile(r"##|%:%:"), "forbidden_construct", "token pasting can assemble names the scan would otherwise see"),
    (re.compile(r"#\s*(?:define|undef)\s+(__device__|__global__|__host__|__CUDA_ARCH__|__forceinline__|__noinline__|"
                r"__CUDACC__|asm|__asm__|__asm)\b"),
     "forbidden_construct", "redefines a CUDA keyword or macro, which would make host code look like device code"),
    (re.compile(r"\bglobalContext\s*\("), "forbidden_construct", "changes torch's global settings"),
    (re.compile(r"#\s*define\s+\w+(?:\([^)]*\))?\s+(?:::\s*)?" + _TORCH_AND_PYBIND + r"\b"), "forbidden_construct",
     "hides a torch or pybind11 namespace behind a macro, where this check cannot follow it"),
    # Python objects in C++: a handle on any Python object reaches every module through its
    # attributes (a tensor's class, its methods' globals, builtins), and pybind11 spells those
    # lookups as free functions (found by argument-dependent lookup, so unqualified too).
    (re.compile(r"\b(?:py|pybind11)\s*::\s*(?!(?:" + "|".join(_PYBIND11_ALLOWED) + r")\b)(\w+)"),
     "forbidden_construct", "handles Python objects in C++, and through them any Python code; a binding takes and"
                            " returns tensors and numbers, and its only pybind11 names are " +
                            ", ".join("py::" + name for name in _PYBIND11_ALLOWED)),
    (re.compile(r"(?<![\w.>:])(?:::\s*)?(" + "|".join(_PYBIND11_FUNCTIONS) + r")\s*[<(]|(?:\.|->)\s*ptr\s*\(\s*\)"),
     "forbidden_construct", "reaches Python objects or their raw pointers from C++; the extension must only compute"),
    (re.compile(r"\busing\s+namespace\s+(?:::\s*)?pybind11\b|\bnamespace\s+(?!py\s*=)\w+\s*=\s*(?:::\s*)?pybind11\b"),
     "forbidden_construct", "brings pybind11's names into scope under other spellings; write py:: (namespace py ="
                            " pybind11)"),
    (re.compile(r"\bTHP\w+"), "forbidden_construct", "uses torch's Python bindings from C++"),
    # Functions by their address: pointer arithmetic from one reaches any function of the
    # same library without naming it, and a call through a pointer escapes every check.
    (re.compile(r"\(\s*(?:\w+\s*::\s*)*\*\s*(?:const\s+)?\w*\s*\)\s*\("), "forbidden_construct",
     "declares a pointer to a function; call your functions by their names"),
    (re.compile(r"&\s*(?:::\s*)?" + _TORCH_AND_PYBIND + r"\s*::"), "forbidden_construct",
     "takes the address of a torch or pybind11 function"),
    (re.compile(r"\b(?:decltype|typeid)\s*\(\s*&?\s*(?:::\s*)?" + _TORCH_AND_PYBIND + r"\s*::|\badd_pointer(?:_t)?\b"),
     "forbidden_construct", "takes the type of a torch or pybind11 function, as a pointer to it would need"),
    (re.compile(r"\busing\s+(?:::\s*)?" + _TORCH_NAMESPACES + r"\s*::"), "forbidden_construct",
     "brings a torch name into scope unqualified, where this check cannot follow it; qualify what you use"),
    (re.compile(r"\b(?:at|torch|c10)\s*::\s*(?:\w+\s*::\s*)*(?!k[A-Z]|nullopt\b)([a-z]\w*)\b(?!\s*(?:[(<]|::))"),
     "forbidden_construct", "names a torch function without calling it, which takes its address; call it, or"
                            " write the computation yourself"),
    # The loaded program's own ELF structures: from them, code finds any function of any
    # library in the process (torch's kernels, BLAS, the interpreter) without linking it.
    (re.compile(r"\b(__ehdr_start|__executable_start|_DYNAMIC|_GLOBAL_OFFSET_TABLE_|Elf(?:32|64)_\w+|ElfW|"
                r"dl_iterate_phdr|dl_phdr_info|link_map|r_debug|getauxval|"
                r"PT_(?:LOAD|DYNAMIC|PHDR|INTERP|NOTE|TLS|GNU_\w+)|"
                r"DT_(?:NULL|NEEDED|PLTRELSZ|PLTGOT|HASH|GNU_HASH|STRTAB|SYMTAB|RELA|RELASZ|RELAENT|STRSZ|SYMENT|"
                r"JMPREL|VERSYM|REL|RELSZ|DEBUG)|0[xX](?:464[cC]457[fF]|7[fF]454[cC]46)[uUlL]*)\b"),
     "forbidden_construct", "reads the loaded program's ELF structures, from which code finds functions it does not"
                            " link; call what you use directly"),
    # Declarations under another symbol's name: a harmless-looking function that is in fact
    # one the link check refuses, or the definition of a library's own function.
    (re.compile(r"#\s*pragma\s+(?:redefine_extname|weak)\b|"
                r"__attribute__\s*\(\(\s*(?:__)?(?:alias|weakref|ifunc|weak)(?:__)?\b|"
                r"\[\[\s*(?:gnu|__gnu__)\s*::\s*(?:__)?(?:alias|weakref|ifunc|weak)(?:__)?\b"),
     "forbidden_construct", "declares or defines a function under another symbol's name (pragmas, aliases, weak"
                            " symbols), which hides what the module calls or replaces a library's function"),
]
_QUALIFIED = re.compile(r"\b(at|torch|c10)\s*::\s*((?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)")
_INLINE_ASSEMBLY = re.compile(r"\b(asm|__asm__|__asm)\b")
_USING_STD = re.compile(r"\busing\s+namespace\s+(?:::\s*)?std\s*;")
_STD_ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*(?:::\s*)?std\s*;")
_DEVICE_KEYWORD = re.compile(r"\b(__device__|__global__)\b")
_CUDA_ARCH_IF = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$", re.M)
CUDA_SUFFIXES = (".cu", ".cuh")
#: Files nvcc may compile (headers can be included by a .cu file): device code is told
#: apart there. .cpp files go to the host compiler, where nothing is device code.
_DEVICE_CAPABLE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".inl")
_HOST_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


def _join_continuations(text: str) -> tuple[str, list[int]]:
    """The text with backslash-newlines removed (translation phase 2), and the offsets in
    it where each original line starts (for line numbers)."""
    pieces: list[str] = []
    starts = [0]  # joined offset of the start of each original line
    length = 0
    position = 0
    for match in re.finditer(r"\\[ \t]*\r?\n|\n", text):
        piece = text[position:match.start()]
        if match.group(0) == "\n":
            piece += "\n"
        pieces.append(piece)
        length += len(piece)
        starts.append(length)
        position = match.end()
    pieces.append(text[position:])
    return "".join(pieces), starts


def _blank_cpp(text: str, literals: list[tuple[int, int]] | None = None) -> str:
    """``text`` with comments and the contents of string and character literals replaced by
    spaces (line breaks kept), so that every offset still points where it pointed. The
    literals' spans are added to ``literals`` when given."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    def in_include(at: int) -> bool:
        line_start = text.rfind("\n", 0, at) + 1
        return re.fullmatch(r"\s*(?:#|%:)\s*include\s*", "".join(out[line_start:at])) is not None

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', text[i:i + 24]) if c in 'RuUL' else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            closing = ")" + raw.group(1) + '"'
            end = text.find(closing, i + raw.end())
            end = n if end < 0 else end + len(closing)
            if literals is not None:
                literals.append((i + raw.end(), max(i + raw.end(), end - len(closing))))
            blank(i, end)
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if not (c == '"' and in_include(i)):  # a header's name stays readable
                if literals is not None:
                    literals.append((i + 1, j))
                blank(i + 1, j)
            i = j + 1
            continue
        i += 1
    return "".join(out)


def _prepare(source: str) -> tuple[str, str, list[int], list[tuple[int, int]]]:
    """(the joined text, the same with comments and literals blanked and digraphs spelled
    out, where each original line starts in them, the spans of the literals' contents)."""
    joined, starts = _join_continuations(source)
    literals: list[tuple[int, int]] = []
    code = _blank_cpp(joined, literals).replace("%:%:", "##  ").replace("%:", "# ")
    return joined, code, starts, literals


#: What names a symbol in a string literal: a mangled C++ name, the Python C API, BLAS and
#: LAPACK routines, OpenMP's runtime, threads, dynamic loading, driver lookups, ELF's magic.
_NAMED_SYMBOL = re.compile(
    r"(?<![A-Za-z0-9])_Z[A-Za-z0-9_]{4,}|\b(?:Py[A-Z]\w*_\w+|_Py\w+|Py_\w+)|"
    r"\b(?:[sdcz](?:gemm|gemv|gemm3m|scal|axpy|dot[cu]?|nrm2|asum|copy|swap|rotg?|trsm|trmm|trsv|symm|symv|syrk|"
    r"syr2k|ger[cu]?)|i[sdcz]amax)_?\b|\b(?:cblas|mkl|openblas|GOMP|omp|kmp|pthread|dl(?:sym|vsym|open|mopen)|"
    r"cuGetProcAddress|cudaGetDriverEntryPoint)\w*|\\(?:x7[fF]|177)ELF|redefine_extname")


def _macro_definitions(code: str) -> dict[str, tuple[list[str] | None, str]]:
    """The file's ``#define``s: name -> (parameters, or None for an object-like macro; body)."""
    macros: dict[str, tuple[list[str] | None, str]] = {}
    for match in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?(.*)$", code, re.M):
        parameters = None
        if match.group(2) is not None:
            parameters = [part.strip() for part in match.group(2)[1:-1].split(",") if part.strip()]
        macros[match.group(1)] = (parameters, match.group(3).strip())
    return macros


def _split_arguments(text: str, start: int) -> tuple[list[str], int] | None:
    """The comma-separated arguments of the parenthesis opening at ``start`` and the offset
    after its closing one; None when it does not close on this line."""
    depth, current, arguments = 0, [], []
    for position in range(start, len(text)):
        character = text[position]
        if character == "(":
            depth += 1
            if depth == 1:
                continue
        elif character == ")":
            depth -= 1
            if depth == 0:
                arguments.append("".join(current).strip())
                return arguments, position + 1
        elif character == "," and depth == 1:
            arguments.append("".join(current).strip())
            current = []
            continue
        current.append(character)
    return None


def _expanded_lines(code: str, passes: int = 8) -> list[tuple[int, str]]:
    """(offset, text) of each line of ``code`` (comments and literals blanked) that uses one
    of the file's own macros, with those macros expanded: a rescan of the result expands
    what the expansion produced, up to ``passes`` times."""
    macros = _macro_definitions(code)
    if not macros:
        return []
    name = re.compile(r"\b(" + "|".join(re.escape(each) for each in macros) + r")\b")
    expanded_lines = []
    offset = 0
    for line in code.split("\n"):
        start, offset = offset, offset + len(line) + 1
        if re.match(r"[ \t]*#[ \t]*define\b", line) or not name.search(line):
            continue
        text = line
        for _ in range(passes):
            out, position, changed = [], 0, False
            for match in name.finditer(text):
                if match.start() < position:
                    continue
                parameters, body = macros[match.group(1)]
                end = match.end()
                if parameters is not None:
                    opening = re.match(r"\s*\(", text[end:])
                    split = _split_arguments(text, end + opening.end() - 1) if opening else None
                    if split is None:
                        continue
                    arguments, end = split
                    replacement = {param: arg for param, arg in zip(parameters, arguments)}
                    body = re.sub(r"\b(" + "|".join(re.escape(p) for p in parameters) + r")\b",
                                  lambda m: replacement.get(m.group(1), m.group(1)), body) if parameters else body
                out.append(text[position:match.start()])
                out.append(" " + body + " ")
                position, changed = end, True
            out.append(text[position:])
            text = "".join(out)
            if not changed:
                break
        expanded_lines.append((start, text))
    return expanded_lines


def strip_cpp(text: str) -> str:
    """Removes comments and the contents of string and character literals, keeping line
    breaks; continuations are joined first, as the compiler does."""
    return _prepare(text)[1]


def _matching_brace(code: str, opening: int) -> int:
    depth = 0
    for k in range(opening, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


_ARCH_TEST = r"(?:defined\s*\(\s*__CUDA_ARCH__\s*\)|defined\s+__CUDA_ARCH__|__CUDA_ARCH__\s*(>=|>)\s*(\d+))"
_DEVICE_ONLY_IF = re.compile(r"\s*(?:" + _ARCH_TEST + r"|\(\s*" + _ARCH_TEST + r"\s*\))\s*(?:&&.*)?")
_HOST_ONLY_IF = re.compile(r"\s*!\s*(?:defined\s*\(\s*__CUDA_ARCH__\s*\)|defined\s+__CUDA_ARCH__)\s*")


def _arch_condition(keyword: str, rest: str) -> tuple[bool, bool]:
    """(whether the condition holds exactly on the host, whether it holds only on the
    device) for ``#<keyword> <rest>``. Only the usual spellings count; anything else on
    ``__CUDA_ARCH__`` (``#if !__CUDA_ARCH__``, ``>= 0``, ``||``) may hold on the host, where
    the macro is 0, and is host code."""
    rest = rest.strip()
    if keyword == "ifdef":
        return False, rest == "__CUDA_ARCH__"
    if keyword == "ifndef":
        return rest == "__CUDA_ARCH__", False
    if _HOST_ONLY_IF.fullmatch(rest):
        return True, False
    match = _DEVICE_ONLY_IF.fullmatch(rest)
    if not match or "||" in rest:
        return False, False
    operator, bound = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    # On the host the macro is 0: ">= 0" and "> -1" would hold there.
    return False, operator is None or int(bound) >= (1 if operator == ">=" else 0)


def device_ranges(code: str) -> list[tuple[int, int]]:
    """Offsets of CUDA device code: the bodies of functions (and lambdas) declared
    ``__device__`` or ``__global__`` but not ``__host__``, and the branches of
    ``#if``/``#ifdef`` on ``__CUDA_ARCH__`` (compiled for the device only)."""
    ranges: list[tuple[int, int]] = []
    for match in _DEVICE_KEYWORD.finditer(code):
        if re.match(r"[ \t]*#", code[code.rfind("\n", 0, match.start()) + 1:]):
            continue  # in a directive (a macro holding the keyword): no function here
        # The declaration runs to its body ('{') or its end (';'); a function has a '('.
        k, parentheses, seen_parameters = match.end(), 0, False
        while k < len(code):
            ch = code[k]
            if ch == "(":
                parentheses += 1
                seen_parameters = True
            elif ch == ")":
                parentheses -= 1
            elif parentheses == 0 and ch in ";}":
                break
            elif parentheses == 0 and ch == "{":
                break
            k += 1
        if k >= len(code) or code[k] != "{" or not seen_parameters:
            continue
        declaration_start = max(code.rfind(";", 0, match.start()), code.rfind("}", 0, match.start()),
                                code.rfind("{", 0, match.start()), code.rfind("\n#", 0, match.start()))
        if re.search(r"\b__host__\b", code[declaration_start + 1:k]):
            continue
        ranges.append((k, _matching_brace(code, k)))
    # Preprocessor branches on __CUDA_ARCH__: "#if(def) __CUDA_ARCH__" up to its #else,
    # #elif or #endif, and "#ifndef __CUDA_ARCH__ ... #else" from the #else on.
    stack: list[list] = []  # [kind, device_start or None]
    for directive in _CUDA_ARCH_IF.finditer(code):
        keyword, rest = directive.group(1), directive.group(2)
        on_arch = "__CUDA_ARCH__" in rest
        if keyword in ("if", "ifdef", "ifndef"):
            negated, device_branch = _arch_condition(keyword, rest)
            stack.append([negated, directive.end() if device_branch else None])
        elif keyword in ("elif", "else") and stack:
            negated_if, start = stack[-1]
            if start is not None:
                ranges.append((start, directive.start()))
                stack[-1][1] = None
            elif negated_if and keyword == "else":
                stack[-1][1] = directive.end()
            stack[-1][0] = False
        elif keyword == "endif" and stack:
            _, start = stack.pop()
            if start is not None:
                ranges.append((start, directive.start()))
    return ranges


def _finding(file: str, line: int, reason: str, message: str, rule: str) -> dict:
    return {"reason": reason, "file": file, "line": line, "rule": rule, "message": f"{file} line {line}: {message}"}


def _shown(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def host_compiled_files(files: dict[str, str]) -> set[str]:
    """The files the host compiler sees: C++ files and every file they include, however
    deep (a header with ``__device__`` functions included from a .cpp file is host code:
    there the CUDA keywords expand to nothing). When a C++ file names a header through a
    macro, every file counts."""
    names = sorted(files)
    host = {name for name in names if name.endswith(_HOST_SUFFIXES)}
    pending = list(host)
    while pending:
        current = pending.pop()
        code = strip_cpp(files[current])
        for directive in re.finditer(r"^[ \t]*#[ \t]*include\b(.*)$", code, re.M):
            quoted = re.match(r'\s*"([^"]+)"', directive.group(1))
            if not quoted:
                if not re.match(r"\s*<", directive.group(1)):
                    return set(names)
                continue
            wanted = posixpath.normpath(posixpath.join(posixpath.dirname(current), quoted.group(1)))
            for name in names:
                if name not in host and (name == wanted or name.endswith("/" + quoted.group(1).lstrip("./"))):
                    host.add(name)
                    pending.append(name)
    return host


def scan_cpp(source: str, file: str, allow_cublas: bool = True, allow_cudnn: bool = True,
             host_compiled: bool | None = None) -> list[dict]:
    """Findings in one C++ or CUDA file. ``host_compiled``: whether the host compiler sees
    the file (``host_compiled_files``); by default, what its suffix says."""
    joined, code, starts, literals = _prepare(source)
    if host_compiled is None:
        host_compiled = not file.endswith(_DEVICE_CAPABLE_SUFFIXES)

    def line_of(offset: int) -> int:
        return bisect.bisect_right(starts, offset)

    found: list[tuple[int, int, int, dict]] = []  # (line, phase, rule index, finding)

    def add(offset: int, phase: int, index: int, reason: str, message: str, rule: str) -> None:
        line = line_of(offset)
        found.append((line, phase, index, _finding(file, line, reason, message, rule)))

    for index, (pattern, reason, why) in enumerate(CPP_FORBIDDEN):
        for match in pattern.finditer(code):
            shown = _shown(match.group(0))
            if shown.startswith("#") and "include" in shown:
                # The header's name is a literal when quoted: read it from the unblanked text.
                shown = _shown(joined[match.start():match.end()])
            add(match.start(), 0, index, reason, f"'{shown}' {why}.", "cpp-construct")

    # std's thread names, unqualified under `using namespace std` or through an alias of std.
    std_names = [re.escape(alias) for alias in _STD_ALIAS.findall(code)]
    thread_uses = []
    if _USING_STD.search(code):
        thread_uses.append(re.compile(r"(?<![\w.>:])(thread|jthread)\b(?!\s*::\s*(id|hardware_concurrency)\b)|"
                                      r"(?<![\w.>:])async\s*\("))
    if std_names:
        thread_uses.append(re.compile(r"\b(?:" + "|".join(std_names) + r")\s*::\s*(?:__\w+\s*::\s*)?(thread|jthread|async)\b"))
    for pattern in thread_uses:
        for match in pattern.finditer(code):
            add(match.start(), 0, len(CPP_FORBIDDEN), "forbidden_construct",
                f"'{_shown(match.group(0))}' starts a thread (std's names are in scope here); forward must finish"
                " all its work before it returns.", "cpp-construct")

    # Inline assembly: PTX in device code is how fast kernels use tensor cores and async
    # copies; in host code it can make system calls no symbol shows.
    device = [] if host_compiled else device_ranges(code)
    for match in _INLINE_ASSEMBLY.finditer(code):
        if any(start <= match.start() < end for start, end in device):
            continue
        where = "in a file the host compiler sees" if host_compiled else "in host code"
        add(match.start(), 0, len(CPP_FORBIDDEN) + 1, "forbidden_construct",
            f"'{match.group(0)}' is inline assembly {where}, which can make system calls that no symbol shows; inline"
            " PTX belongs in __device__ or __global__ functions.", "cpp-asm")

    for match in _QUALIFIED.finditer(code):
        name = re.sub(r"\s+", "", match.group(0))
        if any(name == allowed or name.startswith(allowed + "::") or
               (allowed.endswith("::") and name.startswith(allowed)) or
               (allowed in ("torch::k", "c10::k") and re.match(re.escape(allowed) + r"[A-Z]", name))
               for allowed in CPP_ALLOWED):
            continue
        add(match.start(), 1, 0, "forbidden_operation",
            f"{name} is torch's own computation or internals; the extension may use torch only to"
            " create tensors, read their metadata and get streams, guards and library handles."
            " Write the computation as your own kernels (cuBLAS/cuDNN called directly are allowed where the"
            " task's library policy allows them).", "cpp-torch")
    if not allow_cublas:
        for match in re.finditer(r"\bcublas\w*", code):
            add(match.start(), 2, 0, "forbidden_module",
                "cuBLAS is not allowed by this evaluation's policy (the reference multiplies no matrices).", "library")
    if not allow_cudnn:
        for match in re.finditer(r"\bcudnn\w*", code):
            add(match.start(), 2, 1, "forbidden_module",
                "cuDNN is not allowed by this evaluation's policy (the reference does not convolve).", "library")
    # Symbol names in strings: a lookup of code by name in memory needs one.
    for start, end in literals:
        text = joined[start:end]
        hit = _NAMED_SYMBOL.search(text)
        if hit:
            add(start, 0, len(CPP_FORBIDDEN) + 2, "forbidden_construct",
                f"the string '{_shown(hit.group(0))}' names a symbol (a mangled C++ name, the Python C API, BLAS,"
                " OpenMP, threads, dynamic loading or ELF's magic number), as code that looks functions up in memory"
                " would; call what you use directly.", "cpp-symbol-name")

    # The same pragmas spelled as _Pragma, whose operand is a string.
    for match in re.finditer(r'\b_Pragma\s*\(\s*(?:u8|u|U|L)?"\s*(redefine_extname|weak)\b', joined):
        add(match.start(), 0, len(CPP_FORBIDDEN) + 3, "forbidden_construct",
            f"'_Pragma(\"{match.group(1)} ...\")' declares a function under another symbol's name, which hides what"
            " the module calls or replaces a library's function.", "cpp-construct")

    # The file's own macros, expanded: a rule sees a name however a macro assembles it.
    seen = {(line, index) for line, phase, index, _ in found if phase == 0}
    for offset, expanded in _expanded_lines(code):
        for index, (pattern, reason, why) in enumerate(CPP_FORBIDDEN):
            match = pattern.search(expanded)
            if match and (line_of(offset), index) not in seen:
                seen.add((line_of(offset), index))
                add(offset, 0, index, reason,
                    f"'{_shown(match.group(0))}' (with this file's macros expanded) {why}.", "cpp-macro")
    found.sort(key=lambda item: item[:3])
    return [item[3] for item in found]
