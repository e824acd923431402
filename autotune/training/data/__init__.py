"""Datasets: the registry (registry.py: `DATASETS`, `load`, a user's `factory`), the array sources, image folders
and CIFAR, the train/validation split (dataset.py: `Dataset`), augmentation on the device (augment.py)."""

from __future__ import annotations

from autotune.training.data import augment
from autotune.training.data.dataset import Dataset
from autotune.training.data.registry import DATASETS, factory_kwargs, load

__all__ = ["DATASETS", "Dataset", "augment", "factory_kwargs", "load"]
