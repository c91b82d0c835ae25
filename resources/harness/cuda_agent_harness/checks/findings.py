# SPDX-License-Identifier: Apache-2.0
"""What a static check reports: one finding per construct, with a reason code from the
evaluation's rejection reasons, the file and line, the rule that matched, and a message
that says what was found, where, and what to do instead."""

from __future__ import annotations


class Findings:
    def __init__(self, file: str):
        self.file = file
        self.items: list[dict] = []

    def add(self, reason: str, node_or_line, message: str, rule: str) -> None:
        line = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", 0)
        self.items.append({"reason": reason, "file": self.file, "line": line, "rule": rule,
                           "message": f"{self.file} line {line}: {message}"})
