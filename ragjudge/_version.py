"""The package version, in a module of its own so that any module can record it (reports,
provenance) without importing the package face, which imports those modules back."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"  # keep equal to pyproject.toml's [project] version
