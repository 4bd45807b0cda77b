"""`colloc server --tls-cert/--tls-key`: the CLI and an agent reach it over https,
checking its certificate against a CA file, and are refused by it without one."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import bearer
from tests.e2e.harness import LocalColloc, simjob

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


SELF_SIGNED = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
SELF_SIGNED += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]


def certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made now."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [*SELF_SIGNED, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True
    )
    return cert, key


@pytest.fixture
def https_colloc(tmp_path: Path, database_url: str) -> Iterator[tuple[LocalColloc, Path]]:
    """A server on https with a certificate of its own, and one agent trusting it."""
    cert, key = certificate(tmp_path, "server")
    colloc = LocalColloc(tmp_path, database_url)
    colloc.http.close()
    colloc.url = colloc.url.replace("http://", "https://")
    colloc.http = httpx.Client(
        base_url=colloc.url,
        timeout=10,
        headers=bearer(colloc.admin_token),
        verify=ssl.create_default_context(cafile=cert),
    )
    colloc.env["COLLOC_SERVER"] = colloc.url
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    colloc.server = colloc._spawn(
        "server", "server", "--port", str(colloc.port), "--db", database_url, *tls
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert colloc.server.poll() is None, colloc.log("server")
            try:
                if colloc.http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, colloc.log("server")
                time.sleep(0.2)
        colloc.start_agent("node-b", "--ca-file", str(cert))
        yield colloc, cert
    finally:
        colloc.stop()


def test_the_cli_and_an_agent_work_over_https(https_colloc: tuple[LocalColloc, Path]) -> None:
    colloc, cert = https_colloc
    job_file = colloc.root / "job.yaml"
    job_file.write_text(
        f"name: over-tls\nmemory_mib: 1000\ngpu_models: [T4]\ncommand: {simjob(500, 1)}\n"
    )
    # the CLI with the CA from COLLOC_CA_FILE or --ca-file; the agent took --ca-file
    submitted = run_colloc("submit", str(job_file), "-o", "name", env=colloc.env | ca_env(cert))
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    colloc.wait_for(job_id, {"succeeded"})  # the agent heartbeats over https
    shown = run_colloc("show", str(job_id), "--ca-file", str(cert), env=colloc.env)
    assert shown.returncode == 0 and "state: succeeded" in shown.stdout, shown.stderr

    # without the CA the certificate is refused, in one line that says what to do
    refused = run_colloc("show", str(job_id), env=colloc.env)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr and "--ca-file" in refused.stderr
    # nor does plain http reach it
    with pytest.raises(httpx.HTTPError):
        httpx.get(colloc.url.replace("https://", "http://") + "/healthz", timeout=5)


def ca_env(cert: Path) -> dict[str, str]:
    return {"COLLOC_CA_FILE": str(cert)}


def run_colloc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_unusable_tls_files_are_one_line(tmp_path: Path) -> None:
    cert, _key = certificate(tmp_path, "a")
    _other_cert, other_key = certificate(tmp_path, "b")
    db = f"sqlite:///{tmp_path / 'colloc.db'}"
    missing = tmp_path / "none.pem"
    cases = [
        (["--tls-cert", str(cert), "--tls-key", str(other_key)], "KEY_VALUES_MISMATCH"),
        (["--tls-cert", str(missing), "--tls-key", str(other_key)], "No such file"),
        (["--tls-cert", str(cert)], "go together"),
    ]
    for flags, message in cases:
        result = run_colloc("server", "--db", db, "--port", "1", *flags)
        assert result.returncode == 2, (flags, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    client = run_colloc("jobs", "--server", "https://127.0.0.1:1", "--ca-file", str(tmp_path))
    assert client.returncode == 2 and "cannot use the CA file" in client.stderr, client.stderr
