"""A keep-alive HTTP/1.1 client of JSON requests for the tests that send thousands of
them to app processes (tests/reliability/test_fold_replicas.py): httpx spends about a
millisecond of the test process's CPU per request, which on the 2-core machine of
docs/testing.md is taken from the servers under test; this client writes the request
and reads the ``Content-Length`` body on one asyncio stream."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import orjson


class KeepAlive:
    """One connection to ``url`` (``http://host:port``), each request sent with
    ``headers``; a request waits for the previous response. A connection refused, reset
    or closed mid-response raises ``OSError`` or ``asyncio.IncompleteReadError``."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None, url
        self.host, self.port = parts.hostname, parts.port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    async def __aenter__(self) -> Self:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.writer.close()

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        """The status and the JSON body of ``POST path`` with ``body`` as JSON."""
        data = orjson.dumps(body)
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.head}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        status_line, *lines = (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines if line)
        payload = await self.reader.readexactly(int(fields["content-length"]))
        return int(status_line.split(" ", 2)[1]), orjson.loads(payload)
