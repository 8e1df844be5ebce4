"""When each asset runs on its own: its dependencies' roles, declared once, and the automation conditions
and freshness rules built from them.

A dependency has one of three roles:

- follows (every edge not listed in `EDGE_ROLES`): a new data version of the dependency makes the
  partitions that read it stale, and declarative automation re-runs them;
- `EARLIER`: the asset reads every partition of the dependency but its result depends only on the
  partitions ordered before its own (global dedup: `dedup_clusters` on `dedup_index`, `deduped_documents`
  on `dedup_clusters`). Automation treats it as a gate (it waits until every partition is there, but a new
  partition elsewhere does not re-run the others); `sluice materialize` counts only the earlier ones;
- `GATE`: built once from what exists (the quality and perplexity models from raw documents, the
  tokenizer from deduplicated documents): it waits for the dependency, and never re-runs because the
  dependency gained partitions or changed (only its own code version or settings make it stale).

`stage_automation(asset)` is Dagster's eager condition with those gates and with code-version changes as a
trigger: an asset partition runs when it is newly missing (a snapshot was registered) and still missing when
the request is decided, its code version changed, or a followed dependency was updated (a settings asset
whose observed version changed included) other than by a backfill that plans its own downstream
(`sluice materialize`, a UI backfill: automation leaves their work alone), once nothing it depends on is
missing or in progress and it is not in progress itself (a backfill or a run already covers it). On its very
first evaluation it also asks for what is missing then (unlike Dagster's eager, so a daemon started on a
registered but unmaterialized instance builds it); an asset with a GATE is built once its inputs first exist
instead; a partition whose run failed stays missing but is not newly missing, so automation does not retry
it every tick (the next `sluice materialize` or backfill does).

Automation does not follow EARLIER edges: a partition re-ingested with changed content after later ones
were deduplicated leaves those later partitions stale for `sluice materialize` (data_assets/freshness.py),
which re-runs them; automation alone does not.
"""

from __future__ import annotations

from dagster import AssetSelection, AutomationCondition

from resources.run_tags import COORDINATED_TAG

EARLIER = "earlier"
GATE = "gate"
ROOTS_WITHOUT_DEPS = {"blocklist"}  # its list is its code version: no dependency to be updated or to go missing

EDGE_ROLES: dict[str, dict[str, str]] = {
    "dedup_clusters": {"dedup_index": EARLIER},
    "deduped_documents": {"dedup_clusters": EARLIER},
    "quality_model": {"raw_documents": GATE},
    "perplexity_model": {"raw_documents": GATE},
    "tokenizer": {"deduped_documents": GATE},
}


def role(asset: str, dependency: str) -> str | None:
    """EARLIER, GATE, or None (follows)."""
    return EDGE_ROLES.get(asset, {}).get(dependency)


def updated_elsewhere() -> AutomationCondition:
    """A dependency partition updated since the previous tick by something other than a backfill that plans
    its own downstream (the command's, a UI backfill, the schedule's: their runs carry COORDINATED_TAG), or
    about to be requested with this one: such a backfill already includes, or deliberately leaves out, what
    reads what it materializes."""
    from_elsewhere = AutomationCondition.newly_updated() & ~AutomationCondition.all_new_updates_have_run_tags(tag_keys={COORDINATED_TAG})
    return AutomationCondition.any_deps_match(from_elsewhere | AutomationCondition.will_be_requested()).with_label("any_deps_updated_elsewhere")


def stage_automation(asset: str) -> AutomationCondition:
    roles = EDGE_ROLES.get(asset, {})
    ignored = sorted(roles)
    updated = updated_elsewhere()
    if ignored:
        updated = updated.ignore(AssetSelection.assets(*ignored))
    # Two kinds of trigger. "It is missing" (newly missing: a snapshot was registered; a GATE's inputs first
    # exist; a root looked at every 10 minutes) holds only while the partition is still missing, read when
    # the request is decided: a backfill may materialize it after the trigger fired, and Dagster reads
    # "missing" and "in progress" as they are now but "newly updated" (the reset of since_last_handled) only
    # up to the tick's start, so without this a tick that saw the backfill's run end could still request
    # the partition it had just materialized. "It changed" (code version, an input updated elsewhere) holds
    # until the partition is requested or updated.
    when_missing = AutomationCondition.newly_missing()
    if GATE in roles.values():
        # built once, when its inputs first exist (nothing to build from on an empty instance)
        when_missing = when_missing | (AutomationCondition.missing() & updated_elsewhere())
    if asset in ROOTS_WITHOUT_DEPS:
        # nothing upstream ever updates it: looked at every 10 minutes, built when missing
        when_missing = when_missing | AutomationCondition.cron_tick_passed("*/10 * * * *", "UTC")
    when_changed = AutomationCondition.code_version_changed() | updated
    # A change seen while the partition is in progress (a backfill targets it: `sluice materialize`, the UI)
    # is that backfill's to handle, not a trigger kept for later: when the backfill ends, the automation tick
    # that reads the instance between its last materialization and its completion would otherwise take the
    # partition for missing and request it again.
    armed = ((when_missing & ~AutomationCondition.in_progress()).since_last_handled() & AutomationCondition.missing()) | (
        when_changed & ~AutomationCondition.in_progress()
    ).since_last_handled()
    start = armed
    label = "eager" + (f", gated on every partition of {', '.join(ignored)}" if ignored else "")
    return (
        start
        & ~AutomationCondition.any_deps_missing()
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    ).with_label(label)
