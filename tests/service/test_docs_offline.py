"""`/docs` and `/redoc` work without internet: every file they load is served here."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

# where a page names what it loads: attributes, and the spec in Swagger UI's script
REFERENCE = re.compile(r"""(?:src|href|spec-url)=["']([^"']+)["']|url: ["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_pages_load_only_files_served_here(client: TestClient, page: str) -> None:
    client.headers.pop("Authorization")  # public, as FastAPI's own pages were
    response = client.get(page)
    assert response.status_code == 200
    html = response.text
    assert "http://" not in html and "https://" not in html, html
    references = [a or b for a, b in REFERENCE.findall(html)]
    assert "/openapi.json" in references
    assert any(ref.endswith(".js") for ref in references)
    for ref in references:
        assert ref.startswith("/"), ref
        loaded = client.get(ref)
        assert loaded.status_code == 200 and loaded.content, ref


def test_swagger_ui_is_a_version_that_renders_openapi_3_1(client: TestClient) -> None:
    """FastAPI writes OpenAPI 3.1, which Swagger UI renders from version 5 on."""
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    html = client.get("/docs").text
    (bundle,) = re.findall(r'src="([^"]*swagger-ui-bundle\.js)"', html)
    assert "isOAS31" in client.get(bundle).text
