# SPDX-License-Identifier: Apache-2.0
"""The C++ scan (cpp_scan.py) against the spellings that hide a call from a line-by-line
reader, and the library policy derived from a reference's operators (operators.py)."""
import pathlib
import textwrap

import pytest

from cuda_agent_harness.verify import operators
from cuda_agent_harness.checks.cpp_scan import device_ranges, scan_cpp, strip_cpp

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
    later = PRELUDE + "int x = 1 + \\\n  2;\nvoid g() { std::thread t([] {}); }\n"
    assert reasons(later)[0][:2] == ("forbidden_construct", 4)


def test_a_qualified_name_broken_over_lines_is_one_name():
    found = scan_cpp(PRELUDE + "auto y = at::\n    cpu::\n    relu(x);\n", "kernels/k.cpp")
    assert found and found[0]["reason"] == "forbidden_operation" and found[0]["line"] == 2


def test_a_continued_comment_hides_what_the_compiler_hides():
    # The compiler joins the line before it ends the comment: this is no call at all.
    assert reasons(PRELUDE + "// a comment \\\nauto y = at::matmul(a, b);\nint z = 0;\n") == []


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
             "kernels/k.cu": '#include "lane.cuh"\n', "kernels/binding.cpp": PRELUDE + "int x = 0;\n"}
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
    assert reasons(PRELUDE + "Py_ssize_t n = 0; PyObject* o = nullptr;\n") == []


def test_library_policy_names_every_use():
    source = PRELUDE + "#include <cublas_v2.h>\nvoid f(cublasHandle_t h) {\n  cublasSaxpy(h, 1, nullptr, nullptr, 1, nullptr, 1);\n}\n"
    assert reasons(source) == []
    found = reasons(source, allow_cublas=False)
    assert {line for reason, line, rule in found if rule == "library"} == {2, 3, 4}


LEGITIMATE = sorted(
    path for pattern in ("tests/gpu_candidates/*/*/correct/kernels/*", "tests/adversarial/kernels/*/*",
                         "scripts/demo/*/*/kernels/*", "resources/starter/*/kernels/*")
    for path in REPOSITORY.glob(pattern)
    if path.suffix in (".cu", ".cuh", ".cpp", ".h", ".hpp"))
LEGITIMATE += sorted(
    path for path in REPOSITORY.glob("tests/adversarial/candidates/*/kernels.*/*")
    if path.parts[-3].startswith(("correct", "link_families", "cpp_side_stream_joined", "cublas_gemm")))


@pytest.mark.parametrize("path", LEGITIMATE, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_legitimate_kernels_of_the_repository_pass(path):
    assert scan_cpp(path.read_text(), "kernels/" + path.name) == []


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
