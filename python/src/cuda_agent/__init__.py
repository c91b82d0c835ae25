# SPDX-License-Identifier: Apache-2.0
"""cuda-agent from Python: clients of `cuda-agent serve` and environments built on its
episodes. See README.md of this package."""

from .adapters.gym import KernelEnv
from .candidates import files_from_reply
from .client import (AsyncClient, AsyncEpisode, Client, Episode, Retry, ServiceError, ToolResult,
                     evaluation_request, task, task_from_file)

__all__ = [
    "AsyncClient",
    "AsyncEpisode",
    "Client",
    "Episode",
    "KernelEnv",
    "Retry",
    "ServiceError",
    "ToolResult",
    "evaluation_request",
    "files_from_reply",
    "task",
    "task_from_file",
]
