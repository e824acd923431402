"""Pruning a trained model: masks, making them permanent, and cutting zeroed channels out.

`l1_unstructured`: global magnitude over every conv/linear weight. `ln_structured`: whole conv channels
and linear rows, L2 norm, per layer, never the classifier's rows; `shrink` then cuts the zeroed channels
out of an `nn.Sequential` net (the built-in cnn and mlp), so the model really is smaller and faster.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.nn.utils import prune as torch_prune

from autotune.core import lookup

WEIGHTED = (nn.modules.conv._ConvNd, nn.Linear)
# layers `shrink` can follow: every activation here maps 0 to 0, pooling, dropout and flatten keep a zero a zero
SHRINKABLE = (nn.modules.conv._ConvNd, nn.Linear, nn.modules.batchnorm._BatchNorm, nn.ReLU, nn.ReLU6,
              nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Dropout, nn.Identity, nn.MaxPool1d, nn.MaxPool2d,
              nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten)


def _prunable(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, WEIGHTED)]


def _no_pruning(model: nn.Module, amount: float) -> list[nn.Module]:
    return []


def _l1_unstructured(model: nn.Module, amount: float) -> list[nn.Module]:
    layers = _prunable(model)
    torch_prune.global_unstructured([(m, "weight") for m in layers], pruning_method=torch_prune.L1Unstructured,
                                    amount=amount)
    return layers


def _ln_structured(model: nn.Module, amount: float) -> list[nn.Module]:
    layers = _prunable(model)
    pruned: list[nn.Module] = []
    head = layers[-1] if layers and isinstance(layers[-1], nn.Linear) else None
    for m in layers:
        if m is head:  # its rows are the classes
            continue
        n_out = m.weight.shape[0]
        k = min(int(round(amount * n_out)), n_out - 1)  # keep at least one channel
        if k < 1:
            continue
        torch_prune.ln_structured(m, "weight", amount=k, n=2, dim=0)
        if m.bias is not None:  # a zero channel must output exactly zero, so it can be cut out
            torch_prune.custom_from_mask(m, "bias", m.weight_mask.flatten(1)[:, 0])
        pruned.append(m)
    _mask_following_norms(model, pruned)
    return pruned


# The prune_method registry: name -> (model, amount) -> the modules it attached masks to; the settings
# catalogue's allowed prune_method names are its keys.
PRUNE_METHODS: dict[str, Callable[[nn.Module, float], list[nn.Module]]] = {
    "none": _no_pruning, "l1_unstructured": _l1_unstructured, "ln_structured": _ln_structured,
}


def prune_model(model: nn.Module, method: str, amount: float) -> list[nn.Module]:
    """Attach pruning masks (not yet permanent); returns the pruned modules (for `make_permanent`)."""
    prune = lookup(PRUNE_METHODS, method, None, "prune_method", "prune_method")
    return prune(model, amount) if amount > 0 else []


def _mask_following_norms(model: nn.Module, pruned: list[nn.Module]) -> None:
    """A batch norm after a pruned conv gets the channel mask on its affine weight and bias.

    Without it a zeroed conv channel still leaves BN's shift (a constant map), and cutting the
    channel out would change the network's output.
    """
    for seq in (m for m in model.modules() if isinstance(m, nn.Sequential)):
        children = list(seq.children())
        for a, b in zip(children, children[1:]):
            if a in pruned and isinstance(b, nn.modules.batchnorm._BatchNorm) and b.affine:
                mask = a.weight_mask.flatten(1)[:, 0].clone()
                torch_prune.custom_from_mask(b, "weight", mask)
                torch_prune.custom_from_mask(b, "bias", mask.clone())
                pruned.append(b)


def make_permanent(modules: Iterable[nn.Module]) -> None:
    """`prune.remove`: fold each mask into its tensor and drop the hooks and `*_orig` copies."""
    for m in modules:
        for name in ("weight", "bias"):
            if torch_prune.is_pruned(m) and hasattr(m, f"{name}_mask"):
                torch_prune.remove(m, name)


# ---------------------------------------------------------------- cutting zeroed channels out


def shrink(model: nn.Module, sample: torch.Tensor) -> nn.Module | None:
    """A copy of an `nn.Sequential` net with its all-zero output channels/rows cut out (and the inputs
    downstream that read them), or None if there is nothing to cut or the net is not one this can follow.

    Exact: a removed channel outputs zero (its weight, bias and BN affine are zero), and zero stays
    zero through ReLU, pooling, dropout and flatten; the copy's outputs are checked against the
    original's on `sample` before it is returned.
    """
    if not isinstance(model, nn.Sequential) or not all(isinstance(c, SHRINKABLE) for c in model.children()):
        return None
    original = model
    model = copy.deepcopy(model)
    children = list(model.children())
    flat_in = _flatten_inputs(model, children, sample)
    weighted = [i for i, c in enumerate(children) if isinstance(c, WEIGHTED)]
    if not weighted:
        return None
    changed = False
    keep: torch.Tensor | None = None  # kept feature indices flowing out of the last weighted layer
    with torch.no_grad():
        for idx, c in enumerate(children):
            if isinstance(c, WEIGHTED):
                if keep is not None and not _cut_inputs(c, keep):  # inputs the previous layer removed
                    return None
                if idx == weighted[-1]:
                    break  # the classifier keeps every output
                keep = _cut_outputs(c)
                changed = changed or keep is not None
            elif keep is not None and isinstance(c, nn.modules.batchnorm._BatchNorm):
                _cut_norm(c, keep)
            elif keep is not None and isinstance(c, nn.Flatten):
                keep = _flattened(keep, flat_in.get(idx, (len(keep),)))
    if not changed or not _same_outputs(original, model, sample):
        # nothing cut, or something in the net does not keep a zero channel at zero: stay with the masked model
        return None
    return model


def _flatten_inputs(model: nn.Module, children: list[nn.Module], sample: torch.Tensor) -> dict[int, tuple[int, ...]]:
    """The shape (without the batch) entering each Flatten, by child index, from one forward pass."""
    flat_in: dict[int, tuple[int, ...]] = {}
    hooks = [c.register_forward_hook(lambda mod, i, o, idx=idx: flat_in.__setitem__(idx, tuple(i[0].shape[1:])))
             for idx, c in enumerate(children) if isinstance(c, nn.Flatten)]
    with torch.no_grad():
        was = model.training
        model.eval()
        model(sample[:2])
        model.train(was)
    for h in hooks:
        h.remove()
    return flat_in


def _cut_inputs(c: nn.Module, keep: torch.Tensor) -> bool:
    """Keep only the `keep` input features of a conv or linear layer; False for a grouped conv (not followed)."""
    if isinstance(c, nn.Linear):
        c.weight = nn.Parameter(c.weight[:, keep].clone())
        c.in_features = len(keep)
        return True
    if c.groups != 1:
        return False
    c.weight = nn.Parameter(c.weight[:, keep].clone())
    c.in_channels = len(keep)
    return True


def _cut_outputs(c: nn.Module) -> torch.Tensor | None:
    """Cut a conv's or linear layer's all-zero output channels/rows out; the kept indices, or None if none was cut."""
    rows = c.weight.flatten(1).abs().sum(1)
    if c.bias is not None:
        rows = rows + c.bias.abs()
    alive = torch.nonzero(rows > 0).flatten()
    if len(alive) == 0:  # keep one channel; index tensors live where the weights do (cuda too)
        alive = torch.zeros(1, dtype=torch.long, device=rows.device)
    if len(alive) == c.weight.shape[0]:
        return None
    c.weight = nn.Parameter(c.weight[alive].clone())
    if c.bias is not None:
        c.bias = nn.Parameter(c.bias[alive].clone())
    if isinstance(c, nn.Linear):
        c.out_features = len(alive)
    else:
        c.out_channels = len(alive)
    return alive


def _cut_norm(c: nn.modules.batchnorm._BatchNorm, keep: torch.Tensor) -> None:
    """A batch norm after a cut layer keeps the same channels (affine parameters and running statistics)."""
    if c.affine:
        c.weight = nn.Parameter(c.weight[keep].clone())
        c.bias = nn.Parameter(c.bias[keep].clone())
    if c.running_mean is not None:
        c.running_mean = c.running_mean[keep].clone()
        c.running_var = c.running_var[keep].clone()
    c.num_features = len(keep)


def _flattened(keep: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Kept channels of a (C, *spatial) input as the kept features of its flattened (C x spatial) output."""
    spatial = 1
    for d in shape[1:]:
        spatial *= d
    return (keep[:, None] * spatial + torch.arange(spatial, device=keep.device)[None, :]).flatten()


def _same_outputs(original: nn.Module, model: nn.Module, sample: torch.Tensor) -> bool:
    """The shrunk copy computes what the original does on `sample`, in eval mode."""
    with torch.no_grad(), torch.autocast(sample.device.type, enabled=False):  # compared in fp32, not a caller's bf16
        was = original.training
        original.eval()
        model.eval()
        ref, out = original(sample), model(sample)
        original.train(was)
        model.train(was)
    return torch.allclose(ref, out, rtol=1e-4, atol=1e-4 * float(ref.abs().max().clamp(min=1)))
