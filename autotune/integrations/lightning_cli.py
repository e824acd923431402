"""A LightningCLI program through the trial context: `lightning.cli(ctx, Model, DataModule, **the LightningCLI's own
arguments)` lets LightningCLI parse what it would (its `trainer_defaults`, `seed_everything_default`, a config or
`args`; not autotune's command line) and build the module and the DataModule as it would, then trains them with
`lightning.fit` on a Trainer of the CLI's own arguments (its defaults' max_epochs and callbacks; one Callback or a
list) changed only by what the trial chose.

    def fit(ctx):                                  # trainer: my_script:fit in the YAML
        tune_lightning.cli(ctx, LitAutoEncoder, MyDataModule, seed_everything_default=1234,
                           trainer_defaults={"callbacks": ImageSampler(), "max_epochs": 10})

The seed: a trial trains its own seed (the study's rule: `best --export` trains it again), given to Lightning's
`seed_everything` where the CLI would call it (with `workers=True`, as it does); the CLI's seed is the recipe's
`seed_everything`. The recipe also holds the CLI's callbacks and every Trainer argument it set (`cli_trainer`).
The CLI's SaveConfigCallback (it writes the parsed config next to the logs) is left out: the study stores the trial.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from autotune.training import ContextMisuse, TrialContext, TrialPort

SEED_ENV = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")  # what Lightning's seed_everything sets (restored after the trial)


def as_callbacks(pl: Any, given: Any) -> list[Any]:
    """The user's callbacks as a list (Lightning takes one Callback or a list of them)."""
    if given is None:
        return []
    return [given] if isinstance(given, pl.Callback) else list(given)


def train_cli(pl: Any, fit: Callable[..., None], ctx: TrialContext, model_class: Any = None,
              datamodule_class: Any = None, *, args: Any = None, own_optimizer: bool | None = None,
              **cli_kwargs: Any) -> None:
    """Train this trial with `fit` (lightning.fit) as `LightningCLI(model_class, datamodule_class, args=args,
    **cli_kwargs)` would build it (`args`: the CLI's arguments, a list or a dict; none by default, so it never reads
    autotune's command line); `own_optimizer` as for `fit`."""
    try:
        from lightning.pytorch.cli import LightningCLI
    except ImportError as e:  # (LightningCLI needs jsonargparse)
        raise ContextMisuse(f"LightningCLI cannot be imported: {e} (pip install 'jsonargparse[signatures]')") from None
    cli_kwargs.pop("run", None)  # (a trial fits: no subcommand is parsed)
    cli_kwargs["save_config_callback"] = None
    env = {k: os.environ.get(k) for k in SEED_ENV}

    class TrialCLI(LightningCLI):  # type: ignore[misc, valid-type]
        def _set_seed(self) -> None:  # (the CLI's seed is the recipe's; the trial trains its own)
            self.user_seed = self._get(self.config, "seed_everything")
            if self.user_seed is not False:
                pl.seed_everything(ctx.seed, workers=True, verbose=False)

        def instantiate_trainer(self, **kwargs: Any) -> Any:  # (autotune builds the Trainer: fit's)
            extra = [self._get(self.config_init, c) for c in self._parser(self.subcommand).callback_keys]
            self.trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
            self.extra_callbacks = [*extra, *as_callbacks(pl, self.trainer_defaults.get("callbacks"))]
            return None

    try:
        try:
            made = TrialCLI(model_class, datamodule_class, args=[] if args is None else args, run=False, **cli_kwargs)
        except SystemExit as e:  # (its parser exits on a bad argument, having printed why: the trial fails instead)
            raise ContextMisuse(f"LightningCLI could not parse its arguments (it exited with status {e.code}; its "
                                "message is above)") from None
        trainer_kwargs = _trainer_kwargs(pl, made.trainer_config)
        callbacks = [*as_callbacks(pl, trainer_kwargs.pop("callbacks", None)), *made.extra_callbacks]
        port = TrialPort(ctx, "Lightning")
        port.applied.left_to_recipe("seed_everything", made.user_seed)
        port.applied.left_to_recipe("callbacks", [type(c).__name__ for c in callbacks])
        port.applied.left_to_recipe("cli_trainer", {k: repr(v) for k, v in sorted(trainer_kwargs.items())})
        fit(ctx, made.model, made.datamodule, own_optimizer=own_optimizer, callbacks=callbacks, **trainer_kwargs)
    finally:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _trainer_kwargs(pl: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The Trainer arguments the CLI set (its defaults, its config, its args): those that differ from the Trainer's
    own defaults (accelerator and devices left at "auto" follow the trial's device; set, fit refuses them)."""
    params = inspect.signature(pl.Trainer.__init__).parameters
    out = {}
    for key, value in config.items():
        default = params[key].default if key in params else inspect.Parameter.empty
        if key == "callbacks" or default is inspect.Parameter.empty or not _same(value, default):
            out[key] = value
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # (a value that cannot be compared to the default: the user's)
        return False


__all__ = ["as_callbacks", "train_cli"]
