# SPDX-License-Identifier: Apache-2.0
"""Request handlers, by name.

A handler is a function ``handler(args: dict, context: RequestContext) -> dict`` that runs
in a child forked from a warm worker. Each lives in its own module and registers itself
with the ``@handler("name")`` decorator; a module takes part once it is listed in
``HANDLER_MODULES``. Adding a handler module is one line here.
"""

from __future__ import annotations

import importlib
from typing import Callable

#: Modules whose handlers a worker offers, imported when the worker starts.
HANDLER_MODULES = [
    "cuda_agent_harness.worker.basic",
    "cuda_agent_harness.checks.scan",
    "cuda_agent_harness.verify.operators",
    "cuda_agent_harness.verify.reference",
    "cuda_agent_harness.verify.candidate",
    "cuda_agent_harness.verify.audit",
    "cuda_agent_harness.timing.session",
    "cuda_agent_harness.timing.kernel_table",
]

_handlers: dict[str, Callable] = {}
_prepared: set[str] = set()
_alone: set[str] = set()


def handler(name: str, prepared: bool = False, alone: bool = False):
    """Registers the decorated function as the handler of requests named ``name``.

    ``prepared``: its requests run in the worker's prepared child, whose device and thread
    pools are ready (see ``worker.children.prepare_child``); others run in a child forked on
    arrival, so that the prepared one is there for the next verification (static checks
    come first in one).

    ``alone``: its requests measure time, so no other child of the worker may be busy
    meanwhile: they start once every earlier child has exited, and the next prepared
    child is forked only after them."""

    def register(function: Callable) -> Callable:
        if name in _handlers and _handlers[name] is not function:
            raise ValueError(f"two handlers are registered as {name!r}")
        _handlers[name] = function
        if prepared:
            _prepared.add(name)
        if alone:
            _alone.add(name)
        return function

    return register


def load_handlers(modules: list[str] | None = None) -> dict[str, Callable]:
    """Imports the handler modules and returns the registry."""
    for module in modules if modules is not None else HANDLER_MODULES:
        importlib.import_module(module)
    return dict(_handlers)


def lookup(name: str) -> Callable | None:
    return _handlers.get(name)


def runs_prepared(name: str) -> bool:
    return name in _prepared


def runs_alone(name: str) -> bool:
    return name in _alone


def names() -> list[str]:
    return sorted(_handlers)
