"""YAML text -> Python data, refusing what would mean something other than it says or eat the machine.

PyYAML composes a node graph first, in which an alias is the very node its anchor names: a "billion laughs"
(`a: &a [x, x]`, `b: &b [*a, *a]`, ...) is a few dozen nodes that expand to billions of values once anything
walks them (pydantic, a message's repr, a JSON dump). So the graph is measured before anything is built from
it: the values reached through aliases are counted (each node once, in linear time) and refused past a bound,
and every mapping's keys are checked for duplicates (YAML keeps the last one silently).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autotune.core import ConfigError

# Values that aliases may add to a file beyond those written out in it. A run file's anchors reuse a block or
# two (a few hundred values); a bomb's expansion is millions.
MAX_ALIAS_EXPANSION = 100_000
_MERGE = "tag:yaml.org,2002:merge"


def safe_load(text: str, name: str) -> Any:
    """`yaml.safe_load(text)`, with duplicate keys and alias bombs refused as one ConfigError naming `name`."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check(root, name)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check(root: Node, name: str) -> None:
    """Walk the graph once (iteratively: a deep file must not hit Python's recursion limit): duplicate keys,
    cycles through aliases, and the expanded size of every node."""
    size: dict[int, int] = {}
    refs: dict[int, int] = {}  # how many places hold each node: more than one is an anchor's alias
    on_path: set[int] = set()
    stack: list[tuple[Node, str, bool]] = [(root, "", False)]
    while stack:
        node, path, done = stack.pop()
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        refs[id(node)] = refs.get(id(node), 0) + 1
        if id(node) in size:
            continue
        if id(node) in on_path:  # `&a [*a]`: a value that contains itself expands forever
            raise ConfigError(name, path, f"line {node.start_mark.line + 1}: an alias refers to a value that "
                                          "contains it (recursive anchor); write the value out")
        on_path.add(id(node))
        stack.append((node, path, True))
        if isinstance(node, MappingNode):
            _check_duplicates(node, path, name)
            stack += [(v, _join(path, k), False) for k, v in reversed(node.value)]
            stack += [(k, path, False) for k, _ in node.value]
        elif isinstance(node, SequenceNode):
            stack += [(v, _join(path, str(i)), False) for i, v in reversed(list(enumerate(node.value)))]
    extra = size[id(root)] - len(size)
    if extra > MAX_ALIAS_EXPANSION:
        path, node = _largest(root, size, refs)
        raise ConfigError(name, path, f"line {node.start_mark.line + 1}: aliases (*name) expand this file by "
                                      f"{extra:,} values, more than the {MAX_ALIAS_EXPANSION:,} allowed (nested "
                                      "anchors multiply: a \"billion laughs\"?); write the values out or reuse less")


def _join(path: str, key: Any) -> str:
    part = key.value if isinstance(key, ScalarNode) else str(key) if isinstance(key, str) else "?"
    return f"{path}.{part}" if path else str(part)


def _check_duplicates(node: MappingNode, path: str, name: str) -> None:
    """`train:` twice in one mapping: YAML keeps the last silently; refuse it with both lines."""
    seen: dict[tuple[str, Any], int] = {}
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag == _MERGE:  # `<<: *base` is overridden on purpose
            continue
        line = key.start_mark.line + 1
        ident = (key.tag, key.value)
        if ident in seen:
            raise ConfigError(name, _join(path, key), f"duplicate key at lines {seen[ident]} and {line} (YAML "
                                                      "would silently keep only the last); keep one")
        seen[ident] = line


def _largest(root: Node, size: dict[int, int], refs: dict[int, int]) -> tuple[str, Node]:
    """Where the bomb is: down the values that alone expand past the bound, to the first one an alias reuses."""
    path, node = "", root
    while refs.get(id(node), 0) < 2:
        pairs = [(_join(path, k), v) for k, v in node.value] if isinstance(node, MappingNode) else \
            [(_join(path, str(i)), v) for i, v in enumerate(node.value)] if isinstance(node, SequenceNode) else []
        big = [(p, v) for p, v in pairs if size[id(v)] > MAX_ALIAS_EXPANSION]
        if not big:
            break
        path, node = big[0]
    return path, node
