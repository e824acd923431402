"""The names of every registry's entries, as plain data.

The schema and the settings catalogue check a run file's names against these tuples without importing the
registries (they live above, next to their builders: samplers, pruners, datasets, models, optimizers,
schedules, inits, compression). tests/spec_tests/test_names.py keeps each tuple equal to its registry.
"""

from __future__ import annotations

SAMPLER_NAMES = ("tpe", "random", "gp", "cmaes", "nsga2", "qmc", "grid")
PRUNER_NAMES = ("none", "median", "percentile", "successive_halving", "hyperband", "threshold", "wilcoxon", "pareto",
                "pareto_asha")
DATASET_NAMES = ("digits", "synthetic", "npz", "image_folder", "cifar10", "cifar100", "diabetes", "mnist1d")
MODEL_NAMES = ("cnn", "cnn1d", "mlp", "resnet", "torchvision", "timm")
OPTIMIZER_NAMES = ("sgd", "sgd_nesterov", "adam", "adamw", "rmsprop")
SCHEDULE_NAMES = ("constant", "cosine", "onecycle")
INIT_NAMES = ("default", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal")
QUANTIZER_NAMES = ("none", "dynamic_int8", "static_int8", "bf16", "fp16")
PRUNE_METHOD_NAMES = ("none", "l1_unstructured", "ln_structured")
FREEZER_NAMES = ("none", "features", "all_but_head")
