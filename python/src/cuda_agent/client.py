# SPDX-License-Identifier: Apache-2.0
"""Clients of `cuda-agent serve`: `Client` (blocking) and `AsyncClient` (asyncio).

Both speak the native API: evaluations (`/v1/evaluations`) and episodes (`/v1/episodes`).
What the server refuses is a `ServiceError` carrying its HTTP status and stable code. What
it could not take is retried with exponential back-off: no connection, 429 (a limit of the
client or the service), 502/503/504 (a server restarting or draining). A request that may
have run already (the connection broke after it was sent) is retried only where running it
twice is harmless: reads, and submissions, whose repeats the server answers from its cache.
"""

import asyncio
import dataclasses
import os
import random
import time
from typing import Any, Dict, List, Mapping, Optional, Union

import httpx

__all__ = [
    "AsyncClient",
    "AsyncEpisode",
    "Client",
    "Episode",
    "Retry",
    "ServiceError",
    "ToolResult",
    "episode_request",
    "evaluation_request",
    "task",
    "task_from_file",
]

Json = Dict[str, Any]

# A finished evaluation is awaited in rounds of this many seconds: short enough that no proxy
# closes the connection, long enough that waiting costs nearly no requests.
_WAIT_ROUND_S = 60.0


class ServiceError(Exception):
    """A request the service refused: `status` (HTTP), `code` (stable), and its message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__("%s (%d): %s" % (code, status, message))
        self.status = status
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class Retry:
    """How often, and how patiently, a request the server could not take is sent again."""

    attempts: int = 6
    first_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay(self, attempt: int) -> float:
        # Full jitter: clients that failed together do not come back together.
        return random.uniform(0, min(self.max_delay_s, self.first_delay_s * (2 ** attempt)))


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What one tool call of an episode gave back: the text the model reads."""

    content: str
    is_error: bool
    metadata: Json


def task(name: str, source: str) -> Json:
    """A task as the service takes it: the reference module's name and Python source."""
    return {"name": name, "source": source}


def task_from_file(path: Union[str, os.PathLike], name: Optional[str] = None) -> Json:
    """A task read from a KernelBench-style file (named after it unless `name` is given)."""
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    return task(name or os.path.splitext(os.path.basename(os.fspath(path)))[0], source)


def evaluation_request(task: Json, files: Mapping[str, str], *, policy: Optional[Json] = None, priority: int = 0,
                       deadline_s: Optional[float] = None, metadata: Optional[Json] = None) -> Json:
    """One request of `POST /v1/evaluations` (resources/service/evaluation_request.schema.json).
    `policy` chooses what the server lets a request choose, over its own settings: for
    example {"tolerance": "strict", "libraries": {"cublas": False}, "timing_budget": {"seconds": 5}};
    what it does not name is the server's."""
    request: Json = {"task": dict(task), "candidate": {"files": dict(files)}}
    if policy:
        request["policy"] = dict(policy)
    if priority:
        request["priority"] = priority
    if deadline_s is not None:
        request["deadline_s"] = deadline_s
    if metadata:
        request["metadata"] = dict(metadata)
    return request


def episode_request(task: Json, metadata: Optional[Json] = None, policy: Optional[Json] = None) -> Json:
    """The body of `POST /v1/episodes` (resources/service/episode_request.schema.json); the
    episode's Verify tool and its final evaluation judge by `policy` (as `evaluation_request`'s)."""
    request: Json = {"task": dict(task)}
    if policy:
        request["policy"] = dict(policy)
    if metadata:
        request["metadata"] = dict(metadata)
    return request


class _Api:
    """What both clients share: where requests go, and how answers and failures read."""

    def __init__(self, base_url: str, token: Optional[str], timeout_s: float, retry: Retry):
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": "Bearer " + token} if token else {}
        # The longest wait the client asks for, plus time for the answer to travel.
        self.timeout = httpx.Timeout(timeout_s, read=max(timeout_s, _WAIT_ROUND_S + 30.0))
        self.retry = retry

    @staticmethod
    def answer(response: httpx.Response) -> Json:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            error = body.get("error", {}) if isinstance(body, dict) else {}
            raise ServiceError(response.status_code, error.get("code", "http_%d" % response.status_code),
                               error.get("message", response.text[:500]))
        if not isinstance(body, dict):
            raise ServiceError(response.status_code, "invalid_answer", "the server answered no JSON object")
        return body

    @staticmethod
    def retryable_status(status: int) -> bool:
        return status in (429, 502, 503, 504)

    @staticmethod
    def retryable_failure(error: Exception, idempotent: bool) -> bool:
        # Never sent: always safe. Sent, and the answer lost: safe only where a repeat is.
        if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return True
        return idempotent and isinstance(error, httpx.TransportError)


class Client:
    """The blocking client. Use as a context manager, or call `close()`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", token: Optional[str] = None, *,
                 timeout_s: float = 60.0, retry: Retry = Retry()):
        self._api = _Api(base_url, token, timeout_s, retry)
        self._http = httpx.Client(base_url=self._api.base_url, headers=self._api.headers,
                                  timeout=self._api.timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None, *, params: Optional[Json] = None,
                idempotent: bool = False) -> Json:
        """One call of the API, retried where the server could not take it."""
        retry = self._api.retry
        for attempt in range(retry.attempts):
            last = attempt == retry.attempts - 1
            try:
                response = self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as error:
                if last or not self._api.retryable_failure(error, idempotent):
                    raise
            else:
                if last or not self._api.retryable_status(response.status_code):
                    return self._api.answer(response)
            time.sleep(retry.delay(attempt))
        raise AssertionError("unreachable")

    # --- evaluations -------------------------------------------------------------------
    def health(self) -> Json:
        return self.request("GET", "/healthz", idempotent=True)

    def submit(self, requests: List[Json]) -> List[Json]:
        """Submits evaluation requests (`evaluation_request`) as one batch: their statuses."""
        body = requests[0] if len(requests) == 1 else {"requests": requests}
        return self.request("POST", "/v1/evaluations", body, idempotent=True)["evaluations"]

    def status(self, evaluation_id: str) -> Json:
        return self.request("GET", "/v1/evaluations/" + evaluation_id, idempotent=True)

    def wait(self, evaluation_id: str, timeout_s: Optional[float] = None) -> Json:
        """The status of `evaluation_id` once finished (or as it is after `timeout_s`)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = _WAIT_ROUND_S if deadline is None else min(_WAIT_ROUND_S, deadline - time.monotonic())
            status = self.request("GET", "/v1/evaluations/" + evaluation_id,
                                  params={"wait": "%.3f" % max(left, 0.0)}, idempotent=True)
            if status["stage"] == "finished" or (deadline is not None and time.monotonic() >= deadline):
                return status

    def evaluate(self, task: Json, files: Mapping[str, str], *, timeout_s: Optional[float] = None,
                 **options: Any) -> Json:
        """One evaluation, submitted and waited for: its final status (with "reward")."""
        status = self.submit([evaluation_request(task, files, **options)])[0]
        return status if status["stage"] == "finished" else self.wait(status["id"], timeout_s)

    def cancel(self, evaluation_id: str) -> Json:
        return self.request("DELETE", "/v1/evaluations/" + evaluation_id)

    # --- episodes ----------------------------------------------------------------------
    def open_episode(self, task: Json, *, metadata: Optional[Json] = None,
                     policy: Optional[Json] = None) -> "Episode":
        return Episode(self, self.request("POST", "/v1/episodes", episode_request(task, metadata, policy)))


class _Opened:
    """What the server said of an episode it opened, as both episode classes keep it."""

    def __init__(self, opened: Json):
        self.opened = opened
        self.id: str = opened["id"]
        self.skill: str = opened["skill"]
        self.files: Dict[str, str] = opened["files"]
        self.tools: List[Json] = opened["tools"]
        self.evaluation: Optional[Json] = None


class Episode(_Opened):
    """One episode on the server: its SKILL.md, files and tools, and the calls made in it."""

    def __init__(self, client: Client, opened: Json):
        super().__init__(opened)
        self._client = client

    def __enter__(self) -> "Episode":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def call(self, name: str, arguments: Optional[Json] = None, **keywords: Any) -> ToolResult:
        """Runs tool `name` in the episode's sandbox (arguments as a dict or as keywords)."""
        result = self._client.request("POST", "/v1/episodes/%s/tools/%s" % (self.id, name),
                                      {**(arguments or {}), **keywords})
        return ToolResult(result["content"], bool(result["is_error"]), result.get("metadata", {}))

    def finish(self, timeout_s: Optional[float] = None) -> Json:
        """The trusted evaluation of the workspace, waited for: its status (with "reward")."""
        answer = self._client.request("POST", "/v1/episodes/%s/finish" % self.id, idempotent=True)
        status = answer["evaluation"]
        if status["stage"] != "finished":
            status = self._client.wait(status["id"], timeout_s)
        self.evaluation = status
        return status

    def status(self) -> Json:
        return self._client.request("GET", "/v1/episodes/" + self.id, idempotent=True)

    def close(self) -> None:
        """Removes the episode from the server (its evaluation, if any, stays readable)."""
        try:
            self._client.request("DELETE", "/v1/episodes/" + self.id)
        except ServiceError as error:
            if error.status != 404:  # closed already, or expired
                raise


class AsyncClient:
    """The asyncio client: the same calls as `Client`, awaited."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", token: Optional[str] = None, *,
                 timeout_s: float = 60.0, retry: Retry = Retry(), max_connections: int = 100):
        self._api = _Api(base_url, token, timeout_s, retry)
        self._http = httpx.AsyncClient(base_url=self._api.base_url, headers=self._api.headers,
                                       timeout=self._api.timeout,
                                       limits=httpx.Limits(max_connections=max_connections))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, body: Any = None, *, params: Optional[Json] = None,
                      idempotent: bool = False) -> Json:
        retry = self._api.retry
        for attempt in range(retry.attempts):
            last = attempt == retry.attempts - 1
            try:
                response = await self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as error:
                if last or not self._api.retryable_failure(error, idempotent):
                    raise
            else:
                if last or not self._api.retryable_status(response.status_code):
                    return self._api.answer(response)
            await asyncio.sleep(retry.delay(attempt))
        raise AssertionError("unreachable")

    async def health(self) -> Json:
        return await self.request("GET", "/healthz", idempotent=True)

    async def submit(self, requests: List[Json]) -> List[Json]:
        body = requests[0] if len(requests) == 1 else {"requests": requests}
        return (await self.request("POST", "/v1/evaluations", body, idempotent=True))["evaluations"]

    async def status(self, evaluation_id: str) -> Json:
        return await self.request("GET", "/v1/evaluations/" + evaluation_id, idempotent=True)

    async def wait(self, evaluation_id: str, timeout_s: Optional[float] = None) -> Json:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            left = _WAIT_ROUND_S if deadline is None else min(_WAIT_ROUND_S, deadline - loop.time())
            status = await self.request("GET", "/v1/evaluations/" + evaluation_id,
                                        params={"wait": "%.3f" % max(left, 0.0)}, idempotent=True)
            if status["stage"] == "finished" or (deadline is not None and loop.time() >= deadline):
                return status

    async def evaluate(self, task: Json, files: Mapping[str, str], *, timeout_s: Optional[float] = None,
                       **options: Any) -> Json:
        status = (await self.submit([evaluation_request(task, files, **options)]))[0]
        return status if status["stage"] == "finished" else await self.wait(status["id"], timeout_s)

    async def cancel(self, evaluation_id: str) -> Json:
        return await self.request("DELETE", "/v1/evaluations/" + evaluation_id)

    async def open_episode(self, task: Json, *, metadata: Optional[Json] = None,
                           policy: Optional[Json] = None) -> "AsyncEpisode":
        return AsyncEpisode(self, await self.request("POST", "/v1/episodes",
                                                     episode_request(task, metadata, policy)))


class AsyncEpisode(_Opened):
    """`Episode` for asyncio."""

    def __init__(self, client: AsyncClient, opened: Json):
        super().__init__(opened)
        self._client = client

    async def __aenter__(self) -> "AsyncEpisode":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def call(self, name: str, arguments: Optional[Json] = None, **keywords: Any) -> ToolResult:
        result = await self._client.request("POST", "/v1/episodes/%s/tools/%s" % (self.id, name),
                                            {**(arguments or {}), **keywords})
        return ToolResult(result["content"], bool(result["is_error"]), result.get("metadata", {}))

    async def finish(self, timeout_s: Optional[float] = None) -> Json:
        answer = await self._client.request("POST", "/v1/episodes/%s/finish" % self.id, idempotent=True)
        status = answer["evaluation"]
        if status["stage"] != "finished":
            status = await self._client.wait(status["id"], timeout_s)
        self.evaluation = status
        return status

    async def status(self) -> Json:
        return await self._client.request("GET", "/v1/episodes/" + self.id, idempotent=True)

    async def close(self) -> None:
        try:
            await self._client.request("DELETE", "/v1/episodes/" + self.id)
        except ServiceError as error:
            if error.status != 404:
                raise
