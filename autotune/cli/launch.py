"""`autotune launch`: a study's workers as jobs of a scheduler, through submitit (`pip install 'autotune[slurm]'`).

The launcher creates the study (or resumes it), then submits one job array: each job is one `autotune worker`
on the study's shared storage, one GPU (or `devices` of them) each. The jobs share nothing but the storage, so
the budget stays exact however many there are (budget.py claims trials). Executors: `slurm` (sbatch),
`local` (processes on this machine: submitit's LocalExecutor), `debug` (in this process, one after the other)
and `none` (only create the study, for workers started by something else: a Kubernetes Job, ssh).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.cli import common
from autotune.cli.common import STORAGE_ENV, quoted
from autotune.config import from_dict
from autotune.core import AutotuneError, ConfigError, contention, environ, redact
from autotune.spec import RunConfig
from autotune.study import runner as study_mod
from autotune.training import cpu_cores, devices_wanted

# autotune's executor name -> submitit's cluster name (None: no submission)
EXECUTORS: dict[str, str | None] = {"slurm": "slurm", "local": "local", "debug": "debug", "none": None}
INSTALL = "pip install 'autotune[slurm]'"


@dataclass(frozen=True)
class Request:
    """What to submit: `workers` jobs of one task each, on `executor`."""

    executor: str = "slurm"
    workers: int = 1
    partition: str | None = None
    time_min: int = 60
    gpus_per_task: int | None = None  # None: the config's devices (0 on a CPU config)
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    folder: Path = Path("studies/launch")
    name: str | None = None  # the jobs' name (default: autotune-STUDY)


def parse_time(text: str) -> int:
    """Minutes from `90` (minutes), `1:30:00` (H:MM:SS) or `2-00:00:00` (D-H:MM:SS)."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d\d):(\d\d)|(\d+)", text.strip())
    if m is None:
        raise ConfigError("--time", "--time", f"must be minutes or [D-]H:MM:SS like 90 or 1:30:00; got {text!r}")
    if m[5]:
        return max(1, int(m[5]))
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups()[:4])
    return max(1, days * 1440 + hours * 60 + minutes + (1 if seconds else 0))


def check(cfg: RunConfig, req: Request) -> list[str]:
    """The mistakes a launch would make, as a ConfigError before anything is written; returns notes to print."""
    file = cfg.file
    if req.executor not in EXECUTORS:
        raise ConfigError(file, "--executor", f"unknown {req.executor!r}; known: {', '.join(sorted(EXECUTORS))}")
    if req.workers < 1:
        raise ConfigError(file, "--workers", f"must be >= 1; got {req.workers}")
    url = cfg.study.storage
    if url.startswith("sqlite"):
        raise ConfigError(file, "study.storage", f"SQLite cannot be shared by jobs on several machines ({url}); use "
                                                 "postgresql://USER:PASSWORD@HOST/DB (or mysql://...), "
                                                 "grpc://HOST:PORT, or journal:///path on a shared filesystem")
    device = str(cfg.fixed()["device"])
    kind, _, index = device.partition(":")
    if kind == "cuda" and index:
        raise ConfigError(file, "train.device", f"{device}: each job sees only its own GPU(s); use device cuda or "
                                                "auto")
    per = devices_wanted(cfg)
    if req.gpus_per_task is not None and device not in ("cpu", "mps") and 0 < req.gpus_per_task < per:
        raise ConfigError(file, "--gpus-per-task", f"a trial takes up to {per} devices (devices); got "
                                                   f"{req.gpus_per_task}")
    notes = []
    if url.startswith("journal://") and req.executor == "slurm":
        notes.append(f"{url}: every node must see this file at this path (a shared filesystem), and a journal has "
                     "no heartbeats: a job that dies on another node leaves its trial RUNNING until `autotune worker "
                     "--fail-stale`")
    if EXECUTORS[req.executor] is not None and importlib.util.find_spec("submitit") is None:
        raise ConfigError(file, "--executor", f"{req.executor} jobs are submitted through submitit: {INSTALL}")
    if req.executor == "slurm" and (shutil.which("sbatch") is None or shutil.which("srun") is None):
        raise ConfigError(file, "--executor", "slurm: no sbatch/srun on PATH (not a Slurm login node); run this "
                                              "there, or use --executor local")
    return notes


def gpus(cfg: RunConfig, req: Request) -> int:
    """GPUs each job asks for: --gpus-per-task, else the trial's devices; none for a CPU config, nor for `device:
    auto` run on this machine (local, debug) when it has no GPU: those jobs are CPU workers, as `--workers` runs."""
    device = str(cfg.fixed()["device"])
    if device in ("cpu", "mps"):
        return 0
    if req.gpus_per_task is not None:
        return req.gpus_per_task
    if device == "auto" and req.executor in ("local", "debug"):
        from autotune.study import visible_gpus

        if not visible_gpus():
            return 0
    return devices_wanted(cfg)


def job_threads(req: Request) -> int | None:
    """Each job's torch threads: --cpus-per-task, else (jobs on this machine) the cores split among them as
    `--workers` splits them; None: the scheduler's node decides."""
    if req.cpus_per_task:
        return req.cpus_per_task
    return contention.default_threads(req.workers, n_cores=cpu_cores()) if req.executor == "local" else None


def worker_url(cfg: RunConfig) -> str:
    """The storage URL the jobs open: a relative journal path made absolute (a job may start elsewhere)."""
    url = cfg.study.storage
    if url.startswith("journal://") and not url.startswith("journal:///"):
        return "journal://" + str(Path(url[len("journal://"):]).resolve())
    return url


def create(cfg: RunConfig, req: Request, fresh: bool = False) -> RunConfig:
    """Create (or resume) the study the jobs join, from this machine: no device check here (a login node has
    no GPU); each job checks its own node as `autotune worker` does. (`code_hash` says what the jobs may run.)"""
    cfg = from_dict(cfg.to_dict(), overrides={"study.storage": worker_url(cfg)}, source=cfg.source)
    device = str(cfg.fixed()["device"])
    label = None if device in ("cpu", "mps") or not gpus(cfg, req) else \
        f"{device}: {gpus(cfg, req)} GPU(s) per {req.executor} job" \
        if EXECUTORS[req.executor] else f"{device}: each worker's own"
    study_mod.open_study(cfg, fresh=fresh, device_name=label)
    return cfg


def code_hash(cfg: RunConfig) -> str | None:
    """The launched study's code hash (study/trust.py), where its config names user code: its jobs run that code
    only while the stored config is this one."""
    from autotune.study import trust

    return trust.study_hash(study_mod.open_study(cfg, create=False))


def job(storage: str | None, study_name: str, threads: int | None, code: str | None = None) -> str:
    """One job: `autotune worker` on the study (storage None: the URL is in $AUTOTUNE_STORAGE), with the launched
    study's code hash. A module-level function, so submitit can pickle it; raises when the worker fails, so the
    scheduler marks the job failed."""
    import argparse

    from autotune.cli import worker

    url = storage or os.environ.get(STORAGE_ENV)
    if not url:
        raise AutotuneError(f"no storage: the job's ${STORAGE_ENV} is empty")
    argv = ["--storage", url, "--study", study_name, *(["--threads", str(threads)] if threads else []),
            *(["--code-hash", code] if code else [])]
    parser = argparse.ArgumentParser(prog="autotune worker")
    worker.add_args(parser)
    rc = common.run_command(worker.cmd, parser.parse_args(argv))  # `autotune worker ...`, as its command runs
    sys.stdout.flush()
    if rc != 0:
        raise AutotuneError(f"autotune worker exited with status {rc}: see this job's log")
    return f"worker done on {os.uname().nodename}"


def _executor(req: Request, cfg: RunConfig, n_gpus: int) -> Any:
    import submitit

    cluster = EXECUTORS[req.executor]
    executor = submitit.AutoExecutor(folder=str(req.folder / "%j"), cluster=cluster)
    params: dict[str, Any] = {"name": req.name or f"autotune-{cfg.study.name}", "timeout_min": req.time_min,
                              "tasks_per_node": 1, "nodes": 1, "gpus_per_node": n_gpus}
    if req.cpus_per_task:
        params["cpus_per_task"] = req.cpus_per_task
    if req.mem_gb:
        params["mem_gb"] = req.mem_gb
    if cluster == "slurm":
        params["slurm_array_parallelism"] = req.workers
        if req.partition:
            params["slurm_partition"] = req.partition
    executor.update_parameters(**params)
    return executor


def submit(cfg: RunConfig, req: Request, code: str | None = None) -> list[Any]:
    """Submit the workers: one array of `req.workers` jobs (submitit Job objects, in order)."""
    n_gpus = gpus(cfg, req)
    url = cfg.study.storage
    hidden = redact(url) != url  # the password travels in the jobs' environment, not in the logs folder
    threads = job_threads(req)
    executor = _executor(req, cfg, n_gpus)
    args = (None if hidden else url, cfg.study.name, threads, code)
    with environ.setenv({STORAGE_ENV: url} if hidden else {}):
        if req.executor == "local" and n_gpus:  # the local executor gives every job GPUs 0..n-1: spread them
            return _submit_local_gpus(executor, args, req.workers, n_gpus)
        try:
            return executor.map_array(job, *([a] * req.workers for a in args))
        except Exception as e:  # sbatch refused it (partition, limits): its own words, on one line
            text = [line for line in str(e).strip().splitlines() if line.strip()]
            raise AutotuneError(f"{req.executor} refused the jobs: {text[-1] if text else type(e).__name__}") \
                from None


def _submit_local_gpus(executor: Any, args: tuple[Any, ...], workers: int, n_gpus: int) -> list[Any]:
    from autotune.study import visible_gpus

    visible = [int(g) for g in visible_gpus() if g.isdigit()]
    if len(visible) < workers * n_gpus:
        raise ConfigError("--executor", "--workers", f"{workers} local jobs x {n_gpus} GPU(s) need "
                                                     f"{workers * n_gpus} GPUs but {len(visible)} visible")
    jobs = []
    for k in range(workers):
        executor.update_parameters(visible_gpus=visible[k * n_gpus:(k + 1) * n_gpus])
        jobs.append(executor.submit(job, *args))
    return jobs


def follow(cfg: RunConfig, req: Request, jobs: list[Any], file: str, code: str | None = None) -> list[str]:
    """How to watch the launched study: job ids, the scheduler's queue, the logs, the dashboard, the report."""
    url = quoted(cfg.study.storage)
    ids = [str(j.job_id) for j in jobs]
    lines = [f"submitted {len(jobs)} {req.executor} job(s) on study {cfg.study.name} ({redact(cfg.study.storage)}): "
             f"{' '.join(ids)}"]
    if req.executor == "slurm":
        arrays = sorted({i.split("_")[0] for i in ids})
        lines.append(f"  queue:     squeue -j {','.join(arrays)}    (cancel: scancel {' '.join(arrays)})")
    lines += [f"  logs:      {req.folder}/JOB_ID/   (e.g. {req.folder}/{ids[0]}/{ids[0]}_0_log.out)" if ids else "",
              f"  live:      autotune dashboard {file} --storage {url}",
              f"  report:    autotune report {file} --storage {url}",
              f"  more:      autotune worker --storage {url} --study {cfg.study.name}"
              f"{f' --code-hash {code}' if code else ''}   (from any machine)"]
    return [line for line in lines if line]


def wait(jobs: list[Any]) -> list[str]:
    """Wait for every job; one line per failed job (empty: all ended well)."""
    failed = []
    for j in jobs:
        try:
            j.result()
        except Exception as e:  # submitit re-raises the job's error with its traceback: keep the last line
            text = [line for line in str(e).strip().splitlines() if line.strip()]
            failed.append(f"job {j.job_id}: {text[-1] if text else type(e).__name__}")
    return failed


def stop_jobs(cfg: RunConfig, req: Request, jobs: list[Any]) -> str:
    """The launcher was stopped while it waited: local jobs (processes on this machine) are ended, as `run --workers`
    ends its workers (SIGTERM: each fails its running trial and exits; one still there after lifetime.EXIT_GRACE_S
    + 10 s is killed); a scheduler's jobs are left to it. One line: what was stopped, what the study keeps, how to
    go on."""
    import time

    from autotune.core import lifetime

    ids = " ".join(str(j.job_id) for j in jobs)
    if req.executor == "local":
        for j in jobs:  # SIGTERM to submitit's local controller: it forwards it to its task, the worker (its cancel,
            with contextlib.suppress(Exception):  # a SIGINT, ends the controller with a traceback on our stderr)
                process = getattr(j, "_process", None)  # (submitit's LocalJob keeps its Popen there)
                if process is not None:
                    process.send_signal(signal.SIGTERM)
                else:
                    j.cancel(check=False)
        deadline = time.monotonic() + lifetime.EXIT_GRACE_S + 10
        while time.monotonic() < deadline and not all(_ended(j) for j in jobs):
            time.sleep(0.2)
        for j in jobs:
            process = getattr(j, "_process", None)  # (submitit's LocalJob keeps its Popen there)
            if process is not None and process.poll() is None:
                process.kill()
        what = f"ended {len(jobs)} local job(s) ({ids}); their running trials end FAIL and are retried on resume"
        then = "run the same command again to resume"
    else:
        cancel = f" (cancel: scancel {' '.join(sorted({i.split('_')[0] for i in ids.split()}))})" \
            if req.executor == "slurm" else ""
        what = f"stopped waiting; the {len(jobs)} {req.executor} job(s) ({ids}) keep running the study{cancel}"
        then = "follow it with autotune report or dashboard"
    try:
        from autotune.study import counts, open_study

        finished = f"{counts(open_study(cfg, create=False).get_trials(deepcopy=False)).finished} finished trial(s)"
    except Exception:  # (what it can say: never a second traceback on the way out)
        finished = "finished trials"
    return f"{what}; the study keeps its {finished} in {redact(cfg.study.storage)}; {then}"


def _ended(j: Any) -> bool:
    try:
        return bool(j.done())
    except Exception:
        return True


__all__ = ["EXECUTORS", "Request", "check", "code_hash", "create", "follow", "gpus", "job", "job_threads",
           "parse_time", "quoted", "stop_jobs", "submit", "wait", "worker_url"]


# ---------------------------------------------------------------- the command


def cmd(args: argparse.Namespace) -> int:

    cfg = common.load(args)
    req = Request(executor=args.executor, workers=args.workers, partition=args.partition,
                  time_min=parse_time(args.time), gpus_per_task=args.gpus_per_task,
                  cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb, folder=Path(args.logs), name=args.job_name)
    for line in check(cfg, req):
        print(f"note: {line}", file=sys.stderr)
    cfg = create(cfg, req, fresh=args.fresh)
    code = code_hash(cfg)
    if EXECUTORS[req.executor] is None:
        print(f"study {cfg.study.name} is ready in {redact(cfg.study.storage)}; start workers anywhere with: "
              f"autotune worker --storage {quoted(cfg.study.storage)} --study {cfg.study.name}"
              + (f" --code-hash {code}" if code else ""))
        return 0
    jobs = submit(cfg, req, code)
    print("\n".join(follow(cfg, req, jobs, args.file, code)), flush=True)
    waited = args.wait or req.executor == "debug"  # debug jobs run in this process, as they are waited for
    n_jobs = len(jobs)
    with common.sigterm_stops() as terms:
        try:
            failed = wait(jobs) if waited else None
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from whatever runs this launcher
            common.ignore_more_interrupts()
            print(f"{'terminated' if terms else 'interrupted'}: {stop_jobs(cfg, req, jobs)}", file=sys.stderr)
            jobs.clear()
            return 143 if terms else 130
    jobs.clear()  # now: a submitit job still referenced at interpreter exit prints a TypeError from its __del__
    if failed is None:
        return 0
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    from autotune.study import counts, open_study

    c = counts(open_study(cfg, create=False).get_trials(deepcopy=False))
    print(f"{n_jobs - len(failed)} of {n_jobs} job(s) ended well; the study holds {c.finished} finished, "
          f"{c.running} running, {c.failed} failed trial(s)")
    return 1 if failed else 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="YAML run file: the study is created (or resumed) here, then its workers submitted")
    common.add_study_flags(p)
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
