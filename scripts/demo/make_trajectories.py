#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the demo's bundled trajectories, resources/demo/{cuda,cpu}/trajectory.jsonl.

The demo replays these through the real agent loop: every tool call (Profile, Write,
Compile, Edit, Verify, Finish) really runs against the real sandbox, compile driver,
harness and profiler. Only the model's answers come from here. The tool results written
next to them say what each call is expected to return; the replay client compares the
run with them, and a call whose success or failure differs from the story is reported
as a structural divergence.

The story, on either device: profile the reference, write a fused kernel (v1) that
does not build, fix the build (v2) and fail verification because of a forgotten /2,
fix that (v3, correct but simple), profile, improve the kernel (v4) and finish.

Usage: make_trajectories.py [--check]   (--check: fail if the bundled files are stale)
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
RESOURCES = HERE.parent.parent / "resources" / "demo"


def read(device, version, relative):
    return (HERE / device / version / relative).read_text()


class Story:
    def __init__(self, device):
        self.device = device
        self.events = []
        self.turn = 0
        self.calls = 0

    def message(self, message, **extra):
        self.events.append({"type": "message", "turn": self.turn, "message": message, **extra})

    def say(self, text, calls, results, scored=False):
        """One assistant turn: text, tool calls [(name, arguments)], expected results [(ok, text)]."""
        tool_calls = []
        for name, arguments in calls:
            self.calls += 1
            tool_calls.append({"id": f"call_{self.calls}", "type": "function",
                               "function": {"name": name, "arguments": json.dumps(arguments)}})
        self.turn += 1
        self.message({"role": "assistant", "content": text, "tool_calls": tool_calls},
                     finish_reason="tool_calls" if tool_calls else "stop",
                     usage={"prompt_tokens": 0, "completion_tokens": 0})
        for call, (ok, expected) in zip(tool_calls, results):
            message = {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                       "content": "(expected) " + expected}
            if not ok:
                message["is_error"] = True
            self.message(message)
        if scored:
            # The loop tells the model what the trusted evaluation of a verified change scored.
            self.message({"role": "user", "content": "(expected) [Trusted evaluation of your candidate as of turn "
                          f"{self.turn}: ...]"})

    def lines(self):
        header = {"type": "header", "format": 1, "task": {"name": "level2/14_Gemm_Divide_Sum_Scaling"},
                  "llm": "demo (written by the cuda-agent authors)",
                  "settings": {"device": self.device, "note": "bundled demo trajectory; see scripts/demo"}}
        events = [header] + self.events
        return "".join(json.dumps({**event, "seq": index, "time": 0}, sort_keys=True) + "\n"
                       for index, event in enumerate(events))


def story(device):
    cuda = device == "cuda"
    source = "gemm_sum.cu" if cuda else "gemm_sum.cpp"
    s = Story(device)
    s.message({"role": "system", "content": "(SKILL.md of the workspace)"})
    s.message({"role": "user", "content": "(the task: level2/14_Gemm_Divide_Sum_Scaling)"})

    s.say("I will start by profiling the reference to see where its time goes, and read the starter files.",
          [("Profile", {"target": "reference"}), ("Read", {"file_path": "model_new.py"}),
           ("Read", {"file_path": "kernels/binding.cpp"})],
          [(True, "a table of the reference's top " + ("kernels" if cuda else "operators") +
            ": the matrix multiplication takes most of the time"),
           (True, "the starter model_new.py"), (True, "the starter binding.cpp")])

    files = ["kernels/binding.cpp", f"kernels/{source}", "model_new.py"] + ([] if cuda else ["kernels/gemm_sum.h"])
    s.say("The GEMM dominates, but the model only needs its row sums: sum_j (x W^T)_ij = x_i . (sum_j W_j). "
          "So sum(x @ W.T / 2, dim=1) * s = x . colsum(W) * s / 2: one pass over W for its column sums and "
          "one dot product per row of x, instead of a GEMM. I will write that as one extension.",
          [("Write", {"file_path": path, "content": read(device, "v1", path)}) for path in sorted(files)] +
          [("Compile", {})],
          [(True, f"wrote {path}") for path in sorted(files)] +
          [(False, "the build fails: " + ("no instance of function template \"row_dot\" matches the argument list"
                                          if cuda else "'gemm_divide_sum_scale_kernel' was not declared in this scope"))])

    if cuda:
        s.say("row_dot takes its block size as a template argument (it sizes the shared array of warp sums), "
              "and a kernel launch cannot deduce it: the launch must name it.",
              [("Edit", {"file_path": "kernels/gemm_sum.cu", "old_string": "row_dot<<<",
                         "new_string": "row_dot<256><<<"}),
               ("Compile", {}), ("Verify", {})],
              [(True, "edited"), (True, "build succeeded"),
               (False, "REJECTED: values differ; every output is twice the reference")])
        s.say("Every value is exactly twice the reference: I folded the scaling factor into the column sums "
              "but forgot the division by 2.",
              [("Edit", {"file_path": "kernels/binding.cpp", "old_string": "static_cast<float>(scaling_factor)",
                         "new_string": "static_cast<float>(scaling_factor / 2.0)"}),
               ("Verify", {})],
              [(True, "edited"), (True, "CORRECT")], scored=True)
        s.say("Correct. Now let me see what my kernels cost.",
              [("Compile", {}), ("Profile", {"target": "candidate"})],
              [(True, "build succeeded"),
               (True, "column_sums takes most of the candidate's time: one thread per column leaves most SMs idle")])
        s.say("column_sums runs one thread per column, so only a few dozen blocks stream all of W. I will split "
              "the rows into chunks (partial column sums per chunk, then a small pass that adds the chunks in a "
              "fixed order) and read W and x as float4; the binding sizes the larger workspace.",
              [("Write", {"file_path": "kernels/gemm_sum.cu", "content": read(device, "final", "kernels/gemm_sum.cu")}),
               ("Write", {"file_path": "kernels/binding.cpp", "content": read(device, "final", "kernels/binding.cpp")}),
               ("Compile", {}), ("Verify", {}), ("Profile", {"target": "candidate"})],
              [(True, "wrote kernels/gemm_sum.cu"), (True, "wrote kernels/binding.cpp"), (True, "build succeeded"),
               (True, "CORRECT"), (True, "faster than eager and torch.compile")], scored=True)
    else:
        s.say("binding.cpp calls gemm_divide_sum_scale_kernel without including gemm_sum.h, which declares it.",
              [("Edit", {"file_path": "kernels/binding.cpp", "old_string": "#include <torch/extension.h>\n",
                         "new_string": "#include <torch/extension.h>\n\n#include \"gemm_sum.h\"\n"}),
               ("Compile", {}), ("Verify", {})],
              [(True, "edited"), (True, "build succeeded"),
               (False, "REJECTED: values differ; every output is twice the reference")])
        s.say("Every value is exactly twice the reference: I folded the scaling factor into the column sums "
              "but forgot the division by 2.",
              [("Edit", {"file_path": "kernels/gemm_sum.cpp", "old_string": "static_cast<float>(scaling_factor);",
                         "new_string": "static_cast<float>(scaling_factor / 2.0);"}),
               ("Verify", {})],
              [(True, "edited"), (True, "CORRECT")], scored=True)
        s.say("Correct. Now let me see what my kernel costs.",
              [("Compile", {}), ("Profile", {"target": "candidate"})],
              [(True, "build succeeded"), (True, "a table of the candidate's operators")])
        s.say("The column sums walk W column by column, a strided access. Summing it row by row reads "
              "contiguous memory and lets the compiler vectorize the inner loop.",
              [("Write", {"file_path": "kernels/gemm_sum.cpp", "content": read(device, "final", "kernels/gemm_sum.cpp")}),
               ("Compile", {}), ("Verify", {})],
              [(True, "wrote kernels/gemm_sum.cpp"), (True, "build succeeded"), (True, "CORRECT")], scored=True)

    s.say("The kernel is correct and faster; I am done.",
          [("Finish", {"summary": "Fused the GEMM, division, sum and scaling into column sums of W and a dot "
                                  "product per row of x."})],
          [(True, "finished")])
    return s.lines()


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for device in ("cuda", "cpu"):
        path = RESOURCES / device / "trajectory.jsonl"
        text = story(device)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale (run scripts/demo/make_trajectories.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
