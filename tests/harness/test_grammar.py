# SPDX-License-Identifier: Apache-2.0
"""The grammar of model_new.py: every legitimate model_new.py of the repository passes it, and
every construct outside the allowlist is rejected with its reason, its rule and its line."""

import ast
import glob
import json
import os
import textwrap

import pytest

from cuda_agent_harness.checks.grammar import Contract, check_model_new
from cuda_agent_harness.checks.scan import scan

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ADVERSARIAL = os.path.join(ROOT, "tests", "adversarial")
KERNELBENCH = os.path.join(ROOT, "tests", "data", "kernelbench")


def read(path: str) -> str:
    with open(path) as file:
        return file.read()


def source(body: str) -> str:
    return textwrap.dedent(body).lstrip()


def first(findings):
    return (findings[0]["reason"], findings[0]["rule"], findings[0]["line"]) if findings else None


# -- every legitimate model_new.py passes ---------------------------------------------------------

def adversarial_manifest() -> list[dict]:
    return json.loads(read(os.path.join(ADVERSARIAL, "manifest.json")))["candidates"]


def expected_verdicts(entry: dict) -> set[str]:
    verdicts = set()
    for device in ("cpu", "cuda"):
        expect = (entry.get(device) or {}).get("expect")
        verdicts |= {expect} if isinstance(expect, str) else set(expect or ())
    return verdicts


def legitimate_candidates() -> list[tuple[str, str | None]]:
    """(model_new.py, reference) of every legitimate candidate in the repository."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "gpu_candidates", "level*", "*", "*", "model_new.py"))):
        level, task = path.split(os.sep)[-4:-2]
        reference = os.path.join(KERNELBENCH, level, task + ".py")
        found.append((path, reference if os.path.exists(reference) else None))
    for entry in adversarial_manifest():
        if "correct" in expected_verdicts(entry):
            for path in sorted(glob.glob(os.path.join(ADVERSARIAL, "candidates", entry["name"], "model_new*.py"))):
                found.append((path, os.path.join(ADVERSARIAL, "tasks", "cpu", entry["task"] + ".py")))
    for pattern in ("scripts/demo/**/model_new.py", "resources/demo/**/model_new.py", "examples/**/model_new.py",
                    "benchmarks/**/model_new.py"):
        found += [(path, None) for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True))]
    return found


LEGITIMATE = legitimate_candidates()


def test_the_corpus_of_legitimate_candidates_is_complete():
    names = {os.path.relpath(path, ROOT) for path, _ in LEGITIMATE}
    assert len(names) >= 70
    for expected in ("tests/gpu_candidates/level3/44_MiniGPTBlock/correct/model_new.py",
                     "tests/adversarial/candidates/cuda_graph_static_buffers/model_new.py",
                     "tests/adversarial/candidates/python_side_stream_joined/model_new.py",
                     "tests/adversarial/candidates/packed_weight_cache/model_new.py",
                     "tests/adversarial/candidates/inplace_like_reference/model_new.py",
                     "scripts/demo/cuda/final/model_new.py"):
        assert expected in names


@pytest.mark.parametrize("path, reference", LEGITIMATE, ids=[os.path.relpath(p, ROOT) for p, _ in LEGITIMATE])
def test_every_legitimate_candidate_passes(path, reference):
    findings = check_model_new(read(path), "model_new.py", read(reference) if reference else None)
    assert findings == []


def demo_trajectory_candidates() -> list[str]:
    written = []
    for path in sorted(glob.glob(os.path.join(ROOT, "resources", "demo", "*", "trajectory.jsonl"))):
        for line in read(path).splitlines():
            for call in (json.loads(line).get("message") or {}).get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"])
                if arguments.get("file_path", "").endswith("model_new.py") and "content" in arguments:
                    written.append(arguments["content"])
    return written


def test_the_model_new_py_the_demo_trajectories_write_passes():
    written = demo_trajectory_candidates()
    assert len(written) >= 2
    for text in written:
        assert check_model_new(text) == []


def kernelbench_references() -> list[str]:
    return sorted(glob.glob(os.path.join(KERNELBENCH, "level*", "*.py")))


def starter_for(reference: str) -> str:
    """resources/starter/model_new.py rendered as the workspace renders it for a task."""
    model = next(node for node in ast.parse(reference).body if isinstance(node, ast.ClassDef) and node.name == "Model")
    signatures = {}
    for item in model.body:
        if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "forward"):
            item.args.posonlyargs, item.args.args = item.args.posonlyargs, item.args.args[1:]
            signatures[item.name] = ast.unparse(item.args)
    constructor, forward = signatures.get("__init__", ""), signatures.get("forward", "")
    return (read(os.path.join(ROOT, "resources", "starter", "model_new.py"))
            .replace("{{task_name}}", "a task")
            .replace("{{constructor_parameters}}", ", " + constructor if constructor else "")
            .replace("{{forward_parameters}}", ", " + forward if forward else ", *inputs"))


def test_the_starter_passes_for_every_kernelbench_task():
    references = kernelbench_references()
    assert len(references) > 150
    for path in references:
        reference = read(path)
        assert check_model_new(starter_for(reference), "model_new.py", reference) == [], path


EVERY_ALLOWED_CONSTRUCT = source('''
    """A ModelNew that uses every construct of the grammar."""
    from __future__ import annotations

    import functools
    import math
    from collections import OrderedDict
    from typing import List, Optional, Tuple

    import torch
    import torch.nn as nn
    from torch import nn as torch_nn

    import cuda_extension
    import cuda_extension as ext
    from cuda_extension import relu_into

    BLOCK = 256
    SCALES = (1.0, 2.0)


    @functools.lru_cache(maxsize=None)
    def blocks(n: int, block: int = BLOCK) -> int:
        return (n + block - 1) // block


    def launch(x: torch.Tensor, out: torch.Tensor, scale: float) -> torch.Tensor:
        cuda_extension.scale_into(x, out, scale * 2.0, blocks(x.numel()))
        return out


    class Parameters(nn.Module):
        """Holds parameters under the reference's names; never called."""

        def __init__(self, features: int):
            super().__init__()
            self.proj = nn.Linear(features, 3 * features)
            self.register_buffer("mask", torch.tril(torch.ones(features, features)).view(1, features, features))
            self.heads = features // 2


    class ModelNew(torch_nn.Module):
        limit = 4

        def __init__(self, features: int, dim: int = 1, shape: Tuple[int, ...] = (2, 2)):
            super(ModelNew, self).__init__()
            assert features % 2 == 0, "features must be even"
            if dim < 0:
                raise ValueError(f"dim must not be negative, not {dim}")
            self.dim = dim
            self.eps = 1e-5 * math.sqrt(features)
            self.attn = Parameters(features)
            self.norm = nn.LayerNorm(features)
            self.blocks = nn.ModuleList([nn.Linear(features, features) for _ in range(2)])
            self.heads = nn.ModuleDict(dict(first=nn.Linear(features, features)))
            self.seq = nn.Sequential(OrderedDict([("fc", nn.Linear(features, features)), ("act", nn.ReLU())]))
            self.weight = nn.Parameter(torch.randn(features, features) / math.sqrt(features))
            nn.init.zeros_(self.norm.bias)
            self.register_buffer("table", torch.arange(features, dtype=torch.float32).exp(), persistent=False)
            self.linear_indices = [i for i, layer in enumerate(self.seq) if isinstance(layer, (nn.Linear, nn.Conv2d))]
            self.packed = self.weight.detach().t().contiguous()   # a cache built in __init__
            self.key: Optional[tuple] = None
            self.out = None
            self.graph = None
            self.side = torch.cuda.Stream() if torch.cuda.is_available() else None
            self.calls = 0

        def pack(self, weight: torch.Tensor) -> torch.Tensor:
            key = (weight._version, weight.data_ptr(), tuple(weight.shape))
            if self.key != key:
                self.packed = ext.transpose_pack(weight)
                self.key = key
            return self.packed

        def shape_of(self, x: torch.Tensor) -> Tuple[int, int]:
            rows = x.numel() // x.shape[-1]
            return rows, x.size(-1)

        @torch.no_grad()
        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            self.calls += 1
            rows, columns = self.shape_of(x)
            shape = tuple(x.shape[:-1]) + (columns,)
            wrong_device = x.device.type not in ("cpu", "cuda")
            if not x.is_contiguous() or x.dim() != 2 or x.dtype != torch.float32 or wrong_device:
                x = x.contiguous().to(torch.float32).view(rows, columns)
            if self.out is None or tuple(self.out.shape) != shape:
                self.out = torch.empty(shape, dtype=x.dtype, device=x.device)
            weights: List[torch.Tensor] = [self.seq[i].weight for i in self.linear_indices]
            biases = [block.bias for block in self.blocks] + [self.heads.first.bias]
            total = sum(w.numel() for w in weights) + max(x.shape) + abs(-rows) + round(self.eps * 10) + len(biases)
            cuda_extension.linear_packed_into(x, self.pack(self.weight), self.norm.weight, self.out)
            relu_into(self.out, self.out)
            launch(self.out, self.out, SCALES[0] * self.limit)
            staged = x.new_empty(x.shape).copy_(x).reshape(-1).view(rows, columns).t().contiguous().t()
            staged.zero_()
            staged[0].fill_(float(total % 7))
            for index, (weight, bias) in enumerate(zip(weights, biases)):
                cuda_extension.add_bias_(self.out, weight.view(-1)[: bias.numel()], index)
            if x.is_cuda and self.side is not None:
                current = torch.cuda.current_stream()
                done = torch.cuda.Event()
                self.side.wait_stream(current)
                with torch.cuda.stream(self.side):
                    result = cuda_extension.relu(self.out)
                done.record(self.side)
                current.wait_event(done)
                result.record_stream(current)
                if self.graph is None:
                    self.static = torch.empty_like(self.out)
                    self.graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(self.graph):
                        relu_into(self.static, self.static)
                self.static.copy_(result)
                self.graph.replay()
                return self.static.clone()
            scalar = self.attn.heads * 2 + self.dim
            out = cuda_extension.scale(self.out, scalar, self.table[0].item(), self.attn.mask.size(-1),
                                       self.attn.proj.out_features)
            print(f"{self.calls} calls, {out.shape}")
            return out.view(shape)
''')


def test_a_candidate_using_every_allowed_construct_passes():
    reference = "class Model:\n    def __init__(self, features: int, dim: int = 1, shape=(2, 2)):\n        pass\n"
    assert check_model_new(EVERY_ALLOWED_CONSTRUCT, "model_new.py", reference) == []


# -- what is rejected, with which reason and where --------------------------------------------------

def candidate(forward: str = "return cuda_extension.relu(x)", init: str = "", top: str = "") -> str:
    """A model_new.py whose forward, __init__ and module top are the given lines."""
    indent = lambda text, spaces: textwrap.indent(textwrap.dedent(text).strip(), " " * spaces)  # noqa: E731
    return ("import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport typing\n"
            "import functools\nimport collections\n\nimport cuda_extension\n"
            + (textwrap.dedent(top).strip() + "\n" if top else "")
            + "\n\nclass ModelNew(nn.Module):\n    def __init__(self, features=4):\n        super().__init__()\n"
            "        self.features = features\n        self.fc = nn.Linear(features, features)\n"
            + (indent(init, 8) + "\n" if init else "")
            + "\n    def forward(self, x):\n" + indent(forward, 8) + "\n")


def line_of(text: str, fragment: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), start=1) if fragment in line)


CASES = [
    # imports outside the list
    ("import os", "top", "forbidden_module", "import"),
    ("import operator", "top", "forbidden_module", "import"),
    ("import collections.abc", "top", "forbidden_module", "import"),
    ("import importlib", "top", "forbidden_module", "import"),
    ("from torch.nn.modules import module", "top", "forbidden_module", "import"),
    ("from . import helpers", "top", "forbidden_module", "import"),
    ("from torch import *", "top", "forbidden_construct", "import"),
    # attributes of modules beyond their tables: what modules hand out
    ("_sys = typing.sys", "top", "forbidden_construct", "module-attribute"),
    ("_abc = collections.abc", "top", "forbidden_construct", "module-attribute"),
    ("_reduce = functools.reduce", "top", "forbidden_construct", "module-attribute"),
    ("_torch = torch.nn.modules.module.torch", "top", "forbidden_construct", "torch-nn"),
    ("_torch = torch.nn.parameter.torch", "top", "forbidden_construct", "torch-nn"),
    ("_threading = torch.cuda.threading", "top", "forbidden_construct", "torch-cuda"),
    ("_sys = torch.sys", "top", "forbidden_operation", "torch-compute"),
    ("_modes = torch.utils._python_dispatch", "top", "forbidden_construct", "torch-global"),
    ("_overrides = torch.overrides", "top", "forbidden_construct", "torch-global"),
    ("_c = torch._C", "top", "forbidden_construct", "torch-private"),
    ("_private = cuda_extension._handle", "top", "forbidden_construct", "private"),
    ("from torch import relu as r", "top", "forbidden_operation", "torch-compute"),
    ("from torch.nn.functional import relu", "top", "forbidden_operation", "torch-functional"),
    # reflection and dunders
    ("return getattr(cuda_extension, 'relu')(x)", "forward", "forbidden_construct", "reflection"),
    ("return functools.reduce(getattr, ['nn', 'modules'], torch)", "forward", "forbidden_construct",
     "module-attribute"),
    ("setattr(self, 'fc', None)", "forward", "forbidden_construct", "reflection"),
    ("setattr(torch, 'relu', None)", "top", "forbidden_construct", "monkeypatch"),
    ("return vars(self)", "forward", "forbidden_construct", "reflection"),
    ("return type(x).__mro__", "forward", "forbidden_construct", "reflection"),
    ("return x.__class__", "forward", "forbidden_construct", "introspection"),
    ("return cuda_extension.relu.__self__", "forward", "forbidden_construct", "introspection"),
    ("return self.forward.__func__.__globals__", "forward", "forbidden_construct", "introspection"),
    ("return globals()", "forward", "forbidden_construct", "builtin"),
    ("return eval('x')", "forward", "forbidden_construct", "builtin"),
    ("exec('import os')", "forward", "forbidden_construct", "builtin"),
    ("return __import__('os')", "forward", "forbidden_construct", "dunder"),
    ("return __builtins__", "forward", "forbidden_construct", "dunder"),
    ("nn.Module.__init__(self)", "init", "forbidden_construct", "introspection"),
    ("return super().__getattribute__('fc')", "forward", "forbidden_construct", "introspection"),
    ("return super().forward(x)", "forward", "forbidden_construct", "attribute"),
    ("self.__dict__['fc'] = None", "init", "forbidden_construct", "introspection"),
    ("return self._modules", "forward", "forbidden_construct", "private"),
    ("self._forward_hooks = {}", "init", "forbidden_construct", "reserved"),
    ("self.forward = self.fc", "init", "forbidden_construct", "reserved"),
    ("self.register_forward_hook(None)", "init", "forbidden_construct", "attribute"),
    ("self.register_buffer('b' + 'uf', torch.ones(1))", "init", "forbidden_construct", "reflection"),
    ("return x.grad_fn", "forward", "forbidden_construct", "attribute"),
    ("return x._base", "forward", "forbidden_construct", "private"),
    # aliasing
    ("t = torch\nreturn t.relu(x)", "forward", "forbidden_operation", "torch-compute"),
    ("return [torch][0].relu(x)", "forward", "forbidden_construct", "value"),
    ("return cuda_extension.relu(x, torch)", "forward", "forbidden_construct", "value"),
    ("return {'t': typing}['t']", "forward", "forbidden_construct", "value"),
    ("m = math if x.is_cuda else torch\nreturn m.relu(x)", "forward", "forbidden_construct", "module-attribute"),
    ("f = self.fc\nreturn f(x)", "forward", "forbidden_operation", "layer-call"),
    # torch compute, in forward and in what it calls
    ("return torch.relu(x)", "forward", "forbidden_operation", "torch-compute"),
    ("return torch.randn(4) + x", "forward", "forbidden_operation", "torch-compute"),
    ("return F.relu(x)", "forward", "forbidden_operation", "torch-functional"),
    ("return torch.ops.aten.relu.default(x)", "forward", "forbidden_operation", "torch-ops"),
    ("return torch.compile(cuda_extension.relu)(x)", "forward", "forbidden_construct", "torch-global"),
    ("return self.fc(x)", "forward", "forbidden_operation", "layer-call"),
    ("return nn.Linear(4, 4).weight", "forward", "forbidden_operation", "layer-construction"),
    ("return x.sum()", "forward", "forbidden_operation", "tensor-method"),
    ("return x.relu()", "forward", "forbidden_operation", "tensor-method"),
    ("return x.numpy()", "forward", "forbidden_operation", "tensor-method"),
    ("return x.tolist()", "forward", "forbidden_operation", "tensor-method"),
    ("x.apply_(float)\nreturn x", "forward", "forbidden_operation", "tensor-method"),
    ("return torch.Tensor.relu(x)", "forward", "forbidden_construct", "attribute"),
    # tensor arithmetic in forward
    ("return x + 1", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return x @ self.fc.weight", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return -x", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return x * self.features", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("y = cuda_extension.relu(x)\ny += x\nreturn y", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return cuda_extension.relu(x) if (x > 0).all() else x", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return abs(x)", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return sum([x, x])", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return max(x, 0.0)", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return cuda_extension.scale(x, math.sqrt(x))", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return [w * 2 for w in self.fc.parameters()]", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return cuda_extension.scale(x, sum(w for w in [x]))", "forward", "forbidden_operation", "tensor-arithmetic"),
    ("return x.shape[0] * x", "forward", "forbidden_operation", "tensor-arithmetic"),
    # values read back from a tensor's data (.item()) go to the extension, never into Python arithmetic
    ("return cuda_extension.scale(x, max(x[0].item(), 0.0))", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("return cuda_extension.scale(x, x[0].item() * 2)", "forward", "forbidden_operation", "read-back-arithmetic"),
    ("return cuda_extension.scale(x, float(x[0].item()))", "forward", "forbidden_operation", "read-back-arithmetic"),
    ("return cuda_extension.relu(x) if x[0].item() > 0 else x", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("if x[0].item():\n    return x\nreturn cuda_extension.relu(x)", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("return cuda_extension.scale(x, -x[0].item())", "forward", "forbidden_operation", "read-back-arithmetic"),
    # int(), float(), bool() of a tensor read its data back as .item() does
    ("if float(x.reshape(-1)[0]) < 0:\n    return cuda_extension.relu(x)\nreturn x", "forward",
     "forbidden_operation", "read-back-arithmetic"),
    ("return x if float(cuda_extension.row_sum(x)) > 0 else cuda_extension.relu(x)", "forward",
     "forbidden_operation", "read-back-arithmetic"),
    ("if bool(cuda_extension.any_negative(x)):\n    return cuda_extension.relu(x)\nreturn x", "forward",
     "forbidden_operation", "read-back-arithmetic"),
    ("return cuda_extension.scale(x, int(x[0]) + 1)", "forward", "forbidden_operation", "read-back-arithmetic"),
    ("return cuda_extension.scale(x, int(cuda_extension.count(x)) * 2)", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("return cuda_extension.scale(x, float(self.fc.weight[0, 0]) * 2)", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("for i in range(int(x[0])):\n    x = cuda_extension.relu(x)\nreturn x", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("for i in range(x[0].item()):\n    x = cuda_extension.relu(x)\nreturn x", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("return cuda_extension.scale(x, complex(x))", "forward", "forbidden_construct", "name"),
    # ... and so does the truth of a tensor
    ("if x.reshape(-1)[0]:\n    return cuda_extension.relu(x)\nreturn x", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("return x if not x.reshape(-1)[0] else cuda_extension.relu(x)", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("while self.fc.weight[0, 0]:\n    x = cuda_extension.relu(x)\nreturn x", "forward", "forbidden_operation",
     "read-back-arithmetic"),
    ("for i in range(x.reshape(-1)[0]):\n    x = cuda_extension.relu(x)\nreturn x", "forward",
     "forbidden_operation", "read-back-arithmetic"),
    # lambdas, closures, global state, generators
    ("self.f = lambda a: a * 2", "init", "forbidden_construct", "lambda"),
    ("def inner(a):\n    return a * 2\nreturn inner(x)", "forward", "forbidden_construct", "closure"),
    ("global BLOCK\nreturn x", "forward", "forbidden_construct", "global-state"),
    ("yield x", "forward", "forbidden_construct", "statement"),
    ("try:\n    return cuda_extension.relu(x)\nexcept RuntimeError:\n    return x", "forward", "forbidden_construct",
     "try-except"),
    ("with torch.autograd.profiler.profile():\n    return x", "forward", "forbidden_construct", "torch-global"),
    ("with open('/dev/shm/x') as f:\n    return x", "forward", "forbidden_construct", "builtin"),
    ("if __name__ == '__main__':\n    pass", "top", "forbidden_construct", "module-level"),
    ("for i in range(3):\n    pass", "top", "forbidden_construct", "module-level"),
    ("torch.allclose = None", "top", "forbidden_construct", "monkeypatch"),
    ("torch.backends.cudnn.enabled = False", "top", "forbidden_construct", "monkeypatch"),
    ("nn.Module.forward = None", "top", "forbidden_construct", "monkeypatch"),
    ("print(typing.Optional)", "top", "forbidden_construct", "annotation"),
]


@pytest.mark.parametrize("code, where, reason, rule", CASES, ids=[c[0].split("\n")[-1][:50] for c in CASES])
def test_each_construct_outside_the_grammar_is_rejected_with_its_reason_and_line(code, where, reason, rule):
    text = candidate(**{where: code})
    findings = check_model_new(text)
    assert findings, text
    line = line_of(text, [part for part in code.splitlines() if part.strip()][0]) if "\n" not in code.strip() \
        else None
    hit = [f for f in findings if (f["reason"], f["rule"]) == (reason, rule)]
    assert hit, findings
    if line is not None:
        assert hit[0]["line"] == line
        assert findings[0]["line"] == line
    assert hit[0]["message"].startswith(f"model_new.py line {hit[0]['line']}: ")


def test_the_first_finding_decides_the_reason_and_names_the_construct():
    text = candidate(top="_sys = typing.sys", forward="return x.relu()")
    findings = check_model_new(text)
    assert first(findings) == ("forbidden_construct", "module-attribute", line_of(text, "typing.sys"))
    assert "typing.sys" in findings[0]["message"] and "Optional" in findings[0]["message"]
    assert [f["line"] for f in findings] == sorted(f["line"] for f in findings)


# -- where code runs decides what it may compute -------------------------------------------------------

HELPER = source('''
    import torch
    import torch.nn as nn

    import cuda_extension


    def double(value):
        return value * 2


    class ModelNew(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.weight = nn.Parameter(self.initial(features))
            self.width = double(features)

        def initial(self, features):
            return torch.randn(features, features).abs() * 0.5

        def forward(self, x):
            return cuda_extension.scale(x, double(x.shape[0]){extra})
''')


def test_construction_may_compute_and_forward_may_not():
    assert check_model_new(HELPER.replace("{extra}", "")) == []
    # forward hands a tensor to the same helper: its arithmetic now runs on a tensor inside forward.
    findings = check_model_new(HELPER.replace("{extra}", ", double(x)"))
    assert first(findings) == ("forbidden_operation", "tensor-arithmetic", line_of(HELPER, "return value * 2"))
    # a method __init__ uses becomes forward code once forward calls it too.
    findings = check_model_new(HELPER.replace("{extra}", ", self.initial(4)"))
    assert ("forbidden_operation", "torch-compute", line_of(HELPER, "torch.randn")) in [
        (f["reason"], f["rule"], f["line"]) for f in findings]


def test_numbers_and_shapes_may_be_computed_in_forward():
    text = candidate(forward="""
        n = x.numel() // x.shape[-1] + len(x) * x.dim() - self.features % 3
        shape = tuple(x.shape[:-1]) + (n,)
        blocks = (x.size(0) + 255) // 256 if x.size(0) > 0 else -1
        scale = math.sqrt(self.fc.in_features) * self.fc.weight.shape[0] + x.stride(0)
        return cuda_extension.scale(x.view(x.shape[0], -1), scale, blocks, n, shape, max(x.shape), abs(-n))
    """)
    assert check_model_new(text) == []


def test_a_value_read_back_from_a_tensor_may_be_handed_to_the_extension_but_not_computed_on_in_a_helper():
    handed = candidate(forward="return cuda_extension.scale(x, self.fc.weight[0, 0].item())")
    assert check_model_new(handed) == []
    # A helper of the file that forward calls receives what forward passes it.
    helper = source("""
        import torch
        import torch.nn as nn
        import cuda_extension

        def rectify(value):
            return max(value, 0.0)

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()

            def forward(self, x):
                flat = x.reshape(-1)
                values = [rectify(flat[i].item()) for i in range(flat.numel())]
                return cuda_extension.touch(torch.tensor(values, dtype=x.dtype).reshape(x.shape))
        """)
    assert first(check_model_new(helper)) == ("forbidden_operation", "read-back-arithmetic", 6)


def test_numbers_made_of_numbers_shapes_and_constructor_arguments_stay_numbers_in_forward():
    text = source("""
        import math
        import torch
        import torch.nn as nn

        import cuda_extension


        class ModelNew(nn.Module):
            def __init__(self, k, scale):
                super().__init__()
                self.k = k
                self.scale = scale
                self.eps = float(scale) * 1e-3
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                rows = int(x.shape[0])
                total = int(math.prod(x.shape)) + int(x.numel()) + int(x.size(1))
                factor = float(self.scale) * 2 + float(self.k) + self.eps + float(self.fc.in_features)
                steps = int(self.k) if bool(x.dim() > 1) else 1
                for _ in range(int(self.k) + rows):
                    x = cuda_extension.scale(x, factor, total, steps)
                return x
        """)
    assert check_model_new(text) == []


def test_lists_and_dicts_of_numbers_stay_numbers_in_forward():
    text = candidate(top="""
        CONFIG = {"block": 256, "warps": 4}
        TILES = [16, 32]
    """, init="""
        self.widths = [features] * 3
        self.table = {"a": 1, "b": features // 2}
        self.offsets = [w * 2 for w in self.widths]
        self.steps = list(range(features))
    """, forward="""
        shape = list(x.shape)
        shape[-1] = shape[-1] // TILES[0]
        threads = CONFIG["block"] * self.table["a"] + CONFIG.get("warps", 4) * 32
        blocks, rest = divmod(x.numel(), threads)
        widest = max(self.widths) + self.widths[0] + sum(self.offsets) + self.steps[-1]
        for index, tile in enumerate(TILES):
            widest += tile * index
        if "block" in CONFIG and len(shape) > 1:
            blocks += 1
        return cuda_extension.scale(x, widest, blocks + (1 if rest else 0), shape)
    """)
    assert check_model_new(text) == []


@pytest.mark.parametrize("filling", [
    "self.sizes.append(x)",
    "self.sizes[0] = x",
    "self.sizes += [x]",
    "self.sizes.extend(x)",
    "self.sizes.insert(0, x)",
    "alias = self.sizes\nalias.append(x)",
    "(alias := self.sizes).append(x)",
    "holder = [x, self.sizes]\nholder[1].append(x)",
    "outputs = []\noutputs.append(self.sizes)\noutputs[0].append(x)",
    "self.put(self.sizes, x)",
    "for self.sizes[0] in [x]:\n    pass",
])
def test_a_list_of_numbers_that_anything_else_may_get_into_is_no_list_of_numbers(filling):
    text = candidate(init="self.sizes = [1, 2, 3]", forward=filling + "\nreturn cuda_extension.scale(x, self.sizes[0] * 2)"
                     ).replace("    def forward(self, x):", "    def put(self, into, value):\n        into.append(value)\n\n"
                 "    def forward(self, x):")
    findings = check_model_new(text)
    assert ("forbidden_operation", "tensor-arithmetic", line_of(text, "self.sizes[0] * 2")) in [
        (f["reason"], f["rule"], f["line"]) for f in findings], findings


@pytest.mark.parametrize("reading", [
    "value = self.table.get('a', x) * 2",
    "self.table.update({'a': x})\nvalue = self.table['a'] * 2",
    "self.table.setdefault('c', x)\nvalue = self.table['c'] * 2",
    "value = sum(self.table.values()) + sum([x, 1])",
])
def test_a_dict_of_numbers_gives_numbers_only_while_it_holds_numbers_only(reading):
    text = candidate(init="self.table = {'a': 1, 'b': 2}", forward=reading + "\nreturn cuda_extension.scale(x, value)")
    assert first(check_model_new(text))[:2] == ("forbidden_operation", "tensor-arithmetic")


def test_a_number_read_back_with_a_conversion_may_be_handed_to_the_extension_only():
    # As with .item(): the value reaches the extension untouched, and nothing branches on it.
    handed = candidate(forward="return cuda_extension.scale(x, float(self.fc.weight[0, 0]), int(x.reshape(-1)[0]))")
    assert check_model_new(handed) == []
    sniff = candidate(forward="""
        flat = x.reshape(-1)
        for index in range(0, flat.numel(), 256):
            if float(flat[index]) < 0:
                return cuda_extension.relu(x)
        return cuda_extension.copy(x)
    """)
    findings = check_model_new(sniff)
    assert first(findings) == ("forbidden_operation", "read-back-arithmetic", line_of(sniff, "if float(flat[index])"))
    assert "float(flat[index]) < 0" in findings[0]["message"] and "float()" in findings[0]["message"]


@pytest.mark.parametrize("laundering", [
    "v = float(f'{flat[0].item()!r}')\nreturn cuda_extension.scale(x, v if v > 0 else 0.0)",
    "v = float(str(flat[0]))\nreturn cuda_extension.scale(x, v)",
    "sizes = torch.Size(flat)\nreturn cuda_extension.scale(x, sizes[0])",
    "return cuda_extension.scale(x, TABLE[flat[0].item()])",
    "return cuda_extension.scale(x, TABLE[flat[0]])",
    "return cuda_extension.scale(x, self.ruler[:flat[0].item()].numel())",
    "return cuda_extension.scale(x, x[:flat[0].item(), 0].numel())",
    "return cuda_extension.scale(x, self.ruler[:flat[0]].numel())",
    "return cuda_extension.scale(x, torch.empty(flat[0].item()).numel())",
    "return cuda_extension.scale(x, x.new_empty(int(flat[0])).shape[0])",
    "return cuda_extension.scale(x, sum(1 for i in range(4) if any((flat[i],))))",
    "return cuda_extension.scale(x, all([flat[0], flat[1]]))",
    "values = [flat[i].item() for i in range(4)]\nreturn cuda_extension.scale(x, sorted(values)[1])",
    "values = []\nvalues.append(flat[0].item())\nreturn cuda_extension.scale(x, 0.5 in values)",
    "return cuda_extension.scale(x, {flat[0].item(): 1}.get(0.5, 0))",
    "return cuda_extension.scale(x, flat[0].item() or 1.0)",
    "return cuda_extension.scale(x, flat[0] and 1.0)",
    "v = int(flat[0])\nreturn cuda_extension.scale(x, sum(k for k in range(256) if v is k))",
    "v = flat[0].item()\nreturn cuda_extension.scale(x, 1.0 if v is not 0 else 0.0)",
])
def test_values_read_back_cannot_be_laundered_into_numbers(laundering):
    text = candidate(top="TABLE = (0.0, 1.0, 2.0)", init="self.ruler = torch.arange(1000)",
                     forward="flat = x.reshape(-1)\n" + laundering)
    found = first(check_model_new(text))
    assert found is not None and found[0] == "forbidden_operation", (laundering, found)
    assert found[1] in ("read-back-use", "read-back-arithmetic", "tensor-arithmetic"), found


def test_identity_with_none_and_shapes_through_zip_and_enumerate_stay_numbers():
    # `is None` decides nothing about data; an attribute a base class sets from a constructor
    # argument stays a number in a list display and through enumerate(zip(...)), whichever
    # pass of the inference meets it first.
    text = textwrap.dedent("""\
        import torch
        import torch.nn as nn

        import cuda_extension


        class Base(nn.Module):
            def __init__(self, features):
                super().__init__()
                self.features = features

            def check(self, x, bias=None):
                for index, (have, want) in enumerate(zip(x.shape[-1:], [self.features])):
                    if have != want or bias is not None:
                        raise ValueError("bad size at " + str(index))
                for have, want in zip(x.shape[-1:], {self.features: 1}):
                    assert have == want


        class ModelNew(Base):
            def __init__(self, features):
                super(ModelNew, self).__init__(features)

            def forward(self, x):
                self.check(x)
                return cuda_extension.scale(x, 2.0)
        """)
    assert check_model_new(text) == []


def test_values_read_back_may_be_named_printed_and_handed_to_the_extension():
    text = candidate(init="self.register_buffer('bounds', torch.tensor([0.0, 1.0]), persistent=False)", forward="""
        low, high = self.bounds[0].item(), self.bounds[1].item()
        bound = float(self.bounds[1])
        print(low)
        label = f"{x.shape[0]} rows, {x.dtype}"
        return cuda_extension.clamp(x, low, high, bound, label)
    """)
    assert check_model_new(text) == []


def test_a_value_the_inference_cannot_see_is_not_a_number():
    # An extension's result may be anything: it cannot be counted as a number.
    text = candidate(forward="n = cuda_extension.count(x)\nreturn cuda_extension.scale(x, n + 1)")
    assert first(check_model_new(text))[1] == "tensor-arithmetic"
    # A constructor argument is a number until the file stores a tensor under the same name.
    text = candidate(init="self.scale = features",
                     forward="self.scale = x\nreturn cuda_extension.scale(x, self.scale * 2)")
    assert first(check_model_new(text))[1] == "tensor-arithmetic"
    # Construction code may compute on weights with the arithmetic builtins: what they give
    # there is a tensor, not a number, once forward sees it.
    for built in ("max(self.fc.weight.reshape(-1))", "abs(self.fc.weight)", "sum(self.fc.weight)",
                  "divmod(self.fc.weight, 2)[0]"):
        text = candidate(init=f"self.bound = {built}", forward="return cuda_extension.scale(x, self.bound * 2)")
        assert first(check_model_new(text))[1] == "tensor-arithmetic", built


def test_a_method_of_an_object_the_grammar_cannot_follow_is_checked_as_forward_code():
    text = source('''
        import torch
        import torch.nn as nn

        import cuda_extension


        class Box:
            def __init__(self):
                self.items = []

            def compute(self, x):
                return torch.randn(3) * x


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.boxes = [Box()]

            def forward(self, x):
                return self.boxes[0].compute(x)
    ''')
    findings = check_model_new(text)
    assert ("forbidden_operation", "torch-compute", line_of(text, "torch.randn(3)")) in [
        (f["reason"], f["rule"], f["line"]) for f in findings]


def test_overriding_what_the_harness_calls_outside_forward_is_rejected():
    for method in ("train(self, mode=True)", "load_state_dict(self, state, strict=True)", "to(self, *args)",
                   "_call_impl(self, *args)", "state_dict(self)"):
        text = candidate() + f"\n    def {method}:\n        return self\n"
        findings = check_model_new(text)
        assert first(findings) == ("forbidden_construct", "reserved", line_of(text, f"def {method}")), method


@pytest.mark.parametrize("text, rule", [
    ("import torch.nn as nn\nclass Lazy(__import__('torch').Tensor):\n    pass\nclass ModelNew(nn.Module):\n    pass\n",
     "dunder"),
    ("import torch\nimport torch.nn as nn\nclass Lazy(torch.Tensor):\n    pass\nclass ModelNew(nn.Module):\n    pass\n",
     "tensor-subclass"),
    ("import torch.nn as nn\nclass ModelNew(Model):\n    pass\n", "delegation"),
    ("import torch.nn as nn\nclass ModelNew(nn.Linear):\n    pass\n", "class-base"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module, metaclass=type):\n    pass\n", "class-base"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __call__(self, x):\n        return x\n", "dunder"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __getattr__(self, name):\n        return 1\n",
     "dunder"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __del__(self):\n        pass\n", "finalizer"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    forward = print\n", "class-body"),
    ("import torch.nn as nn\nimport functools\nclass ModelNew(nn.Module):\n    @functools.wraps(print)\n"
     "    def forward(self, x):\n        return x\n", "module-attribute"),
    ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    @property\n    def forward(self):\n        return 1\n",
     "reflection"),
])
def test_class_level_constructs(text, rule):
    findings = check_model_new(text)
    assert findings and findings[0]["rule"] == rule and findings[0]["reason"] == "forbidden_construct", findings


def test_interface_findings():
    assert first(check_model_new("import torch\n")) == ("interface_mismatch", "interface", 0)
    assert first(check_model_new("class ModelNew:\n    pass\n")) == ("interface_mismatch", "interface", 1)
    reference = "class Model:\n    def __init__(self, in_features, out_features):\n        pass\n"
    findings = check_model_new(candidate(), "model_new.py", reference)
    assert findings[-1]["reason"] == "interface_mismatch"
    assert "(self, features)" in findings[-1]["message"]
    assert "(self, in_features, out_features)" in findings[-1]["message"]
    assert first(check_model_new("class ModelNew(:\n")) == ("load_error", "syntax", 1)


# -- the contract's later forms -------------------------------------------------------------------------

def test_torch_operators_of_a_namespace_the_contract_opens():
    text = candidate(forward="y = torch.ops.myext.scale(x, 2.0)\nreturn torch.ops.myext.scale.default(y, 2.0)")
    assert first(check_model_new(text))[:2] == ("forbidden_operation", "torch-ops")
    assert check_model_new(text, contract=Contract(torch_operator_namespaces=frozenset({"myext"}))) == []
    other = candidate(forward="return torch.ops.aten.relu(x)")
    assert first(check_model_new(other, contract=Contract(torch_operator_namespaces=frozenset({"myext"}))))[1] == \
        "module-attribute"
    with pytest.raises(ValueError):
        Contract(torch_operator_namespaces=frozenset({"aten"}))


def test_the_extension_module_names_come_from_the_contract():
    text = "import torch.nn as nn\nimport my_kernels\n\nclass ModelNew(nn.Module):\n" \
           "    def forward(self, x):\n        return my_kernels.run(x)\n"
    assert first(check_model_new(text)) == ("forbidden_module", "import", 2)
    assert check_model_new(text, contract=Contract(extension_modules=frozenset({"my_kernels"}))) == []


# -- exploits that got through the denylist ----------------------------------------------------------

EXPLOITS = {
    "guard_allowlist_widened": ("forbidden_construct", "module-attribute"),
    "dispatch_modes_popped": ("forbidden_construct", "torch-nn"),
    "unguarded_worker_thread": ("forbidden_construct", "module-attribute"),
    "dispatch_key_excluded": ("forbidden_module", "import"),
}


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_exploits_of_the_forward_guard_are_rejected_by_the_grammar(name):
    path = os.path.join(ADVERSARIAL, "candidates", name, "model_new.py")
    findings = check_model_new(read(path))
    assert findings and (findings[0]["reason"], findings[0]["rule"]) == EXPLOITS[name], findings
    entry = next(e for e in adversarial_manifest() if e["name"] == name)
    assert findings[0]["reason"] in expected_verdicts(entry)


HOLES = [
    # Each of these passed the denylist scan that the grammar replaces.
    "_guard = typing.sys.modules['cuda_agent_harness.checks.guard']",
    "_modes = torch.nn.modules.module.torch.utils._python_dispatch._disable_current_modes",
    "_c = torch.nn.parameter.torch._C",
    "_threading = collections.abc.sys.modules['threading']",
    "_walk = functools.reduce(getattr, ['nn', 'modules', 'module', 'sys'], torch)",
    "_defaults = cuda_extension.relu.__defaults__",
]


@pytest.mark.parametrize("line", HOLES)
def test_holes_of_the_denylist_are_closed(line):
    text = candidate(top=line)
    findings = check_model_new(text)
    assert findings and findings[0]["line"] == line_of(text, line) and findings[0]["reason"] == "forbidden_construct"


def test_the_scan_handler_uses_the_grammar():
    files = {"model_new.py": candidate(forward="return x.relu()"), "kernels/k.cpp": "int f() { return 0; }\n"}
    result = scan({"files": files}, None)
    assert [(f["file"], f["rule"]) for f in result["findings"]] == [("model_new.py", "tensor-method")]
    assert scan({"files": {"model_new.py": candidate()}}, None)["findings"] == []
