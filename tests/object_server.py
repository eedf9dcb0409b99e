"""S3 APIs on loopback for the bucket tier's tests: moto's real S3 server, and faulty ones.

moto runs in this process (its threaded server), so the tests' child processes reach
it over HTTP like any S3 endpoint. The faulty servers are what moto cannot be: one
that answers every request with a fixed HTTP status (500, 403), one that accepts
connections and never answers, and a port nothing listens on.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: What every test child needs to reach an S3 endpoint: moto accepts any credentials.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


class ServerUnavailable(Exception):
    """moto is not installed or did not start; the message says which."""


@dataclass
class MotoServer:
    endpoint: str

    def environment(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self):
        """A boto3 client (moto brings boto3): buckets made and objects written directly."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")


@contextlib.contextmanager
def moto_server() -> Iterator[MotoServer]:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        raise ServerUnavailable(f"moto[server] is not installed ({error}; pip install -e "
                                "'.[test]')") from None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        server.start()
    except OSError as error:
        raise ServerUnavailable(f"moto's server did not start: {error}") from None
    host, port = server.get_host_and_port()
    try:
        yield MotoServer(f"http://{host}:{port}")
    finally:
        server.stop()


@contextlib.contextmanager
def answering(status: int) -> Iterator[str]:
    """An endpoint answering every request with `status` (and an S3-like error body)."""
    code = {403: "AccessDenied", 500: "InternalError"}.get(status, "Error")

    class Handler(BaseHTTPRequestHandler):
        def answer(self):
            body = f"<Error><Code>{code}</Code><Message>test</Message></Error>".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent() -> Iterator[str]:
    """An endpoint that accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@contextlib.contextmanager
def down() -> Iterator[str]:
    """An endpoint nothing listens on: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}"
