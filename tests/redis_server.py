"""A real ``redis-server`` on a free loopback port, for the tests and the remote benchmark."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

#: How long a starting server may take to answer PING.
START_TIMEOUT = 20.0


class ServerUnavailable(Exception):
    """redis-server is not installed or did not start; the message says which."""


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def stop(self) -> None:
        """Kill the server (continuing it first, should a test have stopped it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        self.process.kill()
        self.process.wait()


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    """A running server with nothing persisted (files, if any, go to `directory`)."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise ServerUnavailable(
            "redis-server is not installed (apt-get install redis-server; .ci/run does it)"
        )
    port = _free_port()
    directory.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(directory), "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = RedisServer(process, port)
    try:
        _wait_until_ready(server)
        yield server
    finally:
        server.stop()


def _free_port() -> int:
    # Another process could take the port before the server binds it; the server then
    # fails to start and the fixture says so, which is rare enough for tests.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_ready(server: RedisServer) -> None:
    client = server.client()
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.process.poll() is not None:
            raise ServerUnavailable(f"redis-server exited with status {server.process.returncode}")
        try:
            client.ping()
            return
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"redis-server did not answer within {START_TIMEOUT:g} s")
            time.sleep(0.05)
