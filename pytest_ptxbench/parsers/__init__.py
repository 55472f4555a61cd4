"""Parsers of real tool output: cuobjdump SASS, objdump host symbols and code, ptxas resource reports."""
