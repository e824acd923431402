"""The GPU check's guest sections (issue 43), its section 4 (bench/gpu_check.py):

a. a hang inside a CUDA synchronize under `hang_seconds`: a trial whose step waits on a long kernel
   (`torch.cuda._sleep`) that the watchdog's interrupt cannot enter. Shorter than the grace period: the trial is
   stopped (`hang`) as soon as the synchronize returns; longer: the watch records it itself and, autotune being a
   library in this process, the run stops with StuckTrial and this process goes on (it is never ended);
b. the step hooks (what counts an optimizer's steps and makes its settings "applied") on fused and foreach CUDA
   optimizers, autotune's and a fit's own (a tensor lr included): every step counted, nothing left on an optimizer
   once its trial ends;
c. the Hugging Face and Lightning examples (examples/hf_text.yaml, examples/digits_lightning.yaml) in bf16.

On `--device cpu` the same code runs on small sizes (a wait on a pthread mutex, which no signal interrupts, stands in
for the synchronize: it lasts its seconds whatever the load, where a matmul sized by a calibration did not): a test
of the sections (tests/test_gpu_check.py), not a measurement.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

import autotune
from autotune import config
from autotune.core import AutotuneError, watchdog
from autotune.spec import TrialRecord
from autotune.training import TrainingPlan, TrialContext, run_fit
from autotune.training.optimizers import fast_kwargs

_RATE: dict[str, float] = {}  # calibrated: GPU sleep cycles per second


def block(dev: torch.device, seconds: float) -> None:
    """Wait `seconds` inside one native call the interpreter cannot interrupt: on CUDA a spinning kernel and the
    synchronize that waits for it; on a CPU one large matmul."""
    if dev.type == "cuda":
        if "cuda" not in _RATE:
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            torch.cuda._sleep(50_000_000)
            torch.cuda.synchronize(dev)
            _RATE["cuda"] = 50_000_000 / (time.perf_counter() - t0)
        torch.cuda._sleep(int(_RATE["cuda"] * seconds))
        torch.cuda.synchronize(dev)
        return
    _native_wait(seconds)


def _native_wait(seconds: float) -> None:
    """One native call of `seconds` that no signal ends early: the main thread waits on a pthread mutex another
    thread holds that long (pthread_mutex_lock resumes its wait after a signal handler: POSIX never gives EINTR)."""
    import ctypes
    import ctypes.util
    import threading

    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    mutex = ctypes.create_string_buffer(128)  # larger than any pthread_mutex_t
    libc.pthread_mutex_init(mutex, None)
    held = threading.Event()

    def hold() -> None:
        libc.pthread_mutex_lock(mutex)
        held.set()
        time.sleep(seconds)
        libc.pthread_mutex_unlock(mutex)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    held.wait()
    # (ctypes lets go of the GIL: the holder's sleep goes on.) Once it returns, a pending interrupt is raised right
    # here; the mutex is left locked and dropped with its buffer (nothing else ever waits on it).
    libc.pthread_mutex_lock(mutex)


def fit_blocks(ctx: TrialContext) -> None:
    """A step that waits `user.block_s` seconds in native code (a synchronize on a long kernel)."""
    model, _ = ctx.prepare(nn.Linear(64, 10))
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    for _ in ctx.epochs():
        for i, (xb, yb) in enumerate(ctx.loader((x, y))):
            ctx.backward(nn.functional.cross_entropy(model(xb), yb))
            if i == 1:
                block(ctx.device, float(ctx.params["block_s"]))
        ctx.report(val_accuracy=0.5)


def hang_in_sync(chk: Any, device: str) -> None:
    """Section 4a (see the module's docstring)."""
    hang_s = 1.5
    chk.say(f"== a hang inside a {'CUDA synchronize' if chk.cuda else 'native call (CPU: a mutex wait)'} under "
            f"hang_seconds {hang_s:g}: the trial stops once the call returns; past the grace, the watch records it "
            "and this process goes on")
    chk.say(f"  {'case':<44} {'state':<8} {'stop':<6} {'wall s':>6}  run")
    block(chk.dev, 0.1)  # calibrated before any trial is timed
    for name, block_s, grace_s in (("native call 4 s, grace 10 s", 4.0, None), ("native call 6 s, grace 2 s", 6.0,
                                                                                  2.0)):
        if not chk.may_run(f"hang / {name}"):
            return
        row: dict[str, Any] = {"section": "hang_in_sync", "case": name, "block_s": block_s}
        cfg = config.from_dict({
            "study": {"name": f"guest-hang-{int(block_s)}", "storage": f"sqlite:///{chk.out.resolve()}/guest.db",
                      "n_trials": 1},
            "trainer": "bench.gpu_guest:fit_blocks", "objectives": ["val_accuracy"],
            "train": {"device": device, "epochs": 1, "batch_size": 32, "user.block_s": block_s},
            "pruning": {"slow": {"hang_seconds": hang_s}},
        }, source=str(chk.out / "guest.yaml"))
        before = watchdog.GRACE_S
        watchdog.GRACE_S = grace_s if grace_s is not None else before
        t0 = time.perf_counter()
        try:
            study = autotune.run(cfg, fresh=True).study
            row["run"] = "returned"
        except AutotuneError as e:
            row["run"] = f"{type(e).__name__}"
            study = None
        except Exception as e:
            chk.figures.setdefault("guest", []).append({**row, "error": f"{type(e).__name__}: {e}"[:300]})
            chk.say(f"  {name:<44} FAILED {type(e).__name__}: {e}")
            continue
        finally:
            watchdog.GRACE_S = before
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        import optuna

        t = (study or optuna.load_study(study_name=cfg.study.name, storage=cfg.study.storage)).trials[0]
        record = TrialRecord.of(t)
        row.update(state=t.state.name, stop_reason=record.stop_reason, stop_detail=record.stop_detail)
        _keep(chk, row)
        chk.say(f"  {name:<44} {row['state']:<8} {str(row['stop_reason']):<6} {row['wall_s']:>6.1f}  {row['run']}")


def _keep(chk: Any, row: dict[str, Any], shown: str = "") -> bool:
    """The row saved with the check's figures at once (an unattended run keeps what it measured); False when it
    failed, said as `shown FAILED error`."""
    chk.figures.setdefault("guest", []).append(row)
    chk.save()
    if "error" in row:
        chk.say(f"{shown} FAILED {row['error']}")
        return False
    return True


def step_hooks(chk: Any, device: str) -> None:
    """Section 4b (see the module's docstring)."""
    chk.say("== step hooks on fused and foreach optimizers: every step counted, none left once the trial ends")
    chk.say(f"  {'optimizer':<36} {'kernel':<8} {'steps':>11} {'applied':<8} {'hooks left':>10}")
    lr = 1e-3
    # (label, optimizer, the fit's own optimizer factory or None: autotune's)
    cases: list[tuple[str, str, Any]] = [(f"autotune {name}", name, None) for name in ("adam", "adamw", "sgd",
                                                                                        "rmsprop")]
    cases += [("fit's own Adam(foreach=True)", "adam",
               lambda p: torch.optim.Adam(p, lr=lr, foreach=chk.cuda or None)),
              ("fit's own AdamW(fused, tensor lr)", "adamw",
               lambda p: torch.optim.AdamW(p, lr=torch.tensor(lr, device=chk.dev) if chk.cuda else torch.tensor(lr),
                                           fused=True))]
    for label, name, own in cases:
        row: dict[str, Any] = {"section": "step_hooks", "optimizer": label}
        kept: list[torch.optim.Optimizer] = []

        def fit(ctx: TrialContext, own: Any = own, kept: list[torch.optim.Optimizer] = kept) -> None:
            model, opt = ctx.prepare(nn.Linear(32, 4), None if own is None else own)
            kept.append(opt)
            x, y = torch.randn(512, 32), torch.randint(0, 4, (512,))
            for _ in ctx.epochs():
                for xb, yb in ctx.loader((x, y)):
                    ctx.backward(nn.functional.cross_entropy(model(xb), yb))
                ctx.report(val_loss=1.0)

        settings = {"device": device, "optimizer": name, "epochs": 2, "batch_size": 64, "lr": lr}
        searched = ("lr", "optimizer") if own is None else ("lr",)  # (a fit's own: the searched lr scales its groups)
        try:
            ctx = TrialContext(TrainingPlan.bare(settings, searched=searched))
            r = run_fit(fit, ctx)
            opt = kept[0]
            d = opt.defaults
            row.update(kernel="fused" if d.get("fused") else "foreach" if d.get("foreach") else "loop",
                       expected_kernel="fused" if fast_kwargs(name, chk.dev).get("fused") else
                       "foreach" if fast_kwargs(name, chk.dev).get("foreach") else "loop",
                       steps=ctx._state.stepper.opt_steps, expected_steps=2 * 512 // 64,
                       not_applied=r.not_applied, searched=list(searched),
                       hooks_left=len(opt._optimizer_step_post_hooks))
        except Exception as e:  # one failing row must not end an unattended check
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        if not _keep(chk, row, f"  {label:<36}"):
            continue
        applied = "yes" if not set(row["not_applied"]) & set(row["searched"]) else "NO"
        chk.say(f"  {label:<36} {row['kernel']:<8} {row['steps']:>4} of {row['expected_steps']:>4} {applied:<8} "
                f"{row['hooks_left']:>10}")


def frameworks_bf16(chk: Any, device: str) -> None:
    """Section 4c (see the module's docstring)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    chk.say("== the Hugging Face and Lightning examples in bf16: one epoch each through autotune.train")
    chk.say(f"  {'example':<28} {'precision':<9} {'samples/s':>10} {'train s':>8} {'val acc':>7}  not applied")
    for example in ("hf_text.yaml", "digits_lightning.yaml"):
        if not chk.may_run(f"bf16 / {example}"):
            return
        row: dict[str, Any] = {"section": "frameworks_bf16", "example": example}
        try:
            cfg = autotune.load_config(root / "examples" / example, overrides={
                "train.device": device, "study.storage": f"sqlite:///{chk.out.resolve()}/guest.db"})
            user = {k: spec.choices[0] for k, spec in cfg.space.items() if k.startswith("user.") and spec.choices}
            r = autotune.train(cfg, params={"precision": "bf16", "epochs": 1, **user}, seed=0)
            row.update(precision=r.precision, samples_per_s=round(r.samples_per_s, 1),
                       train_time_s=round(r.train_time_s, 3), val_accuracy=round(r.val_accuracy, 4),
                       not_applied=r.not_applied)
        except Exception as e:  # a missing extra (transformers, lightning) or a failing example: said, not fatal
            row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
        if not _keep(chk, row, f"  {example:<28}"):
            continue
        chk.say(f"  {example:<28} {row['precision']:<9} {row['samples_per_s']:>10,.0f} {row['train_time_s']:>8.2f} "
                f"{row['val_accuracy']:>7.3f}  {', '.join(row['not_applied']) or '-'}")


def guest(chk: Any, device: str) -> None:
    """Sections 4a-4c, each on its own (one failing does not stop the others)."""
    for section in (hang_in_sync, step_hooks, frameworks_bf16):
        if chk.may_run(section.__name__):
            section(chk, device)
