"""`autotune doctor`: the device, versions, and which precisions and compile work here."""

from __future__ import annotations

import argparse


def cmd(args: argparse.Namespace) -> int:
    from autotune.observe import doctor

    print(doctor.render(doctor.report(args.device, with_compile=not args.no_compile)))
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile check (it takes seconds)")
