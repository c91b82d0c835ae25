# SPDX-License-Identifier: Apache-2.0
"""A verl reward function: `compute_score` scores one completion with a trusted evaluation.

In verl's config (`custom_reward_function.path: pkg://cuda_agent.adapters.verl`, `name:
compute_score`; a path to this file does not load, its imports are relative), with
each data row's `reward_model.ground_truth` (or `extra_info["task"]`) holding the task as
`{"name": ..., "source": ...}` (a JSON text is read too). The completion's fenced blocks name
the candidate's files (`cuda_agent.candidates`). The server is `$CUDA_AGENT_URL` (default
http://127.0.0.1:8080) with `$CUDA_AGENT_TOKEN`, or `extra_info["cuda_agent_url"]`.

The score is the milestone reward (-1 to 3); a completion without candidate files scores -1
without an evaluation. An evaluation that failed for reasons not the policy's raises, so that
the sample is not scored as the policy's failure.
"""

import json
import os
from typing import Any, Dict, Optional

from ..candidates import files_from_reply
from ..client import AsyncClient, Json

__all__ = ["compute_score"]


def _task_of(ground_truth: Any, extra_info: Optional[Dict[str, Any]]) -> Json:
    task = (extra_info or {}).get("task", ground_truth)
    if isinstance(task, str):
        task = json.loads(task)
    if not isinstance(task, dict) or "name" not in task or "source" not in task:
        raise ValueError("cuda_agent.adapters.verl: the row's ground_truth (or extra_info['task']) must be a task, "
                         "{'name': ..., 'source': ...}")
    return {"name": task["name"], "source": task["source"]}


async def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                        extra_info: Optional[Dict[str, Any]] = None, **_: Any) -> Dict[str, Any]:
    task = _task_of(ground_truth, extra_info)
    files = files_from_reply(solution_str)
    if "model_new.py" not in files:
        return {"score": -1.0, "correct": False, "reason": "no model_new.py block in the completion"}
    url = (extra_info or {}).get("cuda_agent_url") or os.environ.get("CUDA_AGENT_URL", "http://127.0.0.1:8080")
    metadata = {"data_source": data_source}
    if extra_info and "index" in extra_info:
        metadata["index"] = extra_info["index"]
    async with AsyncClient(url, os.environ.get("CUDA_AGENT_TOKEN")) as client:
        status = await client.evaluate(task, files, metadata=metadata)
    if status["outcome"] != "evaluated":
        raise RuntimeError("the evaluation of %s did not score the completion (%s): %s"
                           % (task["name"], status["outcome"], status.get("message", "")))
    reward = status["reward"]
    return {"score": float(reward["value"]), "correct": reward["value"] >= 1,
            "reason": (status.get("rejection") or {}).get("reason", "")}
