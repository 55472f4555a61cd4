"""Trusted replay: the candidate's host code only describes its launches (captured in a sandboxed child);
harness code maps the same buffers, loads the cubins the harness extracted, and replays them."""
