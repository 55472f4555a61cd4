"""Loads the plugin from a plain checkout (no install, e.g. on a machine without a package registry),
unless its entry point has already loaded it: pluggy refuses a second registration."""

import sys

pytest_plugins = [] if "pytest_ptxbench.plugin" in sys.modules else ["pytest_ptxbench.plugin"]
