"""Loads the plugin from a plain checkout (no install, e.g. on a machine without a package registry),
unless its `pytest11` entry point loads it already: pluggy refuses a second registration."""

import os
from importlib.metadata import entry_points


def _loaded_by_entry_point() -> bool:
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == "pytest_ptxbench.plugin" for ep in entry_points(group="pytest11"))


pytest_plugins = [] if _loaded_by_entry_point() else ["pytest_ptxbench.plugin"]
