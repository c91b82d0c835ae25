#!/usr/bin/env python3
"""Builds every hand-written GPU candidate on a machine without a GPU, the way a CUDA
compile driver would, and checks what can be checked without running a kernel.

For each candidate directory (tests/gpu_candidates/<level>/<task>/<variant>/):
  1. nvcc compiles each kernels/*.cu for sm_90 (the H200), g++ compiles kernels/*.cpp against
     a precompiled torch header, and the objects are linked into cuda_extension<EXT_SUFFIX>
     with the libraries a torch CUDA extension gets (c10, torch, torch_cpu, torch_python,
     c10_cuda, torch_cuda, cudart) and nothing else: cuBLAS and cuDNN symbols must resolve
     through torch_cuda's own dependencies, as they do for a torch extension.
  2. A fresh Python process imports torch and the built module (undefined symbols fail here),
     imports model_new.py, checks that ModelNew.__init__ has Model's signature, builds both
     models on the meta device with the task's get_init_inputs(), and loads Model's state
     dict into ModelNew strictly.

Usage: build_local.py [--jobs N] [--build-dir DIR] [filter ...]
A filter selects candidates whose path contains it (e.g. "level1/19_ReLU" or "broken").
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
TASKS = REPO / "tests" / "data" / "kernelbench"
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")
CUDA_HOME = pathlib.Path(NVCC).resolve().parents[1]
CCACHE = ["ccache"] if subprocess.run(["which", "ccache"], capture_output=True).returncode == 0 else []


def torch_paths() -> tuple[list[str], list[str], bool]:
    code = ("import json, torch, torch.utils.cpp_extension as c;"
            "print(json.dumps([c.include_paths(device_type='cuda'), c.library_paths(device_type='cuda'),"
            " bool(torch._C._GLIBCXX_USE_CXX11_ABI)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json
    includes, libraries, abi = json.loads(out.strip().splitlines()[-1])
    return includes, libraries, abi


def candidates(filters: list[str]) -> list[pathlib.Path]:
    found = sorted(p.parent for p in HERE.glob("level*/*/*/model_new.py"))
    return [c for c in found if not filters or any(f in str(c.relative_to(HERE)) for f in filters)]


def task_file(candidate: pathlib.Path) -> pathlib.Path:
    return TASKS / candidate.parents[1].name / f"{candidate.parent.name}.py"


def run(command: list[str], log: list[str]) -> bool:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        log.append("$ " + " ".join(command) + "\n" + result.stdout + result.stderr)
    return result.returncode == 0


class Builder:
    def __init__(self, build_dir: pathlib.Path):
        self.build_dir = build_dir
        self.includes, self.libraries, abi = torch_paths()
        self.includes.append(sysconfig.get_paths()["include"])
        self.defines = ["-DTORCH_EXTENSION_NAME=cuda_extension", "-DTORCH_API_INCLUDE_EXTENSION_H",
                        f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}"]
        self.pch_header = build_dir / "pch" / "torch_binding_pch.hpp"

    def ensure_pch(self) -> None:
        """One precompiled header for the torch/pybind includes every binding.cpp uses."""
        gch = self.pch_header.with_suffix(".hpp.gch")
        if gch.exists():
            return
        self.pch_header.parent.mkdir(parents=True, exist_ok=True)
        self.pch_header.write_text("#pragma once\n#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n"
                                   "#include <c10/cuda/CUDAGuard.h>\n")
        log: list[str] = []
        if not run(["g++", "-std=c++17", "-O2", "-fPIC", "-x", "c++-header", *self.defines,
                    *[f"-isystem{i}" for i in self.includes], str(self.pch_header), "-o", str(gch)], log):
            raise SystemExit("precompiled header failed:\n" + "\n".join(log))

    def build(self, candidate: pathlib.Path) -> tuple[bool, str, float]:
        started = time.monotonic()
        rel = candidate.relative_to(HERE)
        out = self.build_dir / rel
        out.mkdir(parents=True, exist_ok=True)
        log: list[str] = []
        objects = []
        sources = sorted((candidate / "kernels").iterdir())
        include_flags = [flag for i in self.includes for flag in ("-isystem", i)] + [f"-I{candidate / 'kernels'}"]
        ok = True
        for source in sources:
            obj = out / (source.name + ".o")
            if source.suffix == ".cu":
                command = [*CCACHE, NVCC, "-std=c++17", "-O3", "-c", str(source), "-o", str(obj),
                           "-gencode=arch=compute_90,code=sm_90", "-Xcompiler", "-fPIC",
                           "--expt-relaxed-constexpr", "-Werror", "all-warnings", *self.defines,
                           *include_flags]
            elif source.suffix == ".cpp":
                command = [*CCACHE, "g++", "-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror",
                           "-include", str(self.pch_header), "-c", str(source), "-o", str(obj), *self.defines,
                           *include_flags]
            else:
                continue
            ok = run(command, log) and ok
            objects.append(str(obj))
        if not ok:
            return False, "\n".join(log), time.monotonic() - started
        module = out / ("cuda_extension" + sysconfig.get_config_var("EXT_SUFFIX"))
        link = ["g++", "-shared", "-o", str(module), *objects, *[f"-L{p}" for p in self.libraries],
                *[f"-Wl,-rpath,{p}" for p in self.libraries], "-lc10", "-ltorch", "-ltorch_cpu",
                "-ltorch_python", "-lc10_cuda", "-ltorch_cuda", "-lcudart"]
        if not run(link, log):
            return False, "\n".join(log), time.monotonic() - started
        check = textwrap.dedent(f"""
            import importlib.util, inspect, sys, torch
            sys.path.insert(0, {str(out)!r})
            import cuda_extension
            def load(name, path):
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module
            task = load("task_model", {str(task_file(candidate))!r})
            new = load("model_new", {str(candidate / 'model_new.py')!r})
            ref_sig = inspect.signature(task.Model.__init__)
            new_sig = inspect.signature(new.ModelNew.__init__)
            assert list(ref_sig.parameters) == list(new_sig.parameters), (ref_sig, new_sig)
            init = task.get_init_inputs()
            with torch.device("meta"):
                reference = task.Model(*init)
                candidate = new.ModelNew(*init)
            candidate.load_state_dict(reference.state_dict(), strict=True, assign=True)
            exported = sorted(n for n in dir(cuda_extension) if not n.startswith("_"))
            print("ok", exported)
        """)
        result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
        if result.returncode != 0:
            return False, result.stdout + result.stderr, time.monotonic() - started
        return True, result.stdout.strip().splitlines()[-1], time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--build-dir", type=pathlib.Path, default=pathlib.Path("/tmp/gpu_candidates_build"))
    parser.add_argument("filters", nargs="*")
    args = parser.parse_args()
    builder = Builder(args.build_dir)
    builder.ensure_pch()
    selected = candidates(args.filters)
    failures = 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for candidate, (ok, message, seconds) in zip(selected, pool.map(builder.build, selected)):
            rel = candidate.relative_to(HERE)
            print(f"{'PASS' if ok else 'FAIL'} {rel} ({seconds:.1f} s) {message if ok else ''}", flush=True)
            if not ok:
                failures += 1
                print(textwrap.indent(message, "    "))
    print(f"{len(selected) - failures}/{len(selected)} candidates built and loaded")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
