# SPDX-License-Identifier: Apache-2.0
"""The C++ scan (cpp_scan.py) against the spellings that hide a call from a line-by-line
reader, and the library policy derived from a reference's operators (operators.py)."""
import json
import pathlib
import textwrap

import pytest

from cuda_agent_harness.verify import operators
from cuda_agent_harness.checks.cpp_scan import _MACRO_CALL_LINES, device_ranges, host_compiled_files, scan_cpp, strip_cpp

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
PRELUDE = "#include <torch/extension.h>\n"


def reasons(source: str, file: str = "kernels/k.cpp", **policy) -> list[tuple[str, int, str]]:
    return [(f["reason"], f["line"], f["rule"]) for f in scan_cpp(source, file, **policy)]


def test_backslash_newline_is_joined_and_lines_stay_those_of_the_file():
    source = PRELUDE + "torch::Tensor f(const torch::Tensor& a, const torch::Tensor& b) {\n  return a\\\nt::cpu::mm(a, b);\n}\n"
    found = scan_cpp(source, "kernels/k.cpp")
    assert [(f["reason"], f["line"]) for f in found] == [("forbidden_operation", 3)]
    assert "at::cpu::mm" in found[0]["message"]
    # A finding after a continuation keeps its own line.
    later = PRELUDE + "const int x = 1 + \\\n  2;\nvoid g() { std::thread t([] {}); }\n"
    assert reasons(later)[0][:2] == ("forbidden_construct", 4)


def test_a_qualified_name_broken_over_lines_is_one_name():
    found = scan_cpp(PRELUDE + "auto y = at::\n    cpu::\n    relu(x);\n", "kernels/k.cpp")
    assert found and found[0]["reason"] == "forbidden_operation" and found[0]["line"] == 2


def test_a_continued_comment_hides_what_the_compiler_hides():
    # The compiler joins the line before it ends the comment: this is no call at all.
    assert reasons(PRELUDE + "// a comment \\\nauto y = at::matmul(a, b);\nconst int z = 0;\n") == []


@pytest.mark.parametrize("line", [
    "using namespace at;",
    "using namespace ::torch;",
    "using namespace c10;",
    "using namespace at::native;",
    "using namespace torch::indexing;",
    "namespace aten = at;",
    "namespace kernels = at::cpu;",
    "namespace at { Tensor mine(const Tensor& x); }",
    "namespace at::native { int mine(); }",
])
def test_torch_namespaces_brought_into_scope_or_renamed(line):
    found = reasons(PRELUDE + line + "\n")
    assert found and found[0][:2] == ("forbidden_construct", 2), found


@pytest.mark.parametrize("line", [
    "auto spawn = &pthread_create;",
    "auto spawn = pthread_create;",
    "auto run = &PyRun_String;",
    "auto read = &::getenv;",
    "decltype(&dlsym) lookup = nullptr;",
    "auto host = &cudaLaunchHostFunc;",
    "auto shell = &system;",
    "auto raw = &syscall;",
    "long id = SYS_gettid;",
    "auto f = std::getenv;",
])
def test_functions_taken_by_their_address(line):
    found = reasons(PRELUDE + "void f() {\n" + line + "\n}\n")
    assert found and found[0][:2] == ("forbidden_construct", 3), found


@pytest.mark.parametrize("line", [
    "  static const int slot = std::ios_base::xalloc();",
    "  std::clog.pword(0) = new float[16];",
    "  long calls = ++std::cerr.iword(3);",
])
def test_words_kept_in_the_standard_streams(line):
    found = reasons(PRELUDE + "#include <iostream>\nvoid f() {\n" + line + "\n}\n")
    assert found and found[0][:2] == ("forbidden_construct", 4), found


@pytest.mark.parametrize("header", ["ATen/native/Math.h", "ATen/native/cuda/block_reduce.cuh", "ATen/cpu/vec/vec.h",
                                    "ATen/ops/relu.h", "ATen/CPUFunctions.h", "ATen/CUDAFunctions.h",
                                    "ATen/cuda/cub.cuh", "ATen/TensorIterator.h"])
def test_torch_s_headers_of_computation_are_refused(header):
    found = reasons(PRELUDE + f"#include <{header}>\n")
    assert found and found[0][:2] == ("forbidden_construct", 2), found


@pytest.mark.parametrize("header", ["ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h", "ATen/cudnn/Handle.h",
                                    "c10/cuda/CUDAStream.h", "ATen/cuda/CUDAGraph.h"])
def test_torch_s_headers_of_streams_guards_and_handles_are_allowed(header):
    assert reasons(PRELUDE + f"#include <{header}>\n") == []


@pytest.mark.parametrize("source, line", [
    ("using Mm = torch::Tensor(const torch::Tensor&, const torch::Tensor&);\n"
     "void f(void* p) {\n  auto* mm = reinterpret_cast<Mm*>(p);\n}\n", 4),
    ("typedef char* (*GetEnv)(const char*);\nvoid f(void* p) {\n  auto e = (GetEnv*)p;\n}\n", 2),  # the declarator already
    ("typedef int Create(void*);\nvoid f(void* p) {\n  auto c = reinterpret_cast<const Create*>(p);\n}\n", 4),
    ("void f(void* p) {\n  auto g = reinterpret_cast<int (*)(int)>(p);\n}\n", 3),
])
def test_a_function_made_out_of_a_pointer_is_refused(source, line):
    found = reasons(PRELUDE + source)
    assert found and found[0][:2] == ("forbidden_construct", line), found


def test_function_types_that_name_callbacks_a_kernel_takes_are_no_cast():
    source = PRELUDE + ("using Body = float(float);\ntemplate <typename F> float apply(F f, float x) { return f(x); }\n"
                        "float twice(float x) { return 2 * x; }\nfloat g(float x) { Body* body = &twice;"
                        " return apply(body, x); }\n")
    assert reasons(source) == []


def test_macros_a_header_defines_are_expanded_in_the_files_that_use_them():
    from cuda_agent_harness.checks import scan
    header = "#pragma once\n#define Q(x) x\n#define SCOPE(a, b) a::b\n"
    binding = PRELUDE + ('#include "quote.h"\nvoid f(const torch::Tensor& x) {\n'
                         "  auto y = Q(py)::Q(cast)(1);\n  auto z = SCOPE(at, cpu)::relu(x);\n}\n")
    files = {"kernels/quote.h": header, "kernels/binding.cpp": binding, "model_new.py": ""}
    found = [f for f in scan.scan({"files": files, "policy": {}}, None)["findings"] if f["file"] == "kernels/binding.cpp"]
    assert {(f["line"], f["rule"]) for f in found} >= {(4, "cpp-macro"), (5, "cpp-macro")}, found
    assert all("candidate's macros" in f["message"] for f in found if f["rule"] == "cpp-macro")
    assert scan_cpp(binding, "kernels/binding.cpp") == [], "one file alone shows nothing"


@pytest.mark.parametrize("header_name", ["kernels/impl.hxx", "kernels/Impl.H", "kernels/impl.HPP", "kernels/impl.txt"])
def test_every_file_but_python_is_scanned_whatever_its_suffix(header_name):
    # The build lower-cases suffixes and an #include reads any file: a header the scan
    # skipped by its name would carry whatever the binding must not hold.
    from cuda_agent_harness.checks import scan
    header = "#pragma once\ninline void run() { PyObject* builtins = PyEval_GetBuiltins(); (void)builtins; }\n"
    binding = PRELUDE + '#include "' + header_name.split("/")[-1] + '"\n'
    files = {header_name: header, "kernels/binding.cpp": binding, "model_new.py": ""}
    found = [f for f in scan.scan({"files": files, "policy": {}}, None)["findings"] if f["file"] == header_name]
    assert found and found[0]["reason"] == "forbidden_construct", found
    assert header_name in host_compiled_files({header_name: header, "kernels/binding.cpp": binding})


def test_a_macro_defined_again_is_expanded_with_each_of_its_definitions():
    # Used with the first definition, then #undef'd and defined as something harmless: the
    # compiler expands the use with the first, so the scan must too.
    source = PRELUDE + ("#define NAME_IN(space, name) space::name\nvoid f() {\n  auto y = NAME_IN(py, cast)(1);\n}\n"
                        "#undef NAME_IN\n#define NAME_IN(space, name) int\n")
    found = scan_cpp(source, "kernels/k.cpp")
    assert found and (found[0]["reason"], found[0]["line"]) == ("forbidden_construct", 4), found


def test_a_directive_between_the_arguments_of_a_macro_call_does_not_end_it():
    source = PRELUDE + ("#define SCOPED(scope, name) scope::name\nvoid f() {\n  auto y = SCOPED(py,\n"
                        "#if defined(__cplusplus)\n      cast\n#endif\n  )(1);\n}\n")
    found = scan_cpp(source, "kernels/k.cpp")
    assert found and (found[0]["reason"], found[0]["line"]) == ("forbidden_construct", 4), found


def test_include_next_and_import_are_refused_and_what_they_name_is_host_code():
    helper = 'inline long probe(long n) {\n  long r;\n  __asm__ volatile("syscall" : "=a"(r) : "a"(n));\n  return r;\n}\n'
    for directive in ('#include_next "helper.h"', '#import "helper.h"', '%:include_next "helper.h"'):
        source = PRELUDE + directive + "\n"
        assert reasons(source, "kernels/binding.cpp")[0][:2] == ("forbidden_construct", 2), directive
        files = {"kernels/binding.cpp": source, "kernels/helper.h": helper}
        assert "kernels/helper.h" in host_compiled_files(files), directive
        assert scan_cpp(helper, "kernels/helper.h", host_compiled=True), directive


@pytest.mark.parametrize("source", [
    "#define THREAD_HEADER <thread>\n#include THREAD_HEADER\n",
    '#include "/usr/include/pthread.h"\n',
    "%:include <dlfcn.h>\n",
    "#define JOIN(a, b) a %:%: b\n",
    "#define __device__\n",
    "using namespace std;\nvoid f() { thread worker([] {}); worker.join(); }\n",
    "namespace s = std;\nvoid f() { s::thread worker([] {}); }\n",
    "void f(pybind11::object o) { o.attr(\"relu\")(); }\n",
    "void f() { auto os = module_::import(\"os\"); }\n",
    "void f() { tls_set_dispatch_key_excluded(parseDispatchKey(\"Python\"), true); }\n",
])
def test_other_spellings(source):
    found = reasons(PRELUDE + source)
    assert found and found[0][0] == "forbidden_construct", found


def test_inline_assembly_only_in_device_code():
    ptx = 'asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));'
    device = textwrap.dedent(f"""
        __device__ __forceinline__ unsigned lane_id() {{ unsigned lane; {ptx} return lane; }}
        template <int N>
        __global__ void kernel(float* y) {{ unsigned lane; {ptx} y[lane] = N; }}
        __host__ __device__ unsigned either() {{
        #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
          unsigned lane; {ptx} return lane;
        #else
          return 0;
        #endif
        }}
        auto scale = [] __device__ (float x) {{ float y; asm("mul.f32 %0, %1, 2.0;" : "=f"(y) : "f"(x)); return y; }};
    """)
    assert reasons(device, "kernels/k.cu") == []
    assert reasons(device, "kernels/ptx.cuh") == []

    host = [
        ("kernels/k.cpp", 'void f() { asm volatile("syscall"); }'),
        ("kernels/k.cu", 'void f() { __asm__("syscall"); }'),
        ("kernels/k.cu", '__host__ __device__ void f() { asm("syscall"); }'),
        ("kernels/k.cu", '__device__ void g();\nvoid f() { asm("syscall"); }'),
        ("kernels/k.cu", '#define DEVICE __device__\nDEVICE void f() { asm("syscall"); }'),
        ("kernels/k.cu", '__host__ __device__ void f() {\n#ifndef __CUDA_ARCH__\n asm("syscall");\n#endif\n}'),
        ("kernels/k.cu", '#if defined(__CUDA_ARCH__) || defined(HOST)\nvoid f() { asm("syscall"); }\n#endif'),
        ("kernels/k.cpp", '#define __device__\n__device__ void f() { asm("syscall"); }'),
    ]
    for file, source in host:
        found = [f for f in scan_cpp(source, file) if f["rule"] in ("cpp-asm", "cpp-construct")]
        assert found, (file, source)


@pytest.mark.parametrize("source", [
    "torch::Tensor f(torch::Tensor x, py::object hook) { return x; }\n",
    "void f(const py::handle& h) {}\n",
    "void f(pybind11::module_& m) { auto d = getattr(m, \"__dict__\"); }\n",
    "void f(py::module_& m) { PyObject* raw = m.ptr(); }\n",
    "void f(py::module_& m) { if (hasattr(m, \"x\")) {} }\n",
    "using namespace pybind11;\n",
    "namespace python = pybind11;\n",
    "torch::Tensor f(torch::Tensor x) { THPVariable_Wrap(x); return x; }\n",
    # an alias of the alias, under which pybind11's free functions lose their py::
    "namespace q = py;\nvoid f(q::handle h) { auto g = q::getattr(h, \"x\"); }\n",
    "using namespace py;\n",
])
def test_python_objects_are_out_of_reach_of_a_binding(source):
    found = reasons(PRELUDE + source)
    assert found and found[0][0] == "forbidden_construct", found


@pytest.mark.parametrize("source", [
    "using entry = float* (*)(void);\n",
    "typedef void (*callback)(int);\n",
    "void f(void* p) { auto g = (int (*)(int)) p; g(1); }\n",
    "auto p = &torch::Tensor::data_ptr<float>;\n",
    "void f() { void* p = (void*)&at::empty; }\n",
    "void f() { auto p = at::zeros_like; }\n",
    "decltype(at::empty_like)* p = nullptr;\n",
    "using at::zeros_like;\n",
    "#define NS at\nvoid f() { NS::cpu::relu; }\n",
    "void f() { std::add_pointer_t<int(int)> p = nullptr; }\n",
])
def test_functions_by_address_are_refused(source):
    found = reasons(PRELUDE + source)
    assert found and found[0][0] in ("forbidden_construct", "forbidden_operation"), found


@pytest.mark.parametrize("source, rule", [
    # the loaded program's ELF structures, from which any library's functions are found
    ("extern const char __ehdr_start[];\n", "cpp-construct"),
    ("#include <elf.h>\nconst Elf64_Sym* s = nullptr;\n", "cpp-construct"),
    ("extern char _DYNAMIC[];\n", "cpp-construct"),
    ("bool is_elf(const unsigned* page) { return *page == 0x464C457Fu; }\n", "cpp-construct"),
    # symbols named in strings, as a lookup in memory needs them
    ('const char* kernel = "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE";\n', "cpp-symbol-name"),
    ('const char* run = "PyRun_SimpleString";\n', "cpp-symbol-name"),
    ('const char name[] = "sgemm_";\n', "cpp-symbol-name"),
    ('const char magic[] = "\\x7f" "ELF";\nconst char other[] = "\\177ELF";\n', "cpp-symbol-name"),
    # declarations under another symbol's name
    ('_Pragma("redefine_extname quiet PyEval_GetBuiltins")\nextern "C" void* quiet();\n', "cpp-construct"),
    ("#pragma weak GOMP_parallel\n", "cpp-construct"),
    ('extern "C" __attribute__((weak)) void GOMP_parallel(void (*)(void*), void*, unsigned, unsigned) {}\n',
     "cpp-construct"),
    ('extern "C" void f() __attribute__((alias("g")));\n', "cpp-construct"),
    # names a macro of the file assembles
    ("#define ATTR attr\nvoid f(py::module_* m) { m->ATTR(\"x\"); }\n", "cpp-macro"),
    ("#define Q(a, b) a::b\nauto p = &Q(at, detail)::computeStorageNbytesContiguous;\n", "cpp-macro"),
])
def test_what_finds_code_in_memory_or_renames_it_is_refused(source, rule):
    found = scan_cpp(PRELUDE + source, "kernels/k.cpp")
    assert any(f["rule"] == rule and f["reason"] == "forbidden_construct" for f in found), found
    assert all(f["message"].startswith(f"k.cpp line {f['line']}: ") or f["message"].startswith("kernels/k.cpp")
               for f in found), found


def test_macros_pragmas_and_messages_of_ordinary_kernels_pass():
    source = PRELUDE + textwrap.dedent("""\
        #define CHECK_INPUT(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous (weak scaling aside)")
        #define BLOCK 256
        #define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
        __global__ void scale(float* out, const float* in, int n) {
        #pragma unroll
          for (int k = 0; k < 4; ++k) {
            _Pragma("unroll")
            for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += BLOCK) out[i] = 2 * in[i];
          }
        }
        torch::Tensor run(const torch::Tensor& x) {
          CHECK_INPUT(x);
          auto y = torch::empty_like(x);
          scale<<<CEIL_DIV(x.numel(), BLOCK), BLOCK>>>(y.data_ptr<float>(), x.data_ptr<float>(), x.numel());
          return y;
        }
    """)
    assert scan_cpp(source, "kernels/k.cu") == []


def test_what_bindings_legitimately_write_passes():
    source = PRELUDE + textwrap.dedent("""\
        namespace py = pybind11;
        torch::Tensor run(const torch::Tensor& x, c10::optional<torch::Tensor> out, double scale) {
          TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
          auto y = out.has_value() ? *out : torch::empty_like(x, x.options().dtype(torch::kFloat));
          auto* data = reinterpret_cast<float4*>(y.data_ptr<float>());
          const float* in = (const float*)x.data_ptr();
          auto stream = at::cuda::getCurrentCUDAStream();
          (void)data; (void)in; (void)stream; (void)c10::nullopt;
          for (auto i : c10::irange(x.dim())) { (void)i; }
          return y;
        }
        void add_helpers(py::module_& m) { m.def("twice", [](double v) { return 2 * v; }); }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
          m.def("run", &run, "run", py::arg("x"), py::arg("out") = py::none(), py::arg("scale") = 1.0,
                py::call_guard<py::gil_scoped_release>());
          add_helpers(m);
        }
    """)
    assert reasons(source) == []


@pytest.mark.parametrize("condition", ["!__CUDA_ARCH__", "__CUDA_ARCH__ >= 0", "__CUDA_ARCH__ + 1",
                                       "defined(__CUDA_ARCH__) || 1", "__CUDA_ARCH__ > -1"])
def test_only_conditions_false_on_the_host_mark_device_code(condition):
    source = f'#if {condition}\nvoid f() {{ asm volatile("syscall"); }}\n#endif\n'
    assert any(rule == "cpp-asm" for _, _, rule in reasons(source, "kernels/k.cuh")), condition
    device = f'#if {"__CUDA_ARCH__ >= 700" if ">" in condition else "defined(__CUDA_ARCH__)"}\n' \
             'void f() { asm volatile("mov.u32 %0, %%laneid;" : "=r"(x)); }\n#endif\n'
    assert reasons(device, "kernels/k.cuh") == []


def test_a_header_the_host_compiler_includes_is_host_code():
    from cuda_agent_harness.checks.scan import scan
    header = '__device__ inline unsigned lane() { unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l)); return l; }\n'
    files = {"model_new.py": "import torch\n", "kernels/lane.cuh": header,
             "kernels/k.cu": '#include "lane.cuh"\n', "kernels/binding.cpp": PRELUDE + "const int x = 0;\n"}
    assert [f for f in scan({"files": files}, None)["findings"] if f["file"] != "model_new.py"] == []
    files["kernels/binding.cpp"] = PRELUDE + '#include "lane.cuh"\n'
    found = [f for f in scan({"files": files}, None)["findings"] if f["file"] == "kernels/lane.cuh"]
    assert found and found[0]["rule"] == "cpp-asm", found


def test_device_ranges_cover_device_bodies_only():
    code = strip_cpp("void h() { }\n__global__ void k() { int a; }\n__device__ int table[2] = {1, 2};\nvoid g() {}\n")
    ranges = device_ranges(code)
    assert len(ranges) == 1
    start, end = ranges[0]
    assert "int a;" in code[start:end] and "void g" not in code[start:end]


def test_python_types_a_binding_may_name_are_not_the_c_api():
    assert reasons(PRELUDE + "const Py_ssize_t n = 0; PyObject* o = nullptr;\n") == []


def test_library_policy_names_every_use():
    source = PRELUDE + "#include <cublas_v2.h>\nvoid f(cublasHandle_t h) {\n  cublasSaxpy(h, 1, nullptr, nullptr, 1, nullptr, 1);\n}\n"
    assert reasons(source) == []
    found = reasons(source, allow_cublas=False)
    assert {line for reason, line, rule in found if rule == "library"} == {2, 3, 4}


CPP_SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".h", ".hpp")
STATIC_REASONS = {"forbidden_construct", "forbidden_operation", "forbidden_module"}
MANIFEST = json.loads((REPOSITORY / "tests" / "adversarial" / "manifest.json").read_text())["candidates"]


def expected_reasons(entry: dict, device: str) -> set[str]:
    expect = entry.get(device, {}).get("expect", [])
    return {expect} if isinstance(expect, str) else set(expect)


def own_kernels(entry: dict, device: str) -> list[pathlib.Path]:
    candidate = REPOSITORY / "tests" / "adversarial" / "candidates" / entry.get("source", entry["name"])
    directory = candidate / f"kernels.{device}"
    return sorted(path for path in directory.glob("*") if path.suffix in CPP_SOURCE_SUFFIXES) if device in entry else []


#: The C++ and CUDA sources of the repository that the static checks must let through: the
#: hand-written KernelBench kernels (the broken ones too: they are wrong in their numbers,
#: which the static checks are not what finds), the adversarial suite's shared kernels, the
#: demo's, the starter's and the benchmark task's, and the own kernels of every adversarial
#: candidate that the manifest expects to be accepted or rejected by a later check.
LEGITIMATE = sorted(
    path for pattern in ("tests/gpu_candidates/*/*/*/kernels/*", "tests/adversarial/kernels/*/*",
                         "scripts/demo/*/*/kernels/*", "resources/starter/*/kernels/*",
                         "benchmarks/edit_to_verdict/task/*/*")
    for path in REPOSITORY.glob(pattern)
    if path.suffix in CPP_SOURCE_SUFFIXES)
LEGITIMATE += sorted({path for entry in MANIFEST for device in ("cpu", "cuda")
                      if not expected_reasons(entry, device) & STATIC_REASONS for path in own_kernels(entry, device)})


@pytest.mark.parametrize("path", LEGITIMATE, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_legitimate_kernels_of_the_repository_pass(path):
    assert scan_cpp(path.read_text(), "kernels/" + path.name) == []


# -- state kept between calls ------------------------------------------------------------------

@pytest.mark.parametrize("source, name", [
    ("torch::Tensor f(torch::Tensor x) {\n  static int calls = 0;\n  ++calls;\n  return x;\n}\n", "calls"),
    ("int calls = 0;\n", "calls"),
    ("namespace {\nint calls = 0;\n}\n", "calls"),
    ("namespace kernels::detail {\nlong calls;\n}\n", "calls"),
    ('extern "C" {\nunsigned long long calls = 0ULL;\n}\n', "calls"),
    ("static std::atomic<int> calls{0};\n", "calls"),
    ("std::atomic<std::int64_t> calls(0);\n", "calls"),
    ("void f() {\n  static std::atomic_int calls;\n}\n", "calls"),
    ("void f() {\n  static bool first = true;\n}\n", "first"),
    ("void f() {\n  static auto calls = 0;\n}\n", "calls"),
    ("void f() {\n  static int calls(0);\n}\n", "calls"),
    ("void f() {\n  thread_local int calls = 0;\n}\n", "calls"),
    ("std::size_t calls = 0;\n", "calls"),
    ("float history[4] = {0, 0, 0, 0};\n", "history"),
    ("constinit int calls = 0;\n", "calls"),
    ("struct Counter {\n  static int calls;\n};\n", "calls"),
    ("void f() {\n  auto next = [] { static int calls = 0; return calls++; };\n}\n", "calls"),
    ("[[maybe_unused]] static int calls = 0;\n", "calls"),
    ("__device__ int launches;\n", "launches"),
    ("__device__ unsigned int launches = 0;\n", "launches"),
    ("__managed__ int launches;\n", "launches"),
    ("static __device__ float total;\n", "total"),
    ("__device__ float* scratch;\n", "scratch"),
    ("#define COUNTER(name) static int name = 0\nvoid f() {\n  COUNTER(calls);\n}\n", "calls"),
    # data, tensors and the candidate's own types: a memo of earlier inputs and outputs
    ("static torch::Tensor packed;\n", "packed"),
    ("void f() {\n  static std::vector<float> memo;\n}\n", "memo"),
    ("std::unordered_map<std::int64_t, std::vector<float>> outputs;\n", "outputs"),
    ("std::unique_ptr<float[]> previous;\n", "previous"),
    ("struct Entry {\n  float key;\n};\nvoid f() {\n  static std::vector<Entry> entries;\n}\n", "entries"),
    ("struct Book {\n  int calls;\n};\nstatic Book book;\n", "book"),
    ("void f() {\n  static std::string marks;\n}\n", "marks"),
    ("dim3 grid(1);\n", "grid"),
    ("void f() {\n  static auto op = lookup();\n}\n", "op"),
    ("auto remember = [history = std::vector<float>()]() mutable { return history.size(); };\n", "remember"),
    ("static std::map<int, std::pair<cudaStream_t, float>> streams;\n", "streams"),
])
def test_state_kept_between_calls_is_refused(source, name):
    found = [f for f in scan_cpp(PRELUDE + source, "kernels/k.cu") if f["rule"] == "cpp-state"]
    assert found and found[0]["reason"] == "forbidden_construct", found
    line = next(number for number, text in enumerate((PRELUDE + source).split("\n"), 1) if name in text)
    assert found[0]["line"] == line
    message = found[0]["message"]
    assert message.startswith(f"kernels/k.cu line {line}: '{name}'"), message
    assert "depend only on its inputs" in message and "pass state explicitly" in message


@pytest.mark.parametrize("source", [
    "constexpr int kThreads = 256;\nconst float kScale = 2.f;\nint const kRows = 4;\n",
    "static const int kThreads = 256;\nstatic constexpr int kWarps = 8;\ninline constexpr double kEps = 1e-5;\n",
    "constinit const int kBlocks = 4;\nconst float kTable[4] = {1, 2, 3, 4};\n",
    "__constant__ float weights[64];\n__device__ const float kTable[2] = {1.f, 2.f};\n",
    "__global__ void k(float* y) {\n  __shared__ float tile[256];\n  static __shared__ float more[32];\n"
    "  extern __shared__ float dynamic[];\n  y[0] = tile[0] + more[0] + dynamic[0];\n}\n",
    # handles, streams, events and pointers created once: what bindings legitimately keep
    "static cublasHandle_t handle = nullptr;\nstatic float* workspace = nullptr;\n",
    "void f() {\n  static cudaStream_t side = [] { cudaStream_t s = nullptr; return s; }();\n"
    "  static const bool ready = [] { return true; }();\n  static std::once_flag once;\n  (void)ready;\n}\n",
    "std::mutex lock;\nstatic std::unordered_map<int, cublasHandle_t> handles;\n"
    "std::unordered_map<int, std::pair<cudaEvent_t, cudaEvent_t>> events;\n"
    "static std::array<cudaStream_t, 4> streams;\nstatic std::optional<at::cuda::CUDAGraph> graph;\n"
    "std::map<std::string, std::unique_ptr<cudnnTensorDescriptor_t>> descriptors;\n",
    # functions, types and statements that read like declarations
    "static int helper(int x) { return x; }\nstatic inline bool ok(const char* s) { return s != nullptr; }\n",
    "int blocks_for(int64_t n) { return static_cast<int>(n / 256); }\nint64_t numel(const torch::Tensor& t);\n",
    "__device__ float block_sum(float v, float* scratch) { return v + scratch[0]; }\n"
    "__device__ __forceinline__ unsigned lane_id() { unsigned l = 0; return l; }\n"
    "__host__ __device__ inline float square(float x) { return x * x; }\n",
    "template <int N, bool B> __global__ void k(float* y) { int i = N; y[i] = B; }\n",
    "auto twice = [] __device__ (float x) { return 2 * x; };\n",
    "typedef int index_t;\nusing scalar_t = float;\nenum { kTile = 32 };\nenum class Mode : int { A = 0, B = 1 };\n",
    "struct Params {\n  int n;\n  float scale = 1.f;\n  static constexpr int kMax = 4;\n};\n",
    "void f() {\n  int calls = 0;\n  for (int i = 0; i < 4; ++i) calls += i;\n"
    "  static_assert(sizeof(int) == 4, \"int\");\n}\n",
    "const dim3 grid(1);\nvoid launch(int n = 0, float s = 1.f);\nstatic int identity(int x) noexcept;\n",
])
def test_constants_handles_functions_and_shared_memory_are_no_state(source):
    assert scan_cpp(PRELUDE + source, "kernels/k.cu") == []


# -- macro calls whose arguments run over lines -----------------------------------------------

@pytest.mark.parametrize("source, reason, line", [
    # a qualified name assembled from two of a call's arguments, on two lines
    ("#define SCOPED(scope, name) scope::name\nvoid f() {\n  auto& keys = SCOPED(SCOPED(c10,\n      impl),\n"
     "      raw_local_dispatch_key_set);\n}\n", "forbidden_construct", 4),
    ("#define SCOPED(scope, name) scope::name\nvoid f(const torch::Tensor& x) {\n  auto y = SCOPED(at,\n"
     "                  cpu)::relu(x);\n}\n", "forbidden_operation", 4),
    # .attr and py::module_::import spelled by macros, the parenthesis on the next line
    ("#define MEMBER(object, name) object.name\nvoid f(py::module_& m) {\n  MEMBER\n    (m,\n     attr)(\"x\");\n}\n",
     "forbidden_construct", 4),
    ("#define SCOPED(scope, name) scope::name\nvoid f() {\n  auto m = SCOPED(py::module_,\n"
     "                  import)(\"torch\");\n}\n", "forbidden_construct", 4),
])
def test_a_macro_call_over_lines_is_read_as_one_line(source, reason, line):
    found = scan_cpp(PRELUDE + source, "kernels/k.cpp")
    # Found at the line where the call begins, and only with the file's macros expanded.
    assert found and all(f["rule"] == "cpp-macro" for f in found), found
    assert found[0]["reason"] == reason and found[0]["line"] == line, found
    assert "with the candidate's macros expanded" in found[0]["message"]


def test_a_name_already_on_a_line_of_the_call_is_reported_once():
    source = PRELUDE + "#define HIDE(f, x) f(x)\nconst auto y = HIDE(\n  at::\n  _ops::add::call,\n  x);\n"
    found = scan_cpp(source, "kernels/k.cpp")
    assert found and {f["line"] for f in found} == {4}, found
    assert not [f for f in found if f["rule"] == "cpp-macro"]


def test_macro_calls_over_lines_of_ordinary_kernels_pass_and_long_ones_are_not_joined():
    source = PRELUDE + textwrap.dedent("""\
        #define CHECK_INPUT(x) TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, \\
                                          #x " must be a contiguous float32 tensor")
        #define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
        #define LAUNCH(kernel, n, ...) kernel<<<CEIL_DIV(n, 256), 256, 0, \\
                                                at::cuda::getCurrentCUDAStream()>>>(__VA_ARGS__)
        __global__ void scale(float* out, const float* in, int64_t n) {}
        torch::Tensor run(const torch::Tensor& x) {
          CHECK_INPUT(
              x);
          auto y = torch::empty_like(x);
          LAUNCH(scale,
                 x.numel(),
                 y.data_ptr<float>(), x.data_ptr<float>(),
                 x.numel());
          return y;
        }
    """)
    assert scan_cpp(source, "kernels/k.cu") == []
    far = "#define SCOPED(scope, name) scope::name\nvoid f() {\n  auto m = SCOPED(py::module_,\n" + \
          "      \n" * _MACRO_CALL_LINES + "      import)(\"torch\");\n}\n"
    assert [f for f in scan_cpp(PRELUDE + far, "kernels/k.cpp") if f["rule"] == "cpp-macro"] == []


# -- names of Python's internals in strings ------------------------------------------------------

@pytest.mark.parametrize("literal, name", [
    ('"sys"', "sys"), ('"modules"', "modules"), ('"__import__"', "__import__"), ('"builtins"', "builtins"),
    ('"__dict__"', "__dict__"), ('"_C"', "_C"), ('"torch._C"', "_C"), ('"Python"', "Python"),
    ('"_DisableTorchDispatch"', "_DisableTorchDispatch"), ('"_pop_torch_dispatch_stack"', "_pop_torch_dispatch_stack"),
    ('"__torch_dispatch__"', "__torch_dispatch__"), ('"torch.utils._python_dispatch"', "_python_dispatch"),
    # what the compiler makes one string: adjacent literals, escapes, raw and prefixed literals
    ('"_Disable" "TorchDispatch"', "_DisableTorchDispatch"),
    ('"_Disable"\n      "TorchDispatch"', "_DisableTorchDispatch"), ('"s" /* gap */ R"(ys)"', "sys"),
    ('"\\x5f\\x5fimport\\x5f\\x5f"', "__import__"), ('u8"__builtins__"', "__builtins__"),
    ('R"x(globals)x"', "globals"),
])
def test_strings_that_name_pythons_internals_are_refused(literal, name):
    found = [f for f in scan_cpp(PRELUDE + f"void f() {{\n  lookup({literal});\n}}\n", "kernels/k.cpp")
             if f["rule"] == "cpp-python-name"]
    assert found and found[0]["reason"] == "forbidden_construct" and found[0]["line"] == 3, found
    assert f"names {name}," in found[0]["message"], found[0]["message"]


def test_messages_and_names_of_a_binding_are_no_python_internals():
    source = PRELUDE + textwrap.dedent("""\
        torch::Tensor run(const torch::Tensor& x) {
          TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
          TORCH_CHECK(x.dim() == 2, "Python dispatch aside, sys modules and builtins are no concern here");
          TORCH_CHECK(x.numel() > 0, "sys: ", x.numel(), " elements");
          const char* name = "torch.relu";
          const char* halves[] = {"sy", "s"};
          (void)name; (void)halves;
          return x;
        }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "run (CUDA)", py::arg("x")); }
    """)
    assert scan_cpp(source, "kernels/k.cpp") == []


# -- the adversarial candidates of these rules -----------------------------------------------------

@pytest.mark.parametrize("candidate, rule", [
    ("countdown_in_static", "cpp-state"), ("countdown_on_device", "cpp-state"),
    ("cpp_modes_popped_over_lines", "cpp-macro"), ("cpp_dispatch_disabled_over_lines", "cpp-macro"),
    ("cpp_keys_excluded_over_lines", "cpp-macro"),
])
def test_the_suites_candidates_for_these_rules_are_refused_by_them(candidate, rule):
    directories = sorted((REPOSITORY / "tests" / "adversarial" / "candidates" / candidate).glob("kernels.*"))
    assert directories
    for directory in directories:
        found = [f for path in sorted(directory.iterdir()) for f in scan_cpp(path.read_text(), "kernels/" + path.name)]
        assert found and found[0]["reason"] == "forbidden_construct" and found[0]["rule"] == rule, (directory, found)
        # Nothing the text shows line by line: the rule under test is what finds them.
        assert not [f for f in found if f["rule"] in ("cpp-construct", "cpp-torch")], (directory, found)


def test_only_candidates_expected_to_be_refused_statically_meet_these_rules():
    for entry in MANIFEST:
        for device in ("cpu", "cuda"):
            for path in own_kernels(entry, device):
                rules = {f["rule"] for f in scan_cpp(path.read_text(), "kernels/" + path.name)}
                if rules & {"cpp-state", "cpp-python-name"}:
                    assert expected_reasons(entry, device) & STATIC_REASONS, (entry["name"], device, path.name)


def test_strip_keeps_offsets_and_lines():
    text = 'a(); // at::matmul\nb("at::relu"); /* std::thread\n t; */ c(R"x(at::mm)x");\n'
    stripped = strip_cpp(text)
    assert len(stripped) == len(text) and stripped.count("\n") == 3
    assert "matmul" not in stripped and "relu" not in stripped and "thread" not in stripped and "mm" not in stripped


# -- the library policy --------------------------------------------------------------------

class _Context:
    device = "cpu"


def _policy(tmp_path, body: str, init: str = "", inputs: str = "[torch.randn(8, 16)]", init_inputs: str = "[]") -> dict:
    reference = tmp_path / "model.py"
    reference.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init or "pass"}

            def forward(self, x):
                {body}

        def get_inputs():
            return {inputs}

        def get_init_inputs():
            return {init_inputs}
    """))
    return operators.library_policy({"reference_path": str(reference), "device": "cpu"}, _Context())


def test_elementwise_and_reductions_get_no_library(tmp_path):
    for body in ("return torch.relu(x)", "return torch.sum(x, dim=-1)", "return torch.softmax(x, dim=1) * 2 + x",
                 "return torch.nn.functional.layer_norm(x, (16,))"):
        result = _policy(tmp_path, body)
        assert (result["cublas"], result["cudnn"]) == (False, False), (body, result)
        assert result["derived_from"] == "meta"


def test_products_get_cublas_whatever_their_spelling(tmp_path):
    for init, body in [("self.fc = nn.Linear(16, 4)", "return torch.relu(self.fc(x))"),
                       ("", "return x @ x.t()"),
                       ("", "return torch.einsum('ij,kj->ik', x, x)"),
                       ("", "return torch.bmm(x.unsqueeze(0), x.t().unsqueeze(0))")]:
        result = _policy(tmp_path, body, init)
        assert (result["cublas"], result["cudnn"]) == (True, False), (body, result)
        assert result["matrix_products"]


def test_convolutions_get_cudnn_and_cublas(tmp_path):
    result = _policy(tmp_path, "return self.conv(x)", "self.conv = nn.Conv2d(3, 4, 3)", "[torch.randn(1, 3, 8, 8)]")
    assert (result["cublas"], result["cudnn"]) == (True, True)
    assert result["convolutions"] == ["convolution"]


def test_a_reference_that_cannot_run_on_meta_runs_on_its_device(tmp_path):
    # .item() has no value on the meta device.
    result = _policy(tmp_path, "return x * float(x.abs().max().item()) + (x @ x.t()).sum()")
    assert result["derived_from"] == "cpu" and result["cublas"]
    assert result["failures"] and result["failures"][0].startswith("meta")


def test_a_reference_that_runs_nowhere_is_judged_by_its_source(tmp_path):
    result = _policy(tmp_path, "raise RuntimeError('broken'); return torch.matmul(x, x)")
    assert result["derived_from"] == "source"
    assert result["cublas"] and not result["cudnn"]


def test_the_link_policys_torch_operators_cover_the_guards_allowlist():
    """C++ may call, through at::_ops, every overload of what the forward guard allows."""
    import re

    import torch

    from cuda_agent_harness.checks.guard import ALLOWED_ATEN

    header = (REPOSITORY / "include" / "cuda_agent" / "library_policy.hpp").read_text()
    table = header[header.index("torch_operators_always_allowed[] = {"):]
    table = table[:table.index("};")]
    listed = set(re.findall(r'"(\w+)"', table))
    missing = []
    for packet in ALLOWED_ATEN:
        overloads = getattr(torch.ops.aten, packet, None)
        for overload in (overloads.overloads() if overloads is not None else []):
            name = packet if overload == "default" else f"{packet}_{overload.replace('.', '_')}"
            if name not in listed:
                missing.append(name)
    assert not missing, missing


@pytest.mark.parametrize("source", [
    # a header named by a macro: the scan cannot read which
    '#define HEADER "ATen/native/cpu/LogSoftmaxKernelImpl.h"\n#include HEADER\n',
    "#define HEADER <thread>\n#  include HEADER\n",
    # a tensor's lazy negation bit: copy_ of such a view computes -x inside torch
    "torch::Tensor f(torch::Tensor x) { auto v = x.view(-1); v.unsafeGetTensorImpl()->_set_neg(true);"
    " return torch::empty_like(x).copy_(v); }\n",
    "torch::Tensor f(torch::Tensor x) { return torch::_neg_view(x); }\n",
])
def test_includes_named_by_macros_and_tensor_internals_are_refused(source):
    found = reasons(PRELUDE + source)
    assert found and found[0][0] == "forbidden_construct", found
