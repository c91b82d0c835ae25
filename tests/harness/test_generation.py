# SPDX-License-Identifier: Apache-2.0
"""KernelBench generations laid out as candidates (generation.py): the spellings of
load_inline and load that the text alone resolves, the layout load_inline would have built,
and what needs the file to run, refused with its line."""
import ast
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from cuda_agent_harness import generation
from cuda_agent_harness.generation import Unresolved, convert

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
GENERATIONS = REPOSITORY / "tests" / "data" / "generations"


def converted(source: str) -> dict:
    return convert(textwrap.dedent(source))


def refused(source: str) -> Unresolved:
    with pytest.raises(Unresolved) as caught:
        convert(textwrap.dedent(source))
    return caught.value


def assert_uses_the_built_module(model_new: str) -> ast.Module:
    tree = ast.parse(model_new)
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert "cuda_extension" in imported
    calls = [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert not any(call.endswith("load_inline") or call.endswith(".load") or call == "load" for call in calls), calls
    assert "cpp_extension" not in " ".join(
        ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))
    return tree


def test_functions_get_the_binding_load_inline_generates_after_the_torch_include():
    result = converted('''
        from torch.utils.cpp_extension import load_inline
        cpp = "torch::Tensor relu(torch::Tensor x);"
        cuda = "torch::Tensor relu(torch::Tensor x) { return x; }"
        ext = load_inline(name="e", cpp_sources=cpp, cuda_sources=cuda, functions=["relu"])
        ''')
    main, kernel = result["files"]["kernels/main.cpp"], result["files"]["kernels/cuda.cu"]
    assert main.startswith("#include <torch/extension.h>\ntorch::Tensor relu(torch::Tensor x);")
    assert 'm.def("relu", &relu, "relu");' in main
    assert main.index("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)") > main.index("torch::Tensor relu")
    assert kernel.startswith("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n")
    assert kernel.endswith("{ return x; }")
    assert result["build"] == {"function": "load_inline", "line": 5}
    tree = assert_uses_the_built_module(result["files"]["model_new.py"])
    assignment = next(node for node in tree.body if isinstance(node, ast.Assign) and node.targets[0].id == "ext")
    assert ast.unparse(assignment.value) == "cuda_extension"


@pytest.mark.parametrize("functions, expected", [
    ('"forward"', ['m.def("forward", &forward, "forward");']),
    ('{"forward": "the forward pass", "backward": "unused"}',
     ['m.def("forward", &forward, "the forward pass");', 'm.def("backward", &backward, "unused");']),
])
def test_functions_as_a_name_or_a_dict_of_docstrings(functions, expected):
    main = converted(f'''
        import torch.utils.cpp_extension
        m = torch.utils.cpp_extension.load_inline("n", "void forward();", functions={functions})
        ''')["files"]["kernels/main.cpp"]
    for line in expected:
        assert line in main


def test_the_binding_never_reaches_into_torch_internals():
    # load_inline wraps each function in torch::wrap_pybind_function, which the C++ scan
    # refuses as torch internals; the function itself is bound, with or without the option.
    for option in ("", ", with_pytorch_error_handling=False"):
        main = converted(f'''
            from torch.utils.cpp_extension import load_inline as build
            m = build("n", "void f();", functions="f"{option})
            ''')["files"]["kernels/main.cpp"]
        assert 'm.def("f", &f, "f");' in main and "wrap_pybind_function" not in main


def test_what_only_fed_the_build_leaves_the_model():
    model = converted('''
        import os
        import textwrap
        from pathlib import Path
        import math
        import torch
        from torch.utils.cpp_extension import load_inline, load
        HEADER = "// header"  # its own comment
        BODY = textwrap.dedent(HEADER + "void f();")
        SCALE = math.sqrt(2.0)
        ext = load_inline("n", BODY, functions=["f"])
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return ext.f(x) * SCALE
        ''')["files"]["model_new.py"]
    tree = ast.parse(model)
    assert [ast.unparse(node) for node in tree.body[:4]] == ["import cuda_extension", "import math", "import torch",
                                                             "SCALE = math.sqrt(2.0)"]
    assert "textwrap" not in model and "HEADER" not in model and "Path" not in model and "os" not in model.split()


def test_positional_arguments_aliases_dedent_join_and_no_implicit_headers():
    result = converted('''
        """A docstring first."""
        from __future__ import annotations
        import textwrap
        from torch.utils import cpp_extension as ce
        HEAD = "#include <torch/extension.h>\\n"
        BODY = textwrap.dedent("""
            int twice(int v) { return 2 * v; }
        """).strip()
        MODULE = "\\n".join(["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", "m.def(\\"twice\\", &twice);", "}"])
        ext = ce.load_inline("n", [HEAD + BODY, MODULE], None, None, None, ["-O3"], no_implicit_headers=True)
        ''')
    main = result["files"]["kernels/main.cpp"]
    assert main == "#include <torch/extension.h>\nint twice(int v) { return 2 * v; }\n" \
                   "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def(\"twice\", &twice);\n}"
    assert "kernels/cuda.cu" not in result["files"]
    assert result["notes"] and '"extra_cflags": ["-O3"]' in result["notes"][0]
    model = result["files"]["model_new.py"]
    # The import goes after the docstring and the __future__ import, which must stay first.
    assert model.splitlines()[1:4] == ['"""A docstring first."""', "from __future__ import annotations",
                                      "import cuda_extension"]
    assert_uses_the_built_module(model)


@pytest.mark.parametrize("path_expression, expected", [
    ('os.path.join(os.path.dirname(__file__), "k.cu")', "k.cu"),
    ('os.path.join(os.path.dirname(os.path.realpath(__file__)), "src", "k.cu")', "src/k.cu"),
    ('str(Path(__file__).parent / "k.cu")', "k.cu"),
    ('Path(__file__).resolve().parent / "src" / "k.cu"', "src/k.cu"),
    ('"k.cu"', "k.cu"),
])
def test_load_names_its_source_files_relative_to_the_generation(path_expression, expected):
    result = converted(f'''
        import os
        from pathlib import Path
        from torch.utils.cpp_extension import load
        ext = load(name="n", sources=[{path_expression}, "binding.cpp"], extra_cuda_cflags=["-O3"])
        ''')
    assert result["source_files"] == [expected, "binding.cpp"]
    assert result["build"]["function"] == "load"
    assert list(result["files"]) == ["model_new.py"]


def test_the_build_call_inside_the_constructor_is_replaced_where_it_is():
    result = converted('''
        import torch
        from torch.utils.cpp_extension import load_inline
        SOURCE = "void f();"
        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = load_inline(
                    name="n",
                    cpp_sources=SOURCE,
                    functions=["f"],
                )
            def forward(self, x):
                return self.ext.f(x)
        ''')
    assert "self.ext = cuda_extension\n" in result["files"]["model_new.py"]


@pytest.mark.parametrize("source, line, fragment", [
    ('''
     from torch.utils.cpp_extension import load_inline
     source = open("k.cpp").read()
     m = load_inline("n", source, functions=["f"])
     ''', 3, "calls `open`"),
    ('''
     from torch.utils.cpp_extension import load_inline
     m = load_inline("n", open("k.cpp").read(), functions=["f"])
     ''', 3, "calls `open`"),
    ('''
     from torch.utils.cpp_extension import load_inline
     source = "void f();"
     source = source + "void g();"
     m = load_inline("n", source)
     ''', 5, "not assigned exactly once"),
    ('''
     from torch.utils.cpp_extension import load_inline
     name = "f"
     m = load_inline("n", f"void {name}();")
     ''', 4, "not fixed by the file's text"),
    ('''
     from torch.utils.cpp_extension import load_inline
     kwargs = {"cpp_sources": "void f();"}
     m = load_inline("n", **kwargs)
     ''', 4, "with * or **"),
    ('''
     from torch.utils.cpp_extension import load_inline
     m = load_inline("n", "void f();", sycl_sources="x")
     ''', 3, "SYCL"),
    ('''
     from torch.utils.cpp_extension import load_inline
     m = load_inline("n", "void f();", functions=["not a name"])
     ''', 3, "must name C++ functions"),
    ('''
     from torch.utils.cpp_extension import load_inline
     a = load_inline("a", "void f();")
     b = load_inline("b", "void g();")
     ''', 4, "more than one extension"),
    ('''
     import torch
     class ModelNew(torch.nn.Module):
         pass
     ''', 0, "builds no extension"),
])
def test_what_only_running_the_file_would_tell_is_refused_with_its_line(source, line, fragment):
    error = refused(source)
    assert error.reason == "unresolved_sources"
    assert error.line == line
    assert fragment in str(error)


def test_a_file_that_is_not_python_is_a_load_error():
    error = refused("def broken(:\n")
    assert error.reason == "load_error" and error.line == 1 and "not valid Python" in str(error)


def test_the_script_speaks_json_on_its_standard_streams_in_a_bare_interpreter():
    script = pathlib.Path(generation.__file__)
    for name, expect_ok in [("level_1_problem_1_sample_0_kernel.py", True), ("level_1_problem_1_sample_4_kernel.py", False)]:
        request = json.dumps({"source": (GENERATIONS / name).read_text()})
        done = subprocess.run([sys.executable, "-I", "-S", "-c", script.read_text()], input=request,
                              capture_output=True, text=True, timeout=60, check=True)
        reply = json.loads(done.stdout)
        assert reply["ok"] is expect_ok
        if expect_ok:
            assert set(reply["files"]) == {"model_new.py", "kernels/main.cpp"}
        else:
            assert reply["reason"] == "unresolved_sources" and reply["line"] == 9
