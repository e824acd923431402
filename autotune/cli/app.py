"""`autotune run / validate / best / ...`: parsing and dispatch (the COMMANDS registry); turns every AutotuneError
into one line and exit 2. Each command is its own module (autotune/cli/<command>.py: `cmd(args)` runs it,
`add_args(parser)` adds its arguments); the work itself is done by the module that owns each job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from autotune.cli import (
    best,
    common,
    dashboard,
    doctor,
    launch,
    profile,
    report,
    run,
    speed,
    storage_proxy,
    validate,
    worker,
)

# ---------------------------------------------------------------- entry point


Command = Callable[[argparse.Namespace], int]
AddArgs = Callable[[argparse.ArgumentParser], None]
# `autotune NAME`: (what runs it, what adds its arguments, its help line); the order is --help's.
COMMANDS: dict[str, tuple[Command, AddArgs, str]] = {
    "run": (run.cmd, run.add_args, "run or resume the study a YAML file describes"),
    "worker": (worker.cmd, worker.add_args,
               "join an existing study from any machine and run its trials until it is done"),
    "launch": (launch.cmd, launch.add_args,
               "create a study, then submit its workers as jobs (Slurm through submitit, or local processes)"),
    "storage-proxy": (storage_proxy.cmd, storage_proxy.add_args,
                      "serve a study's storage over gRPC (Optuna's proxy) to many workers: grpc://HOST:PORT"),
    "validate": (validate.cmd, validate.add_args, "check a YAML file without running it"),
    "best": (best.cmd, best.add_args, "print the recommended trial of a study (and --export it as a runnable YAML)"),
    "doctor": (doctor.cmd, doctor.add_args, "show the device, versions, and which precisions and compile work here"),
    "profile": (profile.cmd, profile.add_args,
                "run one configuration under torch.profiler: Chrome trace, top operators, input wait"),
    "speed": (speed.cmd, speed.add_args,
              "measure samples/s of every combination of the acceleration settings a YAML file searches"),
    "report": (report.cmd, report.add_args,
               "write one self-contained HTML report (Plotly, opens offline) of a study"),
    "dashboard": (dashboard.cmd, dashboard.add_args,
                  "serve optuna-dashboard on a study's storage (live while `autotune run` writes)"),
}


def build_parser() -> argparse.ArgumentParser:
    from autotune.core import __version__

    parser = argparse.ArgumentParser(prog="autotune", description="Find the best speed-accuracy trade-off for "
                                                                  "training a PyTorch model.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, add_args, help) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help, description=help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. As the program itself (`argv` None: the `autotune` command, `python -m autotune`), the process
    then ends with the command's status even if a user's code left threads running (`common.exit_now`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # the `autotune` program: it may end its process; main(argv) inside a user's may not
        from autotune.core import lifetime

        lifetime.as_program()
    code = common.run_command(COMMANDS[args.command][0], args)
    if argv is None:
        common.exit_now(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
