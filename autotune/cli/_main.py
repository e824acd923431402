"""`autotune run / validate / best / ...`: parsing and dispatch (the COMMANDS registry); turns every AutotuneError
into one line and exit 2. The work itself is done by the module that owns each job."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.core._errors import AutotuneError, ConfigError, redact


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in (("n_trials", "study.n_trials"), ("timeout", "study.timeout"), ("storage", "study.storage"),
                      ("sampler", "study.sampler"), ("seed", "study.seed"), ("study_name", "study.name")):
        value = getattr(args, flag, None)
        if value is not None:
            out[key] = value
    return out


def _load(args: argparse.Namespace) -> Any:
    from autotune.config._load import load

    return load(args.file, _overrides(args))


# ---------------------------------------------------------------- run


def _cmd_run(args: argparse.Namespace) -> int:
    import optuna

    from autotune.observe import _progress as progress
    from autotune.observe import _tracking as tracking
    from autotune.study._study import run

    cfg = _load(args)
    if getattr(args, "workers", None) is not None or getattr(args, "gpus", None) is not None:
        return _run_workers(args, cfg)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trackers = tracking.callbacks(cfg)  # MLflow, checked before the study exists
    view = progress.RunView(cfg, plain=args.plain or not sys.stdout.isatty())
    return _show_run(cfg, view, lambda: run(cfg, fresh=args.fresh, callbacks=[view.on_trial, *trackers],
                                            on_start=view.on_start))


def _show_run(cfg: Any, view: Any, start: Callable[[], Any]) -> int:
    """Run the study behind the live view; Ctrl-C keeps every finished trial and exits 130."""
    t0 = time.perf_counter()
    try:
        result = start()
    except KeyboardInterrupt:
        view.close()
        print(f"interrupted: finished trials are kept in {redact(cfg.study.storage)}; run again to resume",
              file=sys.stderr)
        return 130
    view.close()
    view.summary(result, time.perf_counter() - t0)
    from autotune.observe._tracking import describe

    line = describe(result.study, cfg)
    if line:
        print(line)
    return 0


def _add_study_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-trials", type=int, help="finished trials the study should hold (overrides study.n_trials)")
    p.add_argument("--timeout", type=float, help="seconds for this run (overrides study.timeout)")
    p.add_argument("--storage", help="storage URL (overrides study.storage)")
    p.add_argument("--sampler", help="tpe, random, gp, cmaes, nsga2, qmc or grid (overrides study.sampler)")
    p.add_argument("--seed", type=int, help="sampler and training seed (overrides study.seed)")
    p.add_argument("--study-name", help="study name (overrides study.name)")


def _args_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file, e.g. search_spaces/cnn.yaml")
    _add_study_flags(p)
    p.add_argument("--fresh", action="store_true", help="delete the stored study of this name and start over")
    p.add_argument("--plain", action="store_true", help="plain lines instead of a live display")
    p.add_argument("--workers", type=int, help="worker processes on this machine sharing the study (one GPU each, "
                                               "or a share of the CPU cores); needs journal:// or an RDB server")
    p.add_argument("--gpus", type=lambda s: s.split(","), help="GPU index per worker, e.g. 0,1 (default: every "
                                                               "visible GPU, one worker each; repeat to share)")
    p.add_argument("--fail-stale", action="store_true", help="first fail (and retry once) every RUNNING trial: "
                                                             "for a journal study whose workers were all killed")


def _run_workers(args: argparse.Namespace, cfg: Any) -> int:
    import optuna

    from autotune.observe import _progress as progress
    from autotune.observe import _tracking as tracking
    from autotune.study import _workers as workers

    slots = workers.plan(cfg, args.workers, args.gpus)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.fail_stale:
        _fail_stale(cfg)
    trackers = tracking.callbacks(cfg)  # the driver logs every trial to MLflow, not the workers
    view = progress.RunView(cfg, plain=args.plain or not sys.stdout.isatty())
    print(f"{len(slots)} worker(s): " + "; ".join(s.describe() for s in slots), flush=True)
    return _show_run(cfg, view, lambda: workers.run_parallel(
        cfg, slots, fresh=args.fresh, on_start=view.on_start, on_trial=view.on_trial,
        on_note=lambda line: print(line, file=sys.stderr, flush=True), callbacks=trackers))


def _fail_stale(cfg: Any) -> None:
    from autotune.study import _workers as workers

    failed = workers.fail_stale(cfg)
    if failed:
        print(f"failed {len(failed)} stale RUNNING trial(s) and queued their retries: "
              f"{', '.join(map(str, failed))}", file=sys.stderr)


# ---------------------------------------------------------------- worker


def _cmd_worker(args: argparse.Namespace) -> int:
    import optuna

    from autotune.observe import _progress as progress
    from autotune.observe import _tracking as tracking
    from autotune.study import _budget as budget
    from autotune.study import _workers as workers

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg, study = workers.join(args.storage, args.study, args.n_trials, args.timeout)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    for line in workers.version_notes(study):
        print(f"note: {line}", file=sys.stderr)
    if args.fail_stale:
        _fail_stale(cfg)
    trackers = tracking.callbacks(cfg)  # this worker logs its own trials to the study's MLflow parent run
    view = progress.RunView(cfg, plain=True)
    me = workers.worker_id()
    print(f"worker {me} joined study {cfg.study.name} ({redact(cfg.study.storage)}); "
          f"{budget.counts(study.get_trials(deepcopy=False)).finished} of {cfg.study.n_trials} finished", flush=True)
    try:
        res = workers.run_worker(cfg, sampler_seed_offset=None, callbacks=[view.on_trial, *trackers], study=study)
    except KeyboardInterrupt:
        print("interrupted: this worker's finished trials are kept; its running one was marked FAIL",
              file=sys.stderr)
        return 130
    c = budget.counts(res.study.get_trials(deepcopy=False))
    print(f"worker {me} ran {res.ran - res.surplus} trial(s); the study holds {c.finished} finished, "
          f"{c.running} running, {c.failed} failed")
    return 0


def _args_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", required=True, help="the study's storage: postgresql://..., mysql://... or "
                                                    "journal:///path (SQLite is refused: it cannot share)")
    p.add_argument("--study", required=True, help="the study's name")
    p.add_argument("--n-trials", type=int, help="finished trials the study should hold (default: its config's)")
    p.add_argument("--timeout", type=float, help="seconds this worker runs at most")
    p.add_argument("--threads", type=int, help="torch CPU threads for this worker (default: torch's)")
    p.add_argument("--fail-stale", action="store_true", help="first fail (and retry once) every RUNNING trial: "
                                                             "for a journal study whose workers were all killed")


# ---------------------------------------------------------------- launch


def _cmd_launch(args: argparse.Namespace) -> int:
    import optuna

    from autotune.cli import _launch as launch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = _load(args)
    req = launch.Request(executor=args.executor, workers=args.workers, partition=args.partition,
                         time_min=launch.parse_time(args.time), gpus_per_task=args.gpus_per_task,
                         cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb, folder=Path(args.logs),
                         name=args.job_name)
    for line in launch.check(cfg, req):
        print(f"note: {line}", file=sys.stderr)
    cfg = launch.create(cfg, req, fresh=args.fresh)
    if launch.EXECUTORS[req.executor] is None:
        print(f"study {cfg.study.name} is ready in {redact(cfg.study.storage)}; start workers anywhere with: "
              f"autotune worker --storage {launch.quoted(cfg.study.storage)} --study {cfg.study.name}")
        return 0
    jobs = launch.submit(cfg, req)
    print("\n".join(launch.follow(cfg, req, jobs, args.file)), flush=True)
    wait = args.wait or req.executor == "debug"  # debug jobs run in this process, as they are waited for
    n_jobs, failed = len(jobs), launch.wait(jobs) if wait else None
    jobs.clear()  # now: a submitit job still referenced at interpreter exit prints a TypeError from its __del__
    if failed is None:
        return 0
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    from autotune.study._budget import counts
    from autotune.study._study import open_study

    c = counts(open_study(cfg, create=False).get_trials(deepcopy=False))
    print(f"{n_jobs - len(failed)} of {n_jobs} job(s) ended well; the study holds {c.finished} finished, "
          f"{c.running} running, {c.failed} failed trial(s)")
    return 1 if failed else 0


def _args_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file: the study is created (or resumed) here, then its workers submitted")
    _add_study_flags(p)
    p.add_argument("--executor", default="slurm",
                   help="slurm (sbatch, default), local (processes on this machine), debug (in this process), "
                        "none (only create the study: start `autotune worker` yourself, e.g. a Kubernetes Job)")
    p.add_argument("--workers", type=int, default=1, help="jobs in the array, one worker each (default 1)")
    p.add_argument("--partition", help="Slurm partition")
    p.add_argument("--time", default="60", help="time limit of each job: minutes or [D-]H:MM:SS (default 60)")
    p.add_argument("--gpus-per-task", type=int, help="GPUs per job (default: the config's devices; 0 on a CPU "
                                                      "config)")
    p.add_argument("--cpus-per-task", type=int, help="CPU cores per job (also its torch threads)")
    p.add_argument("--mem-gb", type=float, help="memory per job, GB")
    p.add_argument("--logs", default="studies/launch", help="folder of the jobs' logs and submitit's files "
                                                            "(default studies/launch; on a shared filesystem)")
    p.add_argument("--job-name", help="the jobs' name (default autotune-STUDY)")
    p.add_argument("--fresh", action="store_true", help="delete the stored study of this name and start over")
    p.add_argument("--wait", action="store_true", help="wait for every job and say how each ended")


# ---------------------------------------------------------------- storage-proxy


def _cmd_storage_proxy(args: argparse.Namespace) -> int:
    from autotune.study import _proxy as proxy
    from autotune.study._storage import make_storage

    cfg = _load(args)
    file = Path(cfg.source).name
    proxy.check_backend(cfg.study.storage, file)
    backend = make_storage(cfg)
    if cfg.study.heartbeat_interval is not None:
        print("note: heartbeats do not pass through the proxy: a worker that dies on another machine leaves its "
              "trial RUNNING (one on the proxy's clients' own hosts is still seen)", file=sys.stderr)
    try:
        proxy.serve(backend, cfg.study.storage, file, args.host, args.port, on_ready=lambda line: print(
            f"{line}\nworkers: autotune worker --storage grpc://{args.host}:{args.port} --study {cfg.study.name}"
            f"   (the study must exist: autotune launch {args.file} --storage grpc://{args.host}:{args.port} ...)",
            flush=True))
    except KeyboardInterrupt:
        return 130
    return 0


def _args_storage_proxy(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file whose study.storage (PostgreSQL, MySQL or SQLite) to serve")
    _add_study_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; "
                                                        "0.0.0.0 for every machine: no authentication)")
    p.add_argument("--port", type=int, default=13000, help="port (default 13000)")


# ---------------------------------------------------------------- validate


def _cmd_validate(args: argparse.Namespace) -> int:
    from autotune.observe import _tracking as tracking
    from autotune.study._study import validate

    cfg = _load(args)
    validate(cfg)
    tracking.check(cfg)
    n = len(cfg.space)
    print(f"{args.file}: ok: {len(cfg.objectives)} objective(s), {n} searched setting(s), sampler "
          f"{cfg.study.sampler}, storage {redact(cfg.study.storage)}")
    return 0


def _args_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    _add_study_flags(p)


# ---------------------------------------------------------------- best


def _cmd_best(args: argparse.Namespace) -> int:
    from autotune.observe import _progress as progress
    from autotune.study._study import TuneResult, open_study

    cfg = _load(args)
    study = open_study(cfg, create=False)
    result = TuneResult(study=study, config=cfg)
    best = result.best
    if best is None:
        raise AutotuneError(f"study {cfg.study.name!r} has no completed trial yet")
    progress.print_best(result)
    if args.export:
        from autotune.observe._export import export_best

        path = export_best(cfg, best, Path(args.export))
        print(f"wrote {path}")
    if args.save_model:
        from autotune.study._study import retrain_best

        path = retrain_best(cfg, study, best, Path(args.save_model))
        print(f"wrote {path} (state dict of trial {best.number}'s settings, retrained; use it as model.checkpoint)")
    return 0


def _args_best(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the study's YAML run file")
    _add_study_flags(p)
    p.add_argument("--export", metavar="PATH", help="write a YAML with every setting of the best trial fixed")
    p.add_argument("--save-model", metavar="PATH", help="retrain the best trial's settings and save the model's "
                                                        "state dict (a warm start for model.checkpoint)")


# ---------------------------------------------------------------- doctor


def _cmd_doctor(args: argparse.Namespace) -> int:
    from autotune.observe import _doctor as doctor

    print(doctor.render(doctor.report(args.device, with_compile=not args.no_compile)))
    return 0


def _args_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile check (it takes seconds)")


# ---------------------------------------------------------------- profile


def _cmd_profile(args: argparse.Namespace) -> int:
    from autotune.observe import _profiling as profiling

    cfg = _load(args)
    params = profiling.read_params(Path(args.params)) if args.params else {}
    result, trace, table = profiling.profile(cfg, params, args.epochs, Path(args.out))
    print(table)
    print(f"input wait: {result.data_wait_fraction:.1%} of step time; {result.samples_per_s:,.0f} samples/s; "
          f"train time {result.train_time_s:.2f}s over {result.epochs_run} epoch(s)")
    print(f"chrome trace: {trace}")
    return 0


def _args_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file (its fixed settings are used)")
    p.add_argument("--params", help="YAML of settings to apply (e.g. the file `autotune best --export` wrote)")
    p.add_argument("--epochs", type=int, default=1, help="epochs to profile (default 1)")
    p.add_argument("--out", default="studies", help="folder for the trace (default studies/)")


# ---------------------------------------------------------------- speed


def _cmd_speed(args: argparse.Namespace) -> int:
    from autotune.speed import _speed as speed
    from autotune.study._objective import load_fit
    from autotune.study._study import preflight

    cfg = _load(args)
    preflight(cfg)  # device, data, model: a mistake is one line before any probe runs
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    combos = speed.combinations(cfg)
    print(speed.header(cfg, len(combos)), flush=True)
    note = speed.compile_note(combos, not args.no_compile, args.budget)
    if note:
        print(f"note: {note}", flush=True)
    done = [0]

    def progress(row: Any) -> None:
        done[0] += 1
        print(speed.row_line(row, done[0], len(combos)), file=sys.stderr, flush=True)

    rows = speed.run(cfg, load_fit(cfg), include_compile=not args.no_compile, budget_s=args.budget, on_row=progress)
    print(speed.table(rows))
    return 0


def _args_speed(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file: its model, data (or trainer) and searched acceleration settings")
    p.add_argument("--no-compile", action="store_true", help="leave out combinations with compile: true")
    p.add_argument("--budget", type=float, default=120.0, help="seconds for the whole table (default 120); "
                                                              "combinations not probed by then are listed as such")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")


# ---------------------------------------------------------------- report / dashboard


def _study_and_config(target: str | None, storage: str | None, name: str | None) -> tuple[Any, Any]:
    """(study, RunConfig) from a YAML run file, or from --storage and a study name stored there."""
    from autotune.study import _storage as storage_mod

    if target is not None and (Path(target).is_file() or target.endswith((".yaml", ".yml"))):
        from autotune.config._load import load
        from autotune.study._study import open_study

        cfg = load(target, {k: v for k, v in (("study.storage", storage), ("study.name", name)) if v})
        return open_study(cfg, create=False), cfg
    if storage is None:
        raise ConfigError("autotune report", "--storage", f"{target!r} is not a YAML file: give the run file, or "
                                                          f"--storage URL with the study name")
    return storage_mod.load_stored(storage, name or target)


def _cmd_report(args: argparse.Namespace) -> int:
    import optuna

    from autotune.observe import _report as report

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    if args.target is None and args.storage is None:
        raise ConfigError("autotune report", "FILE_OR_STUDY", "give the YAML run file, or --storage URL --study NAME")
    study, cfg = _study_and_config(args.target, args.storage, args.study)
    out = Path(args.output or f"{study.study_name}.html")
    path = report.write(study, cfg, out)
    print(f"wrote {path} ({len(study.trials)} trials, {path.stat().st_size / 1e6:.1f} MB, opens offline)")
    return 0


def _args_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", metavar="FILE_OR_STUDY", help="the YAML run file, or a study name with "
                                                                         "--storage")
    p.add_argument("-o", "--output", metavar="PATH", help="HTML file to write (default: STUDY_NAME.html)")
    p.add_argument("--storage", help="storage URL (overrides study.storage; alone: a study stored there)")
    p.add_argument("--study", help="study name in --storage (default: the only one)")


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from autotune.observe import _dashboard as dashboard
    from autotune.study._storage import bare_config, make_storage

    if args.file is None and args.storage is None:
        raise ConfigError("autotune dashboard", "FILE", "give the YAML run file or --storage URL")
    if args.file is not None:
        from autotune.config._load import load

        cfg = load(args.file, {"study.storage": args.storage} if args.storage else None)
    else:
        cfg = bare_config(args.storage)
    storage = make_storage(cfg)
    print(f"storage {redact(cfg.study.storage)}", flush=True)
    dashboard.serve(storage, host=args.host, port=args.port, study_name=cfg.study.name if args.file else None)
    return 0


def _args_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", help="the YAML run file whose storage to show")
    p.add_argument("--storage", help="storage URL (overrides study.storage, or instead of FILE)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")


# ---------------------------------------------------------------- entry point


Command = Callable[[argparse.Namespace], int]
AddArgs = Callable[[argparse.ArgumentParser], None]
# `autotune NAME`: (what runs it, what adds its arguments, its help line); the order is --help's.
COMMANDS: dict[str, tuple[Command, AddArgs, str]] = {
    "run": (_cmd_run, _args_run, "run or resume the study a YAML file describes"),
    "worker": (_cmd_worker, _args_worker,
               "join an existing study from any machine and run its trials until it is done"),
    "launch": (_cmd_launch, _args_launch,
               "create a study, then submit its workers as jobs (Slurm through submitit, or local processes)"),
    "storage-proxy": (_cmd_storage_proxy, _args_storage_proxy,
                      "serve a study's storage over gRPC (Optuna's proxy) to many workers: grpc://HOST:PORT"),
    "validate": (_cmd_validate, _args_validate, "check a YAML file without running it"),
    "best": (_cmd_best, _args_best, "print the recommended trial of a study (and --export it as a runnable YAML)"),
    "doctor": (_cmd_doctor, _args_doctor, "show the device, versions, and which precisions and compile work here"),
    "profile": (_cmd_profile, _args_profile,
                "run one configuration under torch.profiler: Chrome trace, top operators, input wait"),
    "speed": (_cmd_speed, _args_speed,
              "measure samples/s of every combination of the acceleration settings a YAML file searches"),
    "report": (_cmd_report, _args_report, "write one self-contained HTML report (Plotly, opens offline) of a study"),
    "dashboard": (_cmd_dashboard, _args_dashboard,
                  "serve optuna-dashboard on a study's storage (live while `autotune run` writes)"),
}


def build_parser() -> argparse.ArgumentParser:
    from autotune import __version__

    parser = argparse.ArgumentParser(prog="autotune", description="Find the best speed-accuracy trade-off for "
                                                                  "training a PyTorch model.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, add_args, help) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help, description=help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command][0](args)
    except AutotuneError as e:  # ConfigError included; no password of a storage URL reaches the terminal
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
