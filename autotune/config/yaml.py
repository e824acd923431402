"""YAML text -> Python data, refusing what would mean something other than it says or eat the machine.

PyYAML composes a node graph first, in which an alias is the very node its anchor names: a "billion laughs"
(`a: &a [x, x]`, `b: &b [*a, *a]`, ...) is a few dozen nodes that expand to billions of values once anything
walks them (pydantic, a message's repr, a JSON dump), and one long string aliased many times is as bad by size
(a 1 MB string used 99,000 times stores as 99 GB of JSON). So the graph is measured before anything is built from
it: the values and the characters reached through aliases are counted (each node once, in linear time) and
refused past a bound. Every mapping's keys are checked for duplicates as YAML reads them, not as they are spelled
(`1` and `0x1`, `yes` and `true`, `~` and `null` are one key; YAML keeps the last silently). PyYAML's composer
recurses once per level of nesting, so the nesting is measured first from the parser's events (which do not
recurse): a file nested deeper than `MAX_DEPTH` is one line, never a RecursionError.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autotune.core import ConfigError

# Values that aliases may add to a file beyond those written out in it. A run file's anchors reuse a block or
# two (a few hundred values); a bomb's expansion is millions.
MAX_ALIAS_EXPANSION = 100_000
MAX_ALIAS_CHARS = 1_000_000  # characters aliases may add (the text a reused block repeats): a run file's, hundreds
MAX_DEPTH = 64  # levels of nesting (a run file needs five or six)
_MERGE = "tag:yaml.org,2002:merge"


def safe_load(text: str, name: str) -> Any:
    """`yaml.safe_load(text)`, with deep nesting, duplicate keys and alias bombs refused as one ConfigError naming
    `name`."""
    _check_depth(text, name)
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check(root, name)
        return loader.construct_document(root)
    except RecursionError:  # (the depth check keeps this from happening; never a traceback if it does)
        raise ConfigError(name, "", f"values nested too deeply to read (at most {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


def _check_depth(text: str, name: str) -> None:
    """Refuse nesting past MAX_DEPTH, from the parser's events (a flat loop: no recursion, whatever the depth)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise ConfigError(name, "", f"line {line}: values nested more than {MAX_DEPTH} levels deep (a run "
                                            "file needs a handful); flatten it")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _own_chars(node: Node) -> int:
    return len(node.value) + 1 if isinstance(node, ScalarNode) else 1


def _check(root: Node, name: str) -> None:
    """Walk the graph once (iteratively: a deep file must not hit Python's recursion limit): duplicate keys,
    cycles through aliases, and the expanded size of every node, in values and in characters."""
    size: dict[int, int] = {}
    chars: dict[int, int] = {}
    refs: dict[int, int] = {}  # how many places hold each node: more than one is an anchor's alias
    on_path: set[int] = set()
    written = 0  # the characters of every node once: the file as written
    keys = _Keys()
    stack: list[tuple[Node, str, bool]] = [(root, "", False)]
    while stack:
        node, path, done = stack.pop()
        if done:
            on_path.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in _children(node))
            chars[id(node)] = _own_chars(node) + sum(chars[id(c)] for c in _children(node))
            continue
        refs[id(node)] = refs.get(id(node), 0) + 1
        if id(node) in size:
            continue
        if id(node) in on_path:  # `&a [*a]`: a value that contains itself expands forever
            raise ConfigError(name, path, f"line {node.start_mark.line + 1}: an alias refers to a value that "
                                          "contains it (recursive anchor); write the value out")
        on_path.add(id(node))
        written += _own_chars(node)
        stack.append((node, path, True))
        if isinstance(node, MappingNode):
            keys.check(node, path, name)
            stack += [(v, _join(path, k), False) for k, v in reversed(node.value)]
            stack += [(k, path, False) for k, _ in node.value]
        elif isinstance(node, SequenceNode):
            stack += [(v, _join(path, str(i)), False) for i, v in reversed(list(enumerate(node.value)))]
    extra = size[id(root)] - len(size)
    if extra > MAX_ALIAS_EXPANSION:
        path, node = _largest(root, size, refs, MAX_ALIAS_EXPANSION)
        raise ConfigError(name, path, f"line {node.start_mark.line + 1}: aliases (*name) expand this file by "
                                      f"{extra:,} values, more than the {MAX_ALIAS_EXPANSION:,} allowed (nested "
                                      "anchors multiply: a \"billion laughs\"?); write the values out or reuse less")
    extra_chars = chars[id(root)] - written
    if extra_chars > MAX_ALIAS_CHARS:
        path, node = _largest(root, chars, refs, MAX_ALIAS_CHARS)
        raise ConfigError(name, path, f"line {node.start_mark.line + 1}: aliases (*name) expand this file by "
                                      f"{extra_chars:,} characters, more than the {MAX_ALIAS_CHARS:,} allowed (a "
                                      "long value reused many times); write the values out or reuse less")


def _join(path: str, key: Any) -> str:
    part = key.value if isinstance(key, ScalarNode) else str(key) if isinstance(key, str) else "?"
    return f"{path}.{part}" if path else str(part)


class _Keys:
    """Duplicate keys as YAML reads them: each key scalar constructed as the loader would (`0x1` is 1, `yes` is
    True, `~` is None), and compared as the dict it becomes compares them (1, 1.0 and True are one key)."""

    def __init__(self) -> None:
        self.constructor = yaml.constructor.SafeConstructor()

    def value(self, key: ScalarNode) -> Any:
        try:
            value = self.constructor.construct_object(key)
            hash(value)
            return value
        except Exception:  # (a tag it cannot build, an unhashable value: compared as spelled)
            return (key.tag, key.value)

    def check(self, node: MappingNode, path: str, name: str) -> None:
        """`train:` twice in one mapping: YAML keeps the last silently; refuse it with both lines."""
        seen: dict[Any, tuple[ScalarNode, Any]] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE:  # `<<: *base` is overridden on purpose
                continue
            value = self.value(key)
            if value in seen:
                first, kept = seen[value]
                same = "" if first.value == key.value else \
                    f" (`{first.value}` and `{key.value}` are the same key, {kept!r})"
                raise ConfigError(name, _join(path, key), f"duplicate key at lines {first.start_mark.line + 1} and "
                                                          f"{key.start_mark.line + 1}{same} (YAML would silently "
                                                          "keep only the last); keep one")
            seen[value] = (key, value)


def _largest(root: Node, size: dict[int, int], refs: dict[int, int], bound: int) -> tuple[str, Node]:
    """Where the bomb is: down the values that alone expand past the bound, to the first one an alias reuses."""
    path, node = "", root
    while refs.get(id(node), 0) < 2:
        pairs = [(_join(path, k), v) for k, v in node.value] if isinstance(node, MappingNode) else \
            [(_join(path, str(i)), v) for i, v in enumerate(node.value)] if isinstance(node, SequenceNode) else []
        big = [(p, v) for p, v in pairs if size[id(v)] > bound]
        if not big:
            break
        path, node = big[0]
    return path, node
