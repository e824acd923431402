"""Batches for a training function: tensors kept on the device and batched by index, or a tuned DataLoader.

`build` turns what `ctx.loader` was given into batches per the trial's settings (data_fraction, data_on_device,
the DataLoader's workers, pinned memory, prefetch; this rank's share of each global batch on several devices);
`Batches` is what the training function iterates (a training loader's iteration timed by the context).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset

from autotune.core import watchdog
from autotune.spec import Settings
from autotune.training.context.misuse import ContextMisuse
from autotune.training.distributed.devices import ShardedBatches

if TYPE_CHECKING:
    from autotune.training.context.applied import Applied
    from autotune.training.context.collective import Alone


def _to_device(batch: Any, dev: torch.device, channels_last: bool) -> Any:
    """Every tensor of a batch (tuple, list, dict) on the device, without blocking; 4-D tensors (images,
    uint8 ones too: what is computed from them keeps the format) in channels_last when the trial asks."""
    if isinstance(batch, torch.Tensor):
        out = batch.to(dev, non_blocking=True)
        if channels_last and out.ndim == 4:
            out = out.contiguous(memory_format=torch.channels_last)
        return out
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, dev, channels_last) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, dev, channels_last) for k, v in batch.items()}
    return batch


def first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch:
        return first_tensor(batch[0])
    if isinstance(batch, dict) and batch:
        return first_tensor(next(iter(batch.values())))
    return None


def _stratified(y: torch.Tensor, fraction: float, gen: torch.Generator) -> torch.Tensor:
    """Indices of a share of each class (at least one each): the same classes, fewer samples."""
    keep = []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        n = max(1, int(round(len(idx) * fraction)))
        keep.append(idx[torch.randperm(len(idx), generator=gen)[:n]])
    return torch.cat(keep).sort().values


def fraction_indices(n: int, fraction: float, seed: int, labels: torch.Tensor | None = None) -> torch.Tensor | None:
    """`data_fraction` of n samples (stratified when integer class labels are known); None keeps all."""
    if fraction >= 1.0:
        return None
    gen = torch.Generator().manual_seed(seed)
    if labels is not None and labels.ndim == 1 and not labels.is_floating_point() and not labels.is_complex():
        return _stratified(labels.cpu(), fraction, gen)
    return torch.randperm(n, generator=gen)[: max(1, int(round(n * fraction)))].sort().values


class DeviceBatches:
    """Tensors kept on the device, batched by a fresh permutation each epoch: no DataLoader, no host work."""

    def __init__(self, tensors: Sequence[torch.Tensor], batch_size: int, dev: torch.device, channels_last: bool,
                 seed: int, shuffle: bool, drop_last: bool, shard: ShardedBatches | None = None) -> None:
        self.tensors = [_to_device(t, dev, channels_last) for t in tensors]
        self.n = len(self.tensors[0])
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last and self.n >= batch_size
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.dev = dev
        self.shard = shard  # several devices: this rank's part of each global batch

    def __len__(self) -> int:
        if self.shard is not None:
            return len(self.shard)
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        if self.shard is not None:  # the epoch's order (the same on every rank) moved once, then sliced
            order = self.shard.order().to(self.dev, non_blocking=True)
            for lo, hi in self.shard.spans():
                idx = order[lo:hi]
                yield tuple(t[idx] for t in self.tensors)
        elif self.shuffle:
            order = torch.randperm(self.n, device=self.dev, generator=self.gen)
            for i in range(0, len(self) * self.batch_size, self.batch_size):
                idx = order[i: i + self.batch_size]
                yield tuple(t[idx] for t in self.tensors)
        else:  # evaluation order: slices, no gather
            for i in range(0, len(self) * self.batch_size, self.batch_size):
                yield tuple(t[i: i + self.batch_size] for t in self.tensors)


class LoaderBatches:
    """A `DataLoader` (the trial's workers, pinned memory, prefetch); each batch moved to the device."""

    def __init__(self, loader: DataLoader[Any], dev: torch.device, channels_last: bool) -> None:
        self.loader = loader
        self.dev = dev
        self.channels_last = channels_last

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield _to_device(batch, self.dev, self.channels_last)


class Batches:
    """What `ctx.loader` returns: iterate it for batches on the device. A training loader's iteration is
    timed (input wait, samples). `len()` is its batches per epoch, `.batch_size` and `.dataset` (the data after
    `data_fraction`) read as a DataLoader's do."""

    def __init__(self, inner: DeviceBatches | LoaderBatches, train: bool,
                 timed: Callable[[Iterable[Any]], Iterator[Any]]) -> None:
        self._inner = inner
        self._timed = timed  # the context's clock around a training loader's batches
        self.train = train

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def batch_size(self) -> int:
        inner = self._inner
        if isinstance(inner, DeviceBatches):
            return inner.batch_size
        size: Any = inner.loader.batch_size or getattr(inner.loader.batch_sampler, "batch_size", 1)
        return int(size)

    @property
    def dataset(self) -> Dataset[Any]:
        """The data batched, after `data_fraction` (as a DataLoader's `.dataset`: `len(train.dataset)` samples):
        the Dataset given (a Subset of it), or a TensorDataset of the tensors (on the device with data_on_device)."""
        inner = self._inner
        if isinstance(inner, DeviceBatches):
            return TensorDataset(*inner.tensors)
        return inner.loader.dataset

    def __iter__(self) -> Iterator[Any]:
        return self._timed(self._inner) if self.train else _checked(self._inner)

    def untimed(self) -> Iterable[Any]:
        """The same batches with no clock or counter (e.g. calibration after training)."""
        return self._inner


def _checked(inner: Iterable[Any]) -> Iterator[Any]:
    """An evaluation loader's batches; an interrupted trial's interrupt is raised again at each (watchdog.check)."""
    for batch in inner:
        watchdog.check()
        yield batch


def as_tensors(data: Any) -> list[torch.Tensor] | None:
    """(x, y, ...) tensors or arrays of one length, or a TensorDataset; None for any other dataset."""
    import numpy as np

    if isinstance(data, TensorDataset):
        return list(data.tensors)
    if isinstance(data, (tuple, list)) and data and all(isinstance(t, (torch.Tensor, np.ndarray)) for t in data):
        tensors = [torch.as_tensor(t) for t in data]
        if len({len(t) for t in tensors}) != 1:
            raise ContextMisuse(f"ctx.loader: tensors of different lengths {[len(t) for t in tensors]}")
        return tensors
    if isinstance(data, Dataset):
        return None
    raise ContextMisuse(f"ctx.loader takes a tuple of tensors or a torch Dataset; got {type(data).__name__}")


def length(data: Any) -> int:
    try:
        return len(data)
    except TypeError:
        raise ContextMisuse("data_fraction < 1 needs a dataset with a length") from None


def _fraction(data: Any, tensors: list[torch.Tensor] | None, fraction: float,
              seed: int) -> tuple[Any, list[torch.Tensor] | None]:
    """`data_fraction` of the data: the tensors indexed, or a Subset of the Dataset."""
    n = len(tensors[0]) if tensors is not None else length(data)
    labels = tensors[1] if tensors is not None and len(tensors) > 1 else None
    keep = fraction_indices(n, fraction, seed, labels)
    if keep is None:
        return data, tensors
    if tensors is not None:
        return data, [t[keep] for t in tensors]
    return Subset(data, keep.tolist()), tensors


def build(data: Any, bs: int, shuffle: bool, train: bool, drop_last: bool, extra: dict[str, Any],
          s: Settings, dev: torch.device, seed: int, applied: Applied,
          collective: Alone) -> DeviceBatches | LoaderBatches:
    """`ctx.loader`'s batches per the trial's settings `s` (what could not apply noted in the ledger, `applied`)."""
    tensors = as_tensors(data)
    if train and s["data_fraction"] < 1.0:
        data, tensors = _fraction(data, tensors, s["data_fraction"], seed)
    channels_last = s["channels_last"]
    if channels_last and train:
        x = tensors[0] if tensors is not None else None
        if x is not None and x.ndim != 4:
            applied.cannot("channels_last", f"inputs are not 4-D images (shape {tuple(x.shape[1:])})", first=True)
    shard = None
    if train:  # several devices: this rank's part of every global batch (None in one process)
        shard = collective.shard(lambda: len(tensors[0]) if tensors is not None else length(data),
                                 tensors is None and isinstance(data, IterableDataset), bs, seed, shuffle, drop_last)
    if tensors is not None and s["data_on_device"] and not extra:
        return DeviceBatches(tensors, bs, dev, channels_last, seed, shuffle, drop_last, shard)
    if s["data_on_device"] and train:
        applied.cannot("data_on_device", ("the data is a Dataset, not tensors: batches come from a DataLoader"
                                            if tensors is None else "DataLoader arguments were given to ctx.loader"))
    dataset = TensorDataset(*tensors) if tensors is not None else data
    if drop_last and shard is None and not isinstance(dataset, IterableDataset) and _shorter(dataset, bs):
        drop_last = False  # a batch larger than the data: its one short batch is the epoch, not none (as DeviceBatches)
    return LoaderBatches(dataloader(dataset, bs, shuffle, drop_last, extra, s, dev, seed, applied, shard),
                         dev, channels_last)


def _shorter(dataset: Any, bs: int) -> bool:
    try:
        return len(dataset) < bs
    except TypeError:
        return False


def dataloader(dataset: Any, bs: int, shuffle: bool, drop_last: bool, extra: dict[str, Any], s: Settings,
               dev: torch.device, seed: int, applied: Applied,
               shard: ShardedBatches | None = None) -> DataLoader[Any]:
    """A DataLoader with the trial's workers, pinned memory and prefetch (`extra`: the fit's own arguments)."""
    kwargs: dict[str, Any] = {"batch_size": bs, "num_workers": s["num_workers"],
                              "pin_memory": s["pin_memory"] and dev.type == "cuda", "drop_last": drop_last}
    if shard is not None:  # this rank's indices of each global batch
        del kwargs["batch_size"], kwargs["drop_last"]
        kwargs["batch_sampler"] = shard
    elif isinstance(dataset, IterableDataset):
        if shuffle:
            applied.cannot("shuffle", "an IterableDataset is read in its own order", first=True)
    else:
        kwargs["shuffle"] = shuffle
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    if s["num_workers"] > 0:  # DataLoader rejects these two without workers
        kwargs["prefetch_factor"] = s["prefetch_factor"]
        kwargs["persistent_workers"] = bool(s["persistent_workers"])
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # (a forked worker: no CUDA context)
            kwargs["multiprocessing_context"] = "spawn"
    kwargs.update(extra)
    return DataLoader(dataset, **kwargs)


__all__ = ["Batches", "DeviceBatches", "LoaderBatches", "as_tensors", "build", "fraction_indices"]
