"""The launcher of a several-device trial: N rank processes (forkserver), their TCPStore, and the supervisor that
relays rank 0's records and the study's verdicts and sees a rank die or raise at once (see launch.py)."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from autotune.core import (
    AutotuneError,
    ConfigError,
    TrialStopped,
    as_imported,
    exit_text,
    importable,
    message_and_where,
    module_argv,
)
from autotune.training.distributed.group import Group, backend_for

COLLECTIVE_TIMEOUT_S = 600  # a collective left waiting this long raises (a rank deadlocked in user code)
STORE_TIMEOUT_S = 60  # ranks joining the store
FINISH_GRACE_S = 10  # once rank 0 is done, the others have this long to exit before they are killed
HANG_GRACE_S = 10  # hang_seconds is checked by the ranks every FINITE_CHECK_EVERY steps; past this, killed
POLL_S = 0.5
# A rank's lost-connection error can reach the launcher before the peer's death that caused it is reaped: the
# others are killed this long after such an error, not at once, so a dead peer is seen dead, not as one killed here.
CONSEQUENCE_GRACE_S = 2.0
# Imported once in the forkserver, inherited by every rank: DDP imports torch._dynamo (3 s here).
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch.nn.parallel", "autotune.fit.trainer",
           "sklearn.datasets", "sklearn.model_selection"]
# Words of the errors a rank sees when a peer went away: consequences, never the cause of a failure.
COMM_MARKERS = ("gloo", "nccl", "connection closed", "connection reset", "broken pipe", "socket", "timed out",
                "timeout", "peer")


class RankFailed(AutotuneError):
    """A rank of a several-device trial died or failed in a way that cannot be re-raised as its own error."""


# ---------------------------------------------------------------- the launcher


@dataclass(frozen=True)
class _Spec:
    """What a rank needs to join its trial's group."""

    world: int
    device_type: str  # "cuda" or "cpu"
    port: int  # the launcher's TCPStore
    threads: int  # torch CPU threads per rank
    reports: bool  # rank 0 sends epoch records (the launcher has an on_record)
    asks: bool  # rank 0 asks the study after each epoch (the launcher has an on_epoch)


Target = Callable[[Any, Group, Callable[[Any], None] | None, Callable[[Any], None] | None], Any]


def _context() -> Any:
    """forkserver where there is one: a rank forks from a process that imported torch, DDP's torch._dynamo and
    autotune once (0.3 s a trial instead of 5); it never held a CUDA context, so CUDA works in the ranks."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")


def launch(target: Target, payload: Any, world: int, device: torch.device,
           on_record: Callable[[Any], None] | None = None, on_epoch: Callable[[Any], None] | None = None,
           hang_seconds: float | None = None) -> Any:
    """Run `target(payload, group, on_epoch, on_record)` on `world` ranks and return rank 0's result.

    Rank 0's epoch records reach `on_record` and `on_epoch` here, in this process; a TrialStopped from `on_epoch`
    goes back to rank 0, which stops every rank at that step. Any rank's exception is raised here (the first
    rank's own error; a peer's lost-connection errors are its consequences), a rank's death is a RankFailed, and
    a rank-0 stop is its TrialStopped. Every rank is gone when this returns or raises."""
    import torch.distributed as dist

    try:
        # unpickled in the rank under the command line the module was imported with here (`as_imported`); the
        # rank's main script, which multiprocessing runs again first, sees this process's own
        blob = pickle.dumps((target, payload))
    except Exception as e:
        raise RankFailed(f"devices {world} trains in new processes, so the training function must be importable by "
                         f"name (a module-level function, not a lambda, closure or notebook cell): {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None
    if device.type == "cuda" and world > torch.cuda.device_count():  # e.g. `autotune worker` on a smaller machine
        raise RankFailed(f"devices {world} but this process sees {torch.cuda.device_count()} CUDA GPU(s) "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    ctx = _context()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=STORE_TIMEOUT_S))
    spec = _Spec(world=world, device_type=device.type, port=store.port,
                 threads=max(1, torch.get_num_threads() // world), reports=on_record is not None,
                 asks=on_epoch is not None)
    ranks: list[_Rank] = []
    # Held open here only: when this process dies, however, every rank reads end-of-file on it and exits.
    lifeline, life_w = ctx.Pipe(duplex=False)
    try:
        for r in range(world):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_rank_main, args=(blob, module_argv(), r, spec, theirs, lifeline),
                            name=f"autotune-rank-{r}")
            with importable():  # the rank imports the training function's module by name, as this process did
                p.start()
            theirs.close()
            ranks.append(_Rank(r, p, mine))
        lifeline.close()
        return _Supervisor(ranks, on_record, on_epoch, hang_seconds).run()
    finally:
        for rk in ranks:
            if rk.proc.is_alive():
                rk.proc.kill()
        for rk in ranks:
            rk.proc.join(timeout=30)
            rk.conn.close()
        lifeline.close()
        life_w.close()
        del store


class _Rank:
    def __init__(self, rank: int, proc: Any, conn: Connection) -> None:
        self.rank, self.proc, self.conn = rank, proc, conn
        self.final: tuple[Any, ...] | None = None  # its last message: result, done, stopped, error, config
        self.open = True  # its pipe may still hold messages
        self.exited = False
        self.killed = False  # by the launcher (so its exit is no news)


class _Supervisor:
    """The launcher's loop: rank 0's records to the study and its answers back; deaths, errors, the hang limit."""

    def __init__(self, ranks: list[_Rank], on_record: Callable[[Any], None] | None,
                 on_epoch: Callable[[Any], None] | None, hang_seconds: float | None) -> None:
        self.ranks = ranks
        self.world = len(ranks)
        self.on_record = on_record
        self.on_epoch = on_epoch
        self.deadline = time.monotonic() + hang_seconds + HANG_GRACE_S if hang_seconds else math.inf
        self.hang_seconds = hang_seconds
        self.epoch = 0  # the last epoch rank 0 reported
        self.done_at: float | None = None  # rank 0's result or stop arrived
        self.consequence_at: float | None = None  # a rank's lost-connection error arrived
        self.hung = False
        self.parent_error: BaseException | None = None

    def run(self) -> Any:
        while not all(rk.exited for rk in self.ranks):
            conns = [rk.conn for rk in self.ranks if rk.open]
            sentinels = {rk.proc.sentinel: rk for rk in self.ranks if not rk.exited}
            ready = wait([*conns, *sentinels], timeout=POLL_S)
            for rk in self.ranks:  # messages first: a rank's last words arrive before its exit is seen
                if rk.open and rk.conn in ready:
                    self._read(rk)
            for obj in ready:
                if obj in sentinels:
                    self._exited(sentinels[obj])
            now = time.monotonic()
            if now > self.deadline and not self.hung:
                self.hung = True
                self._kill_all()
            if self.done_at is not None and now > self.done_at + FINISH_GRACE_S:
                self._kill_all()
            if self.consequence_at is not None and now > self.consequence_at + CONSEQUENCE_GRACE_S:
                self._kill_all()
        return self._outcome()

    def _read(self, rk: _Rank) -> None:
        while rk.open and rk.conn.poll():
            try:
                msg = pickle.loads(rk.conn.recv_bytes())
            except (EOFError, OSError):
                rk.open = False
                return
            self._handle(rk, msg)

    def _handle(self, rk: _Rank, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "record":
            self.epoch = max(self.epoch, int(msg[1].epoch))
            self._call(self.on_record, msg[1], rk, answer=False)
        elif kind == "epoch":
            self._call(self.on_epoch, msg[1], rk, answer=True)
        else:
            rk.final = msg
            if kind == "error" and msg[3]:  # a consequence: its cause (a peer's death or error) may be on its way
                self.consequence_at = self.consequence_at or time.monotonic()
            elif kind in ("error", "config"):
                self._kill_all()
            elif rk.rank == 0 and self.done_at is None:
                self.done_at = time.monotonic()

    def _call(self, fn: Callable[[Any], None] | None, rec: Any, rk: _Rank, answer: bool) -> None:
        reply: tuple[Any, ...] = ("go",)
        try:
            if fn is not None and self.parent_error is None:
                fn(rec)
        except TrialStopped as e:
            reply = ("stop", e.reason, e.epoch, e.detail)
        except BaseException as e:  # the study's side failed (storage...): no rank can go on
            self.parent_error = e
            self._kill_all()
            return
        if answer:
            try:
                rk.conn.send_bytes(pickle.dumps(reply))
            except OSError:  # rank 0 is gone: its sentinel says so
                pass

    def _exited(self, rk: _Rank) -> None:
        self._read(rk)  # whatever it sent before it went
        rk.proc.join(timeout=5)
        rk.exited = True
        if rk.final is None and not rk.killed:
            self._kill_all()  # died without a word: the others may be blocked in a collective with it

    def _kill_all(self) -> None:
        for rk in self.ranks:
            if not rk.exited and rk.proc.exitcode is None:
                rk.killed = True
                rk.proc.kill()

    def _outcome(self) -> Any:
        if self.parent_error is not None:
            raise self.parent_error
        own = [rk for rk in self.ranks if rk.final is not None and rk.final[0] in ("error", "config")
               and not (rk.final[0] == "error" and rk.final[3])]
        if own:  # the lowest rank's own error is the cause
            _raise(own[0], self.world)
        dead = [rk for rk in self.ranks if rk.final is None and not rk.killed]
        if dead:
            rk = dead[0]
            raise RankFailed(f"rank {rk.rank} of {self.world} (pid {rk.proc.pid}) {_exit_text(rk.proc.exitcode)} "
                             f"in epoch {self.epoch + 1}; the other rank(s) were stopped")
        main = self.ranks[0].final
        if main is not None and main[0] == "stopped":
            raise TrialStopped(main[1], main[2], main[3])
        if main is not None and main[0] == "result":
            return main[1]
        if self.hung:
            raise TrialStopped("hang", self.epoch, f"trial wall time over hang_seconds {self.hang_seconds:g} (its "
                                                   f"ranks stopped answering; killed {HANG_GRACE_S} s later)")
        comm = [rk for rk in self.ranks if rk.final is not None and rk.final[0] == "error"]
        if comm:
            _raise(comm[0], self.world)
        raise RankFailed(f"rank 0 of {self.world} ended without a result")


def _raise(rk: _Rank, world: int) -> None:
    final = rk.final
    assert final is not None
    if final[0] == "config":
        raise ConfigError(final[1], final[2], final[3])
    _, blob, text, _comm, oom = final
    if blob is not None:
        raise pickle.loads(blob)
    if oom:
        raise torch.OutOfMemoryError(f"rank {rk.rank} of {world}: {text}")
    raise RankFailed(f"rank {rk.rank} of {world}: {text}")


def _exit_text(code: int | None) -> str:
    text = exit_text(code)
    return f"was {text}" if code is not None and code < 0 else f"{text} before it finished"


# ---------------------------------------------------------------- a rank's process


def _rank_main(blob: bytes, argv: list[str], rank: int, spec: _Spec, conn: Connection, lifeline: Connection) -> None:
    """Entry point of one rank: join the group, run the target, send one last message, leave the group."""
    _die_with_launcher(lifeline)
    torch.set_num_threads(spec.threads)
    final: tuple[Any, ...]
    try:
        with as_imported(argv):  # the training function's module, imported by name here
            target, payload = pickle.loads(blob)
        if spec.device_type == "cuda":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            if sys.platform.startswith("linux"):
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this host
        store = torch.distributed.TCPStore("127.0.0.1", spec.port, is_master=False,
                                           timeout=timedelta(seconds=STORE_TIMEOUT_S))
        torch.distributed.init_process_group(backend_for(device), store=store, rank=rank, world_size=spec.world,
                                             timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
                                             device_id=device if device.type == "cuda" else None)
        group = Group(rank, spec.world, device)
        main = rank == 0
        on_record = _reporter(conn) if main and spec.reports else None
        on_epoch = _asker(conn) if main and spec.asks else None
        result = target(payload, group, on_epoch, on_record)
        final = ("result", result) if main else ("done",)
    except TrialStopped as e:
        final = ("stopped", e.reason, e.epoch, e.detail)
    except ConfigError as e:
        final = ("config", e.file, e.key_path, e.message)
    except BaseException as e:  # noqa: BLE001 - a rank reports whatever ended it, then exits
        final = _error(e, rank, spec.world)
    try:
        _send(conn, final)
    except OSError:  # the launcher is gone
        pass
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    conn.close()


def _send(conn: Connection, msg: tuple[Any, ...]) -> None:
    """Plain pickle (tensors by value), not multiprocessing's shared-memory handles, which die with this process."""
    conn.send_bytes(pickle.dumps(msg))


def _reporter(conn: Connection) -> Callable[[Any], None]:
    return lambda rec: _send(conn, ("record", rec))


def _asker(conn: Connection) -> Callable[[Any], None]:
    def ask(rec: Any) -> None:
        _send(conn, ("epoch", rec))
        reply = pickle.loads(conn.recv_bytes())
        if reply[0] == "stop":
            raise TrialStopped(reply[1], reply[2], reply[3])

    return ask


def _error(e: BaseException, rank: int, world: int) -> tuple[Any, ...]:
    """("error", the exception pickled or None, its one line, comm?, oom?): the exception keeps its type and the
    user's file:line, tagged with the rank; a CUDA error that broke this rank's context is text only (the
    launcher's own context is fine)."""
    from autotune.training import accel

    first, where = message_and_where(e)
    comm = isinstance(e, getattr(torch.distributed, "DistError", ())) or \
        any(m in f"{type(e).__name__} {first}".lower() for m in COMM_MARKERS)
    oom = accel.is_oom(e)
    tag = f"rank {rank} of {world}"
    text = f"{type(e).__name__}: {first}"[:300] + (f" (at {where})" if where else "")
    blob = None
    if not accel.is_fatal_device_error(e):
        e.__traceback__ = e.__context__ = e.__cause__ = None
        try:
            e.__dict__["_autotune_where"] = f"{where}, {tag}" if where else tag
            blob = pickle.dumps(e)
            pickle.loads(blob)
        except Exception:  # an exception that does not round-trip: its text is enough
            blob = None
    return ("error", blob, text, comm, oom)


def _die_with_launcher(lifeline: Connection) -> None:
    """A rank never outlives the process that launched it: a thread waits for end-of-file on the lifeline, whose
    only writer is the launcher (a rank's parent is the forkserver, which the ranks themselves keep alive, so the
    parent-death signal alone would not do)."""
    import threading

    def watch() -> None:
        try:
            lifeline.recv_bytes()
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="autotune-lifeline", daemon=True).start()
