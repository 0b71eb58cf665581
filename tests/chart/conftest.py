"""The chart rendered once per session with its default values, with values-production.yaml, and with
values-secure.yaml on top of it (TLS, tokens, authorization)."""

from __future__ import annotations

import pytest

from tests.chart.render import PRODUCTION_VALUES, SECURE_VALUES, Manifest, render


@pytest.fixture(scope="session")
def default_manifests() -> list[Manifest]:
    return render()


@pytest.fixture(scope="session")
def production_manifests() -> list[Manifest]:
    return render(PRODUCTION_VALUES)


@pytest.fixture(scope="session")
def secure_manifests() -> list[Manifest]:
    return render(PRODUCTION_VALUES, SECURE_VALUES)


@pytest.fixture(scope="session", params=["default", "production", "secure"])
def manifests(request: pytest.FixtureRequest, default_manifests: list[Manifest],
              production_manifests: list[Manifest], secure_manifests: list[Manifest]) -> list[Manifest]:
    """Each test taking this runs on the three renders."""
    renders = {"default": default_manifests, "production": production_manifests, "secure": secure_manifests}
    return renders[request.param]
