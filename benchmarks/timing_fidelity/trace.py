# SPDX-License-Identifier: Apache-2.0
"""What the device and the host do during a few profiler samples, in time order.

The fidelity benchmark separates a sample's window (CUDA events around the call) from its
escape charge (the host's wait for the whole device once it has seen the end event, beyond
a calibrated floor). On an H200 that wait stayed at the floor after ReLU, softmax or a bf16
GEMM, and ran 12 to 38 µs beyond it after an fp32 cuBLAS GEMM or a cuDNN convolution. This
script records a few samples of chosen workloads with torch.profiler (CUPTI on a GPU) and
prints every device activity (kernel, copy, memset) and the host's CUDA runtime calls
(synchronize, event record and query) with their start and length, so that one can see
whether the device still runs something after the call's last kernel, or the host's
synchronize takes that long with the device idle.

    python3 benchmarks/timing_fidelity/trace.py [--samples 3] [--workloads conv2d "matmul 2048"]
                                                [--pool-release-default]

The profiler keeps memory freed into the device's memory pool (its release threshold at
the maximum); ``--pool-release-default`` leaves CUDA's default (0: released at every
synchronize), to compare. The fidelity benchmark takes the same flag.

A workload is chosen by a piece of its name in the fidelity benchmark (all when none is
given). For looking, not for judging: the profiler adds its own overhead to every call.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _fidelity_benchmark():
    """run.py beside this file (its workloads; importing it also sets the paths up)."""
    spec = importlib.util.spec_from_file_location("cuda_agent_timing_fidelity", os.path.join(HERE, "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fidelity = _fidelity_benchmark()
import benchlib  # noqa: E402  (put on the path by run.py)

#: Host calls worth seeing beside the device's activities (CUDA runtime and driver names).
HOST_CALLS = ("Synchronize", "EventRecord", "EventQuery", "LaunchKernel", "Memset", "Memcpy", "Malloc", "Free",
              "MemPool")


def timeline(profiler, torch) -> list[dict]:
    """Device activities and the host's CUDA calls, in time order, from a finished profiler."""
    device_types = {torch.autograd.DeviceType.CUDA}
    rows = []
    for event in profiler.events():
        on_device = getattr(event, "device_type", None) in device_types
        if not on_device and not any(call in event.name for call in HOST_CALLS):
            continue
        rows.append({"where": "device" if on_device else "host", "name": event.name,
                     "start_us": float(event.time_range.start), "length_us": float(event.time_range.elapsed_us())})
    rows.sort(key=lambda row: row["start_us"])
    if rows:
        origin = rows[0]["start_us"]
        for row in rows:
            row["start_us"] -= origin
    return rows


def chosen(all_workloads: list, wanted: list[str]) -> list:
    if not wanted:
        return all_workloads
    picked = [each for each in all_workloads if any(piece in each[0] for piece in wanted)]
    if not picked:
        names = ", ".join(each[0] for each in all_workloads)
        raise SystemExit(f"no workload matches {wanted}; the workloads are: {names}")
    return picked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--workloads", nargs="*", default=[], help="pieces of workload names")
    parser.add_argument("--pool-release-default", action="store_true",
                        help="leave the device memory pool's release threshold at CUDA's default (0) instead of "
                             "the profiler's (keep everything), to compare")
    arguments = parser.parse_args(argv)

    import torch

    from cuda_agent_harness.timing import contender_timer, devices, input_sets

    device_kind = arguments.device or ("cuda" if benchlib.gpu_present() else "cpu")
    device = devices.make_device(torch, device_kind)
    pool = fidelity.pool_release(device, arguments.pool_release_default)
    constants = device.measure_timing_constants()
    print(f"trace on {device.describe()['name']}: escape floor {constants['floor_us']:.2f} µs, "
          f"tolerance {constants['tolerance_us']:.2f} µs, memory pool {pool}")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device_kind == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for name, get_inputs, function in chosen(fidelity.workloads(torch, device_kind), arguments.workloads):
        timer = contender_timer.ContenderTimer(name, function, device, input_sets.InputFactory(get_inputs, device))
        timer.warm_up(1)
        for index in range(3):  # the lead is measured and settles before the profiler starts
            timer.sample(input_sets.derive_seed(2, index))
        with torch.profiler.profile(activities=activities) as profiler:
            taken = [timer.sample(input_sets.derive_seed(3, index)) for index in range(arguments.samples)]
        print(f"\n{name}: {arguments.samples} samples, lead {taken[-1].lead_us:.0f} µs")
        for number, sample in enumerate(taken):
            print(f"  sample {number}: window {sample.raw_us:.2f} µs, host wait after it {sample.gap_us:.2f} µs, "
                  f"escape charged {sample.escape_us:.2f} µs, covered {sample.covered}")
        rows = timeline(profiler, torch)
        if not any(row["where"] == "device" for row in rows):
            print("  (no device activities recorded: on the CPU there is no device to watch)")
        for row in rows:
            print(f"  {row['start_us']:10.1f} µs  {row['length_us']:9.2f} µs  {row['where']:6s}  {row['name'][:90]}")
        del timer
    return 0


if __name__ == "__main__":
    sys.exit(main())
