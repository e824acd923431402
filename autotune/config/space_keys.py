"""Settings fixed in `train:` and searched in `space:`: values each setting takes, a key in one section only."""

from __future__ import annotations

from autotune.config.conditions import check_when
from autotune.config.model_keys import check_model_spec
from autotune.core import ConfigError, unknown
from autotune.spec import MODEL_PREFIX, SETTINGS, USER_PREFIX, ParamSpec, RunConfig


def check_train_values(cfg: RunConfig, file: str) -> None:
    for key, value in cfg.train.items():
        if key.startswith(USER_PREFIX):
            continue
        try:
            SETTINGS[key].check(value)
        except ValueError as e:
            raise ConfigError(file, f"train.{key}", str(e)) from None


def check_space(cfg: RunConfig, file: str) -> None:
    for key in cfg.space:
        if key in cfg.train:
            raise ConfigError(file, f"space.{key}", "is both fixed in train and searched in space; keep one")
    for key, spec in cfg.space.items():
        if _space_prefix(key):
            _check_prefixed_spec(key, spec, cfg, file)
        else:
            _check_spec(key, spec, cfg, file)


def _check_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    where = f"space.{key}"
    setting = SETTINGS[key]
    if not setting.searchable:
        raise ConfigError(file, where, f"{key} cannot be searched; set it in train")
    if spec.type in ("float", "int"):
        if setting.kind not in ("float", "int"):
            raise ConfigError(file, f"{where}.type", f"{key} takes {setting.rule()}: use type categorical"
                                                     + (" or bool" if setting.kind == "bool" else ""))
        if setting.kind == "int" and spec.type == "float":
            raise ConfigError(file, f"{where}.type", f"{key} is an integer setting: use type int")
        for bound in ("low", "high"):
            try:
                setting.check(getattr(spec, bound))
            except ValueError as e:
                raise ConfigError(file, f"{where}.{bound}", f"{key} {e}") from None
    else:
        if setting.kind == "bool" and spec.type == "categorical":
            bad = [c for c in spec.choices or () if not isinstance(c, bool)]
            if bad:
                raise ConfigError(file, f"{where}.choices", f"{key} takes true or false; got {bad[0]!r}")
        for c in spec.choices or ():
            try:
                setting.check(c)
            except ValueError as e:
                if setting.kind == "choice":
                    msg = unknown(key, c, setting.choices)
                else:
                    msg = f"{key} {e}"
                raise ConfigError(file, f"{where}.choices", msg) from None
    check_when(key, spec, cfg, file)


# A `space:` key with a prefix searches something other than a trainer setting: `model.KEY` a key of the
# model section (model_keys.py), `user.NAME` a parameter of the user's training function.


def _space_prefix(key: str) -> str | None:
    """The prefix of a searched key that is not a trainer setting ('model.' or 'user.'), or None."""
    return next((p for p in (MODEL_PREFIX, USER_PREFIX) if key.startswith(p)), None)


def _check_prefixed_spec(key: str, spec: ParamSpec, cfg: RunConfig, file: str) -> None:
    prefix = _space_prefix(key)
    if prefix == MODEL_PREFIX:
        check_model_spec(key[len(MODEL_PREFIX):], spec, cfg, file)
    elif prefix == USER_PREFIX:  # any value: the user's function reads it (check_user_training checks the rest)
        check_when(key, spec, cfg, file)
