# SPDX-License-Identifier: Apache-2.0
"""The static checks: what they flag, with which reason, and what they leave alone."""

import textwrap

import pytest

from cuda_agent_harness.checks.scan import scan_cpp, scan_python, strip_cpp

REFERENCE = textwrap.dedent("""
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_features, out_features):
            super().__init__()
""")


def python(body: str) -> str:
    return textwrap.dedent(body).lstrip()


def reasons(findings):
    return [(f["reason"], f["rule"]) for f in findings]


def test_a_clean_candidate_has_no_findings():
    source = python('''
        import math
        import torch
        import torch.nn as nn
        import cuda_extension as ext

        NOTE = "try: torch.matmul(a, b) except: pass  # import threading; exec('x')"

        class Empty:
            pass

        class ModelNew(nn.Module):
            def __init__(self, in_features, out_features):
                super().__init__()
                self.fc = nn.Linear(in_features, out_features)
                self.register_buffer("mask", torch.tril(torch.ones(4, 4)))  # compute in __init__ is fine
                nn.init.zeros_(self.fc.bias)

            def forward(self, input):
                out = torch.empty(input.shape[0], self.fc.out_features, device=input.device, dtype=input.dtype)
                stream = torch.cuda.current_stream()
                layer = self.fc
                ext.linear(input, layer.weight, layer.bias, out)
                return out.view(-1).reshape(out.shape)
    ''')
    assert scan_python(source, reference_source=REFERENCE) == []


@pytest.mark.parametrize("line, reason, rule", [
    ("import threading", "forbidden_module", "import"),
    ("import numpy as np", "forbidden_module", "import"),
    ("from model import Model", "forbidden_module", "import"),
    ("import torch.utils.cpp_extension", "forbidden_module", "import"),
    ("torch.allclose = lambda *a: True", "forbidden_construct", "monkeypatch"),
    ("setattr(torch.testing, 'assert_close', None)", "forbidden_construct", "monkeypatch"),
    ("torch.backends.cudnn.enabled = False", "forbidden_construct", "monkeypatch"),
    ("torch.set_num_threads(1)", "forbidden_construct", "torch-global"),
    ("x = torch._C._nn", "forbidden_construct", "torch-private"),
    ("f = eval('1')", "forbidden_construct", "builtin"),
    ("g = getattr(torch, 'mat' + 'mul')", "forbidden_construct", "reflection"),
])
def test_module_level_violations(line, reason, rule):
    source = "import torch\nimport torch.nn as nn\n" + line + "\n\nclass ModelNew(nn.Module):\n    pass\n"
    assert (reason, rule) in reasons(scan_python(source))


@pytest.mark.parametrize("statement, reason, rule", [
    ("return torch.matmul(x, x)", "forbidden_operation", "torch-compute"),
    ("return F.relu(x)", "forbidden_operation", "torch-functional"),
    ("return torch.ops.aten.mm.default(x, x)", "forbidden_operation", "torch-ops"),
    ("return t.relu(x)", "forbidden_operation", "torch-compute"),
    ("return alias.sigmoid(x)", "forbidden_operation", "torch-compute"),
    ("return torch.compile(lambda a: a)(x)", "forbidden_construct", "torch-global"),
    ("return x.__class__", "forbidden_construct", "introspection"),
])
def test_forward_violations_through_aliases(statement, reason, rule):
    source = python(f'''
        import torch
        import torch as t
        import torch.nn as nn
        import torch.nn.functional as F
        alias = torch

        class ModelNew(nn.Module):
            def forward(self, x):
                {statement}
    ''')
    assert (reason, rule) in reasons(scan_python(source))


def test_try_except_and_finalizers_and_tensor_subclasses():
    source = python('''
        import torch
        import torch.nn as nn

        class Lazy(torch.Tensor):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return x
                except Exception:
                    return x
            def __del__(self):
                pass
    ''')
    found = reasons(scan_python(source))
    assert ("forbidden_construct", "try-except") in found
    assert ("forbidden_construct", "finalizer") in found
    assert ("forbidden_construct", "tensor-subclass") in found


def test_try_finally_without_handlers_is_allowed():
    source = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        try:\n            return x\n        finally:\n            pass\n"
    assert scan_python(source) == []


def test_interface_is_checked_against_the_reference():
    assert ("interface_mismatch", "interface") in reasons(scan_python("x = 1\n"))
    source = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n"
    found = scan_python(source, reference_source=REFERENCE)
    assert found and found[0]["reason"] == "interface_mismatch"
    assert "in_features, out_features" in found[0]["message"]


def test_syntax_errors_are_load_errors_with_a_line():
    found = scan_python("class ModelNew(:\n")
    assert found[0]["reason"] == "load_error" and found[0]["line"] == 1


def test_cpp_comments_and_strings_are_not_code():
    code = strip_cpp('a(); // at::matmul\nb("at::relu"); /* std::thread\n t; */ c(R"x(at::mm)x");\n')
    assert "matmul" not in code and "relu" not in code and "thread" not in code and "mm" not in code
    assert code.count("\n") == 3


def test_cpp_allowed_torch_surface():
    source = textwrap.dedent('''
        #include <torch/extension.h>
        #include <ATen/cuda/CUDAContext.h>
        #include <c10/cuda/CUDAGuard.h>
        torch::Tensor f(const torch::Tensor& x) {
          const c10::cuda::CUDAGuard guard(x.device());
          TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
          auto y = torch::empty_like(x);
          auto z = x.contiguous().clone();
          auto s = at::cuda::getCurrentCUDAStream();
          at::ScalarType t = at::ScalarType::Float;
          auto handle = at::cuda::getCurrentCUDABlasHandle();
          // at::matmul would not be allowed, but this is a comment
          return y;
        }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("f", &f); }
    ''')
    assert scan_cpp(source, "kernels/binding.cpp") == []


@pytest.mark.parametrize("line, reason", [
    ("auto y = at::matmul(a, b);", "forbidden_operation"),
    ("auto y = torch::nn::functional::relu(a);", "forbidden_operation"),
    ("std::thread worker([]{}); worker.detach();", "forbidden_construct"),
    ("c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKey::Python);", "forbidden_construct"),
    ("auto op = c10::Dispatcher::singleton();", "forbidden_operation"),
    ("void* lib = dlopen(\"x\", 0);", "forbidden_construct"),
    ("if (fork() == 0) {}", "forbidden_construct"),
    ("cudaCtxResetPersistingL2Cache();", "forbidden_construct"),
    ("#define CALL(a, b) a##b", "forbidden_construct"),
    ("PyRun_SimpleString(\"import os\");", "forbidden_construct"),
])
def test_cpp_violations(line, reason):
    found = scan_cpp("#include <torch/extension.h>\nvoid f() {\n" + line + "\n}\n", "kernels/k.cu")
    assert found and found[0]["reason"] == reason and found[0]["line"] == 3


def test_library_policy_is_applied():
    source = "#include <cublas_v2.h>\nvoid f(cublasHandle_t h) {}\n"
    assert scan_cpp(source, "kernels/k.cpp") == []
    found = scan_cpp(source, "kernels/k.cpp", allow_cublas=False)
    assert found and found[0]["reason"] == "forbidden_module"
