"""The champion gate: a candidate takes the alias only on evidence, never on noise or by forgetting.

1. Confirmation on held-out data. The candidate (a study's best trial, chosen on validation) and the
   model it would replace (the current champion, or for a first champion the model the trials started
   from) are both scored, query by query, on a retrieval set no trial saw. Choosing the best of N
   trials on the data that also judges it would promote the luckiest trial (winner's curse).
2. A gain that beats noise. The per-query differences are resampled (paired bootstrap); the candidate
   wins only if the whole confidence interval of the mean gain lies above 0.
3. No forgetting. On a small general-capability pack (STS Spearman, paraphrase retrieval, old-domain
   MLM loss where both models carry a trained head) the candidate may not fall behind by more than
   the tolerance.

`decide` is the rule as a pure function; `run_gate` loads the models and measures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from lmplatform.config.loader import ConfigError
from lmplatform.config.schema import DataConfig
from lmplatform.data.pairs import Pair, read_pairs
from lmplatform.data.sampling import sample_texts
from lmplatform.data.sts_pairs import read_pairs_jsonl
from lmplatform.evaluation.registry import evaluation_spec
from lmplatform.evaluation.retrieval_validation import (
    attach_first_stage,
    build_retrieval_set,
    evaluate_model,
    retrieval_set_from_pairs,
)
from lmplatform.evaluation.system import SetMetadata, load_scorer
from lmplatform.evaluation.tasks.old_domain_mlm.task import old_domain_mlm_loss
from lmplatform.metrics.bootstrap import paired_bootstrap
from lmplatform.models.kind import CROSS_ENCODER
from lmplatform.objectives.registry import objective_spec
from lmplatform.retrieval.settings import RetrievalValidationConfig
from lmplatform.tune.space import ChampionSpec, GeneralPackSpec, ScoredPairsSpec

if TYPE_CHECKING:
    from lmplatform.objectives.run_config import RunConfig
    from lmplatform.retrieval.settings import RetrievalValidationConfig, SearchSettings

GATE_TAG = "lmp.gate"


@dataclass
class PairedComparison:
    """Mean per-query scores of two models on the same queries and the bootstrap interval of the gain."""

    metric: str
    candidate: float
    comparator: float
    gain: float
    low: float
    high: float
    level: float
    queries: int

    def describe(self) -> str:
        return (f"{self.metric} {self.candidate:.4f} vs {self.comparator:.4f}: gain {self.gain:+.4f}, "
                f"{self.level:.0%} CI [{self.low:+.4f}, {self.high:+.4f}] over {self.queries} queries")


@dataclass
class ProbeResult:
    """One general-capability probe for both models; `drop` > 0 means the candidate is worse."""

    name: str
    candidate: Optional[float]
    comparator: Optional[float]
    drop: Optional[float]
    higher_is_better: bool = True
    note: str = ""

    def describe(self) -> str:
        if self.drop is None:
            return f"{self.name}: skipped ({self.note})"
        return f"{self.name} {self.candidate:.4f} vs {self.comparator:.4f} (drop {self.drop:+.4f})"


@dataclass
class GateVerdict:
    promote: bool
    reason: str
    compared_with: str
    comparison: Optional[PairedComparison] = None
    probes: list[ProbeResult] = field(default_factory=list)

    def tags(self) -> dict[str, str]:
        """The numbers behind the decision, for the registered version (`lmp models why` reads them)."""
        tags = {f"{GATE_TAG}.compared_with": self.compared_with}
        c = self.comparison
        if c is not None:
            tags |= {f"{GATE_TAG}.metric": c.metric, f"{GATE_TAG}.candidate": f"{c.candidate:.6f}",
                     f"{GATE_TAG}.comparator": f"{c.comparator:.6f}", f"{GATE_TAG}.gain": f"{c.gain:.6f}",
                     f"{GATE_TAG}.ci_low": f"{c.low:.6f}", f"{GATE_TAG}.ci_high": f"{c.high:.6f}",
                     f"{GATE_TAG}.level": str(c.level), f"{GATE_TAG}.queries": str(c.queries)}
        for probe in self.probes:
            tags[f"{GATE_TAG}.probe.{probe.name}"] = probe.describe()
        return tags


def compare(metric: str, candidate: np.ndarray, comparator: np.ndarray, spec: ChampionSpec) -> PairedComparison:
    gain, low, high = paired_bootstrap(candidate, comparator, spec.level, spec.resamples, spec.seed)
    return PairedComparison(metric, float(np.mean(candidate)), float(np.mean(comparator)), gain, low, high,
                            spec.level, len(candidate))


def decide(comparison: Optional[PairedComparison], probes: Sequence[ProbeResult], tolerance: float,
           compared_with: str) -> GateVerdict:
    """The rule: the gain's interval lies above 0, and no probe drops by more than `tolerance`."""
    probes = list(probes)
    if comparison is None:
        return GateVerdict(True, f"nothing to compare with ({compared_with})", compared_with, None, probes)
    if comparison.low <= 0:
        why = ("no gain" if comparison.gain <= 0 else "the gain is within noise: its interval includes 0")
        return GateVerdict(False, f"{why}; {comparison.describe()} against {compared_with}", compared_with, comparison, probes)
    regressed = [p for p in probes if p.drop is not None and p.drop > tolerance]
    if regressed:
        return GateVerdict(
            False, f"forgets: {'; '.join(p.describe() for p in regressed)} exceeds the tolerance {tolerance:g} "
            f"(while {comparison.describe()})", compared_with, comparison, probes)
    return GateVerdict(True, f"beats {compared_with}: {comparison.describe()}"
                       + (f"; no probe dropped more than {tolerance:g}" if probes else ""), compared_with, comparison, probes)


# -- measuring ---------------------------------------------------------------------------------------
def reranks(objective: str) -> bool:
    """Whether the objective trains a re-ranker (a `CrossEncoder`, no embeddings) rather than an encoder."""
    return objective_spec(objective).model_kind == CROSS_ENCODER


def load_ranker(model_dir: str | Path, objective: str) -> object:
    """The model as the gate scores it: a CrossEncoder for re-rankers, an Encoder otherwise."""
    if reranks(objective):
        from lmplatform.models.cross_encoder import CrossEncoder

        return CrossEncoder.from_pretrained(model_dir)
    from lmplatform.models.encoder import Encoder

    return Encoder.from_pretrained(model_dir)


def _sts_probe(spec: ScoredPairsSpec, encoders: Sequence[object]) -> list[float]:
    from lmplatform.evaluation.tasks.sts.task import cosine_scores
    from lmplatform.metrics.sts import spearman

    pairs = read_pairs_jsonl(spec.path, "sts", spec.scale, spec.score_field, spec.sentence1_field,
                             spec.sentence2_field, where=spec.where or None, limit=spec.limit)
    out = []
    for encoder in encoders:
        rho = spearman(cosine_scores(encoder, pairs.sentence1, pairs.sentence2), pairs.scores)
        out.append(rho if np.isfinite(rho) else 0.0)  # constant similarities (a collapsed model) rank nothing
    return out


def _paraphrase_probe(specs: Sequence[ScoredPairsSpec], min_share: float, encoders: Sequence[object]) -> list[float]:
    paraphrases: list[Pair] = []
    others: list[str] = []
    for spec in specs:
        pairs = read_pairs_jsonl(spec.path, "paraphrase", spec.scale, spec.score_field, spec.sentence1_field,
                                 spec.sentence2_field, where=spec.where or None, limit=spec.limit)
        low, high = spec.scale
        threshold = low + min_share * (high - low)
        for s1, s2, score in zip(pairs.sentence1, pairs.sentence2, pairs.scores):
            if score >= threshold and s1 != s2:
                paraphrases.append(Pair(s1, s2))
            else:
                others.append(s2)
    cfg = RetrievalValidationConfig(relevance="pair", recall_ks=[1], mrr_k=10)
    rset = retrieval_set_from_pairs(paraphrases, paraphrases, others, cfg)
    return [float(evaluate_model(e, rset, cfg)["ir_mrr_at_10"].mean()) for e in encoders]


def has_trained_mlm_head(model_dir: str | Path) -> bool:
    """Whether the folder's weights hold an MLM head's transform (the decoder alone is tied to the embeddings)."""
    from safetensors import safe_open

    for weights in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(weights), "pt") as handle:
            if any(key.startswith("cls.predictions.transform") for key in handle.keys()):
                return True
    return False


def general_probes(pack: GeneralPackSpec, candidate_dir: str | Path, comparator_dir: str | Path,
                   objective: str) -> list[ProbeResult]:
    """Every probe of the pack for both models (candidate first)."""
    probes: list[ProbeResult] = []
    embedding = not reranks(objective)
    encoders = ([load_ranker(candidate_dir, objective), load_ranker(comparator_dir, objective)]
                if embedding and (pack.sts is not None or pack.paraphrase) else [])
    if pack.sts is not None:
        if embedding:
            cand, comp = _sts_probe(pack.sts, encoders)
            probes.append(ProbeResult("sts_spearman", cand, comp, comp - cand))
        else:
            probes.append(ProbeResult("sts_spearman", None, None, None, note="a re-ranker has no embeddings"))
    if pack.paraphrase:
        if embedding:
            cand, comp = _paraphrase_probe(pack.paraphrase, pack.paraphrase_min_share, encoders)
            probes.append(ProbeResult("paraphrase_mrr_at_10", cand, comp, comp - cand))
        else:
            probes.append(ProbeResult("paraphrase_mrr_at_10", None, None, None, note="a re-ranker has no embeddings"))
    if pack.old_domain is not None:
        probes.append(_old_domain_probe(pack, candidate_dir, comparator_dir))
    for evaluation in pack.evaluations:  # a registered evaluation's score, each model on its own
        spec = evaluation_spec(evaluation.name)
        cand, comp = (spec.evaluate_model(str(model), evaluation, None).score for model in (candidate_dir, comparator_dir))
        probes.append(ProbeResult(evaluation.key, cand, comp, comp - cand))
    return probes


def _old_domain_probe(pack: GeneralPackSpec, candidate_dir: str | Path, comparator_dir: str | Path) -> ProbeResult:
    if not (has_trained_mlm_head(candidate_dir) and has_trained_mlm_head(comparator_dir)):
        return ProbeResult("old_domain_mlm_loss", None, None, None, higher_is_better=False,
                           note="a model has no trained MLM head, so its MLM loss would measure a random head")
    texts = sample_texts(DataConfig(train_paths=[pack.old_domain], validation_fraction=0.0), pack.old_domain_texts,
                         seed=1234, split="train")
    cand = old_domain_mlm_loss(str(candidate_dir), texts)["mlm_loss"]
    comp = old_domain_mlm_loss(str(comparator_dir), texts)["mlm_loss"]
    return ProbeResult("old_domain_mlm_loss", cand, comp, cand - comp, higher_is_better=False)


def run_gate(spec: ChampionSpec, metric: str, objective: str, candidate_dir: str | Path,
             comparator_dir: Optional[str | Path], compared_with: str,
             searches: Optional[tuple["SearchSettings", "SearchSettings"]] = None,
             text_metadata: Optional[Mapping[str, Mapping[str, Any]]] = None) -> GateVerdict:
    """Score both models on the confirmation set and the general pack, then `decide`.

    `searches`: the candidate's and the comparator's search settings, when what is compared is a retrieval system
    (a bi-encoder with BM25 fusion, a metadata fusion and a re-ranker, `evaluation/system.py`), each scored as it is
    served; their `reranker` is a local folder; `text_metadata`: the texts' metadata (`evaluation.system.text_metadata`)
    a metadata fusion reads. The general probes still compare the two bi-encoders."""
    if comparator_dir is None:
        return decide(None, [], 0.0, compared_with)
    assert spec.confirm is not None
    rset = build_retrieval_set(spec.confirm)
    if reranks(objective):
        attach_first_stage(rset, spec.confirm)
    if searches is not None:
        metadata = SetMetadata.of(rset, text_metadata) if text_metadata is not None else None
        scores = [load_scorer(str(folder), rset, spec.confirm, search.reranker, metadata=metadata).per_query(search)[metric]
                  for folder, search in zip((candidate_dir, comparator_dir), searches)]
    else:
        scores = [evaluate_model(load_ranker(folder, objective), rset, spec.confirm)[metric]
                  for folder in (candidate_dir, comparator_dir)]
    comparison = compare(metric, scores[0], scores[1], spec)
    # The probes cost encodes; a candidate that does not win is refused without them.
    wins = comparison.low > 0
    probes = general_probes(spec.general, candidate_dir, comparator_dir, objective) if spec.general and wins else []
    return decide(comparison, probes, spec.general.tolerance if spec.general else 0.0, compared_with)


def check_held_out(spec: ChampionSpec, base: "RunConfig") -> None:
    """Refuse a confirmation set that shares queries with the pairs the trials train or select on.

    Run before any trial starts: it also reads (and so checks) every file of the confirmation set.
    """
    if spec.confirm is None:
        return
    confirm = set(build_retrieval_set(spec.confirm).query_texts)
    sources = [base.data] if objective_spec(base.objective.name).pair_data else []
    if base.retrieval_validation is not None and base.retrieval_validation.pairs is not None:
        sources.append(base.retrieval_validation.pairs)
    seen: set[str] = set()
    for data in sources:
        pairs = read_pairs(data)
        seen |= {pair.query for pair in pairs.train + pairs.validation}
    overlap = confirm & seen
    if overlap:
        raise ConfigError(
            f"champion.confirm shares {len(overlap)} of its {len(confirm)} queries with the pairs the trials train or "
            f"select on (e.g. {sorted(overlap)[0][:80]!r}): a confirmation set must be held out from both; "
            "point champion.confirm.pairs at a split of its own"
        )


def check_system_held_out(spec: ChampionSpec, select: "RetrievalValidationConfig") -> None:
    """Refuse a confirmation set that shares queries with the set a retrieval system's settings were chosen on."""
    if spec.confirm is None:
        return
    overlap = set(build_retrieval_set(spec.confirm).query_texts) & set(build_retrieval_set(select).query_texts)
    if overlap:
        raise ConfigError(f"champion.confirm shares {len(overlap)} queries with the set the system's settings were "
                          f"chosen on (e.g. {sorted(overlap)[0][:80]!r}); point champion.confirm.pairs at a split of its own")
