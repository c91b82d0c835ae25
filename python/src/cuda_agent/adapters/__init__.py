# SPDX-License-Identifier: Apache-2.0
"""Adapters of the service to training frameworks; each imports only what it needs:
`gym` (Gymnasium-style `KernelEnv`), `verl` (reward function), `verl_agent_loop` (verl's
multi-turn `AgentLoopBase`), `skyrl` (`BaseTextEnv`), `openrlhf` (agent executor), `openenv`
(OpenEnv `Environment`, server app and client), and `text_protocol` (tool calls in a model's
text), which the text-based ones share."""
