"""`load(path, overrides) -> RunConfig`: the only code that sees raw YAML dicts.

Validation happens here, once: unknown keys (all of them, with close matches), types, ranges, then the
cross-field checks (checks.py). Past this module every config is a frozen, typed object.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from autotune.config.bounds import FILE_BYTES, check_bounds
from autotune.config.checks import check_semantics
from autotune.config.yaml import safe_load
from autotune.core import ConfigError, one_of, shown, suggest
from autotune.spec import MODEL_PREFIX, SETTINGS, USER_PREFIX, ParamSpec, RunConfig

# ---------------------------------------------------------------- loading


def load(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read, validate and freeze a YAML run file. Raises ConfigError on any mistake."""
    path = Path(path)
    raw = read_yaml(path)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(path.name, "", f"top level must be a mapping of sections; got {type(raw).__name__}")
    return from_dict(raw, overrides=overrides, source=str(path))


def read_yaml(path: Path) -> Any:
    """A YAML file's content (None if empty); a file that cannot be read as YAML text is one ConfigError:
    missing, a directory, no permission, binary, not UTF-8, malformed."""
    if path.is_dir():
        raise ConfigError(str(path), "", "is a directory, not a YAML file")
    if not path.exists():
        raise ConfigError(str(path), "", "no such file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(str(path), "", f"cannot read: {e.strerror or e}") from None
    name = path.name
    if len(data) > FILE_BYTES:  # refused before parsing: YAML reads a few MB a minute on a busy machine
        raise ConfigError(name, "", f"the file is {len(data):,} bytes; at most {FILE_BYTES:,} (a run file is a few "
                                    "kB): read big data from a file your code opens")
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(name, "", f"not a text file (byte 0x00 at offset {nul}): a binary file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(name, "", f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {col}; "
                                    "save the file as UTF-8") from None
    try:
        return safe_load(text, name)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(name, "", f"malformed YAML: {where}{problem}") from None


def from_dict(raw: dict[str, Any], overrides: dict[str, Any] | None = None, source: str = "<config>") -> RunConfig:
    """Validate a raw dict (as read from YAML) into a RunConfig."""
    file = Path(source).name
    raw = copy.deepcopy(raw)
    for key, value in (overrides or {}).items():
        _apply_override(raw, key, value, file)
    check_bounds(raw, file)  # sizes first: nothing below meets (or echoes) a value too big to be sane
    _check_unknown_keys(raw, RunConfig, "", file)
    _normalize(raw, file)
    try:
        cfg = RunConfig.model_validate({**raw, "source": source})
    except ValidationError as e:
        raise _first_error(e, file) from None
    return check_semantics(cfg, file, source)


def _apply_override(raw: dict[str, Any], dotted: str, value: Any, file: str) -> None:
    parts = dotted.split(".")
    if len(parts) > 2 and parts[0] in ("train", "space") and f"{parts[1]}." in (USER_PREFIX, MODEL_PREFIX):
        parts = [parts[0], f"{parts[1]}.{parts[2]}", *parts[3:]]  # train.user.width: the key is user.width
    node = raw
    for i, part in enumerate(parts[:-1]):
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(file, ".".join(parts[: i + 1]), "cannot override inside a non-mapping value")
        node = nxt
    node[parts[-1]] = value


def _fields(model: type[BaseModel]) -> list[str]:
    return [n for n in model.model_fields if n != "source"]


def _check_unknown_keys(raw: Any, model: type[BaseModel], prefix: str, file: str) -> None:
    """Report every unknown key at this level and below, at once."""
    problems: list[str] = []

    def walk(node: Any, m: type[BaseModel], pre: str) -> None:
        if not isinstance(node, dict):
            return
        known = _fields(m)
        for key in node:
            if key not in known:
                problems.append(f"{pre}{key}: unknown key{suggest(str(key), known)}; {one_of(known)}")
        for key in known:
            sub = _submodel(m, key)
            if sub is not None and key in node and not (m is RunConfig and key == "select"):
                walk(node[key], sub, f"{pre}{key}.")

    walk(raw, model, prefix)
    problems += _check_settings_keys(raw)
    if problems:
        first_key, _, first_msg = problems[0].partition(": ")
        more = "; ".join(problems[1:])
        raise ConfigError(file, first_key, first_msg + (f"; also {more}" if more else ""))


def _check_settings_keys(raw: dict[str, Any]) -> list[str]:
    problems = []
    for section in ("train", "space"):
        block = raw.get(section)
        if not isinstance(block, dict):
            continue
        problems += [p for p in (_setting_key_problem(section, key) for key in block) if p is not None]
        if section == "space":
            problems += _spec_key_problems(block)
    return problems


def _setting_key_problem(section: str, key: Any) -> str | None:
    """A key of train or space that is no setting (nor a user.NAME, nor a model.KEY checked later)."""
    if key == "early_stopping" and section == "train":
        return None
    if str(key).startswith(USER_PREFIX):
        if not str(key)[len(USER_PREFIX):].isidentifier():
            return f"{section}.{key}: a user parameter is user.NAME with NAME a Python identifier"
        return None
    if section == "space" and str(key).startswith(MODEL_PREFIX):
        return None  # checked once the model section is known: _check_prefixed_spec
    if key not in SETTINGS:
        return f"{section}.{key}: unknown setting{suggest(str(key), SETTINGS)}; {one_of(SETTINGS)}"
    return None


def _spec_key_problems(space: dict[str, Any]) -> list[str]:
    """Keys of a searched parameter's mapping that ParamSpec does not have."""
    known = list(ParamSpec.model_fields)
    return [f"space.{key}.{k}: unknown key{suggest(str(k), known)}; {one_of(known)}"
            for key, spec in space.items() if isinstance(spec, dict) for k in spec if k not in ParamSpec.model_fields]


def _submodel(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    ann = model.model_fields[field].annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    if typing.get_origin(ann) in (typing.Union, types.UnionType):  # Optional[Model]
        for arg in typing.get_args(ann):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def _normalize(raw: dict[str, Any], file: str) -> None:
    """Shorthands: `train.early_stopping: {patience, min_delta}`; `objectives: [val_accuracy]`."""
    train = raw.get("train")
    if isinstance(train, dict) and "early_stopping" in train:
        es = train.pop("early_stopping")
        if es is None or es is False:
            es = {"patience": 0}
        if not isinstance(es, dict) or set(es) - {"patience", "min_delta"}:
            raise ConfigError(file, "train.early_stopping", "must be a mapping with keys patience, min_delta")
        train["early_stopping_patience"] = es.get("patience", 3)
        train["early_stopping_min_delta"] = es.get("min_delta", 0.0)
    objs = raw.get("objectives")
    if objs is None and raw.get("task") == "regression":  # the classification default has val_accuracy
        raw["objectives"] = [{"metric": "val_mse"}, {"metric": "train_time_s"}]
    if isinstance(objs, list):
        raw["objectives"] = [{"metric": o} if isinstance(o, str) else o for o in objs]
    if isinstance(objs, (list, tuple)) and not objs:
        raise ConfigError(file, "objectives", "must list at least one objective")


def _first_error(e: ValidationError, file: str) -> ConfigError:
    err = e.errors()[0]
    loc = [str(p) for p in err["loc"] if not re.fullmatch(r"[A-Z]\w*|function-after\[.*\]|literal\[.*\]", str(p))]
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        sub = re.match(r"(\w+): ", msg)  # a model validator names the field it blames
        if sub:
            loc.append(sub.group(1))
            msg = msg[sub.end():]
    elif "input" in err and err["type"] not in ("missing",):
        msg = f"{msg}; got {shown(err['input'])}"
    return ConfigError(file, ".".join(loc), msg)
