"""pytest-ptxbench: GPU-kernel benchmark tasks as pytest tests.

Importing the package starts nothing: no torch, no CUDA.
"""

__version__ = "0.1.0"
