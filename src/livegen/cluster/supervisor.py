"""``livegen serve``'s processes: one server, or N on one port joined in a Ray cluster; and the drain.

One process (the default, ``--workers 1`` without ``--ray-address``) is the
app under uvicorn, as before, on one event loop. That loop is the ceiling
(about 50 µs of CPU per wire event: a few hundred streaming voice sessions
per process, whatever the cores), so ``--workers N`` runs N server
processes instead, each its own uvicorn and event loop:

- the parent (``Supervisor``) starts a local Ray (in a process of its own, out
  of the server's process group, ended with the parent), or joins ``--ray-address``,
  creates the cluster's coordinator actor (``cluster/coordinator.py``), and starts
  the N processes (``python -m livegen.cluster.supervisor``); it restarts one that
  dies once it served (its counts and address are dropped from the coordinator
  first; one that dies before it registered stops the server rather than loop)
  and passes ``SIGTERM`` on to all of them. They run in a process group of
  their own, so a signal to the whole group (Ctrl-C in a terminal, systemd's
  stop) reaches them once, through the parent, and a first ``SIGTERM`` still
  drains, with the local Ray's processes (the coordinator among them) alive
  until the parent ends them last. A joined Ray's may still die with such a
  signal: while the server stops, every call to Ray is bounded
  (``STOP_CALL_S``), and a process whose Ray is gone exits without Ray's
  exit-time disconnect, which would wait out Ray's reconnect timeouts;
- each process binds the public port with ``SO_REUSEPORT`` (the kernel spreads
  new connections over the processes) and a private port of its own, which
  resumes of its sessions are relayed to from the other processes
  (``cluster/gate.py``, ``cluster/forward.py``); it joins Ray as a driver, takes
  a tag from the coordinator and registers its private address.

Every server, one process or many, drains on ``SIGTERM`` (``DrainingServer``):
new sessions are refused (HTTP 503 ``server_draining``; ``/health`` 503
``draining``), live ones may finish for up to ``--drain-timeout`` seconds,
and so may parked ones (their clients may resume and finish, until the
session's resume window closes), then the rest end with their terminal event
(``session.closed``, reason ``server_shutdown``) and the process exits. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import ipaddress
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from livegen.cluster import mode
from livegen.cluster.ray import import_ray
from livegen.logs import log_event
from livegen.server.config import ServerConfig
from livegen.server.http.budgets import uvicorn_options
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from livegen.models import Registry
    from livegen.server.state import State

logger = logging.getLogger("livegen.server")

#: The environment variable that carries a server process's assignment from the parent.
ASSIGNMENT = "LIVEGEN_WORKER_ASSIGNMENT"
#: Seconds past ``--drain-timeout`` the parent waits for its processes before it kills them.
KILL_AFTER_S = 20.0
#: The most one call to Ray may take while the server stops (Ray may have died with the signal).
STOP_CALL_S = 2.0
#: How often a drain looks whether the parked sessions have resumed or ended.
PARKED_POLL_S = 0.2
#: The argument that makes ``python -m livegen.cluster.supervisor`` the supervisor's private Ray.
RAY_HEAD = "--ray-head"
#: What ``ray.init`` sets in the environment of the process that starts a Ray, which every driver
#: of it needs too.
RAY_HEAD_ENV = ("RAY_AUTH_MODE",)
#: Ray's own switch (read when Ray is imported) that makes a node take the loopback address for its
#: own (``ray._private.services.get_node_ip_address``); each of its servers (GCS, raylet, the
#: dashboard and runtime-env agents, every worker's and driver's) then listens on loopback only
#: (Ray binds all interfaces unless the node's address is a loopback one). Set for a Ray of the
#: server's own when ``--host`` is a loopback address: nothing off this machine may reach Ray
#: where nothing off it may reach the server (docs/cluster.md).
RAY_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose first ``SIGTERM`` drains the app's sessions before it exits."""

    def __init__(self, config: uvicorn.Config, state: State) -> None:
        super().__init__(config)
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        #: The drain's task: held until it ends (it ends the server: ``should_exit``).
        self._tasks = TaskSet()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if (
            sig == signal.SIGTERM
            and self._draining is None
            and self._loop is not None
            and not self.should_exit
        ):
            self._captured_signals.append(sig)
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        self._draining = self._tasks.spawn(self.drain())

    async def drain(self) -> None:
        """Refuse new sessions, wait for the live ones up to the drain timeout, end the rest."""
        state = self.state
        gate, timeout_s = state.gate, state.config.drain_timeout_s
        gate.draining = True
        parked = parked_sessions(state)
        log_event(logger, "server.draining", sessions=gate.open_sessions, parked=parked, timeout_s=timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                await self._until_settled()
                await self._until_cluster_settled()
        except TimeoutError:
            sessions, parked = gate.open_sessions, parked_sessions(state)
            log_event(logger, "server.drain_timeout", logging.WARNING, sessions=sessions, parked=parked)
        await state.stop_services()  # the rest: session.closed, reason server_shutdown
        self.should_exit = True

    async def _until_settled(self) -> None:
        """Until no session socket is open and no session is parked: a parked session's client
        may come back during the drain (a resume still attaches, ``cluster/gate.py``), so it is
        waited for as a live one is, until it resumes and ends, or its resume window closes."""
        gate = self.state.gate
        while True:
            await gate.idle.wait()
            if parked_sessions(self.state) == 0:
                return
            await asyncio.sleep(PARKED_POLL_S)  # the parked set has no event of its own

    async def _until_cluster_settled(self) -> None:
        """In a cluster, until no process of this server holds a session. The processes share
        one port (``SO_REUSEPORT``): one that closed its socket while the others drain would
        reset the connections the kernel had already queued on it (a health check, a resume,
        a new session that should hear 503), so an idle process keeps answering until all are
        idle, or the drain times out."""
        member = self.state.gate.member
        if member is None:
            return
        while True:  # the counts live in another process's actor: there is no event to wait on
            if await member.group_sessions() == 0:
                return
            await asyncio.sleep(PARKED_POLL_S)


def parked_sessions(state: State) -> int:
    """Sessions parked for a resume, by the services' own reports."""
    return sum(int(service.health().get("parked_sessions", 0)) for service in state.services)


def run(config: ServerConfig, registry_spec: str | None = None, app: Any = None) -> None:
    """``livegen serve``: one process here (``app``, if built already), or a supervisor of
    ``--workers`` processes (each builds its own app)."""
    if config.workers > 1 or config.ray_address is not None:
        Supervisor(config, registry_spec).run()
        return
    from livegen.server.app import create_app

    app = app or create_app(config, load_registry(registry_spec))
    server = DrainingServer(_uvicorn_config(app, config), app.state.livegen)
    server.run()


def _uvicorn_config(app: Any, config: ServerConfig) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_config=None,
        log_level=config.log_level,
        **uvicorn_options(config),  # type: ignore[arg-type]
    )


def load_registry(spec: str | None) -> Registry | None:
    """A registry from ``module:function`` (benches and tests serve their own models); None: the default."""
    if spec is None:
        return None
    module, _, name = spec.partition(":")
    registry: Registry = getattr(importlib.import_module(module), name)()
    return registry


class Supervisor:
    """The parent of ``--workers`` server processes: Ray, the coordinator, the processes."""

    def __init__(self, config: ServerConfig, registry_spec: str | None) -> None:
        self.config = config
        self.registry_spec = registry_spec
        self.group = secrets.token_hex(4)
        self.children: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
        self.stopping = False
        #: False once a call to Ray failed: the calls left are skipped, and so is Ray's disconnect.
        self.ray_alive = True
        self._reserved: socket.socket | None = None
        #: The process that holds a Ray of this server's own (``_start_ray``); None when joined.
        self.ray_head: subprocess.Popen[bytes] | None = None

    def run(self) -> None:
        from livegen.cluster.coordinator import NAMESPACE, coordinator

        # Ray's own start first: the environment it hands its drivers is read when Ray is imported.
        if self.config.ray_address is None and is_loopback(self.config.host):
            os.environ.update(RAY_LOOPBACK_ENV)  # for Ray's processes, this driver and the servers'
        self.ray_address = self.config.ray_address or self._start_ray()
        ray = import_ray()
        ray.init(address=self.ray_address, namespace=NAMESPACE, log_to_driver=False)
        self.ray = ray
        self.actor = coordinator(ray)
        port = self._reserve_port()
        log_event(logger, "server.workers", workers=self.config.workers, port=port, group=self.group)
        # SIGHUP (the terminal closed) ends the processes now, as SIGINT does: it reaches them no more.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        try:
            for index in range(self.config.workers):
                self._start(index, port)
            self._watch(port)
        finally:
            self._stop_all()
            self._leave_ray()

    def _start_ray(self) -> str:
        """A Ray of this server's own, started by a process of its own (``_ray_head``) out of the
        server's process group: a signal to that group (Ctrl-C, systemd's stop) must not end
        Ray's processes, and the coordinator with them, while the server processes drain. Its
        address; it ends when this process closes its stdin, or dies (``_leave_ray`` ends it)."""
        # CPUs for the world workers every process starts and the shared speech service
        # (cluster/speech.py), and no more: Ray starts an idle worker process per CPU
        # it is given, ~100 MiB each, which nothing here would use.
        # CPUs for the cluster's shared world services (cluster/world.py) and speech service
        # (cluster/speech.py), and no more: Ray starts an idle worker process per CPU it
        # is given, ~100 MiB each, which nothing here would use.
        num_cpus = max(1, self.config.world_workers) + 1
        command = [sys.executable, "-m", "livegen.cluster.supervisor", RAY_HEAD, str(num_cpus)]
        self.ray_head = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
        assert self.ray_head.stdout is not None
        line = self.ray_head.stdout.readline()
        if not line:
            raise SystemExit(f"livegen: Ray did not start (exit code {self.ray_head.wait()}); see its log")
        settings = json.loads(line)
        os.environ.update(settings["env"])  # for this driver and the server processes
        return str(settings["address"])

    def _reserve_port(self) -> int:
        """The public port: the configured one, or (port 0) one chosen here and held bound (not
        listening) so that no other program takes it while the processes bind it too."""
        self._reserved = reuse_port_socket(self.config.host, self.config.port)
        port: int = self._reserved.getsockname()[1]
        return port

    def _start(self, index: int, port: int) -> None:
        tag = str(self.ray.get(self.actor.new_tag.remote()))
        assignment = {
            "config": {**dataclasses.asdict(self.config), "port": port},
            "index": index,
            "tag": tag,
            "group": self.group,
            "ray_address": self.ray_address,
            "registry": self.registry_spec,
            "parent": os.getpid(),
        }
        env = {**os.environ, ASSIGNMENT: json.dumps(assignment)}
        # A group of its own: a signal to the server's group reaches it once, passed on by _on_signal.
        command = [sys.executable, "-m", "livegen.cluster.supervisor"]
        child = subprocess.Popen(command, env=env, start_new_session=True)
        self.children[index] = (child, tag)
        log_event(logger, "server.worker_started", index=index, pid=child.pid, tag=tag)

    def _watch(self, port: int) -> None:
        while self.children:
            time.sleep(0.2)
            for index, (child, tag) in list(self.children.items()):
                if child.poll() is None:
                    continue
                del self.children[index]
                if self.stopping:
                    self._forget(tag)
                    continue
                had_started = self._call(self.actor.address, tag) is not None
                self._forget(tag)
                log_event(logger, "server.worker_died", logging.ERROR, index=index, code=child.returncode)
                if not had_started:
                    # It never got going (a port taken, Ray unreachable): no restart loop.
                    self._on_signal(signal.SIGTERM, None)
                    raise SystemExit(f"livegen: server process {index} ended as it started; see its log")
                self._start(index, port)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = not self.stopping
        self.stopping = True
        for child, _ in self.children.values():
            # The first SIGTERM drains each process; a second signal (or SIGINT) ends them now.
            child.send_signal(signal.SIGTERM if first and signum == signal.SIGTERM else signal.SIGINT)

    def _stop_all(self) -> None:
        self.stopping = True
        deadline = time.monotonic() + self.config.drain_timeout_s + KILL_AFTER_S
        for child, tag in list(self.children.values()):
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            self._forget(tag)
        if self._reserved is not None:
            self._reserved.close()

    def _call(self, method: Any, *args: Any) -> Any:
        """``method(*args)`` of the coordinator, waited for ``STOP_CALL_S`` at most; None (and Ray
        marked gone) when Ray cannot answer."""
        if not self.ray_alive:
            return None
        try:
            return self.ray.get(method.remote(*args), timeout=STOP_CALL_S)
        except Exception as exc:
            log_event(logger, "cluster.unreachable", logging.WARNING, error=repr(exc))
            self.ray_alive = False
            return None

    def _forget(self, tag: str) -> None:
        """A process that ended: its counts and address go with it."""
        self._call(self.actor.forget, tag)

    def _leave_ray(self) -> None:
        """End a Ray of this server's own, or leave a joined one, and exit. Ray's own shutdown
        (its driver's disconnect) waits out Ray's reconnect timeouts when Ray's processes died
        with the signal that stops the server (a process group's Ctrl-C, systemd's stop), and a
        live one cannot be told from a dying one in time: so a Ray of this server's own (the
        process ``_start_ray`` started and Ray's processes under it) is ended here, then the
        process exits at once."""
        if self.config.ray_address is not None and self.ray_alive:
            from livegen.cluster.coordinator import stop_services

            stop_services(self.ray, self.actor)  # the last ``livegen serve`` of it stops its services
            return  # a cluster that answered: Ray leaves it at exit
        if self.config.ray_address is None:
            import psutil  # Ray's own dependency

            processes = psutil.Process().children(recursive=True)
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    process.terminate()
            for process in psutil.wait_procs(processes, timeout=STOP_CALL_S)[1]:
                with contextlib.suppress(psutil.Error):
                    process.kill()
        log_event(logger, "server.stopped")
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (``--host``) is a loopback address: only this machine reaches the server."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _private_ray_files() -> None:
    """Ray's token file (``~/.ray/auth_token``, its only guard) readable by this user alone: Ray
    writes it with the process's umask (mode 0644 as a rule), and so it writes every file of its
    session. Files made from here on are private (this process is Ray's head: its processes
    inherit the mask), and a token left by an earlier Ray is made private too."""
    os.umask(0o077)
    folder = Path.home() / ".ray"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        (folder / "auth_token").chmod(0o600)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT``: every process of the server binds
    one, and the kernel spreads new connections over those listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _end_with_parent(parent: int) -> None:
    """Out of the supervisor's process group, a server process would outlive a supervisor killed
    outright: on Linux it is sent SIGINT (end now) when its parent dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGINT)
    if os.getppid() != parent:  # the parent died before that took hold
        os.kill(os.getpid(), signal.SIGINT)


def _ray_head(num_cpus: int) -> None:
    """The supervisor's private Ray (``Supervisor._start_ray``): started here, its address on
    stdout, ended when stdin closes (the supervisor closed it, or died)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # Ray's prints (and its processes') go to stderr: stdout carries the address alone
    _private_ray_files()
    ray = import_ray()
    # "local": a Ray of this server's own, even where another runs on the machine (ray.init()
    # without an address may join that one, and refuses num_cpus when it does). Ray's processes
    # end with this one (Ray ties them to the process that started them).
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    # What a driver of this Ray needs: its address, and the settings ray.init gave this process's
    # environment for its children (Ray's token authentication: RAY_AUTH_MODE).
    settings = {"address": ray.get_runtime_context().gcs_address}
    settings["env"] = {name: os.environ[name] for name in RAY_HEAD_ENV if name in os.environ}
    print(json.dumps(settings), file=out, flush=True)
    sys.stdin.read()
    ray.shutdown()


def _child() -> None:
    """One server process of ``--workers``: join Ray, register, serve both ports."""
    from livegen import logs
    from livegen.cluster.coordinator import COORDINATOR, NAMESPACE, Member
    from livegen.server.app import create_app
    from livegen.server.http.budgets import limit_malloc_arenas

    limit_malloc_arenas()
    assignment = json.loads(os.environ.pop(ASSIGNMENT))
    _end_with_parent(assignment["parent"])
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in assignment["config"].items()
    }
    config = ServerConfig(**fields)
    logs.configure(config.log_level)
    ray = import_ray()
    ray.init(address=assignment["ray_address"], namespace=NAMESPACE, log_to_driver=False)
    # Every model's heavy parts (speech, lockstep, world): once, in the cluster's services.
    mode.join(mode.Membership(assignment["tag"], NAMESPACE, COORDINATOR))
    app = create_app(config, load_registry(assignment["registry"]))
    state: State = app.state.livegen
    public = reuse_port_socket(config.host, config.port)
    private = socket.socket(public.family, socket.SOCK_STREAM)
    private.bind((config.host, 0))
    host = config.host if config.host not in ("0.0.0.0", "::", "") else ray.util.get_node_ip_address()
    scheme = "wss" if config.tls else "ws"
    address = f"{scheme}://{host}:{private.getsockname()[1]}"
    actor = ray.get_actor(COORDINATOR, namespace=NAMESPACE)
    relay_key = str(ray.get(actor.relay_key.remote()))
    member = Member(assignment["tag"], assignment["group"], actor, address, relay_key)
    state.gate.join(member, private.getsockname()[1])
    state.metrics.identify(member.tag, member.group)
    info = {"pid": os.getpid(), "index": assignment["index"], "port": config.port, "node": host}
    ray.get(actor.register.remote(member.tag, {**info, "address": address, "group": member.group}))
    code = 0
    try:
        DrainingServer(_uvicorn_config(app, config), state).run(sockets=[public, private])
    except (KeyboardInterrupt, SystemExit):
        pass  # uvicorn raises the stop signal again once it has stopped
    except BaseException:
        logger.exception("server process failed")
        code = 1
    finally:
        # Without Ray's exit-time disconnect, which waits out Ray's reconnect timeouts when Ray's
        # processes died with the server's signal; Ray sees this driver go either way.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == [RAY_HEAD]:
        _ray_head(int(sys.argv[2]))
    else:
        _child()
