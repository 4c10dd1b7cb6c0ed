"""The server's payloads as the session hands them to tasks."""
from __future__ import annotations

from typing import Any

from fedclock.actors.transport import Transport


class PayloadCache:
    """Handles of the server's payloads. When the algorithm sends every client the same
    payload (``payload_is_shared``), one handle per server version serves every task of that
    version (and the executors unpickle it once, :class:`~fedclock.actors.transport.ByReference`);
    otherwise each task gets its own."""

    def __init__(self, transport: Transport, server: Any, shared: bool) -> None:
        self.t = transport
        self.server = server
        self.shared = shared
        self._held: tuple[int, Any] | None = None

    def for_client(self, client: int, version: int) -> Any:
        """The handle of ``client``'s payload at server ``version`` (the current one)."""
        if not self.shared:
            return self.t.call(self.server, "payload_for", client)
        if self._held is None or self._held[0] != version:
            self._held = (version, self.t.call(self.server, "payload_for", client))
        return self._held[1]

    def clear(self) -> None:
        """Forget the held payload (the server's state was put back)."""
        self._held = None
