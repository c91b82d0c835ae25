#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering rule of include/cuda_agent/, and its check.

Includes point only down the chain:

    contracts and vocabulary (the top-level headers and the top detail/)
      <- llm, sandbox, tasks, tools (the file tools), and the optional http, cuda, torch
      <- compile, verify, profile (each with the tool that drives it)
      <- evaluate
      <- agent
      <- the at-scale parts: service, bench, deploy, synthesis
      <- server (the service over HTTP)

A header may include headers of its own folder and of any lower layer. It may not include
a higher layer, nor a folder of its own layer unless SIDEWAYS names that edge (with the
reason). Besides the chain:
  - a subsystem's detail/ is its own: only the subsystem includes it (and the folders
    DETAIL_FRIENDS names); the top detail/ is shared by all;
  - the optional components (OPTIONAL) are included only by themselves, so that the core
    compiles with the standard library and nlohmann_json alone;
  - every folder under include/cuda_agent/ must have a place in LAYERS;
  - the umbrella header (UMBRELLA) may include every core header.

    layering.py [--root <repository>]   check include/ (exit 1 and one line per violation)
    layering.py --self-test             check the checker on a copy with bad includes
"""

import argparse
import pathlib
import re
import shutil
import sys
import tempfile

# --- the rule, as data ---------------------------------------------------------------
# (layer, folders). "" is the top level of include/cuda_agent/ with its detail/.
LAYERS = [
    (0, [""]),
    (1, ["llm", "sandbox", "tasks", "tools", "http", "cuda", "torch"]),
    (2, ["compile", "verify", "profile"]),
    (3, ["evaluate"]),
    (4, ["agent"]),
    # The at-scale parts, each in its own folder above agent (deploy and synthesis not
    # written yet). An edge between two of them goes into SIDEWAYS with its reason.
    (5, ["service", "bench", "deploy", "synthesis"]),
    # The optional HTTP face of the service (cpp-httplib).
    (6, ["server"]),
]

# Edges allowed within one layer: (from, to) -> why.
SIDEWAYS = {
    ("http", "llm"): "the libcurl clients implement the llm wire protocols and read llm_spec",
    ("verify", "compile"): "the Verify tool builds the candidate with the compile driver first",
    ("profile", "verify"): "WorkerTimingLauncher times in the verifier's warm harness workers",
}

# Folders that may include another subsystem's detail/: owner -> friends.
DETAIL_FRIENDS = {
    "llm": ["http"],
}

OPTIONAL = ["http", "cuda", "torch", "server"]
UMBRELLA = "cuda_agent.hpp"
# -----------------------------------------------------------------------------------

LAYER_OF = {folder: layer for layer, folders in LAYERS for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](cuda_agent/[^">]+)[">]')


def place(relative):
    """(folder, is_detail) of a path relative to include/cuda_agent/."""
    parts = relative.split("/")
    if len(parts) == 1:
        return "", False
    if parts[0] == "detail":
        return "", True
    return parts[0], len(parts) > 2 and parts[1] == "detail"


def violation(source, target):
    """Why `source` may not include `target` (paths below include/cuda_agent/), or None."""
    source_folder, _ = place(source)
    target_folder, target_detail = place(target)
    for folder in (source_folder, target_folder):
        if folder not in LAYER_OF:
            return f"folder '{folder}/' has no place in the layering table (tests/headers/layering.py)"
    if source == UMBRELLA:
        if target_folder in OPTIONAL:
            return f"the umbrella header covers the core only, not the optional component '{target_folder}/'"
        return None
    if target_folder in OPTIONAL and target_folder != source_folder:
        return (f"'{target_folder}/' is an optional component: only its own headers include it, "
                "the core must compile without it")
    if target_detail and target_folder and source_folder != target_folder \
            and source_folder not in DETAIL_FRIENDS.get(target_folder, []):
        return f"'{target_folder}/detail/' is private to {target_folder}/"
    if source_folder == target_folder:
        return None
    source_layer, target_layer = LAYER_OF[source_folder], LAYER_OF[target_folder]
    if target_layer < source_layer:
        return None
    if target_layer == source_layer and (source_folder, target_folder) in SIDEWAYS:
        return None
    direction = "up" if target_layer > source_layer else "sideways"
    def name(folder):
        return f"{folder}/" if folder else "the top level"
    return (f"points {direction}: {name(source_folder)} (layer {source_layer}) may not include "
            f"{name(target_folder)} (layer {target_layer})")


def check(include_root):
    """Violations as (file, line, target, reason), for every header under include_root."""
    base = include_root / "cuda_agent"
    found = []
    headers = sorted(p for p in base.rglob("*") if p.suffix in (".hpp", ".cuh", ".h") and p.is_file())
    folders = sorted({place(h.relative_to(base).as_posix())[0] for h in headers})
    for folder in folders:
        if folder not in LAYER_OF:
            found.append((f"include/cuda_agent/{folder}/", 0, "",
                          f"folder '{folder}/' has no place in the layering table (tests/headers/layering.py)"))
    for header in headers:
        source = header.relative_to(base).as_posix()
        if place(source)[0] not in LAYER_OF:
            continue
        for number, line in enumerate(header.read_text(encoding="utf-8").splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)[len("cuda_agent/"):]
            reason = violation(source, target)
            if reason:
                found.append((f"include/cuda_agent/{source}", number, f"cuda_agent/{target}", reason))
    return found, len(headers)


def report(found):
    for file, line, target, reason in found:
        where = f"{file}:{line}:" if line else f"{file}:"
        what = f" includes {target}:" if target else ""
        print(f"{where}{what} {reason}")


# A deliberate bad include per kind of violation, added to a copy of the real tree:
# (file, include, expected fragment of the reason). The last one adds a folder.
BAD_INCLUDES = [
    ("llm/llm_spec.hpp", "agent/agent_loop.hpp", "points up: llm/ (layer 1) may not include agent/ (layer 4)"),
    ("message.hpp", "tools/tools.hpp", "points up: the top level (layer 0) may not include tools/ (layer 1)"),
    ("detail/files.hpp", "sandbox/sandbox_options.hpp", "points up: the top level (layer 0) may not include sandbox/"),
    ("compile/compile_driver.hpp", "profile/harness_profiler.hpp",
     "points sideways: compile/ (layer 2) may not include profile/ (layer 2)"),
    ("sandbox/process_sandbox.hpp", "tasks/task_loader.hpp", "points sideways: sandbox/ (layer 1)"),
    ("agent/agent_loop.hpp", "sandbox/detail/cgroup_v2.hpp", "'sandbox/detail/' is private to sandbox/"),
    ("evaluate/trusted_evaluator.hpp", "http/http.hpp", "'http/' is an optional component"),
    ("cuda_agent.hpp", "torch/output_check.hpp", "not the optional component 'torch/'"),
]


def self_test(root):
    failures = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-layering-") as scratch:
        copy = pathlib.Path(scratch) / "include"
        shutil.copytree(root / "include", copy)
        clean, _ = check(copy)
        if clean:
            failures.append("the unchanged copy of include/ should pass, but:")
            failures.extend(f"  {f}:{l}: {r}" for f, l, _, r in clean)
        expected = []
        for file, target, reason in BAD_INCLUDES:
            path = copy / "cuda_agent" / file
            path.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text(encoding="utf-8") if path.exists() else "#pragma once\n"
            lines = text.splitlines()
            lines.append(f'#include "cuda_agent/{target}"')
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            expected.append((f"include/cuda_agent/{file}", len(lines), f"cuda_agent/{target}", reason))
        # Allowed edges must stay allowed: down the chain, within a folder, listed sideways,
        # a friend's detail/, the top detail/ from anywhere.
        allowed = [("agent/optimize.hpp", "llm/llm_spec.hpp"), ("verify/verify_tool.hpp", "compile/compile_driver.hpp"),
                   ("http/curl_transport.hpp", "llm/detail/sse_parser.hpp"), ("tools/read.hpp", "detail/files.hpp"),
                   ("evaluate/reward_policies.hpp", "evaluate/trusted_evaluator.hpp")]
        for file, target in allowed:
            path = copy / "cuda_agent" / file
            path.write_text(path.read_text(encoding="utf-8") + f'#include "cuda_agent/{target}"\n', encoding="utf-8")
        mystery = copy / "cuda_agent" / "mystery"
        mystery.mkdir()
        (mystery / "thing.hpp").write_text('#pragma once\n#include "cuda_agent/message.hpp"\n', encoding="utf-8")
        found, _ = check(copy)
        for file, line, target, reason in expected:
            hits = [f for f in found if f[0] == file and f[1] == line and f[2] == target and reason in f[3]]
            if not hits:
                failures.append(f"missed: {file}:{line} including {target} (expected '{reason}')")
        for f in found:
            if f[0] != "include/cuda_agent/mystery/" and not any(f[0] == e[0] and f[1] == e[1] for e in expected):
                failures.append(f"unexpected: {f[0]}:{f[1]}: {f[3]}")
        folder = [f for f in found if f[0] == "include/cuda_agent/mystery/" and f[1] == 0]
        if not folder:
            failures.append("missed: the unplaced folder include/cuda_agent/mystery/")
        print(f"self-test: {len(expected)} bad includes and one unplaced folder planted, "
              f"{len(found)} violations reported:")
        report(found)
    if failures:
        print("self-test FAILED:")
        print("\n".join(failures))
        return 1
    print("self-test passed: every bad include was named with its file and line, no allowed one was")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2],
                        help="repository root (holds include/)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on a copy with bad includes")
    arguments = parser.parse_args()
    if arguments.self_test:
        return self_test(arguments.root)
    found, count = check(arguments.root / "include")
    if found:
        report(found)
        print(f"{len(found)} include(s) break the layering rule (tests/headers/layering.py)")
        return 1
    print(f"{count} headers: every include points down the chain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
