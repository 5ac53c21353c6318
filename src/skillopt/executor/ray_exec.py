"""Async functions run as Ray tasks, their model calls answered by this process's pool.

Design (docs/trainer.md, "Running rollouts on Ray"):

* **What runs remotely** is one whole unit of work (a trainer rollout: the agent CLI process,
  its workspace, the scoring), given as a module-level ``async def fn(completer, *args)``.
  The worker runs it under ``anyio.run`` and sends back its result, or its error as data
  (:mod:`.wire`), so the caller sees the same result types and error classes as locally.
* **Where the pool lives**: here, in the driver. The ``completer`` a remote function gets is
  a relay: each model call goes to a small Ray actor (no CPU reserved), which this process
  drains and answers through its own pool, so per-member limits, retries, Retry-After,
  the cache, redaction and the call accounting are exactly those of a local run. An agent
  CLI started on a worker calls its own endpoint (the member's base URL) directly, as it
  does locally; the caller bounds how many such rollouts are in flight.
* **Waiting** is async: the driver awaits ``ObjectRef``s on its event loop (no threads of
  ours). A cancelled wait (SIGTERM, Ctrl-C, a sibling's fatal error) cancels the function on
  the worker (its subprocesses are killed by their own cancellation handlers) and waits,
  shielded and bounded, until it has ended: a run never shuts Ray down under a live agent.

Ray is imported only here and only when an executor is opened; a missing Ray is a
ConfigError naming ``executor.kind``.

**The private local instance listens on loopback only.** Ray's servers run whatever a client
sends them, so the instance a run starts for itself (``executor.address = ""``) must not be
reachable from the network. Ray binds every server of a node to the node's address when that
address is 127.0.0.1, but it turns a requested 127.0.0.1 into the machine's LAN address (so
other machines could join) unless its multi-node mode is off
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read when Ray is imported). So: that mode is off
before Ray is imported for a local instance; a node address that would not be loopback is
refused before anything starts; and, once started, every socket the instance listens on
(:mod:`.listeners`, Linux) must be a loopback one, or the instance is shut down and refused.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

from skillopt.backends.base import Completer, Completion, CompletionRequest
from skillopt.errors import ConfigError, SkillOptError
from skillopt.executor.listeners import (
    Listener,
    is_loopback,
    listeners_supported,
    new_listeners,
    tree_listeners,
)
from skillopt.executor.settings import ExecutorSettings
from skillopt.executor.wire import WIRE_ERRORS, error_from_wire, error_to_wire
from skillopt.logging import get_logger

__all__ = ["RayExecutor", "import_ray", "open_ray_executor"]

T = TypeVar("T")
RemoteFn = Callable[..., Awaitable[Any]]

_log = get_logger(__name__)

_OK, _ERROR = "ok", "error"
_RELAY_CONCURRENCY = 1_000_000
_STOP_GRACE_S = 30.0  # how long a cancelled remote function may take to kill its agent
_LOOPBACK = "127.0.0.1"
# Ray's multi-node mode: on, a node asked to live at 127.0.0.1 gets the LAN address instead
_RAY_MULTI_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def import_ray(*, local: bool = False) -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it.

    ``local``: for a private instance on this machine, Ray's multi-node mode is switched off
    first (unless the environment says otherwise; :func:`_connect` refuses what that gives)."""
    if local and "ray" not in sys.modules:
        os.environ.setdefault(_RAY_MULTI_NODE_ENV, "0")
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(
            f"Ray is not installed ({exc}); install the extra: pip install 'skillopt[ray]'",
            key="executor.kind",
        ) from exc


# --------------------------------------------------------------------------- worker side


class _Relay:
    """A Ray actor: workers ``ask`` it for model calls, the driver ``take``s and ``answer``s
    them. Holds no state beyond the calls in flight."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[int, int, CompletionRequest]] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[tuple[str, Any]]] = {}
        self._ids = itertools.count()
        self._stops: dict[int, asyncio.Event] = {}

    async def ask(self, session: int, request: CompletionRequest) -> tuple[str, Any]:
        call = next(self._ids)
        future: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[call] = future
        self._queue.put_nowait((call, session, request))
        try:
            return await future
        finally:
            self._waiting.pop(call, None)

    async def take(self) -> list[tuple[int, int, CompletionRequest]]:
        batch = [await self._queue.get()]
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def answer(self, call: int, outcome: tuple[str, Any]) -> None:
        future = self._waiting.get(call)
        if future is not None and not future.done():
            future.set_result(outcome)

    async def stopped(self, session: int) -> None:
        """Returns once the driver ends ``session`` (cancelled, or finished)."""
        await self._stops.setdefault(session, asyncio.Event()).wait()
        self._stops.pop(session, None)

    async def stop(self, session: int) -> None:
        self._stops.setdefault(session, asyncio.Event()).set()


class _RelayCompleter:
    """The completer a remote function gets: every call is made by the driver's pool."""

    def __init__(self, relay: Any, session: int) -> None:
        self._relay = relay
        self._session = session

    async def complete(self, request: CompletionRequest) -> Completion:
        kind, payload = await self._relay.ask.remote(self._session, request)
        if kind == _ERROR:
            raise error_from_wire(payload)
        if not isinstance(payload, Completion):
            raise TypeError(f"relay answered {type(payload).__name__}, not a Completion")
        return payload


def _run_on_worker(fn: RemoteFn, args: tuple[Any, ...], session: int, relay: Any) -> Any:
    """The Ray task body: ``fn`` on a fresh event loop of this worker."""

    outcome: tuple[str, Any] = (_ERROR, error_to_wire(SkillOptError("cancelled by the driver")))

    async def work(scope: anyio.CancelScope) -> None:
        nonlocal outcome
        try:
            outcome = _OK, await fn(_RelayCompleter(relay, session), *args)
        except WIRE_ERRORS as exc:
            outcome = _ERROR, error_to_wire(exc)
        scope.cancel()

    async def main() -> tuple[str, Any]:
        # The driver's cancellation arrives as the end of ``stopped``: the function is
        # cancelled like a local one (its agent's process group is killed).
        async with anyio.create_task_group() as tg:
            tg.start_soon(work, tg.cancel_scope)
            await relay.stopped.remote(session)
            tg.cancel_scope.cancel()
        return outcome

    return anyio.run(main)


# --------------------------------------------------------------------------- driver side


class RayExecutor:
    """Submits remote functions and answers their model calls (see the module docstring)."""

    def __init__(self, ray: Any, relay: Any, settings: ExecutorSettings) -> None:
        self._ray = ray
        self._relay = relay
        self._task = ray.remote(max_retries=0)(_run_on_worker).options(
            num_cpus=settings.cpus_per_task
        )
        self._sessions: dict[int, Completer] = {}
        self._ids = itertools.count()
        self.submitted = 0
        self.relayed_calls = 0

    async def call(self, fn: RemoteFn, *args: Any, completer: Completer) -> Any:
        """``await fn(completer, *args)``, run as a Ray task; model calls go to ``completer``."""
        session = next(self._ids)
        self._sessions[session] = completer
        ref = self._task.remote(fn, args, session, self._relay)
        self.submitted += 1
        try:
            kind, payload = await ref
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._stop_remote(session, ref)
            raise
        except BaseException:
            self._relay.stop.remote(session)
            raise
        finally:
            self._sessions.pop(session, None)
        self._relay.stop.remote(session)  # releases the relay's ``stopped`` call
        if kind == _ERROR:
            raise error_from_wire(payload)
        return payload

    async def _stop_remote(self, session: int, ref: Any) -> None:
        """Cancel the worker's function and wait until it has ended, so its agent's processes
        are dead before the run (and maybe Ray) shuts down.

        Stopping the session cancels the function like a local one (a task still queued stops
        as soon as it starts). Not ``ray.cancel`` first: its interrupt could land while the
        worker kills the agent's processes; it is the fallback for a worker that does not end
        within ``_STOP_GRACE_S``."""
        _log.info("ray_task_cancelled", task=ref.hex())
        try:
            await self._relay.stop.remote(session)
            with anyio.move_on_after(_STOP_GRACE_S):
                await ref
                return
        except Exception as exc:  # the relay or the worker died: nothing is left to stop
            _log.warning("ray_task_stop_failed", task=ref.hex(), error=type(exc).__name__)
            return
        _log.warning("ray_task_force_cancelled", task=ref.hex(), grace_s=_STOP_GRACE_S)
        self._ray.cancel(ref, force=True)

    async def serve(self) -> None:
        """Answer the workers' model calls until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                for call, session, request in await self._relay.take.remote():
                    tg.start_soon(self._answer, call, session, request)

    async def _answer(self, call: int, session: int, request: CompletionRequest) -> None:
        completer = self._sessions.get(session)
        if completer is None:  # its task was cancelled meanwhile; nobody waits for it
            return
        outcome: tuple[str, Any]
        try:
            outcome = _OK, await completer.complete(request)
        except WIRE_ERRORS as exc:
            outcome = _ERROR, error_to_wire(exc)
        self.relayed_calls += 1
        await self._relay.answer.remote(call, outcome)


def _not_private(what: str) -> ConfigError:
    return ConfigError(
        f"refusing to run a private local Ray instance that {what}: Ray's servers run any "
        "code sent to them. Ray must be imported with "
        f"{_RAY_MULTI_NODE_ENV}=0 (skillopt sets it unless Ray was imported earlier in this "
        "process or the environment sets it otherwise), or the run must be in a network "
        "namespace of its own; or name a cluster you secured in executor.address",
        key="executor.address",
    )


def _check_local_node_address() -> None:
    """Refuse before starting when Ray would put the new node on a non-loopback address."""
    try:
        services = importlib.import_module("ray._private.services")
        address = str(services.resolve_ip_for_localhost(_LOOPBACK))
    except (ImportError, AttributeError):  # another Ray: the started instance is checked
        return
    if not is_loopback(address):
        raise _not_private(f"would live at {address}, not {_LOOPBACK}")


def _check_started_instance(ray: Any, before: list[Listener]) -> None:
    """Every server the instance opened listens on loopback, or it is shut down and refused."""
    address = str(ray.util.get_node_ip_address())
    public: list[str] = []
    if listeners_supported():
        public = [str(s) for s in new_listeners(before) if not is_loopback(s.address)]
    if is_loopback(address) and not public:
        return
    ray.shutdown()
    raise _not_private(
        f"listens beyond loopback ({', '.join(public) or f'node address {address}'})"
    )


def _connect(ray: Any, settings: ExecutorSettings) -> bool:
    """Join or start Ray; True when this process started it (and must shut it down)."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage reports leave the machine
    common: dict[str, Any] = {"configure_logging": False, "log_to_driver": False}
    try:
        if settings.address:
            ray.init(address=settings.address, **common)
            return True
        _check_local_node_address()
        before = tree_listeners() if listeners_supported() else []
        ray.init(
            address="local",  # a new instance, never a cluster found on this machine
            num_cpus=settings.num_cpus or None,
            include_dashboard=False,
            _node_ip_address=_LOOPBACK,
            **common,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = settings.address or "a private local instance"
        raise ConfigError(
            f"cannot start or reach Ray ({where}): {exc}", key="executor.address"
        ) from exc
    _check_started_instance(ray, before)
    return True


@asynccontextmanager
async def open_ray_executor(settings: ExecutorSettings) -> AsyncIterator[RayExecutor]:
    """A connected executor answering model calls; Ray is shut down on exit if we started it.

    ``ray.init`` blocks while a private instance starts (a few seconds, once per run)."""
    ray = import_ray(local=not settings.address)
    started = _connect(ray, settings)
    # every task in flight holds one ``stopped`` call on it: no small concurrency cap
    relay = ray.remote(num_cpus=0, max_concurrency=_RELAY_CONCURRENCY)(_Relay).remote()
    executor = RayExecutor(ray, relay, settings)
    _log.info("ray_executor_open", address=settings.address or "local", started=started)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(executor.serve)
            try:
                yield executor
            finally:
                tg.cancel_scope.cancel()
    finally:
        ray.kill(relay)
        _log.info(
            "ray_executor_closed",
            submitted=executor.submitted,
            relayed_calls=executor.relayed_calls,
        )
        if started:
            ray.shutdown()
