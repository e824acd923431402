"""autotune.compress, by submodule (support, transfer, prune, quantize, measure, pipeline): each method really
changes the model and keeps it usable; the teacher really teaches; the metrics reach the study."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml
from torch import nn

import autotune
from autotune import config, fit
from autotune.compress import measure, prune, quantize, support, transfer
from autotune.core.errors import ConfigError
from autotune.search import results
from autotune.training import models, tasks
from autotune.training.data import registry as data

ROOT = Path(__file__).resolve().parents[2]
SMALL_MODEL = {"name": "cnn", "channels": [8, 16], "hidden": 32}


def _cfg(tmp_path: Path, **sections: Any) -> config.RunConfig:
    raw: dict[str, Any] = {
        "study": {"name": "t", "storage": f"sqlite:///{tmp_path / 't.db'}", "n_trials": 2, "sampler": "grid"},
        "objectives": ["val_accuracy", "inference_latency_ms"],
        "data": {"name": "digits"},
        "model": SMALL_MODEL,
        # one thread: on a shared 2-core machine two-thread torch runs several times slower
        "train": {"device": "cpu", "epochs": 2, "lr": 0.01, "infer_batch_size": 64, "cpu_threads": 1},
    }
    for key, value in sections.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and key in raw and key != "space" else value
    src = tmp_path / "t.yaml"
    src.write_text(yaml.safe_dump(raw))
    return config.load(src)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, data.Dataset]:
    """A small CNN trained on digits for 3 epochs (shared by the unit tests, which work on copies)."""
    cfg = _cfg(tmp_path_factory.mktemp("trained"), train={"epochs": 3})
    res = autotune.train(cfg)
    assert res.model is not None
    return res.model.eval(), data.load(cfg.data, cfg.source)


def _acc(model: nn.Module, ds: data.Dataset) -> float:
    return measure.val_metrics(model, ds, ds.x_val, ds.y_val, 512, torch.device("cpu"))["val_accuracy"]


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


# ---------------------------------------------------------------- support: what can run where


def test_unsupported_fixed_combinations_are_config_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"train\.qat: .*needs quantize static_int8"):
        fit.preflight(_cfg(tmp_path, train={"qat": True}))
    with pytest.raises(ConfigError, match=r"train\.freeze: freeze needs model\.checkpoint"):
        fit.preflight(_cfg(tmp_path, train={"freeze": "all_but_head"}))
    with pytest.raises(ConfigError, match=r"train\.qat: qat with l1_unstructured"):
        fit.preflight(_cfg(tmp_path, train={"qat": True, "quantize": "static_int8", "prune_method": "l1_unstructured",
                                              "prune_amount": 0.5}))
    monkeypatch.setattr(quantize, "quantized_engine", lambda: None)
    with pytest.raises(ConfigError, match=r"train\.quantize: static_int8 needs a quantized engine"):
        fit.preflight(_cfg(tmp_path, train={"quantize": "static_int8"}))


def test_unsupported_sampled_combination_is_a_pruned_trial(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"space\.qat: .*needs quantize static_int8"):  # nothing could run
        fit.preflight(_cfg(tmp_path, space={"qat": {"type": "categorical", "choices": [True]}}))
    cfg = _cfg(tmp_path, space={"qat": {"type": "bool"}})
    fit.preflight(cfg)  # qat false can run: not an error up front
    res = autotune.run(cfg)
    by_qat = {t.params["qat"]: t for t in res.study.trials}
    assert by_qat[False].state == optuna.trial.TrialState.COMPLETE
    assert by_qat[True].state == optuna.trial.TrialState.PRUNED
    assert by_qat[True].user_attrs["stop_reason"] == "unsupported"
    assert "needs quantize static_int8" in by_qat[True].user_attrs["stop_detail"]


# ---------------------------------------------------------------- transfer: checkpoints, freeze, distillation


def test_checkpoint_warm_start_freeze_and_save_model(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, study={"n_trials": 1})
    autotune.run(cfg)
    ckpt = tmp_path / "best.pt"
    from autotune.cli import app as cli

    args = ["best", str(tmp_path / "t.yaml"), "--save-model", str(ckpt)]
    assert cli.main(args) == 0
    state = torch.load(ckpt, weights_only=True)
    ds = data.load(cfg.data, cfg.source)
    fresh = models.build(cfg.model, ds.input_shape, ds.n_classes, 0.0, "default")
    transfer.load_checkpoint(fresh, str(ckpt), cfg.source, "none")
    for k, v in fresh.state_dict().items():
        torch.testing.assert_close(v, state[k])
    assert _acc(fresh, ds) > 0.8  # a trained model, not a fresh one

    # warm start with the features frozen: conv weights come through training unchanged
    warm = _cfg(tmp_path, model={"checkpoint": str(ckpt)}, train={"freeze": "features", "epochs": 1})
    r = autotune.train(warm)
    torch.testing.assert_close(r.model[0].weight.detach(), state["0.weight"])
    assert not torch.equal(r.model[-1].weight.detach(), state[f"{len(r.model) - 1}.weight"])
    assert r.history[0].val_accuracy > 0.8  # starts where the checkpoint left off


def test_checkpoint_mismatch_names_the_layers(tmp_path: Path) -> None:
    other = models.build(config.ModelConfig(name="cnn", channels=(4, 16), hidden=32), (1, 8, 8), 10, 0.0, "default")
    state = other.state_dict()
    del state["12.bias"]
    torch.save(state, tmp_path / "other.pt")
    cfg = _cfg(tmp_path, model={"checkpoint": str(tmp_path / "other.pt")})
    with pytest.raises(ConfigError, match=r"model\.checkpoint: .*missing 12\.bias.*shape mismatch 0\.weight "
                                          r"\(checkpoint \[4, 1, 3, 3\], model \[8, 1, 3, 3\]\)"):
        autotune.train(cfg)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match=r"model\.checkpoint: cannot read .*junk\.pt as a state dict: "):
        autotune.train(_cfg(tmp_path, model={"checkpoint": str(tmp_path / "junk.pt")}))


def _teacher(logits: torch.Tensor) -> nn.Module:
    """A stand-in teacher whose outputs are `logits`, whatever its input."""

    class Fixed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return logits

    return Fixed()


def test_distill_loss_mixes_labels_with_the_teachers_softened_predictions() -> None:
    torch.manual_seed(0)
    xb, student = torch.randn(6, 5), torch.randn(6, 4, requires_grad=True)
    teacher_a, teacher_b = torch.randn(6, 4), torch.randn(6, 4)
    label_loss = nn.functional.cross_entropy(student, torch.tensor([0, 1, 2, 3, 0, 1]))
    cfg = config.DistillConfig(teacher="x", alpha=0.7, temperature=4.0)
    loss_a = transfer.distill_loss(label_loss, student, _teacher(teacher_a), xb, cfg)
    # Hinton et al., written out: KL(p_teacher || p_student) at T, averaged over the batch, times T^2
    p, log_q = torch.softmax(teacher_a / 4, 1), torch.log_softmax(student / 4, 1)
    kd = (p * (p.log() - log_q)).sum(1).mean() * 16
    torch.testing.assert_close(loss_a, 0.3 * label_loss + 0.7 * kd)
    # the teacher decides the loss: another teacher gives another one; one that agrees with the student adds nothing
    other = transfer.distill_loss(label_loss, student, _teacher(teacher_b), xb, cfg)
    assert abs(other.item() - loss_a.item()) > 1e-3
    agreeing = transfer.distill_loss(label_loss, student, _teacher(student.detach()), xb, cfg)
    torch.testing.assert_close(agreeing, 0.3 * label_loss)
    torch.testing.assert_close(transfer.distill_loss(label_loss, student, _teacher(teacher_a), xb,
                                                     cfg.model_copy(update={"alpha": 0.0})), label_loss)
    loss_a.backward()  # the gradient reaches the student only
    assert student.grad is not None and float(student.grad.abs().sum()) > 0


def test_distillation_trains_a_student_from_the_teacher_alone(tmp_path: Path) -> None:
    """alpha 1: the student never sees a label, so what it learns is what the teacher knows. A trained teacher
    makes a working classifier of it; an untrained teacher of the same shape leaves it guessing."""
    teacher_arch = {"name": "cnn", "channels": [16, 32], "hidden": 64}
    teacher = autotune.train(_cfg(tmp_path, model=teacher_arch, train={"epochs": 3}))
    torch.save(teacher.model.state_dict(), tmp_path / "teacher.pt")
    torch.manual_seed(0)
    untrained = models.build(config.ModelConfig(**teacher_arch), (1, 8, 8), 10, 0.0, "default")
    torch.save(untrained.state_dict(), tmp_path / "untrained.pt")
    student = {"channels": [4, 8], "hidden": 16}

    def distilled(name: str) -> float:
        return autotune.train(_cfg(tmp_path, model=student, distill={
            "teacher": str(tmp_path / name), "teacher_model": teacher_arch, "alpha": 1.0,
            "temperature": 4.0})).val_accuracy

    assert teacher.val_accuracy > 0.9
    assert distilled("teacher.pt") > 0.6
    assert distilled("untrained.pt") < 0.4
    with pytest.raises(ConfigError, match=r"distill\.teacher: .*shape mismatch 0\.weight"):
        autotune.train(_cfg(tmp_path, model=student, distill={"teacher": str(tmp_path / "teacher.pt")}))
    with pytest.raises(ConfigError, match=r"distill\.teacher: no such file"):
        autotune.train(_cfg(tmp_path, distill={"teacher": str(tmp_path / "missing.pt")}))
    with pytest.raises(ConfigError, match=r"distill\.alpha"):
        _cfg(tmp_path, distill={"teacher": "x", "alpha": 1.5})


def test_distill_from_the_best_trial_of_another_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.core.errors import ConfigError as _CE
    from tests.support import tiny

    monkeypatch.chdir(tmp_path)  # the teacher file goes to studies/ under the working directory
    student = {"model": {"name": "cnn", "channels": [8], "hidden": 16}, "study": {"name": "student", "n_trials": 1},
               "train": {"epochs": 3, "lr": 3e-3}}
    with pytest.raises(_CE, match=r"distill\.teacher: best needs a completed trial in study 'big'"):
        autotune.run(tiny(tmp_path, **student, distill={"teacher": "best", "teacher_study": "big"}))
    assert "student" not in optuna.get_all_study_names(f"sqlite:///{tmp_path}/t.db")  # nothing half-written
    teacher = autotune.run(tiny(tmp_path, study={"name": "big", "n_trials": 1}, train={"epochs": 4}))
    # alpha 1: the student sees no label, so what it learns is the best trial's knowledge (chance is 0.1; an
    # untrained teacher leaves it there, as test_distillation_trains_a_student_from_the_teacher_alone shows)
    res = autotune.run(tiny(tmp_path, **student, distill={"teacher": "best", "teacher_study": "big", "alpha": 1.0}))
    assert (tmp_path / "studies" / "big-teacher.pt").is_file()
    t = res.study.trials[-1]
    assert teacher.best is not None and teacher.best.values["val_accuracy"] > 0.5
    assert t.state.name == "COMPLETE" and t.user_attrs["val_accuracy"] > 0.3


# ---------------------------------------------------------------- prune


def test_l1_unstructured_zeroes_the_smallest_weights_for_good(trained: tuple[nn.Module, data.Dataset]) -> None:
    model, ds = copy.deepcopy(trained[0]), trained[1]
    total = sum(w.numel() for w in _weights(model))
    before = measure.params_nonzero(model)
    layers = prune.prune_model(model, "l1_unstructured", 0.5)
    prune.make_permanent(layers)
    zeros = sum(int((w == 0).sum()) for w in _weights(model))
    assert zeros == pytest.approx(total * 0.5, abs=1)
    assert measure.params_nonzero(model) == pytest.approx(before - total * 0.5, abs=2)
    # permanent: no masks, no *_orig copies, no hooks left
    assert not any(torch.nn.utils.prune.is_pruned(m) for m in model.modules())
    assert not any(k.endswith(("_orig", "_mask")) for k in model.state_dict())
    assert _acc(model, ds) > 0.5  # still a working classifier


def test_ln_structured_cuts_channels_out_exactly(trained: tuple[nn.Module, data.Dataset]) -> None:
    model, ds = copy.deepcopy(trained[0]), trained[1]
    size_before = measure.model_size_bytes(model)
    layers = prune.prune_model(model, "ln_structured", 0.5)
    prune.make_permanent(layers)
    small = prune.shrink(model, ds.x_val[:64])
    assert small is not None
    convs = [m for m in small.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [4, 8]
    assert convs[1].in_channels == 4
    linears = [m for m in small.modules() if isinstance(m, nn.Linear)]
    assert linears[0].out_features == 16 and linears[-1].out_features == 10  # classes untouched
    assert measure.model_size_bytes(small) < 0.5 * size_before
    with torch.no_grad():  # cutting zero channels out changes nothing
        torch.testing.assert_close(small(ds.x_val), model(ds.x_val), rtol=1e-4, atol=1e-4)


def _conv_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 2 * 2, 32), nn.ReLU(), nn.Linear(32, 10)).eval()


@pytest.mark.parametrize("case", ["half", "all_of_one_layer"])
def test_shrink_makes_its_index_tensors_where_the_weights_are(case: str) -> None:
    """On CUDA an index made without `device=` (torch.arange(n), torch.tensor([0])) lands on the CPU and fails
    against CUDA weights. A CPU has no second device, so the default device is made `meta` while the weights stay
    on the CPU: any tensor shrink creates without naming the weights' device is then on meta and fails the same way."""
    model, x = _conv_net(), torch.randn(64, 1, 8, 8)
    if case == "half":  # a Flatten follows the last pruned conv: its kept inputs are expanded with an arange
        prune.make_permanent(prune.prune_model(model, "ln_structured", 0.5))
        widths = [4, 8]
    else:  # every channel of the second conv (and its BN) zero: shrink keeps one channel, index made from scratch
        with torch.no_grad():
            for t in (model[4].weight, model[4].bias, model[5].weight, model[5].bias):
                t.zero_()
        widths = [8, 1]
    with torch.device("meta"):
        small = prune.shrink(model, x)
    assert small is not None
    assert [m.out_channels for m in small.modules() if isinstance(m, nn.Conv2d)] == widths
    assert all(p.device.type == "cpu" for p in small.parameters())
    with torch.no_grad():
        torch.testing.assert_close(small(x), model(x), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- quantize


def test_dynamic_int8_quantizes_linear_weights(trained: tuple[nn.Module, data.Dataset]) -> None:
    model, ds = copy.deepcopy(trained[0]), trained[1]
    q = quantize.quantize_dynamic(model)
    qlinears = [m for m in q.modules() if type(m).__name__ == "Linear" and "dynamic" in type(m).__module__]
    assert len(qlinears) == 2 and qlinears[0].weight().dtype == torch.qint8
    assert measure.model_size_bytes(q) < measure.model_size_bytes(trained[0])
    assert abs(_acc(q, ds) - _acc(trained[0], ds)) <= 0.03


def test_static_int8_quantizes_conv_and_linear(trained: tuple[nn.Module, data.Dataset]) -> None:
    model, ds = copy.deepcopy(trained[0]), trained[1]
    q = quantize.quantize_static(model, [ds.x_train[i: i + 128] for i in range(0, 512, 128)])
    kinds = {type(m).__name__ for m in q.modules()}
    assert "ConvReLU2d" in kinds and "LinearReLU" in kinds and "Linear" in kinds  # fused, quantized modules
    qconv = next(m for m in q.modules() if type(m).__name__ == "ConvReLU2d")
    assert qconv.weight().dtype == torch.qint8
    assert measure.model_size_bytes(q) < 0.75 * measure.model_size_bytes(trained[0])  # tiny model: headers weigh
    assert abs(_acc(q, ds) - _acc(trained[0], ds)) <= 0.03


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_casts_change_dtype_and_halve_size(trained: tuple[nn.Module, data.Dataset], mode: str) -> None:
    if support.cast_error("cpu", mode) is not None:
        pytest.skip(f"{mode} does not run on this CPU")
    model, ds = copy.deepcopy(trained[0]), trained[1]
    cast = quantize.quantize_model(model, mode, False, lambda: [], torch.device("cpu"))  # the trainer's path
    assert all(p.dtype == quantize.CAST_DTYPES[mode] for p in cast.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in cast.parameters())
    assert param_bytes == sum(p.numel() * 4 for p in trained[0].parameters()) // 2
    assert measure.model_size_bytes(cast) < 0.75 * measure.model_size_bytes(trained[0])  # tiny model: headers
    assert abs(_acc(cast, ds) - _acc(trained[0], ds)) <= 0.03
    assert measure.latency_ms(cast, ds.x_val, 32, torch.device("cpu"), warmup=1, repeats=3) > 0


def test_qat_fine_tunes_with_fake_quant_and_converts_to_int8(tmp_path: Path) -> None:
    r = autotune.train(_cfg(tmp_path, train={"epochs": 3}), params={"qat": True, "quantize": "static_int8",
                                                                     "prune_method": "ln_structured",
                                                                     "prune_amount": 0.25})
    assert r.extra["finetune_time_s"] > 0 and r.extra["pruned_shrunk"] is True
    qconv = next(m for m in r.compressed_model.modules() if type(m).__name__ == "ConvReLU2d")
    assert qconv.weight().dtype == torch.qint8 and qconv.out_channels == 6  # shrunk 8 -> 6, then int8
    assert r.val_accuracy > 0.8


def test_qat_fine_tunes_in_fp32_whatever_the_trial_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's fused fake-quantize kernels take fp32 only: under bf16 autocast they fail (on CUDA, and on this CPU
    too: "expected scalar type Float but found BFloat16"). A bf16 trial's QAT fine-tune runs without autocast."""
    seen: list[bool] = []
    real = quantize.prepare_qat

    def spy(model: nn.Module) -> nn.Module:
        q = real(model)
        q.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
        return q

    monkeypatch.setattr(quantize, "prepare_qat", spy)
    r = autotune.train(_cfg(tmp_path, train={"epochs": 2}), params={"precision": "bf16", "qat": True,
                                                                     "quantize": "static_int8"})
    assert r.precision == "bf16" and r.extra["finetune_time_s"] > 0
    assert seen and not any(seen)  # every fake-quant forward of the fine-tune ran in fp32
    assert any(type(m).__name__ == "ConvReLU2d" for m in r.compressed_model.modules())  # converted to int8
    assert r.val_accuracy > 0.5


# ---------------------------------------------------------------- measure


def test_val_metrics_are_the_trainers_on_the_inference_device(trained: tuple[nn.Module, data.Dataset]) -> None:
    """The compressed model is scored by tasks.evaluate itself: an fp32 model gets exactly the trainer's figures;
    an int8 model (CPU only, fp32 inputs) and a bf16-cast one (bf16 inputs) are fed as deployed."""
    model, ds = copy.deepcopy(trained[0]), trained[1]
    cpu = torch.device("cpu")
    assert measure.val_metrics(model, ds, ds.x_val, ds.y_val, 128, cpu) == \
        tasks.evaluate(model, ds, ds.x_val, ds.y_val, 128, cpu)
    q = quantize.quantize_dynamic(copy.deepcopy(model))
    assert measure.input_dtype(q) == torch.float32
    metrics = measure.val_metrics(q, ds, ds.x_val, ds.y_val, 128, cpu)
    assert set(metrics) == {"val_loss", "val_accuracy"} and metrics["val_accuracy"] > 0.8
    if support.cast_error("cpu", "bf16") is None:
        cast = copy.deepcopy(model).to(torch.bfloat16)
        assert measure.input_dtype(cast) == torch.bfloat16
        assert measure.val_metrics(cast, ds, ds.x_val, ds.y_val, 128, cpu)["val_accuracy"] > 0.8


def test_params_nonzero_counts_int8_weights_by_their_integers() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        model[0].weight[0].zero_()  # 4 zeros
    assert measure.params_nonzero(model) == (12 - 4) + 3 + 6 + 2
    q = quantize.quantize_dynamic(copy.deepcopy(model))
    assert measure.params_nonzero(q) == measure.params_nonzero(model)  # a zero weight stays an integer zero


# ---------------------------------------------------------------- pipeline: through the trainer and the study


def test_trainer_reports_compression_metrics(tmp_path: Path) -> None:
    """Structured pruning + static int8 through autotune.train: smaller, fewer weights, still accurate."""
    cfg = _cfg(tmp_path)
    base = autotune.train(cfg)
    small = autotune.train(cfg, params={"prune_method": "ln_structured", "prune_amount": 0.5, "finetune_epochs": 1,
                                        "quantize": "static_int8"})
    for r in (base, small):
        assert {"model_size_bytes", "inference_latency_ms", "params_nonzero",
                "val_accuracy_before_compress"} <= set(r.metrics())
        assert r.extra["inference_latency_ms"] > 0
    assert base.val_accuracy == base.extra["val_accuracy_before_compress"]  # nothing compressed
    assert small.extra["pruned_shrunk"] is True
    assert small.extra["model_size_bytes"] < 0.6 * base.extra["model_size_bytes"]  # tiny model: headers weigh
    assert small.extra["params_nonzero"] < 0.4 * base.extra["params_nonzero"]
    assert small.val_accuracy > 0.8
    qconv = next(m for m in small.compressed_model.modules() if type(m).__name__ == "ConvReLU2d")
    assert qconv.weight().dtype == torch.qint8


def test_fine_tuning_reads_only_the_settings_it_uses(tmp_path: Path) -> None:
    """Fine-tuning after pruning builds its context from the plan's settings: a copy of the watched ctx.settings
    counted every setting of the trial as read (the ledger's not_applied then hid what a trial never applied)."""
    from autotune.fit.plan import TrialPlan
    from autotune.fit.trainer import BuiltinFit
    from autotune.training import TrialContext

    cfg = _cfg(tmp_path)
    settings = {**cfg.fixed(), "epochs": 1, "batch_size": 128}
    plan = TrialPlan.of(cfg, settings, 0, fixed=frozenset(), study_rules=False).training
    builtin = BuiltinFit(plan)
    builtin.ds = ds = data.load(cfg.data, cfg.source)
    ctx = TrialContext(plan)
    ledger = ctx._state.applied
    assert not ledger.was_read("momentum") and not ledger.was_read("weight_decay")
    spent = builtin.finetune(ctx, models.build(cfg.model, ds.input_shape, ds.n_classes, 0.0, "default"), 1)
    assert spent > 0
    assert ledger.was_read("lr") and ledger.was_read("precision")  # what fine-tuning takes from the trial
    assert not ledger.was_read("momentum") and not ledger.was_read("weight_decay")


def test_half_magnitude_pruning_with_finetune_keeps_accuracy(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, model={"channels": [16, 32], "hidden": 64}, train={"epochs": 4, "lr": 0.005})
    r = autotune.train(cfg, params={"prune_method": "l1_unstructured", "prune_amount": 0.5, "finetune_epochs": 1})
    unpruned = r.extra["val_accuracy_before_compress"]
    assert unpruned > 0.9
    assert r.val_accuracy >= unpruned - 0.02
    nonzero_weights = sum(int(torch.count_nonzero(w)) for w in _weights(r.compressed_model))
    assert nonzero_weights <= 0.5 * sum(w.numel() for w in _weights(r.compressed_model)) + 1


def test_accuracy_drop_constraint_marks_infeasible_trial(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, constraints={"max_accuracy_drop": 0.0},
               train={"prune_amount": 0.9},
               space={"prune_method": {"type": "categorical", "choices": ["none", "ln_structured"]}})
    res = autotune.run(cfg)
    by_method = {t.params["prune_method"]: t for t in res.study.trials}
    assert set(by_method) == {"none", "ln_structured"}
    pruned_t, plain_t = by_method["ln_structured"], by_method["none"]
    assert pruned_t.user_attrs["val_accuracy"] < pruned_t.user_attrs["val_accuracy_before_compress"]
    assert pruned_t.constraints["accuracy_drop"] > 0
    assert plain_t.constraints == {"accuracy_drop": 0.0}
    summaries = {s.number: s for s in res.trials()}
    assert summaries[pruned_t.number].feasible is False and summaries[plain_t.number].feasible is True
    assert summaries[pruned_t.number].row()["feasible"] is False
    # the front keeps feasible trials only, although the pruned model is faster
    front = results.pareto_front(res.study.trials, cfg.directions)
    assert [t.number for t in front] == [plain_t.number]


def test_compress_yaml_study_runs_end_to_end(tmp_path: Path) -> None:
    cfg = config.load(ROOT / "search_spaces" / "compress.yaml", overrides={
        "study.storage": f"sqlite:///{tmp_path / 'c.db'}", "study.n_trials": 4, "study.sampler": "random",
        "space.epochs": {"type": "int", "low": 1, "high": 2}, "model.channels": [8, 16], "model.hidden": 32,
        "train.cpu_threads": 1, "train.infer_batch_size": 64,
    })
    res = autotune.run(cfg)
    trials = res.study.trials
    assert len(trials) == 4
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert done
    for t in done:
        assert len(t.values) == 3
        assert t.values[1] == t.user_attrs["inference_latency_ms"] > 0
        assert t.values[2] == t.user_attrs["model_size_bytes"] > 0
        assert "accuracy_drop" in t.constraints
    assert res.best is not None


class _Residual(nn.Module):
    """A user model shrink cannot follow (a skip connection) and eager int8 cannot convert (a tensor `+`)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))
        h = h + torch.relu(self.conv2(h))
        return self.fc(h.flatten(1))


def residual_net(n_classes: int) -> nn.Module:
    return _Residual(n_classes)


def test_user_model_keeps_masked_zeros_and_unconvertible_int8_is_a_pruned_trial(tmp_path: Path) -> None:
    model = {"name": None, "factory": "tests.compress_tests.test_compress:residual_net"}
    r = autotune.train(_cfg(tmp_path, model=model), params={"prune_method": "ln_structured", "prune_amount": 0.5})
    assert r.extra["pruned_shrunk"] is False  # not a Sequential: masked zeros, same shapes
    assert r.compressed_model.conv1.weight.shape == (8, 1, 3, 3)
    assert int((r.compressed_model.conv1.weight.flatten(1).abs().sum(1) == 0).sum()) == 4
    assert r.val_accuracy > 0.1
    cfg = _cfg(tmp_path, model=model, study={"n_trials": 1},
               space={"quantize": {"type": "categorical", "choices": ["static_int8"]}})
    (t,) = autotune.run(cfg).study.trials
    assert t.state == optuna.trial.TrialState.PRUNED and t.user_attrs["stop_reason"] == "unsupported"
    assert t.user_attrs["stop_detail"].startswith("quantize static_int8: ")


# ---------------------------------------------------------------- the registries: every prune method and freeze mode


def _small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return models.build(config.ModelConfig(name="cnn", channels=(8, 16), hidden=16), (1, 8, 8), 3, 0.0, "default")


@pytest.mark.parametrize("method", prune.PRUNE_METHODS)
def test_every_prune_method_zeroes_weights(method: str) -> None:
    model = _small_cnn()
    layers = prune.prune_model(model, method, 0.5)
    prune.make_permanent(layers)
    zero = sum(int((m.weight == 0).sum()) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
    assert (zero > 0) == (method != "none") and (layers == []) == (method == "none")


@pytest.mark.parametrize("freeze", transfer.FREEZERS)
def test_every_freeze_mode_fixes_layers(freeze: str) -> None:
    model = _small_cnn()
    transfer.apply_freeze(model, freeze)
    fixed = [p for p in model.parameters() if not p.requires_grad]
    assert (len(fixed) > 0) == (freeze != "none")
    assert model[-1].weight.requires_grad  # the head always trains


def test_unknown_prune_method_and_freeze_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^<config>: prune_method: unknown prune_method 'l1'; allowed: "
                                          r"l1_unstructured, ln_structured, none$"):
        prune.prune_model(_small_cnn(), "l1", 0.5)
    with pytest.raises(ConfigError, match=r"^<config>: freeze: unknown freeze 'head'; allowed: all_but_head, "
                                          r"features, none$"):
        transfer.apply_freeze(_small_cnn(), "head")
