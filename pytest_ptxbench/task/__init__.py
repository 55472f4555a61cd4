"""Tasks: the catalogue of families read from YAML, their formulas, and the test cases they make."""
