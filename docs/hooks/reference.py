"""MkDocs hook: the reference pages, generated at build time from the code, so they cannot go stale.

Each page is built from the one source of truth it documents: the YAML schema from the pydantic models
(autotune/spec/schema.py), the settings catalogue (autotune/spec/settings.py `SETTINGS`), the metrics catalogue
(autotune/spec/metrics.py `CATALOGUE`), what a study stores (autotune/spec/stored.py `TrialRecord`,
`StudyRecord`), the command line from the argparse parser (autotune/cli/app.py
`build_parser`), the public Python API from docstrings (`inspect`), and bench/RESULTS.md copied as it is.
None of them is committed: `on_files` adds them to the build. tests/test_docs.py calls `PAGES` directly. The
how-to pages' framework tables are filled in where a page says `<!-- table: hf -->` (`on_page_markdown`), from
autotune/integrations/tables.py: each framework's one mapping and the catalogue's `applied_by`; and the lists of
settings the prose names (`<!-- names: KEY -->`, `NAME_LISTS`) are filled from the catalogue and the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _cell(value: Any) -> str:
    """One table cell: pipes escaped, newlines folded."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    return f"`{value}`" if str(value) != "" else "`''`"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n", 1)[0].replace("\n", " ")


# ---------------------------------------------------------------- the YAML schema


def _type(ann: Any) -> str:
    """A type as a reader writes it in YAML terms: `int | null`, `one of a, b`, a section's name."""
    from pydantic import BaseModel

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (dict, list, tuple):
        inner = ", ".join(_type(a) for a in args if a is not Ellipsis)
        return {dict: "mapping", list: "list", tuple: "list"}[origin] + (f"[{inner}]" if inner else "")
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann.__name__
    if ann is typing.Any:
        return "any"
    return {str: "str", int: "int", float: "float", bool: "bool"}.get(ann, getattr(ann, "__name__", str(ann)))


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}


def _constraints(field: Any) -> str:
    """The annotated_types bounds pydantic keeps in a field's metadata (`Field(ge=1)` and the like)."""
    out = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _comments(model: type) -> dict[str, str]:
    """A field's description: `Field(description=...)`, else the comment at the end of its line in the source."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    found, above = {}, []
    for line in source.splitlines():
        if re.match(r"\s+#", line):  # a comment on the lines above a field
            above.append(line.strip().lstrip("#").strip())
            continue
        m = re.match(r"\s+(\w+)\s*:[^#]*(?:#\s*(.+))?$", line)
        if m and (m.group(2) or above):
            found[m.group(1)] = (m.group(2) or " ".join(above)).strip()
        above = []
    return found


def _default(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(the section's defaults)"
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        return _code([v.model_dump(exclude_none=True) for v in value])
    return _code("null" if value is None else value)


def _models_in(ann: Any) -> list[type]:
    from pydantic import BaseModel

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in _models_in(a)]


def _section(path: str, model: type, out: list[str]) -> None:
    """One section's table, then each nested section's (`study.warm_start`, `pruning.slow`, ...)."""
    doc = inspect.cleandoc(model.__doc__ or "")
    out.append(f"## `{path}`\n\n" + (f"{doc}\n\n" if doc and not doc.startswith("!!") else ""))
    notes = _comments(model)
    rows, nested = [], []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        note = field.description or notes.get(name, "")
        rows.append([_code(name), _type(field.annotation), _default(field), _constraints(field), note])
        nested += [(f"{path}.{name}", m) for m in _models_in(field.annotation)]
    out.append(_table(["key", "type", "default", "constraints", "meaning"], rows) + "\n")
    for sub_path, sub in nested:
        _section(sub_path, sub, out)


def yaml_page() -> str:
    from autotune.spec import schema

    out = ["# YAML schema\n\n",
           "Generated from the pydantic models in `autotune/spec/schema.py` at build time. Every key is optional "
           "unless its default says *required*; an unknown key is an error naming the closest one. The settings "
           "that `train:` and `space:` take are in [Trainer settings](settings.md); the metrics `objectives:` "
           "names are in [Metrics](metrics.md). A guided tour with examples: [The YAML file](../guide/yaml.md).\n\n"]
    top_rows, sections = [], []
    notes = _comments(schema.RunConfig)
    for name, field in schema.RunConfig.model_fields.items():
        if field.exclude:
            continue
        models = _models_in(field.annotation)
        top_rows.append([_code(name), _type(field.annotation), _default(field), notes.get(name, "")])
        path = f"{name}.<setting>" if typing.get_origin(field.annotation) is dict else name  # space: name -> spec
        sections += [(path, m) for m in models if m not in (schema.FastestWithin, schema.MostAccurateUnder)]
    out.append("## Top level\n\n" + _table(["key", "type", "default", "meaning"], top_rows) + "\n")
    for name, model in sections:
        _section(name, model, out)
    return "".join(out)


# ---------------------------------------------------------------- the catalogues

_SETTING_COLUMNS = ("name", "kind", "default", "doc")  # shown first; rule() gives the allowed values
_HIDDEN = {"names", "low", "high", "low_open", "high_open", "searchable"}  # folded into rule() and the meaning


def settings_page() -> str:
    from autotune.spec.settings import SETTINGS

    fields = [f.name for f in dataclasses.fields(next(iter(SETTINGS.values())))]
    extra = [f for f in fields if f not in _SETTING_COLUMNS and f not in _HIDDEN]  # columns the catalogue grows
    rows = []
    for s in SETTINGS.values():
        doc = s.doc if getattr(s, "searchable", True) else f"{s.doc} (fixed only)"
        rows.append([_code(s.name), s.kind, s.rule(), _code(s.default), doc]
                    + [_catalogue_value(getattr(s, f)) for f in extra])
    return ("# Trainer settings\n\n"
            "Generated from the settings catalogue (`autotune/spec/settings.py`, `SETTINGS`) at build time: every "
            "key `train:` fixes and `space:` searches (those marked *fixed only* cannot be searched). Your own "
            "parameters are `user.NAME` keys; where each setting takes effect: "
            "[What the context owns](../guide/own-training.md#what-the-context-owns).\n\n"
            + _table(["setting", "type", "values", "default", "meaning"] + extra, rows))


def _catalogue_value(value: Any) -> str:
    if isinstance(value, (tuple, list, frozenset, set)):
        return ", ".join(str(v) for v in value)
    if callable(value):
        return getattr(value, "__name__", "")
    return str(value)


def metrics_page() -> str:
    from autotune.spec.metrics import CATALOGUE

    rows = [[_code(m.name), m.direction or "-", m.label, "every epoch" if m.per_epoch else "once, at the end",
             m.source, "yes" if m.objective else "no", m.task or "both"] for m in CATALOGUE.values()]
    return ("# Metrics\n\n"
            "Generated from the metrics catalogue (`autotune/spec/metrics.py`, `CATALOGUE`) at build time. "
            "`objective: yes` metrics may be named under `objectives:` (a direction left out takes the one "
            "shown); a training function of your own may report further metrics of its own names (declare "
            "those that are not objectives under `metrics:`). Sources: `reported` by the training function, "
            "`clock` kept by the trial context, `inference` / `compression` / `model` measured after training.\n\n"
            + _table(["metric", "direction", "meaning", "known", "source", "objective", "task"], rows))


# ---------------------------------------------------------------- what a study stores


STORED_TYPES = {"int": "integer", "str": "text", "bool": "true", "dict[str, Any]": "mapping",
                "dict[str, str]": "mapping to text", "dict[str, dict[str, Any]]": "mapping to mappings",
                "list[dict[str, Any]]": "list of mappings", "list[list[float]]": "list of lists of numbers",
                "list[float]": "list of numbers", "list[str]": "list of names"}


def _stored_rows(record: type) -> list[list[Any]]:
    """A record's fields: name, JSON type (every one optional: absent until set), what it holds."""
    return [[_code(f.name), STORED_TYPES.get(str(f.type).removesuffix(" | None"), str(f.type)),
             f.metadata.get("doc", "")] for f in dataclasses.fields(record)]


def stored_page() -> str:
    from autotune.spec import StudyRecord, TrialRecord

    return ("# What a study stores\n\n"
            "Generated from the stored-attrs catalogue (`autotune/spec/stored.py`) at build time. Each trial's user "
            "attrs are the fields of its `TrialRecord` that it set, each under its name (optuna-dashboard shows "
            "them on the trial; `TrialRecord.of(trial)` reads them in Python), and its final metrics, each under "
            "the metric's own name (see [Metrics](metrics.md)). The study's own user attrs are its `StudyRecord`'s."
            "\n\n## A trial\n\n" + _table(["attr", "type", "what it holds"], _stored_rows(TrialRecord))
            + "\n## The study\n\n" + _table(["attr", "type", "what it holds"], _stored_rows(StudyRecord)))


# ---------------------------------------------------------------- the command line


def _arguments(parser: argparse.ArgumentParser) -> list[list[str]]:
    fmt = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if not action.option_strings:  # a positional: its metavar is its name
            name, metavar = fmt._format_args(action, action.dest), ""
        else:
            name = ", ".join(action.option_strings)
            metavar = "" if action.nargs == 0 else fmt._format_args(action, action.dest.upper())
        default = action.default if action.option_strings and action.nargs != 0 else None
        shown_default = "" if default in (None, argparse.SUPPRESS) else _code(default)
        meaning = fmt._expand_help(action) if action.help else ""
        rows.append([_code(f"{name} {metavar}".strip()), shown_default, meaning])
    return rows


def cli_page() -> str:
    from autotune.cli.app import COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = ["# Command line\n\n",
           "Generated from the argparse parser (`autotune/cli/app.py`, `COMMANDS`) at build time. "
           "`autotune COMMAND --help` prints the same. A mistake in a file or an argument is one line on stderr, "
           "exit status 2.\n\n",
           _table(["command", "what it does"], [[f"[`autotune {n}`](#autotune-{n})", h]
                                                 for n, (_, _, h) in COMMANDS.items()]) + "\n"]
    for name, (_, _, help_line) in COMMANDS.items():
        command = sub.choices[name]
        usage = command.format_usage().removeprefix("usage: ").strip()
        out.append(f"## autotune {name}\n\n{help_line}\n\n```\n{usage}\n```\n\n")
        out.append(_table(["argument", "default", "meaning"], _arguments(command)) + "\n")
    return "".join(out)


# ---------------------------------------------------------------- the Python API


def _signature(obj: Callable[..., Any], name: str) -> str:
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name


def _function(obj: Callable[..., Any], name: str, level: str = "###") -> str:
    return f"{level} `{_signature(obj, name)}`\n\n{inspect.cleandoc(obj.__doc__ or '')}\n\n"


def _instance_attributes(cls: type) -> list[list[str]]:
    """Public attributes `__init__` sets (`self.name = ...  # what it is`), read from its source."""
    init = cls.__dict__.get("__init__")
    try:
        source = inspect.getsource(init) if init else ""
    except (OSError, TypeError):
        return []
    rows, seen = [], set()
    for m in re.finditer(r"((?:self\.[a-z]\w*,\s*)*self\.[a-z]\w*)(?:\s*:[^=\n]+)?\s*=[^\n#]*(?:#\s*([^\n]+))?",
                         source):
        for name in re.findall(r"self\.(\w+)", m.group(1)):  # `self.rank, self.world_size = ...` too
            if name not in seen:
                seen.add(name)
                rows.append([_code(name), m.group(2) or ""])
    return rows


def _members(cls: type) -> tuple[list[list[str]], list[str]]:
    """(attributes and properties as table rows, methods as sections): the class's public names, not inherited
    from object, in definition order."""
    attrs, methods = [], []
    fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
    notes = _comments(cls)
    names = [n for klass in reversed(cls.__mro__[:-1]) for n in vars(klass) if not n.startswith("_")]
    for name in dict.fromkeys(names):
        static = inspect.getattr_static(cls, name)
        if isinstance(static, (staticmethod, classmethod)) or inspect.isfunction(static):
            func = getattr(cls, name)
            methods.append(_function(func, f"{cls.__name__}.{name}", "####"))
        elif isinstance(static, property):
            attrs.append([_code(name), _first_paragraph(static.__doc__)])
        elif name not in fields:
            attrs.append([_code(name), notes.get(name, "")])
    attrs = [[_code(f), notes.get(f, "")] for f in fields] + attrs  # a dataclass's fields first
    return attrs, methods


def _class(cls: type) -> str:
    out = [f"### `{cls.__name__}`\n\n{inspect.cleandoc(cls.__doc__ or '')}\n\n"]
    attrs, methods = _members(cls)
    attrs = _instance_attributes(cls) + attrs
    seen: set[str] = set()
    attrs = [row for row in attrs if not (row[0] in seen or seen.add(row[0]))]  # first mention wins
    if attrs:
        out.append(_table(["attribute", "what it is"], attrs) + "\n")
    out += methods
    return "".join(out)


def api_page() -> str:
    import autotune

    out = ["# Python API\n\n",
           "Generated from the docstrings of `autotune`'s public names at build time. A guided tour: "
           "[Tune your own training](../guide/own-training.md).\n\n", "## Functions\n\n"]
    out += [_function(getattr(autotune, n), f"autotune.{n}") for n in ("load_config", "run", "train")]
    out.append("## Types\n\n")
    for name in ("TuneResult", "TrainResult", "TrialSummary", "EpochRecord", "TrialContext"):
        out.append(_class(getattr(autotune, name)))
    out.append("## Errors\n\n")
    for name in ("AutotuneError", "ConfigError", "TrialStopped", "ContextMisuse"):
        cls = getattr(autotune, name)
        out.append(f"### `{name}`\n\n{inspect.cleandoc(cls.__doc__ or '')}\n\n")
    return "".join(out)


def measurements_page() -> str:
    return (ROOT / "bench" / "RESULTS.md").read_text()


# path under docs/ -> what builds it
PAGES: dict[str, Callable[[], str]] = {
    "reference/yaml.md": yaml_page,
    "reference/settings.md": settings_page,
    "reference/metrics.md": metrics_page,
    "reference/stored.md": stored_page,
    "reference/cli.md": cli_page,
    "reference/api.md": api_page,
    "reference/measurements.md": measurements_page,
}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the build (nothing is written under docs/)."""
    from mkdocs.structure.files import File

    for path, build in PAGES.items():
        files.append(File.generated(config, path, content=build()))
    return files


# ---------------------------------------------------------------- the how-to pages' framework tables

FRAMEWORK_TABLE = re.compile(r"<!-- table: (\w+) -->")


def howto_page(path: str, markdown: str) -> str:
    """A how-to page with each `<!-- table: NAME -->` replaced by that framework's table, generated from
    autotune/integrations/tables.py (its one mapping and the settings catalogue's `applied_by`)."""
    if "<!-- table:" not in markdown:
        return markdown
    from autotune.integrations.tables import FRAMEWORKS

    return FRAMEWORK_TABLE.sub(lambda m: FRAMEWORKS[m.group(1)].table(), markdown)


# ---------------------------------------------------------------- lists of settings in the prose

NAME_LIST = re.compile(r"<!-- names: ([\w-]+) -->(.*?)<!-- /names -->", re.S)


def _neutral() -> list[str]:
    from autotune.spec.settings import acting

    return list(acting("speed"))


def _throughput() -> list[str]:
    from autotune.speed import THROUGHPUT

    return list(THROUGHPUT)


def _cannot(table_name: str) -> Callable[[], list[str]]:
    """What a framework's table refuses (validation names the key): each setting it cannot apply at all, and each
    value it cannot take (`lr_schedule: onecycle`), in the catalogue's order."""
    def names() -> list[str]:
        from autotune.integrations import tables
        from autotune.spec.settings import SETTINGS

        fw = getattr(tables, table_name)
        return ([k for k in SETTINGS if k in fw.cannot and fw.role(k)[0] == "cannot"]
                + [f"{k}: {value}" for k in SETTINGS for value in fw.values.get(k, {})])
    return names


def _nothing_of_yours() -> list[str]:
    """The settings a user's own code would read, refused for a Trainer object (no code of the user's runs)."""
    from autotune.integrations.tables import HF, HF_OBJECT
    from autotune.spec.settings import SETTINGS

    return [k for k in SETTINGS if HF.role(k)[0] == "yours" and HF_OBJECT.role(k)[0] == "cannot"]


# `<!-- names: KEY -->...<!-- /names -->` in a page: the names KEY's function gives, each as code, comma-separated.
# The page keeps the list written out (it reads on GitHub too); the build fills it afresh, and tests/test_docs.py
# fails when what is written differs from what the code gives.
NAME_LISTS: dict[str, Callable[[], list[str]]] = {
    "neutral": _neutral,  # the strategy's NEUTRAL: settings that change only the speed
    "throughput": _throughput,  # the speed probe's THROUGHPUT: what a combination is made of
    "hf-cannot": _cannot("HF"),
    "hf-object-refused": _nothing_of_yours,
}


def filled(markdown: str) -> str:
    """The page with each `<!-- names: KEY -->` list as the code gives it now."""
    def fill(m: re.Match[str]) -> str:
        names = NAME_LISTS[m.group(1)]()
        return f"<!-- names: {m.group(1)} -->{', '.join(f'`{n}`' for n in names)}<!-- /names -->"
    return NAME_LIST.sub(fill, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return filled(howto_page(page.file.src_uri, markdown))
