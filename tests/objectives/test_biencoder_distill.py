"""Cross-encoder -> bi-encoder distillation: the losses against hand computations, the config's refusals,
`stage:<name>` teachers in a pipeline, and a short Ray Train run whose teacher scores are cached on disk."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from lmplatform.config import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.objectives.biencoder_distill.objective import (
    TEACHER_SCORES,
    BiencoderDistillObjective,
    DistillCollator,
    DistillEvaluator,
    listwise_kl,
    margin_mse,
    prepare_data,
)
from lmplatform.objectives.run_config import load_run_config
from tests.conftest import TOKEN_WORDS

# Dyadic values: sums and differences of these are exact in float32, so "exactly 0" is a fair test.
TEACHER = torch.tensor([[4.0, 1.5, -2.0, 0.25], [-1.0, -3.5, 2.0, -1.0]])
PER_QUERY = torch.tensor([[0.5], [-8.0]])


def _margin_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    return margin_mse(student[:, 0], student[:, 1:], teacher[:, 0], teacher[:, 1:])


def test_margin_mse_is_zero_exactly_when_the_student_has_the_teachers_margins() -> None:
    assert float(_margin_mse(TEACHER + PER_QUERY, TEACHER)) == 0.0
    moved = (TEACHER + PER_QUERY).clone()
    moved[1, 2] += 1.0  # one negative 1 closer: one margin of the 6 off by 1
    assert float(_margin_mse(moved, TEACHER)) == pytest.approx(1 / 6)


def test_listwise_kl_is_zero_when_the_distributions_match_and_matches_its_formula() -> None:
    assert float(listwise_kl(TEACHER, TEACHER)) == 0.0
    assert float(listwise_kl(TEACHER + PER_QUERY, TEACHER)) == pytest.approx(0.0, abs=1e-6)  # softmax ignores a shift
    # student / 0.5 == teacher / 2 only when student == teacher / 4
    assert (float(listwise_kl(TEACHER / 4, TEACHER, student_temperature=0.5, teacher_temperature=2.0))
            == pytest.approx(0.0, abs=1e-6))
    student = torch.tensor([[0.3, 0.1, -0.2, 0.0], [0.0, 0.5, -0.5, 0.2]])
    p_t = torch.softmax(TEACHER / 2.0, dim=1)
    p_s = torch.softmax(student / 0.1, dim=1)
    by_hand = float((p_t * (p_t.log() - p_s.log())).sum(1).mean())
    assert float(listwise_kl(student, TEACHER, 0.1, 2.0)) == pytest.approx(by_hand, rel=1e-5) and by_hand > 0


def test_margin_mse_gradient_matches_a_hand_computation_and_gradcheck() -> None:
    student_pos = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    student_neg = torch.tensor([[0.5, 2.0], [-1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    teacher_pos = torch.tensor([3.0, 1.0], dtype=torch.float64)
    teacher_neg = torch.tensor([[1.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    margin_mse(student_pos, student_neg, teacher_pos, teacher_neg).backward()
    # residuals r = (s+ - s-) - (t+ - t-) = [[0.5-2, -1-2], [1-1, 0+1]] = [[-1.5, -3], [0, 1]]; loss = mean r^2 over 4
    # dL/ds+_b = (2/4) sum_n r_bn, dL/ds-_bn = -(2/4) r_bn
    assert student_pos.grad.tolist() == [-2.25, 0.5]
    assert student_neg.grad.tolist() == [[0.75, 1.5], [0.0, -0.5]]
    assert torch.autograd.gradcheck(margin_mse, (student_pos.detach().requires_grad_(), student_neg.detach().requires_grad_(),
                                                 teacher_pos, teacher_neg))
    assert torch.autograd.gradcheck(lambda s: listwise_kl(s, teacher_neg, 0.5, 2.0), (student_neg.detach().requires_grad_(),))


def _write_pairs(path: Path, n: int = 48, negatives: int = 2, short_every: int = 0) -> Path:
    rng = random.Random(0)
    with path.open("w") as handle:
        for i in range(n):
            words = rng.sample(TOKEN_WORDS, 4)
            document = words[:3] + [rng.choice(TOKEN_WORDS)]
            count = 1 if short_every and i % short_every == 0 else negatives
            hard = [" ".join(rng.sample(TOKEN_WORDS, 4)) for _ in range(count)]
            handle.write(json.dumps({"q": " ".join(words), "d": " ".join(document), "neg": hard}) + "\n")
    return path


def _overrides(tiny_bert: Path, pairs: Path, teacher: Path | str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=32",
        f"data.train_paths={pairs}", "data.query_field=q", "data.document_field=d", "data.hard_negative_field=neg",
        "data.validation_fraction=0.25",
        "objective.name=biencoder_distill", f"objective.teacher={teacher}", "objective.max_hard_negatives=2",
        "objective.teacher_max_seq_length=48", "objective.teacher_batch_size=16",
        "optim.lr=1e-3", "optim.warmup_ratio=0", "optim.batch_size=8", "scaling.cpus_per_worker=1",
        f"checkpoint.storage_path={tmp_path / 'runs'}", "tracking.experiment=tests", "tracking.register_model=false",
        *extra,
    ]


def test_a_config_without_hard_negatives_or_with_an_unknown_loss_is_refused(tiny_bert: Path, tmp_path: Path) -> None:
    pairs = _write_pairs(tmp_path / "pairs.jsonl")
    base = _overrides(tiny_bert, pairs, tiny_bert, tmp_path)
    with pytest.raises(ConfigError, match=r"biencoder_distill needs data\.hard_negative_field"):
        load_run_config(None, [o for o in base if not o.startswith("data.hard_negative_field")])
    with pytest.raises(ConfigError, match=r"objective\.loss: got 'mse'; Input should be 'margin_mse' or 'kl'"):
        load_run_config(None, base + ["objective.loss=mse"])
    with pytest.raises(ConfigError, match=r"objective\.teacher: required field is missing"):
        load_run_config(None, [o for o in base if not o.startswith("objective.teacher=")])
    # the field is set but the file's rows hold fewer hard negatives than asked: refused before Ray is needed
    cfg = load_run_config(None, base + ["objective.max_hard_negatives=3"])
    with pytest.raises(DataError, match=r"has 3 hard negative\(s\) in data\.hard_negative_field='neg' \(\d+ have any\)"):
        prepare_data(cfg)
    with pytest.raises(ConfigError, match=r"objective\.teacher = 'stage:reranker' names a pipeline stage"):
        prepare_data(load_run_config(None, base + ["objective.teacher=stage:reranker"]))


def test_a_pipeline_resolves_a_stage_teacher_and_refuses_a_later_one(tmp_path: Path) -> None:
    from lmplatform.pipeline.config import build_stage_config, pipeline_config_from_dict
    from lmplatform.pipeline.preflight import stage_problems

    distill = {"data": {"train_paths": ["pairs.jsonl"], "hard_negative_field": "neg"},
               "objective": {"name": "biencoder_distill", "teacher": "stage:reranker"}}
    reranker = {"data": {"train_paths": ["pairs.jsonl"]}, "objective": {"name": "cross_encoder"}}
    cfg = pipeline_config_from_dict({"name": "p", "stages": [{"name": "reranker", "run": reranker},
                                                            {"name": "student", "run": distill}]}, tmp_path)
    run = build_stage_config(cfg, cfg.stages[1], "default", "runs", "r", stage_outputs={"reranker": "/models/reranker"})
    assert run.objective.teacher == "/models/reranker"
    assert build_stage_config(cfg, cfg.stages[1], "default", "runs", "r").objective.teacher == "stage:reranker"
    fields = [p.field for p in stage_problems(cfg, cfg.stages[1], will_run=["reranker"])]
    assert "objective.teacher" not in fields  # an earlier stage's model exists by the time the student trains
    assert "objective.teacher" in [p.field for p in stage_problems(cfg, cfg.stages[1], will_run=[])]
    with pytest.raises(ConfigError, match=r"objective\.teacher names stage:reranker, which is not an earlier training stage"):
        pipeline_config_from_dict({"name": "p", "stages": [{"name": "student", "run": distill},
                                                          {"name": "reranker", "run": reranker}]}, tmp_path)


def _tiny_cross_encoder(tiny_bert: Path, folder: Path) -> Path:
    from lmplatform.models.cross_encoder import CrossEncoder

    torch.manual_seed(1)
    return CrossEncoder.from_pretrained(tiny_bert, max_seq_length=48).save_pretrained(folder)


def test_collator_objective_and_evaluator_on_a_tiny_bert(tiny_bert: Path) -> None:
    from lmplatform.models.encoder import Encoder

    torch.manual_seed(0)
    model = Encoder.from_pretrained(tiny_bert, max_seq_length=16)
    rows = {"query": np.array(["printer jams", "vpn drops"], dtype=object),
            "document": np.array(["paper jam tray", "vpn tunnel error"], dtype=object),
            "hard_negatives": np.array([["disk full", "login timeout"], ["payment failed", "app crash"]], dtype=object),
            TEACHER_SCORES: np.array([[3.0, -1.0, 0.5], [2.0, 1.0, -2.0]], dtype=object)}
    batch = DistillCollator(model.tokenizer, 16, 2)(rows)
    assert batch[TEACHER_SCORES].dtype == torch.float32 and batch[TEACHER_SCORES].shape == (2, 3)
    assert batch["negative_input_ids"].shape[0] == 4
    for loss_name in ("margin_mse", "kl"):
        objective = BiencoderDistillObjective(loss_name, 0.05, in_batch_weight=0.5)
        loss, metrics = objective(model, batch)
        loss.backward()
        assert torch.isfinite(loss) and {"distill_loss", "margin_agreement", "ranking_loss"} <= set(metrics)
        with torch.inference_mode():
            sums = DistillEvaluator(objective)(model, [batch])
        assert sums["distill_loss"][1] == 2 and sums["margin_agreement"][1] == 4 and sums["inbatch_candidates"][1] == 2
    with pytest.raises(ValueError, match="margin_mse, kl"):
        BiencoderDistillObjective("mse", 0.05)


def test_short_training_run_and_cached_teacher_scores(ray_session, tiny_bert, mlflow_uri, tmp_path, capsys) -> None:
    from lmplatform.jobs.train_run import run_training

    teacher = _tiny_cross_encoder(tiny_bert, tmp_path / "teacher")
    pairs = _write_pairs(tmp_path / "pairs.jsonl", n=48, short_every=8)  # 6 pairs have 1 hard negative, not 2
    cfg = load_run_config(None, _overrides(tiny_bert, pairs, teacher, tmp_path, "optim.max_steps=2",
                                           f"tracking.tracking_uri={mlflow_uri}", "tracking.log_every_n_steps=1"))
    result = run_training(cfg)
    first = capsys.readouterr().out
    assert "teacher scores: computed" in first and "42 rows x 3 scores" in first
    assert result.metrics["step"] == 2
    assert np.isfinite(result.metrics["val_distill_loss"]) and 0 <= result.metrics["val_margin_agreement"] <= 1
    cached = list((tmp_path / "runs" / "teacher_scores").glob("*.npy"))
    assert len(cached) == 1 and np.load(cached[0]).shape == (42, 3)

    again = prepare_data(cfg)  # a second run or trial with the same inputs
    assert "teacher scores: cached: 42 rows" in capsys.readouterr().out
    assert again.metrics["data/teacher_scores_cached"] == 1.0 and again.metrics["data/distill_skipped_rows"] == 6
    row = next(iter(again.datasets["train"].iter_rows()))
    assert len(row[TEACHER_SCORES]) == 3 and len(row["hard_negatives"]) == 2
    from lmplatform.models.cross_encoder import CrossEncoder

    expected = CrossEncoder.from_pretrained(teacher, max_seq_length=48).logits([row["query"]] * 3,
                                                                               [row["document"], *row["hard_negatives"]])
    assert np.allclose(row[TEACHER_SCORES], expected, atol=1e-5)

    other = load_run_config(None, _overrides(tiny_bert, pairs, teacher, tmp_path, "objective.teacher_max_seq_length=40"))
    assert prepare_data(other).metrics["data/teacher_scores_cached"] == 0.0  # another key: scored again
    assert len(list((tmp_path / "runs" / "teacher_scores").glob("*.npy"))) == 2
