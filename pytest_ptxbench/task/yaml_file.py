"""Reading the YAML of a task or shapes file: plain data only, so that a file cannot hang its reader.

Anchors and aliases (`&a`, `*a`, the `<<` merge key) are refused, which rules out alias bombs; so is
nesting deeper than MAX_DEPTH, and a key given twice in one mapping instead of the last one silently winning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node

_MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_DEPTH = 32  # levels of nested mappings and lists; the catalogue's files use 4


class YAMLFileError(ValueError):
    """The file cannot be read as plain YAML; the message names the file and, where known, the line."""


class _Refused(yaml.YAMLError):
    """Valid YAML that a task file may not use, at a line of the file."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line: int = mark.line + 1


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors, aliases, merge keys, repeated keys or deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"alias *{event.anchor} is not allowed (no anchors or aliases)", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused(f"anchor &{event.anchor} is not allowed (no anchors or aliases)", event.start_mark)
        if self.depth == MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                raise _Refused("the merge key << is not allowed", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: PyYAML's own check names it
            if earlier is not key_node:
                line = earlier.start_mark.line + 1
                raise _Refused(f"key {key!r} is given twice (first on line {line})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """The data in `path`, or YAMLFileError: unreadable, not UTF-8, not valid YAML, or not plain data."""
    try:
        text = path.read_bytes().decode()
    except OSError as exc:
        raise YAMLFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise YAMLFileError(
            f"{path}: not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        ) from None
    try:
        return yaml.load(text, Loader=_PlainLoader)
    except _Refused as exc:
        raise YAMLFileError(f"{path}: line {exc.line}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise YAMLFileError(f"{path}: not valid YAML: {exc}") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise YAMLFileError(f"{path}: not valid YAML: {exc}") from None
