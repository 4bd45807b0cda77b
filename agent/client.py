"""The agent's HTTP client for the scheduler's `/v1/nodes` endpoints."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx


def tls_verification(ca_file: Path | None) -> ssl.SSLContext | bool:
    """How an https server's certificate is checked: against the system's CAs, or with
    `ca_file` (PEM) against that CA alone, e.g. a cluster's own. Never unchecked."""
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:  # unreadable, or holding no certificate (ssl.SSLError)
        raise ValueError(f"cannot use the CA file {ca_file}: {exc}") from exc


class ServerError(Exception):
    """The server answered with an error; `status` is its HTTP status, `retry_after_s`
    its Retry-After in seconds where it gave one (a 503 when shedding load)."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.retry_after_s = retry_after_s


def retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After's delay in seconds; None where absent or an HTTP date (the server
    sends whole seconds)."""
    try:
        seconds = float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None
    return seconds if seconds >= 0 else None


class SchedulerClient:
    def __init__(
        self,
        server: str,
        token: str | None,
        timeout_s: float = 10.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=server.rstrip("/"), headers=headers, timeout=timeout_s, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def _post(
        self, path: str, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else min(timeout_s, self._timeout_s)
        response = self._http.post(path, json=body, timeout=timeout)
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:500]
            raise ServerError(response.status_code, message, retry_after_s(response))
        result: dict[str, Any] = response.json()
        return result

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post("/v1/nodes/register", body)

    def heartbeat(
        self, node_id: int, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One heartbeat; `timeout_s` may shorten the client's timeout for this one."""
        return self._post(f"/v1/nodes/{node_id}/heartbeat", body, timeout_s)
