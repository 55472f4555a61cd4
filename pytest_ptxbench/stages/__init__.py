"""The pipeline's stages, in order: build → inspect → check → profile → sanitize → time."""
