"""The chart rendered once per session with its default values and with values-production.yaml."""

from __future__ import annotations

import pytest

from tests.chart.render import PRODUCTION_VALUES, Manifest, render


@pytest.fixture(scope="session")
def default_manifests() -> list[Manifest]:
    return render()


@pytest.fixture(scope="session")
def production_manifests() -> list[Manifest]:
    return render(PRODUCTION_VALUES)


@pytest.fixture(scope="session", params=["default", "production"])
def manifests(request: pytest.FixtureRequest, default_manifests: list[Manifest],
              production_manifests: list[Manifest]) -> list[Manifest]:
    """Each test taking this runs on both renders."""
    return default_manifests if request.param == "default" else production_manifests
