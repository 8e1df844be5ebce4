"""`sluice whatif`: what another config's cleaning settings would keep and drop, from cleaned_attributes alone.

Cleaning stores every rule's statistic for every document (sluice.clean.attributes). A change of thresholds
is then answered by re-thresholding those columns, without extraction or any filter running again: each
document's decision is recomputed under both configs with the same rule tables the filters apply (the
`limits` of each RuleFilter built from the settings, `language_limits`, and each other step's recorded
outcome), in chain order, the first failing rule deciding, for the settings of the document's source and
language (`CleaningSettings.for_source` / `for_language`). Everything is a polars expression over a lazy
scan of the Parquet files: memory stays flat in the number of documents.

Honest scope. What the attributes cannot answer is named with the partitions that need a re-run, never
estimated (`Change`): extraction and mojibake repair, the language-ID model, word splitting, a statistic's
definition (every setting of a rule table that is no threshold: Gopher's alpha words and stop words, the
n-gram sizes, FineWeb's variant and short-line length), C4's line rules (they change the text the later rules
see), a filter switched on that was off (its statistics were not taken), another URL or training blocklist,
changed code-share settings, and changed toxicity, perplexity or quality-model settings. Documents that would
newly reach a model scorer (perplexity, quality model: not run on dropped documents) are counted as
`unknown`, not guessed. A step's budget timeouts stay as they were.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sluice.clean.attributes import ATTRIBUTES_DATASET
from sluice.config import CleaningSettings, SluiceConfig
from sluice.runtime.compute import Executor

KEPT, DROPPED, ROUTED, UNKNOWN = "kept", "dropped", "routed", "unknown"
ROUTE_REASON = "code_routed"  # sluice.clean.steps.codeshare's Route
# Steps after language ID that are no rule table: (the key in sluice.clean.chain._language_steps, step name,
# enabled?). Their outcome is recorded where they ran; perplexity and the quality model do not run on dropped documents.
MODEL_STEPS = {
    "toxicity": ("toxicity", lambda s: s.toxicity.enabled, lambda s: s.toxicity),
    "perplexity": ("perplexity", lambda s: s.perplexity.enabled, lambda s: s.perplexity),
    "quality_threshold": ("quality_model", lambda s: s.quality_threshold is not None, lambda s: s.quality_threshold),
}


@dataclass(frozen=True)
class Check:
    """One rule as cleaning applies it: fails when `column <keep_if> threshold` does not hold (a null value:
    the rule does not apply). keep_if "outcome": a step's recorded reason column ("" kept, null not run)."""

    step: str
    column: str
    threshold: Any
    keep_if: str
    reason: str


def chain_checks(source: CleaningSettings, language: str) -> tuple[Check, ...]:
    """The checks of a source's chain (sluice.clean.chain.build_steps, same order) for a document of `language`."""
    from sluice.clean.chain import _language_steps
    from sluice.clean.steps.length_language import LengthFilter, language_limits

    checks: list[Check] = []

    def outcome(step: str) -> None:
        checks.append(Check(step, f"{step}.reason", None, "outcome", step))

    def table(step: str, limits: dict[str, tuple[str, Any, str]]) -> None:
        for reason, (statistic, threshold, keep_if) in limits.items():
            if threshold is not None:
                checks.append(Check(step, f"{step}.{statistic}", threshold, keep_if, reason))

    if source.url_blocklist:
        outcome("url")
    outcome("decode")
    outcome("extract")
    if source.fix_mojibake:
        outcome("unicode_repair")
    if source.blocklist:
        outcome("blocklist")
    table("length", LengthFilter(source.min_chars, source.max_chars).limits)
    if source.code_share.enabled:
        outcome("code_share")
    table("language", language_limits(source.keep_languages, source.min_language_score, source.language_min_scores(), language))
    settings = source.for_language(language)
    for keys, build in _language_steps(None, 4000, None):
        if keys[0] in MODEL_STEPS:
            name, enabled, _ = MODEL_STEPS[keys[0]]
            if enabled(settings):
                outcome(name)
            continue
        step = build(settings)
        if step is not None:
            table(step.name, step.limits)
    return tuple(checks)


def _filters(settings: CleaningSettings) -> dict[str, Any]:
    """The rule-table filters after language ID these settings enable, by name (None where off)."""
    from sluice.clean.chain import _language_steps

    return {keys[0]: build(settings) for keys, build in _language_steps(None, 4000, None) if keys[0] not in (*MODEL_STEPS, "c4")}


def unanswerable(current: CleaningSettings, other: CleaningSettings, languages: Iterable[str]) -> list[str]:
    """What of `other` (one source's settings) the attributes written under `current` cannot answer exactly,
    for documents of these languages: each change named (empty: every decision is recomputable)."""
    problems = []
    for key in ("extraction", "fix_mojibake", "langid_model"):
        if getattr(current, key) != getattr(other, key):
            problems.append(f"{key} changed (the text or language every rule sees)")
    for key in ("url_blocklist", "blocklist"):
        changed = _list_change(getattr(current, key), getattr(other, key))
        if changed:
            problems.append(f"{key} {changed} (only the list cleaning used was applied)")
    if other.code_share.enabled and other.code_share != current.code_share:
        problems.append("code_share changed (its outcome is recorded for the settings cleaning used)")
    default = _language_changes(current.for_language(""), other.for_language(""))
    problems += default
    for language in sorted(set(languages) - {""}):  # a language's own changes (those of every language named once)
        own = _language_changes(current.for_language(language), other.for_language(language))
        problems += [f"languages.{language}: {problem}" for problem in own if problem not in default]
    return sorted(set(problems))


def _list_change(current: Any, other: Any) -> str:
    """How a list setting (a file path, or the setting itself) changed: '' when both name the same list, by
    content where both are files (a copied config names the same list by another path)."""
    if not other or other == current:
        return ""
    if isinstance(other, str) and isinstance(current, str):
        try:
            return "" if Path(other).read_bytes() == Path(current).read_bytes() else "changed"
        except OSError:
            return f"changed ({other} cannot be read)" if not Path(other).is_file() else "changed"
    return "changed"


def _language_changes(current: CleaningSettings, other: CleaningSettings) -> list[str]:
    problems = []
    line_rules = [(s.c4.model_dump(exclude={"min_num_sentences"}), s.c4.enabled and s.word_splitting) for s in (current, other)]
    if line_rules[0] != line_rules[1]:
        problems.append("c4 line rules changed (they change the text later rules see)")
    mine, theirs = _filters(current), _filters(other)
    for name, step in theirs.items():
        if step is None:
            continue
        if mine.get(name) is None:
            problems.append(f"{name} switched on (its statistics were not taken)")
        elif mine[name].definition() != step.definition():
            problems.append(f"{name}: a setting that defines a statistic changed (not only a threshold)")
    for key, (name, enabled, section) in MODEL_STEPS.items():
        if enabled(other) and section(other) != section(current):
            problems.append(f"{key} changed ({name}'s outcome is recorded for the settings cleaning used)")
    return problems


def _keeps(column: pl.Expr, check: Check) -> pl.Expr:
    threshold = check.threshold
    if check.keep_if == "in":
        return column.is_in(sorted(threshold))
    return {">=": column.__ge__, ">": column.__gt__, "<=": column.__le__, "<": column.__lt__, "==": column.__eq__}[check.keep_if](threshold)


def first_failure(checks: tuple[Check, ...]) -> pl.Expr:
    """The reason of the first check that fails (null: every check keeps); "?<step>" where a step's outcome is
    needed but was not recorded (a model scorer the document never reached)."""
    expr = pl.lit(None, dtype=pl.String)
    for check in reversed(checks):
        column = pl.col(check.column)
        if check.keep_if == "outcome":
            expr = pl.when(column.is_null()).then(pl.lit(f"?{check.step}")).when(column != "").then(column).otherwise(expr)
        else:
            expr = pl.when(column.is_not_null() & ~_keeps(column, check)).then(pl.lit(check.reason)).otherwise(expr)
    return expr


def _decision(rule: pl.Expr) -> pl.Expr:
    return (
        pl.when(rule.is_null()).then(pl.lit(KEPT)).when(rule == ROUTE_REASON).then(pl.lit(ROUTED))
        .when(rule.str.starts_with("?")).then(pl.lit(UNKNOWN)).otherwise(pl.lit(DROPPED))
    )


def decision_rule(source: CleaningSettings, languages: Iterable[str]) -> pl.Expr:
    """The first failing rule of each row under `source`'s settings, per language (languages with the same
    checks share one expression). A budget timeout stays. (Checks on columns the files lack, a step the chain
    that wrote them did not have, are named by `missing_columns` first, never skipped.)"""
    groups: dict[tuple[Check, ...], list[str]] = {}
    for language in sorted(set(languages)):
        groups.setdefault(chain_checks(source, language), []).append(language)
    default = chain_checks(source, "")
    expr: Any = None
    for checks, members in groups.items():
        if checks == default:
            continue
        branch = first_failure(checks)
        expr = pl.when(pl.col("language").is_in(members)).then(branch) if expr is None else expr.when(pl.col("language").is_in(members)).then(branch)
    rule = first_failure(default) if expr is None else expr.otherwise(first_failure(default))
    timeout = pl.col("reason").str.contains(r"^step_(timeout|crashed):")
    return pl.when(timeout).then(pl.col("reason")).otherwise(rule)


def missing_columns(source: CleaningSettings, languages: Iterable[str], columns: set[str]) -> list[str]:
    """The attribute columns the checks of `source`'s chain read that the files do not have."""
    return sorted({check.column for language in {*languages, ""} for check in chain_checks(source, language)} - columns)


@dataclass
class Partition:
    source: str
    snapshot: str
    files: list[str] = field(default_factory=list)  # local paths of its attributes files (with rows)
    listed: bool = False  # its manifest lists attributes files (False: cleaned before they were written)


def attribute_partitions(config: SluiceConfig, scratch: str) -> list[Partition]:
    """Every cleaned partition's attributes files, through the cleaned manifests (remote files are fetched
    into `scratch`)."""
    from sluice.io.layout import entry_key, list_partitions, partition_prefix, read_manifest
    from sluice.io.storage import open_store

    store = open_store(config.storage.root, config.s3)
    partitions = []
    for ref in list_partitions(store, "cleaned_documents"):
        prefix = partition_prefix("cleaned_documents", ref)
        manifest = read_manifest(store, prefix) or {}
        partition = Partition(ref.source, ref.snapshot)
        for entry in manifest.get("side_files", []):
            if entry.get("prefix", "").startswith(f"{ATTRIBUTES_DATASET}/"):
                partition.listed = True
                if entry["rows"]:
                    key = entry_key(prefix, entry)
                    partition.files.append(store.local_path(key) or store.fetch(key, scratch))
        partitions.append(partition)
    return partitions


def scan_attributes(partitions: list[Partition]) -> pl.LazyFrame:
    """One lazy frame over the attribute files of `partitions`, each row tagged with its source and snapshot."""
    frames = [
        pl.scan_parquet(path).with_columns(source=pl.lit(p.source), snapshot=pl.lit(p.snapshot)) for p in partitions for path in p.files
    ]
    return pl.concat(frames, how="diagonal_relaxed")


def _columns(partitions: list[Partition]) -> set[str]:
    import pyarrow.parquet as pq

    return {name for p in partitions for path in p.files for name in pq.read_schema(path).names}


@dataclass
class WhatIf:
    """The answer: `flips` (a lazy frame: doc_id, source, snapshot, language, before, after, rule, before_rule,
    tokens), per-source totals, the changes not answered with their partitions, and the self-check count of
    documents whose recorded decision the current config does not reproduce (0 when the attributes are
    current)."""

    flips: pl.LazyFrame | None
    totals: list[dict[str, Any]]
    unanswered: list[dict[str, Any]]
    inconsistent: int
    budgets: list[dict[str, Any]] = field(default_factory=list)  # mix components before / after (mix_budgets)
    configs: tuple[SluiceConfig, SluiceConfig] | None = None  # (current, other): the report's thresholds and texts

    def table(self, samples: int = 0) -> str:
        """Flips per source x snapshot x language x rule (documents and tokens), then the totals."""
        lines = []
        if self.flips is not None:
            counts = (
                self.flips.with_columns(rule=pl.coalesce(pl.col("rule"), pl.col("before_rule")))
                .group_by("source", "snapshot", "language", "before", "after", "rule")
                .agg(documents=pl.len(), tokens=pl.col("tokens").sum(), examples=pl.col("doc_id").sort().head(max(samples, 0)))
                .sort("source", "snapshot", "language", "before", "after", "rule")
                .collect()
            )
            lines.append(f"{'source':12s} {'snapshot':10s} {'lang':5s} {'flip':18s} {'rule':28s} {'docs':>7s} {'tokens':>10s}")
            for row in counts.iter_rows(named=True):
                flip = f"{row['before']}->{row['after']}"
                lines.append(
                    f"{row['source']:12s} {row['snapshot']:10s} {row['language'] or '-':5s} {flip:18s} {row['rule'] or '-':28s} "
                    f"{row['documents']:7d} {row['tokens'] or 0:10d}" + (f"  e.g. {', '.join(row['examples'])}" if samples else "")
                )
            if counts.height == 0:
                lines.append("(no document changes its decision)")
        for total in self.totals:
            lines.append(
                f"{total['source']}: kept {total['kept_before']} -> {total['kept_after']} documents, "
                f"{total['tokens_before']} -> {total['tokens_after']} tokens (share {total['share_before']:.3f} -> {total['share_after']:.3f})"
                + (f"; {total['unknown']} unknown (newly reach a model scorer: re-run)" if total["unknown"] else "")
            )
        for budget in self.budgets:
            if budget["met_before"] and not budget["met_after"]:
                lines.append(
                    f"mix {budget['mix']}: {budget['component']} would no longer meet its {budget['target_tokens']} tokens "
                    f"(about {budget['available_after']} kept training tokens left, max_epochs {budget['max_epochs']:g}; estimated before dedup)"
                )
        for item in self.unanswered:
            lines.append(f"not answered for {item['source']} (re-run {len(item['partitions'])} partitions: {', '.join(item['partitions'])}): " + "; ".join(item["changes"]))
        if self.inconsistent:
            lines.append(f"warning: {self.inconsistent} documents' recorded decisions differ from the current config's (stale attributes: re-materialize)")
        return "\n".join(lines)


@dataclass(frozen=True)
class JudgeTask:
    """One attributes file judged under both configs' settings of its source (`judge_file`)."""

    path: str  # a local attributes file
    source: str
    snapshot: str
    current: CleaningSettings
    changed: CleaningSettings
    languages: tuple[str, ...]  # the source's languages (the per-language settings in the rules)
    out: str  # where its flips go

    @property
    def label(self) -> str:
        return f"whatif {self.source}/{self.snapshot} {Path(self.path).name}"


FLIPS_SCHEMA = {
    "doc_id": pl.String, "source": pl.String, "snapshot": pl.String, "language": pl.String, "before": pl.String, "after": pl.String,
    "rule": pl.String, "before_rule": pl.String, "tokens": pl.Int64,
}
COUNTS = ("documents", "kept_before", "kept_after", "tokens_before", "tokens_after", "unknown", "inconsistent")


def judge_file(task: JudgeTask) -> dict[str, Any]:
    """{"by_language": {language: the COUNTS}, "flips": the flips file (None without flips)}. A task holds
    one attributes file's decisions and writes its flips itself."""
    frame = scan_attributes([Partition(task.source, task.snapshot, [task.path])]).with_columns(language=pl.col("language").fill_null(""))
    judged = (
        frame.with_columns(
            before_rule=pl.col("reason"), computed=_decision(decision_rule(task.current, task.languages)), rule=decision_rule(task.changed, task.languages),
        )
        .with_columns(before=pl.col("decision"), after=_decision(pl.col("rule")))
        .select(*FLIPS_SCHEMA, "computed")
        .collect(engine="streaming")  # one file's decisions, judged once
    )
    by_language = judged.group_by("language").agg(
        documents=pl.len(),
        kept_before=(pl.col("before") == KEPT).sum(), kept_after=(pl.col("after") == KEPT).sum(),
        tokens_before=pl.col("tokens").filter(pl.col("before") == KEPT).sum(), tokens_after=pl.col("tokens").filter(pl.col("after") == KEPT).sum(),
        unknown=(pl.col("after") == UNKNOWN).sum(), inconsistent=(pl.col("computed") != pl.col("before")).sum(),
    )
    flips = (
        judged.filter((pl.col("before") != pl.col("after")) & (pl.col("after") != UNKNOWN))
        .with_columns(rule=pl.when(pl.col("after") == KEPT).then(None).otherwise(pl.col("rule")))
        .select(*FLIPS_SCHEMA)
    )
    if flips.height:
        flips.write_parquet(task.out)
    counts = {row["language"]: {name: int(row[name] or 0) for name in COUNTS} for row in by_language.iter_rows(named=True)}
    return {"by_language": counts, "flips": task.out if flips.height else None}


def what_if(config: SluiceConfig, other: SluiceConfig, scratch: str, executor: Executor | None = None) -> WhatIf:
    """Compare `other`'s cleaning settings with `config`'s over the attributes of `config`'s storage: one
    `judge_file` task per attributes file on `executor` (inline by default), their per-language counts
    folded here (a few numbers per language) and their flips read back lazily from `scratch`."""
    executor = executor or Executor()
    Path(scratch).mkdir(parents=True, exist_ok=True)
    every = attribute_partitions(config, scratch)
    partitions = [p for p in every if p.files]
    by_source: dict[str, list[Partition]] = {}
    for partition in partitions:
        by_source.setdefault(partition.source, []).append(partition)
    flips, totals, unanswered, inconsistent = [], [], [], 0
    missing = [f"{p.source}/{p.snapshot}" for p in every if not p.listed]
    if missing:  # cleaned before cleaned_attributes were written
        unanswered.append({"source": "*", "partitions": missing, "changes": ["no cleaned_attributes: re-materialize cleaned_documents there"]})
    for source, parts in sorted(by_source.items()):
        current, changed = config.cleaning.for_source(source), other.cleaning.for_source(source)
        languages = sorted(scan_attributes(parts).select(pl.col("language").fill_null("").unique()).collect(engine="streaming").to_series().to_list())
        changes = unanswerable(current, changed, languages)
        changes += [f"{column} not in the attributes" for column in missing_columns(changed, languages, _columns(parts))]
        if changes:
            unanswered.append({"source": source, "partitions": [f"{p.source}/{p.snapshot}" for p in parts], "changes": changes})
            continue
        tasks = [
            JudgeTask(path, p.source, p.snapshot, current, changed, tuple(languages), str(Path(scratch) / f"flips-{source}-{p.snapshot}-{i:05d}.parquet"))
            for p in parts for i, path in enumerate(p.files)
        ]
        results = executor.map(judge_file, tasks)
        by_language: dict[str, dict[str, int]] = {}
        for result in results:
            for language, counts in result["by_language"].items():
                folded = by_language.setdefault(language, dict.fromkeys(COUNTS, 0))
                for name in COUNTS:
                    folded[name] += counts[name]
        summary = {name: sum(counts[name] for counts in by_language.values()) for name in COUNTS}
        inconsistent += summary.pop("inconsistent")
        languages_tokens = {language: [by_language[language]["tokens_before"], by_language[language]["tokens_after"]] for language in sorted(by_language)}
        totals.append({"source": source, **summary, "tokens_by_language": languages_tokens})
        flips.extend(pl.scan_parquet(result["flips"]) for result in results if result["flips"])
    for total in totals:  # each source's share of the kept tokens, before and after
        total["share_before"] = total["tokens_before"] / max(sum(t["tokens_before"] for t in totals), 1)
        total["share_after"] = total["tokens_after"] / max(sum(t["tokens_after"] for t in totals), 1)
    flipped = pl.concat(flips) if flips else (pl.LazyFrame(schema=FLIPS_SCHEMA) if totals else None)
    return WhatIf(flipped, totals, unanswered, inconsistent, mix_budgets(other, totals, unanswered), (config, other))


def mix_budgets(other: SluiceConfig, totals: list[dict[str, Any]], unanswered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each mix component of `other`'s mixes (sluice.mix.plan: its target from the weights, met when it needs
    at most max_epochs of the available training tokens) before and after, from the kept token estimates.
    An estimate and an upper bound of what the mix will have: dedup and decontamination remove more, and the
    tokenizer's count differs from the bytes / 4 estimate; a component of an unanswered source is not judged."""
    from sluice.config.training import split_weight_key
    from sluice.mix.plan import targets

    tokens = {t["source"]: t["tokens_by_language"] for t in totals}
    skipped = {item["source"] for item in unanswered}
    rows = []
    for name, mix in sorted(other.mixes.items()):
        for key, target in targets(mix.weights, mix.token_budget).items():
            source, language = split_weight_key(key)
            if source in skipped or source not in tokens or target == 0:
                continue
            pairs = [value for code, value in tokens[source].items() if language is None or code == language]
            available = [sum(pair[i] for pair in pairs) * (1 - mix.validation_share) for i in (0, 1)]
            epochs = [target / tokens_ if tokens_ else None for tokens_ in available]  # (None: no token left)
            rows.append({
                "mix": name, "component": key, "target_tokens": target, "available_before": round(available[0]), "available_after": round(available[1]),
                "epochs_before": epochs[0], "epochs_after": epochs[1], "max_epochs": mix.max_epochs,
                "met_before": epochs[0] is not None and epochs[0] <= mix.max_epochs, "met_after": epochs[1] is not None and epochs[1] <= mix.max_epochs,
            })
    return rows
