# SPDX-License-Identifier: Apache-2.0
"""The static check of a candidate's C++ and CUDA sources, on their text alone.

The text is first brought to what the compiler's tokenizer sees: backslash-newline
continuations joined (a name split over two lines is one name), the ``%:`` digraphs
spelled as ``#``, comments and string literals blanked out (so that they never trigger a
rule). Rules then run over the whole text, so that a qualified name broken over lines is
still seen, and once more with the file's own macros expanded (a macro call whose arguments
run over lines read as one line); each finding carries the line of the original file.

This is the first and fastest message, not the boundary: what the built module links is
checked symbol by symbol afterwards (include/cuda_agent/verify/link_policy.hpp), and that
check sees every call however the source spells it. The rules here aim at the spellings
that hide a call from a reader: ``using`` directives and namespace aliases of torch's
namespaces, functions taken by their address, headers named through macros, inline
assembly in host code and raw system calls; and at what no symbol shows: state kept between
calls (static, namespace-scope and device variables holding numbers) and strings naming
Python's internals."""

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
#: torch's headers of computation: its native kernels and their helpers (ATen/native/, the
#: CUDA ones under ATen/native/cuda/ too), vectorized CPU math (ATen/cpu/), operator entry
#: points (ATen/ops/, ATen/<Backend>Functions.h) and torch's wrappers of CUB.
_TORCH_COMPUTE_HEADERS = (r"ATen/native/|ATen/cpu/|ATen/ops/|ATen/\w*Functions(?:_inl)?\.h|ATen/cuda/cub|"
                          r"ATen/TensorIterator\.h|ATen/Functions\.h")
_TORCH_NAMESPACES = r"(?:at|torch|c10|caffe2|aten)"
#: A function type under a name (using F = R(A...); typedef R F(A...); typedef R (*F)(A...)),
#: and casts to a function pointer: a function made out of a pointer.
_FUNCTION_TYPE_ALIAS = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*(?!decltype\b)[^;={}]*?\(\s*(?:\*\s*)?\)?"
                                  r"[^;={}]*\)\s*(?:noexcept\s*)?;")
_FUNCTION_TYPEDEF = re.compile(r"\btypedef\s+[^;{}]*?(?:\(\s*\*\s*([A-Za-z_]\w*)\s*\)|\b([A-Za-z_]\w*))\s*\([^;{}]*\)"
                               r"\s*(?:noexcept\s*)?;")
_CAST_TO_FUNCTION_POINTER = re.compile(r"\b(?:reinterpret_cast|bit_cast)\s*<[^;<>]*\(\s*\*\s*\)\s*\(")
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
    (re.compile(r"(?m)^[ \t]*(?:#|%:)[ \t]*include\s*[<\"]\s*(" + _TORCH_COMPUTE_HEADERS + r")"), "forbidden_construct",
     "includes torch's own computation (its kernels, vectorized math and operator entry points are inline code"
     " there, which no symbol shows once compiled); write the computation as your own kernels"),
    (re.compile(r"(?m)^[ \t]*(?:#|%:)[ \t]*(include_next|import)\b"), "forbidden_construct",
     "includes a file past the rules of #include (the rest of the search path, or once only); include headers"
     " with #include"),
    (re.compile(r"(?<![\w$])(pword|iword|xalloc)\s*\("), "forbidden_construct",
     "keeps words in a standard stream's storage, which outlives the call (the link check cannot see it: its"
     " first words need no call into the library); a kernel's result must depend only on its inputs"),
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
    (re.compile(r"\busing\s+namespace\s+(?:::\s*)?(?:pybind11|py)\b|"
                r"\bnamespace\s+(?!py\s*=)\w+\s*=\s*(?:::\s*)?pybind11\b|\bnamespace\s+\w+\s*=\s*(?:::\s*)?py\b"),
     "forbidden_construct", "brings pybind11's names into scope under other spellings; write py:: (namespace py ="
                            " pybind11)"),
    # A header named by a macro: what is included is decided where this check cannot read it.
    (re.compile(r"(?m)^[ \t]*(?:#|%:)[ \t]*include\s*(?![<\"\s])"), "forbidden_construct",
     "includes a header named by a macro; name headers with <...> or \"...\""),
    # A tensor's lazy negation and conjugation bits: a copy of such a view computes -x or
    # conj(x) inside torch, below everything that watches the operators forward runs.
    (re.compile(r"\b(?:_set_neg|_set_conj|_set_zero|set_neg|set_conj|_neg_view|_conj|_conj_physical|resolve_neg|"
                r"resolve_conj|unsafeGetTensorImpl|unsafeReleaseTensorImpl|getIntrusivePtr|TensorImpl|key_set_)\b"),
     "forbidden_construct", "reaches a tensor's implementation (its dispatch keys, its lazy negation or"
                            " conjugation), where torch computes without an operator; the extension must compute in"
                            " its own kernels"),
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
_DEVICE_CAPABLE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".hxx", ".inl")
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
        return re.fullmatch(r"\s*(?:#|%:)\s*(?:include(?:_next)?|import)\s*", "".join(out[line_start:at])) is not None

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


def _macro_variants(code: str) -> dict[str, list[tuple[list[str] | None, str]]]:
    """Every ``#define`` of each name in the file, in order: name -> [(parameters, or None
    for an object-like macro; body), ...]. A name defined again (after an ``#undef``) has
    several: each is in force over part of the file."""
    macros: dict[str, list[tuple[list[str] | None, str]]] = {}
    for match in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?(.*)$", code, re.M):
        parameters = None
        if match.group(2) is not None:
            parameters = [part.strip() for part in match.group(2)[1:-1].split(",") if part.strip()]
        macros.setdefault(match.group(1), []).append((parameters, match.group(3).strip()))
    return macros


def _macro_definitions(code: str) -> dict[str, tuple[list[str] | None, str]]:
    """The file's ``#define``s: name -> (parameters, or None for an object-like macro; body),
    the last of each name's."""
    return {name: variants[-1] for name, variants in _macro_variants(code).items()}


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


#: The most lines one call of a function-like macro may spread its arguments over and still
#: be read as one line when the file's macros are expanded.
_MACRO_CALL_LINES = 40


def _unclosed_macro_call(text: str, function_like: re.Pattern) -> bool:
    """Whether ``text`` ends inside a call of one of the file's function-like macros: its
    argument list opens and does not close, or the name ends the text (the parenthesis may
    open on the next line)."""
    for match in function_like.finditer(text):
        rest = text[match.end():]
        if not rest.strip():
            return True
        opening = re.match(r"\s*\(", rest)
        if opening and _split_arguments(text, match.end() + opening.end() - 1) is None:
            return True
    return False


def macro_definitions(source: str) -> dict[str, tuple[list[str] | None, str]]:
    """The ``#define``s of a C++ or CUDA file, as ``scan_cpp``'s ``macros`` takes them."""
    return _macro_definitions(_prepare(source)[1])


def _expanded_lines(code: str, passes: int = 8, macros: dict | None = None) -> list[tuple[int, int, str]]:
    """(offset, offset of the last line, text) of each line of ``code`` (comments and
    literals blanked) that uses one of the file's own macros or of ``macros`` (the other
    files' of the candidate, which a header brings in), with those macros expanded: a
    rescan of the result expands what the expansion produced, up to ``passes`` times. A
    macro call whose arguments run over lines is one line from its first to the one that
    closes it (``_MACRO_CALL_LINES`` at most), as the preprocessor reads it: a name split
    between two of its arguments is then whole."""
    variants = _macro_variants(code)
    # A name defined more than once is in force with each definition over some lines: each
    # line is expanded with every one (the i-th expansion takes each name's i-th definition).
    expansions = max((len(each) for each in variants.values()), default=1)
    lines_out: list[tuple[int, int, str]] = []
    for variant in range(expansions):
        chosen = {name: each[min(variant, len(each) - 1)] for name, each in variants.items()}
        lines_out += _expanded_lines_with({**(macros or {}), **chosen}, code, passes)
    return lines_out


def _expanded_lines_with(macros: dict, code: str, passes: int) -> list[tuple[int, int, str]]:
    """``_expanded_lines`` with one definition of each macro."""
    if not macros:
        return []
    name = re.compile(r"\b(" + "|".join(re.escape(each) for each in macros) + r")\b")
    calls = [re.escape(each) for each, (parameters, _) in macros.items() if parameters is not None]
    function_like = re.compile(r"\b(" + "|".join(calls) + r")\b") if calls else None
    lines = code.split("\n")
    expanded_lines = []
    offset, index = 0, 0
    while index < len(lines):
        line = lines[index]
        start, offset, index = offset, offset + len(line) + 1, index + 1
        if re.match(r"[ \t]*#[ \t]*define\b", line) or not name.search(line):
            continue
        text, last, taken = line, start, 1
        while (function_like is not None and taken < _MACRO_CALL_LINES and index < len(lines)
               and _unclosed_macro_call(text, function_like)):
            # A directive between a call's arguments (#if, #else, ...) is the preprocessor's
            # own line: the call goes on after it.
            if not re.match(r"[ \t]*#", lines[index]):
                text += " " + lines[index]
            last, offset, index, taken = offset, offset + len(lines[index]) + 1, index + 1, taken + 1
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
        expanded_lines.append((start, last, text))
    return expanded_lines


# -- state kept between calls ---------------------------------------------------------------
# A variable that outlives the call (static, at namespace scope, on the device) lets the
# extension count its calls and answer differently to the check and to the run that counts,
# or remember earlier inputs and their outputs. What a binding legitimately keeps is named
# here, and nothing else may be kept: opaque handles of the CUDA libraries, streams, events
# and graphs, locks and once-flags, standard containers and smart pointers of those (a map
# may be keyed by a number, a device index), and pointers. Numbers, tensors, containers of
# data and the candidate's own types are refused, whatever they are used for. A pointer can
# still reach memory that outlives the call: what it could remember is worth nothing in a
# timed batch, whose inputs are fresh on every call (timing/trusted_clock.py).

#: The number-like types, as a declaration spells them (whitespace removed around ::, <, >).
_NUMBER_TYPE = re.compile(
    r"(?:(?:signed|unsigned|short|long|int|char|char8_t|char16_t|char32_t|wchar_t|bool|_Bool|float|double|__int128)"
    r"(?: |$))+|"
    r"(?:(?:::)?std::|::)?(?:u?int(?:_least|_fast)?(?:8|16|32|64)_t|u?intmax_t|u?intptr_t|size_t|ssize_t|ptrdiff_t)|"
    r"(?:(?:::)?(?:c10|at|torch)::)?(?:Half|BFloat16)|__half|half|__nv_bfloat16|nv_bfloat16|__nv_half|"
    r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]|"
    r"(?:(?:::)?cuda::)?(?:(?:::)?std::)?(?:atomic(?:_ref)?<.*>|atomic_\w+)")
_NUMBER_ARRAY = re.compile(r"(?:(?:::)?std::)?array<(.*),[^,<>]*>")
#: The types a binding may keep from call to call, as a declaration spells them.
_KEPT_HANDLE = re.compile(
    r"(?:::)?(?:cuda(?:Stream|Event|Graph|GraphExec|GraphNode|MemPool)_t|cublas(?:Lt)?Handle_t|"
    r"cublasLt(?:MatmulDesc|MatrixLayout|MatmulPreference|MatrixTransformDesc)_t|cudnn(?:Handle|\w*Descriptor)_t|"
    r"CU(?:stream|event|graph|graphExec|module|function|context))|"
    r"(?:(?:::)?(?:at|c10)::cuda::)?CUDA(?:Stream|Event|Graph)|"
    r"(?:(?:::)?std::)?(?:mutex|shared_mutex|recursive_mutex|once_flag)|(?:::)?c10::once_flag")
_KEPT_CONTAINER = re.compile(
    r"(?:(?:::)?std::)?(vector|array|deque|list|map|unordered_map|optional|pair|tuple|unique_ptr|shared_ptr)<(.*)>")
#: Words of a declaration that say how it is stored, not what it holds.
_STORAGE_WORDS = frozenset((
    "static", "extern", "inline", "thread_local", "_Thread_local", "__thread", "volatile", "register", "mutable",
    "constinit", "__device__", "__managed__", "__host__", "__constant__", "__shared__", "__restrict__",
    "__forceinline__", "__noinline__", "__inline__", "typename", '"'))
_CONSTANT_WORDS = frozenset(("const", "constexpr", "consteval"))
#: Words that begin something other than a variable's declaration.
_NOT_A_VARIABLE = frozenset((
    "typedef", "using", "friend", "return", "throw", "goto", "delete", "new", "operator", "namespace", "class",
    "struct", "union", "enum", "template", "case", "default", "else", "do", "if", "for", "while", "switch",
    "co_return", "co_yield", "co_await", "static_assert", "sizeof", "decltype", "asm", "__asm__", "__asm", "void"))
_TYPE_KEYWORDS = frozenset(("signed", "unsigned", "short", "long", "int", "char", "bool", "float", "double", "auto",
                            "void", "const", "constexpr", "volatile", "static"))
_DECLARATION_TOKEN = re.compile(r"[A-Za-z_]\w*|::|\d[\w.']*|\.\d[\w.']*|\S")
#: Attributes of a declaration: [[...]], and the words whose parenthesis follows.
_DECLARATION_NOISE = re.compile(r"\[\[.*?\]\]|"
                                r"\b(?:__attribute__|alignas|__align__|__declspec|__launch_bounds__)\s*(?=\()")
#: What may precede a declaration in its statement: labels, access specifiers, template headers.
_LABELS = re.compile(r"\s*(?:(?:public|private|protected|default)\s*:(?!:)|case\b(?:[^:;]|::)*:(?!:))")
_TEMPLATE_HEADER = re.compile(r"\s*template\s*(?=<)")
_NUMBER_START = re.compile(r"\s*[-+]?\s*(?:\d|\.\d|true\b|false\b|')")
_NAMESPACE_HEAD = re.compile(r'\s*(?:(?:inline\s+)?namespace\b[\w\s:]*|extern\s*"[^"\n]*"\s*)')


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _closing(text: str, start: int, opening: str = "{", closing: str = "}") -> int:
    """The offset of the bracket that closes the one at ``start`` (the text's end if none)."""
    depth = 0
    for position in range(start, len(text)):
        if text[position] == opening:
            depth += 1
        elif text[position] == closing:
            depth -= 1
            if depth == 0:
                return position
    return len(text)


def _balanced(text: str, start: int, opening: str, closing: str) -> int:
    """The offset after the bracket that closes the one at ``start`` (the text's end if none)."""
    return min(_closing(text, start, opening, closing) + 1, len(text))


def _declaration_words(segment: str) -> str:
    """``segment`` with attributes, labels and template headers blanked (offsets kept)."""
    for match in reversed(list(_DECLARATION_NOISE.finditer(segment))):
        end = match.end() if match.group(0).startswith("[[") else _balanced(segment, match.end(), "(", ")")
        segment = _blank(segment, match.start(), end)
    position = 0
    while True:
        label = _LABELS.match(segment, position)
        template = _TEMPLATE_HEADER.match(segment, position)
        if label:
            segment, position = _blank(segment, label.start(), label.end()), label.end()
        elif template:
            end = _balanced(segment, template.end(), "<", ">")
            segment, position = _blank(segment, template.start(), end), end
        else:
            return segment


def _declared_variable(segment: str) -> tuple[str, int, list[str], str, str] | None:
    """(name, its offset in ``segment``, the other words before it, the character after it,
    the text after that character) of the variable a statement ``segment`` declares; None
    for a function, a type or anything else."""
    words = _declaration_words(segment)
    tokens = [(match.group(0), match.start()) for match in _DECLARATION_TOKEN.finditer(words)]
    angles, end = 0, len(tokens)
    for k, (token, _) in enumerate(tokens):
        if token == "<":
            angles += 1
        elif token == ">" and angles:
            angles -= 1
        elif angles == 0 and token in ("=", "[", "(", "{", ",", ";", ":"):
            end = k
            break
    head = tokens[:end]
    if len(head) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", head[-1][0]) or head[-1][0] in _TYPE_KEYWORDS:
        return None
    name, name_offset = head[-1]
    words_before = [token for token, _ in head[:-1]]
    while len(words_before) >= 2 and words_before[-1] == "::":  # Counter::calls, defined out of its class
        words_before = words_before[:-2]
    if not words_before or set(words_before) & _NOT_A_VARIABLE:
        return None
    after = tokens[end][0] if end < len(tokens) else ""
    rest = words[tokens[end][1] + 1:] if end < len(tokens) else ""
    if after == "(" and not _NUMBER_START.match(rest):
        return None  # a function; "static int calls(0)" initializes a number
    return name, name_offset, words_before, after, rest


def _number_like(type_text: str) -> bool:
    array = _NUMBER_ARRAY.fullmatch(type_text)
    return bool(_NUMBER_TYPE.fullmatch(array.group(1) if array else type_text))


def _template_arguments(text: str) -> list[str]:
    """The top-level, comma-separated arguments of a template's argument list."""
    arguments, depth, start = [], 0, 0
    for position, character in enumerate(text):
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(character, 0)
        if character == "," and depth == 0:
            arguments.append(text[start:position])
            start = position + 1
    return arguments + [text[start:]]


def _may_keep(type_text: str, after: str = "", rest: str = "") -> bool:
    """Whether a variable of ``type_text`` may outlive the call: a handle, a lock, or a
    container of those (``_KEPT_HANDLE``). ``auto`` is judged by its initializer: only a
    lambda that captures nothing holds nothing."""
    if type_text == "auto":
        return after == "=" and rest.lstrip().startswith("[]")
    if _KEPT_HANDLE.fullmatch(type_text):
        return True
    container = _KEPT_CONTAINER.fullmatch(type_text)
    if not container:
        return False
    kind, arguments = container.group(1), _template_arguments(container.group(2))
    if kind in ("map", "unordered_map"):
        key, values = arguments[0], arguments[1:2]
        return (_number_like(key) or key in ("std::string", "::std::string") or _may_keep(key)) and all(
            _may_keep(value) for value in values)
    if kind == "array":
        return _may_keep(arguments[0])
    return all(_may_keep(argument) for argument in arguments)


def _kept_state(code: str, scope_known: bool = True) -> list[tuple[int, str]]:
    """(offset, what it is) of each variable of ``code`` (comments and literals blanked)
    that keeps a value from one call to the next: a variable declared static or thread_local,
    or at namespace scope (when ``scope_known``: the text is a whole file), of a type a binding
    may not keep (``_may_keep``), and any device variable (__device__, __managed__). Constants,
    pointers, __constant__ and __shared__ memory are none."""
    structure = re.sub(r"(?m)^[ \t]*#.*$", lambda match: " " * len(match.group(0)), code)
    found: list[tuple[int, str]] = []
    namespaces: list[bool] = []  # per open brace: whether it opens a namespace or extern "C" block
    start = 0
    for position, character in enumerate(structure):
        if character not in ";{}":
            continue
        segment = structure[start:position]
        declared = _declared_variable(segment)
        if declared is not None:
            name, name_offset, words, after, rest = declared
            word_set = set(words)
            type_words = " ".join(word for word in words if word not in _STORAGE_WORDS)
            type_text = re.sub(r"\s*(::|<|>|,|\*|&)\s*", r"\1", type_words)
            device = [word for word in words if word in ("__device__", "__managed__")]
            per_thread = word_set & {"thread_local", "_Thread_local", "__thread"}
            kept = "static" in word_set or per_thread
            described = None
            if word_set & _CONSTANT_WORDS or word_set & {"__shared__", "__constant__"}:
                pass  # read-only, or memory of one block's one launch
            elif device:
                described = f"a device variable ({' '.join(device)})"
            elif ("*" not in words and "&" not in words and "&&" not in words
                  and (kept or (scope_known and all(namespaces))) and not _may_keep(type_text, after, rest)):
                described = ("a thread_local variable" if per_thread else "a static variable" if kept else
                             "a variable at namespace scope")
            if described:
                shown = type_text + ("[]" if after == "[" else "")
                found.append((start + name_offset, f"'{name}' ({shown}) is {described}"))
        if character == "{":
            namespaces.append(_NAMESPACE_HEAD.fullmatch(_declaration_words(segment)) is not None)
        elif character == "}" and namespaces:
            namespaces.pop()
        start = position + 1
    return found


_STATE_ADVICE = (", which keeps its value from one call to the next: a kernel's result must depend only on its inputs."
                 " Keep only caches keyed on nothing that changes (constants const or constexpr; handles, streams and"
                 " events created once), or pass state explicitly (a tensor the Python side holds and passes in).")


# -- names of Python's internals in strings ---------------------------------------------------
#: Python's and torch's internals that native code can only want in order to reach Python:
#: its modules and builtins, attribute walks to them, torch's private module, its dispatch
#: modes and keys. A string literal that is exactly one of them (or a dotted path through
#: one) is refused; messages that merely contain the words are not.
_PYTHON_INTERNAL_NAMES = frozenset((
    "__import__", "builtins", "__builtins__", "sys", "modules", "os", "subprocess", "ctypes", "importlib", "gc",
    "getattr", "setattr", "exec", "eval", "globals", "locals", "vars", "__dict__", "__globals__", "__class__",
    "__subclasses__", "__mro__", "__bases__", "__base__", "__loader__", "__spec__", "__code__", "__closure__",
    "__getattribute__", "_getframe", "f_back", "f_globals", "f_locals", "get_referrers",
    "_C", "_disabled_torch_function_impl", "_disabled_torch_dispatch_impl", "_DisableTorchDispatch",
    "_DisableTorchFunction", "_DisableTorchFunctionSubclass", "_EnableTorchFunction", "_DisableFuncTorch",
    "_pop_torch_dispatch_stack", "_pop_torch_function_stack", "_push_on_torch_dispatch_stack",
    "_push_on_torch_function_stack", "_len_torch_dispatch_stack", "_len_torch_function_stack", "_pop_mode",
    "_pop_mode_temporarily", "_get_dispatch_mode", "_set_dispatch_mode", "_unset_dispatch_mode",
    "_disable_current_modes", "_python_dispatch", "_ExcludeDispatchKeyGuard", "_IncludeDispatchKeyGuard",
    "_RestorePythonTLSSnapshot", "_AutoDispatchBelowAutograd", "_dispatch_tls_set_dispatch_key_excluded",
    "_dispatch_tls_set_dispatch_key_included", "_dispatch_tls_is_dispatch_key_excluded",
    "_dispatch_tls_local_exclude_set", "_dispatch_tls_local_include_set", "DispatchKey", "DispatchKeySet", "Python",
    "PythonTLSSnapshot", "PythonDispatcher", "PreDispatch", "__torch_dispatch__", "__torch_function__",
    "TorchDispatchMode", "TorchFunctionMode",
))
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]+)|([0-7]{1,3})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _unescaped(text: str) -> str:
    def one(match: re.Match) -> str:
        for group in (1, 3, 4):
            if match.group(group):
                return chr(min(int(match.group(group), 16), 0x10FFFF))
        if match.group(2):
            return chr(int(match.group(2), 8))
        return _SIMPLE_ESCAPES.get(match.group(5), match.group(5))
    return _ESCAPE.sub(one, text)


def _string_constants(joined: str, code: str, literals: list[tuple[int, int]]) -> list[tuple[int, str]]:
    """(offset, value) of each string the compiler builds: adjacent literals ("_Disable"
    "TorchDispatch") are one, and escapes are decoded."""
    strings: list[tuple[int, str]] = []
    previous_end = None
    for start, end in sorted(literals):
        value = joined[start:end] if joined[start - 1:start] != "'" else None
        if value is None:
            previous_end = None
            continue
        raw = joined[start - 1:start] == "("  # a raw literal's content has no escapes
        value = value if raw else _unescaped(value)
        # Between two adjacent literals: the quotes (blanked for raw literals) and a prefix.
        if previous_end is not None and re.fullmatch(r'"?\s*(?:u8|u|U|L)?', code[previous_end:start - 1]):
            strings[-1] = (strings[-1][0], strings[-1][1] + value)
        else:
            strings.append((start, value))
        previous_end = end
    return strings


def _python_internal(value: str) -> str | None:
    """The internal ``value`` names, when it is exactly a name or a dotted path through one."""
    if not _DOTTED_NAME.fullmatch(value):
        return None
    return next((part for part in value.split(".") if part in _PYTHON_INTERNAL_NAMES), None)


def strip_cpp(text: str) -> str:
    """Removes comments and the contents of string and character literals, keeping line
    breaks; continuations are joined first, as the compiler does."""
    return _prepare(text)[1]


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
        ranges.append((k, _closing(code, k)))
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


_TORCH_NAME_ADVICE = (
    "is torch's own computation or internals; the extension may use torch only to create tensors, read their"
    " metadata and get streams, guards and library handles. Write the computation as your own kernels"
    " (cuBLAS/cuDNN called directly are allowed where the task's library policy allows them).")


def _torch_name_allowed(name: str) -> bool:
    """Whether the qualified torch name ``name`` (whitespace removed) is one CPP_ALLOWED lists."""
    return any(name == allowed or name.startswith(allowed + "::") or
               (allowed.endswith("::") and name.startswith(allowed)) or
               (allowed in ("torch::k", "c10::k") and re.match(re.escape(allowed) + r"[A-Z]", name))
               for allowed in CPP_ALLOWED)


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
    host = {name for name in names if name.lower().endswith(_HOST_SUFFIXES)}
    pending = list(host)
    while pending:
        current = pending.pop()
        code = strip_cpp(files[current])
        for directive in re.finditer(r"^[ \t]*(?:#|%:)[ \t]*(?:include(?:_next)?|import)\b(.*)$", code, re.M):
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
             host_compiled: bool | None = None, macros: dict | None = None) -> list[dict]:
    """Findings in one C++ or CUDA file. ``host_compiled``: whether the host compiler sees
    the file (``host_compiled_files``); by default, what its suffix says. ``macros``: the
    ``#define``s of the candidate's other files (``macro_definitions``), expanded here too,
    since a header can define what this file uses."""
    joined, code, starts, literals = _prepare(source)
    if host_compiled is None:
        host_compiled = not file.lower().endswith(_DEVICE_CAPABLE_SUFFIXES)

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
        if not _torch_name_allowed(name):
            add(match.start(), 1, 0, "forbidden_operation", f"{name} {_TORCH_NAME_ADVICE}", "cpp-torch")
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

    # Names of Python's internals in strings: native code has no use for them but to reach Python.
    for start, value in _string_constants(joined, code, literals):
        internal = _python_internal(value)
        if internal:
            add(start, 0, len(CPP_FORBIDDEN) + 5, "forbidden_construct",
                f"the string '{value}' names {internal}, one of Python's or torch's internals (modules, builtins,"
                " attribute walks, torch._C, dispatch modes and keys), which native code could only use to reach"
                " Python; the extension must only compute.", "cpp-python-name")

    # A function made out of a pointer: what it calls is found at run time (in a library's
    # image in memory, say), where neither the scan nor the link check sees a name.
    aliases = [match.group(1) for match in _FUNCTION_TYPE_ALIAS.finditer(code)]
    aliases += [match.group(1) or match.group(2) for match in _FUNCTION_TYPEDEF.finditer(code)]
    casts = [_CAST_TO_FUNCTION_POINTER]
    if aliases:
        names = "|".join(re.escape(alias) for alias in sorted(set(aliases)))
        casts.append(re.compile(r"\b(?:reinterpret_cast|bit_cast)\s*<\s*(?:const\s+)?(?:" + names + r")\b|"
                                r"\(\s*(?:" + names + r")\s*\*\s*\)"))
    for pattern in casts:
        for match in pattern.finditer(code):
            add(match.start(), 0, len(CPP_FORBIDDEN) + 6, "forbidden_construct",
                f"'{_shown(match.group(0))}' makes a function out of a pointer: what it calls is found at run time,"
                " past what the checks can see; call functions by their names", "cpp-construct")

    # State kept between calls: after whatever else its line shows, which says more (the
    # declaration of a static that holds a torch call's result names the call first).
    state_rule = (3, 0)
    for offset, what in _kept_state(code):
        add(offset, *state_rule, "forbidden_construct", what + _STATE_ADVICE, "cpp-state")

    # The same pragmas spelled as _Pragma, whose operand is a string.
    for match in re.finditer(r'\b_Pragma\s*\(\s*(?:u8|u|U|L)?"\s*(redefine_extname|weak)\b', joined):
        add(match.start(), 0, len(CPP_FORBIDDEN) + 3, "forbidden_construct",
            f"'_Pragma(\"{match.group(1)} ...\")' declares a function under another symbol's name, which hides what"
            " the module calls or replaces a library's function.", "cpp-construct")

    # The file's own macros, expanded: a rule sees a name however a macro assembles it, in a
    # call whose arguments run over lines too. What the text itself shows on one of the
    # call's lines is not reported again.
    seen = {(line, phase, index) for line, phase, index, _ in found}
    for offset, last, expanded in _expanded_lines(code, macros=macros):
        lines = range(line_of(offset), line_of(last) + 1)

        def report(phase: int, index: int, reason: str, message: str, rule: str) -> None:
            if not any((line, phase, index) in seen for line in lines):
                seen.add((lines[0], phase, index))
                add(offset, phase, index, reason, message, rule)

        for index, (pattern, reason, why) in enumerate(CPP_FORBIDDEN):
            match = pattern.search(expanded)
            if match:
                report(0, index, reason, f"'{_shown(match.group(0))}' (with the candidate's macros expanded) {why}.",
                       "cpp-macro")
        names = (re.sub(r"\s+", "", match.group(0)) for match in _QUALIFIED.finditer(expanded))
        name = next((name for name in names if not _torch_name_allowed(name)), None)
        if name:
            report(1, 0, "forbidden_operation", f"{name} (with the candidate's macros expanded) {_TORCH_NAME_ADVICE}",
                   "cpp-macro")
        if not expanded.lstrip().startswith("#"):
            for _, what in _kept_state(expanded, scope_known=False)[:1]:
                report(*state_rule, "forbidden_construct", what + " (with the candidate's macros expanded)" +
                       _STATE_ADVICE, "cpp-state")
    found.sort(key=lambda item: item[:3])
    return [item[3] for item in found]
