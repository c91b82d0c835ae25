# SPDX-License-Identifier: Apache-2.0
"""Prints, as one JSON object, what the compile driver needs to build a torch extension
with this interpreter: include and library directories, the C++ ABI torch was built
with, the extension-module suffix, and where cuDNN lives when torch ships it.

Run once per toolchain by cuda_agent::CompileDriver; the result is cached on disk."""

import importlib.util
import json
import os
import platform
import sys
import sysconfig


def package_directory(name):
    """The directory of an installed package, or None (without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def find_library(directory, stem):
    """The versioned shared library `stem`.so.N in `directory` (newest first), or None."""
    if not directory or not os.path.isdir(directory):
        return None
    names = sorted((n for n in os.listdir(directory) if n.startswith(stem + ".so")), reverse=True)
    return os.path.join(directory, names[0]) if names else None


def main():
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(torch_dir, "include")
    cudnn_dir = package_directory("nvidia.cudnn")
    info = {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "extension_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "python_include_directory": sysconfig.get_paths()["include"],
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "torch_directory": torch_dir,
        "torch_version_file": os.path.join(torch_dir, "version.py"),
        "torch_include_directories": [include, os.path.join(include, "torch", "csrc", "api", "include")],
        "torch_library_directory": os.path.join(torch_dir, "lib"),
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)),
        "cudnn_include_directory": os.path.join(cudnn_dir, "include") if cudnn_dir else None,
        "cudnn_library": find_library(os.path.join(cudnn_dir, "lib"), "libcudnn") if cudnn_dir else None,
    }
    json.dump(info, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
