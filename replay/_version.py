"""The package version, in a module of its own: what every layer may import (results,
manifests and reports record it) without importing the `replay` package's API."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
