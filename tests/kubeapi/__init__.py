"""A fake Kubernetes API server for tests: list, watch, create, replace over real HTTP."""

from .server import FakeKubeAPI

__all__ = ["FakeKubeAPI"]
