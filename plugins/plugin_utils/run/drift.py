# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``drift`` (playbook ``stellaops.runtime.verify``): what each target runs, as
``stella_inspect`` observed it (option ``observed``: ``{target name: its registered result}``), held against
what the last successful job of each of its projects recorded (job/drift.py), and the verdicts recorded as
the targets' health (a drifted target ``degraded``, code ``runtime_drift``; one in sync again gets back the
status its last job gave: job/health.py). It never changes a target; in check mode it records nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import DEPLOYMENT_EVIDENCE_FILE
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import drift as _drift
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import health as _health
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import checked_document

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def inspection_failure(result: Any) -> str | None:
    """Why a target's registered ``stella_inspect`` result says nothing of it, ``None`` when it does."""
    if not isinstance(result, dict) or not result:
        return "not inspected (no stella_inspect result for it)"
    if result.get("unreachable"):
        return "unreachable: %s" % first_line(result.get("msg") or "no answer")
    if result.get("failed") or result.get("skipped"):
        what = "%s: " % result["code"] if result.get("code") else ""
        return "inspection failed: %s%s" % (what, first_line(result.get("msg") or "skipped"))
    if not isinstance(result.get("projects"), dict):
        return "inspection returned no projects"
    return None


def recorded_deployment(store: SqlJobStore, record: JobRecord, name: str) -> dict[str, Any] | None:
    """The ``deployment.json`` job ``record`` kept for target ``name`` (checked against its SHA-256),
    ``None`` when the store holds none."""
    target = record["targets"][name]
    document = ((target.get("evidence") or {}).get(DEPLOYMENT_EVIDENCE_FILE) or {}).get("document")
    index = store.document_index(record["jobId"])
    if not document or document not in index:
        return None
    found: dict[str, Any] = checked_document(store, record["jobId"], document, index)
    return found


class Drift(Step):
    """Compare, then record the health each verdict implies."""

    name = "drift"
    needs = ("observed",)
    check_mode = "read"
    recorded_job = False

    def project_verdict(
        self, store: SqlJobStore, name: str, project: str, observed: dict[str, Any], busy: dict[tuple[str, str], str]
    ) -> tuple[dict[str, Any], JobRecord | None]:
        if (name, project) in busy:
            why = "job %s is deploying project %s; check again once it ended" % (busy[(name, project)], project)
            return _drift.verdict(name, project, None, observed, why), None
        record = store.last_succeeded(project, name)
        if record is None:
            return _drift.verdict(name, project, None, observed), None
        try:
            deployment = recorded_deployment(store, record, name)
        except StellaError as exc:
            return _drift.verdict(name, project, None, observed, "%s: %s" % (exc.code, exc.reason)), None
        want = _drift.expected(record["jobId"], record["targets"][name], deployment)
        if want is None:
            why = "job %s kept no deployment evidence for this target in the job store" % record["jobId"]
            return _drift.verdict(name, project, None, observed, why), None
        return _drift.verdict(name, project, want, observed), record

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        observed: dict[str, Any] = args["observed"] or {}
        names = args["targets"] or sorted(observed)
        at = utc_timestamp()
        busy = {
            (name, target["projectName"]): record["jobId"]
            for record in store.unfinished()
            for name, target in (record.get("targets") or {}).items()
            if target.get("projectName")
        }
        verdicts: list[dict[str, Any]] = []
        drifted_events, restored_events = [], []
        for name in names:
            result = observed.get(name)
            failure = inspection_failure(result)
            if failure is not None or not isinstance(result, dict):
                verdicts.append(_drift.verdict(name, None, None, {}, failure or "not inspected"))
                continue
            projects = result["projects"]
            if not projects:
                why = "no project found under %s" % result.get("workDirectory")
                verdicts.append(_drift.verdict(name, None, None, {}, why))
                continue
            mine, records = [], {}
            for project in sorted(projects):
                entry, record = self.project_verdict(store, name, project, projects[project], busy)
                mine.append(entry)
                if record is not None:
                    records[project] = record
            verdicts.extend(mine)
            if not records:
                continue
            compared = [e for e in mine if e["project"] in records]
            first = records[compared[0]["project"]]
            target = first["targets"][name]
            drifted = [e for e in compared if e["verdict"] == _drift.DRIFTED]
            if drifted:
                drifted_events.append(
                    _health.drift_event(
                        target.get("targetId") or name,
                        target.get("targetName") or name,
                        _drift.target_reason(drifted),
                        drifted[0]["jobId"],
                        at,
                    )
                )
            else:
                restored_events.append(_health.in_sync_event(target, name, first["jobId"], at))
        if not ctx.check_mode and (drifted_events or restored_events):
            store.record_drift(drifted_events, restored_events)
        return {
            "verdicts": verdicts,
            "lines": [_drift.line(v) for v in verdicts],
            "drifted": sorted({v["target"] for v in verdicts if v["verdict"] == _drift.DRIFTED}),
            "health": drifted_events,
            "inSync": [event["targetId"] for event in restored_events],
            "recorded": not ctx.check_mode,
            "checkedAt": at,
        }
