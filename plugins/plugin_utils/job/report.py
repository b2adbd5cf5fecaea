# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The evidence report of a deployment job: one self-contained HTML page for people (docs/report.md).

:func:`render_report` is pure: the job record (and, when known, the evidence files written for it, the
job's ``release.rollback.evidence.v1`` and each target's ``deployment.json``) in, HTML out. The page has
inline CSS only, no script and no external address; every value is escaped, links are relative, and
values under secret-bearing keys (``secretEnv``, registry credentials, passwords, tokens, headers) are
never shown: they are collected first and masked wherever they would appear. :func:`load_evidence` and
:func:`write_report` read the job's evidence directory and write ``report.html`` beside ``job.json``. An
evidence document that does not hash to the SHA-256 recorded with it, or is no JSON document, is shown as
corrupt and its contents are never used (``evidence_corrupt``).
"""

from __future__ import annotations

import json
import os
import posixpath
import urllib.parse

import jinja2
import markupsafe

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import (
    job_evidence,
    rollback_evidence as _rollback_evidence,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import collect_secrets, masked
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import verify_rollback_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    JOB_EVIDENCE_FILE,
    ROLLBACK_EVIDENCE_FILE,
)

REPORT_FILE = "report.html"
JOB_FILES = (JOB_EVIDENCE_FILE, ROLLBACK_EVIDENCE_FILE)
# Banner colours: the job's status at a glance.
STATUS_COLOURS = {
    "Succeeded": "#1a7f37",
    "RolledBack": "#b45309",
    "Failed": "#b91c1c",
    "RollingBack": "#6d28d9",
    "Running": "#1d4ed8",
    "Pending": "#57606a",
}
BADGES = {
    "succeeded": "ok",
    "passed": "ok",
    "shifted": "ok",
    "restored": "ok",
    "complete": "ok",
    "proceed": "ok",
    "failed": "bad",
    "stop": "bad",
    "incomplete": "bad",
    "rolledback": "warn",
    "rollingback": "warn",
    "running": "info",
    "pending": "muted",
    "skipped": "muted",
    "not_shifted": "muted",
    "not_run": "muted",
}
CORRUPT = "evidence_corrupt"
ARTIFACT_KEYS = ("manifestHash", "composeLockHash", "versionStickerHash", "applyManifestHash", "currentDigest")
PHASE_COLOURS = {"ok": "#2da44e", "bad": "#cf222e", "muted": "#afb8c1", "warn": "#d97706", "info": "#218bff"}


def _flat(value, prefix=""):
    """``[(dotted key, text)]`` of a mapping (pure)."""
    rows = []
    for key, item in sorted((value or {}).items()):
        name = "%s%s" % (prefix, key)
        if isinstance(item, dict) and item:
            rows.extend(_flat(item, name + "."))
        else:
            rows.append((name, item if isinstance(item, str) else json.dumps(item, sort_keys=True)))
    return rows


def _badge(status):
    return BADGES.get(str(status or "").lower().replace("-", "_"), "muted")


def _yes(value):
    return None if value is None else ("yes" if value else "no")


def _failure_text(failure):
    if not failure:
        return None
    target = failure.get("target") or {}
    return "%s: %s" % (
        target.get("targetName") or target.get("targetId") or failure.get("moduleName"),
        failure.get("failureReason"),
    )


def _duration(ms):
    if ms is None:
        return ""
    return "%d ms" % ms if ms < 1000 else "%.1f s" % (ms / 1000.0)


def _href(path, base):
    """A relative link to ``path`` from ``base`` (the report's directory), or ``None``."""
    if not path:
        return None
    if base is None:
        return None if os.path.isabs(path) else urllib.parse.quote(path)
    return urllib.parse.quote(os.path.relpath(path, base) if os.path.isabs(path) else path)


def _document_href(document, job_id):
    """A link to a document of the job store from the job's report, as the two lie in an evidence
    directory (``stella evidence JOB --output DIR`` writes that tree), or ``None``."""
    if not document:
        return None
    return urllib.parse.quote(posixpath.relpath(document, job_evidence_dir("", job_id)))


def _phases(target, key):
    phases = target.get(key) or []
    total = sum(p.get("durationMs") or 0 for p in phases)
    rows = []
    for phase in phases:
        ms = phase.get("durationMs") or 0
        width = (100.0 * ms / total) if total else 100.0 / len(phases)
        rows.append(
            {
                "name": phase.get("name"),
                "status": phase.get("status"),
                "badge": _badge(phase.get("status")),
                "duration": _duration(ms),
                "completedAt": phase.get("completedAt"),
                "width": "%.2f%%" % max(width, 0.8),
                "colour": PHASE_COLOURS[_badge(phase.get("status"))],
            }
        )
    return {"rows": rows, "total": _duration(total) if phases else ""}


def _traffic(evidence, prefix):
    evidence = evidence or {}

    def get(key):
        return evidence.get(prefix + key)

    known = ("mode", "status", "shifted", "adapter", "slot", "controlWeight", "treatmentWeight", "reason")
    extra = [
        (k[len(prefix) :], v)
        for k, v in _flat(evidence)
        if k.startswith(prefix) and k[len(prefix) :] not in known and not k[len(prefix) :].startswith("rollback.")
    ]
    return {
        "mode": get("mode"),
        "status": get("status"),
        "badge": _badge(get("status")),
        "adapter": get("adapter"),
        "shifted": get("shifted"),
        "slot": get("slot"),
        "control": get("controlWeight"),
        "treatment": get("treatmentWeight"),
        "reason": get("reason"),
        "extra": extra,
    }


def _hashes(target, deployment):
    """``[(what, value)]``: the artifact hashes of one target, from the record and its deployment.json."""
    rows, seen = [], set()

    def add(what, value):
        if value and (what, value) not in seen:
            seen.add((what, value))
            rows.append((what, value))

    artifacts = dict((deployment or {}).get("artifacts") or {})
    for key in ARTIFACT_KEYS:
        add(key, target.get(key) or artifacts.get(key))
    add("rollbackDigest", (target.get("rollback") or {}).get("rollbackDigest"))
    for file_name, digest in sorted(
        dict(artifacts.get("artifactHashes") or {}, **(target.get("artifactHashes") or {})).items()
    ):
        add(file_name, digest)
    for container in (deployment or {}).get("containers") or []:
        add("image %s" % container.get("service"), container.get("imageDigest"))
    if deployment and deployment.get("evidenceDigest"):
        add("deployment.json evidenceDigest", deployment["evidenceDigest"])
    return rows


def _corrupt(entry, corrupt):
    """Whether the evidence file ``entry`` (``{"path", "document", "corrupt"}``) failed its check."""
    return bool(entry.get("corrupt") or any(entry.get(k) and entry[k] in corrupt for k in ("path", "document")))


def _target_view(record, name, deployment, base, corrupt):
    target = record["targets"][name]
    probe = ((deployment or {}).get("health") or {}).get("probe") or {}
    files = [
        {
            "name": file_name,
            "sha256": entry.get("sha256"),
            "path": entry.get("path"),
            "href": _href(entry.get("path"), base) or _document_href(entry.get("document"), record["jobId"]),
            "corrupt": _corrupt(entry, corrupt),
        }
        for file_name, entry in sorted((target.get("evidence") or {}).items())
    ]
    rollback = target.get("rollback") or {}
    verify = next((p.get("status") for p in target.get("phases") or [] if p.get("name") == "verify"), None)
    return {
        "name": name,
        "status": target.get("status"),
        "badge": _badge(target.get("status")),
        "before": target.get("statusBeforeRollback"),
        "batch": (target.get("batch") or 0) + 1,
        "id": target.get("targetId"),
        "type": target.get("targetType"),
        "endpoint": target.get("endpoint"),
        "project": target.get("projectName"),
        "slot": target.get("slot"),
        "reason": target.get("reason"),
        "code": target.get("code"),
        "rollbackError": target.get("rollbackError"),
        "rollbackSkipped": target.get("rollbackSkipped"),
        "restored": rollback.get("restoredRevisionPath"),
        "previous": target.get("previousRevisionPath"),
        "appliedBy": target.get("appliedByJobId"),
        "phases": _phases(target, "phases"),
        "rollbackPhases": _phases(target, "rollbackPhases"),
        "probe": {
            "status": probe.get("healthProbe.status"),
            "badge": _badge(probe.get("healthProbe.status")),
            "rows": [(k, v) for k, v in _flat(probe) if k != "healthProbe.status"],
        }
        if probe
        else None,
        "verify": verify,
        "verifyBadge": _badge(verify),
        "hashes": _hashes(target, deployment),
        "files": files,
    }


def _rollback_view(record, evidence):
    rollback = record.get("rollback") or {}
    order = " \u2192 ".join(", ".join(batch) for batch in rollback.get("batches") or [])
    view = {
        "status": rollback.get("status"),
        "badge": _badge(rollback.get("status")),
        "present": bool(rollback),
        "rows": [
            ("Attempted", _yes(rollback.get("attempted"))),
            ("Automatic", _yes(rollback.get("automatic"))),
            ("Skipped because", rollback.get("skipReason")),
            ("Setting from", rollback.get("source")),
            ("Reason", rollback.get("reason")),
            ("Order (reverse batch order)", order),
            ("Started", rollback.get("startedAt")),
            ("Completed", rollback.get("completedAt")),
        ],
        "skipped": sorted((rollback.get("skipped") or {}).items()),
        "proof": None,
    }
    if evidence:
        drift = verify_rollback_evidence(evidence)
        view["proof"] = {
            "proofStatus": evidence.get("proofStatus"),
            "proofBadge": _badge(evidence.get("proofStatus")),
            "proofDigest": evidence.get("proofDigest"),
            "orderProofStatus": evidence.get("orderProofStatus"),
            "orderBadge": _badge(evidence.get("orderProofStatus")),
            "orderProofDigest": evidence.get("orderProofDigest"),
            "drift": ", ".join(drift) if drift else None,
            "failure": _failure_text(evidence.get("failure")),
            "targets": [
                {
                    "name": t.get("targetName") or t.get("targetId"),
                    "id": t.get("targetId"),
                    "hasDigestProof": t.get("hasDigestProof"),
                    "missing": t.get("missingProofReason"),
                    "current": t.get("currentDigest"),
                    "rollback": t.get("rollbackDigest"),
                }
                for t in evidence.get("targets") or []
            ],
            "orders": [
                (
                    key,
                    [
                        (
                            e.get("batchIndex"),
                            (e.get("target") or {}).get("targetName"),
                            e.get("status"),
                            _badge(e.get("status")),
                        )
                        for e in evidence.get(key) or []
                    ],
                )
                for key in ("deploymentOrder", "rollbackOrder")
            ],
        }
    return view


def _view(record, evidence_files, rollback, deployments, base, corrupt):
    release = record.get("release") or {}
    gates = {g.get("batch"): g for g in record.get("gates") or []}
    batches = []
    for index, batch in enumerate(record.get("batches") or []):
        gate = gates.get(index)
        verdict = None if gate is None else ("proceed" if gate.get("proceed") else "stop")
        batches.append(
            {
                "number": index + 1,
                "targets": batch,
                "gate": verdict,
                "badge": _badge(verdict),
                "reason": (gate or {}).get("reason"),
                "at": (gate or {}).get("at"),
                "failed": ", ".join((gate or {}).get("failedTargets") or []),
            }
        )
    traffic = [
        dict(
            _traffic(t.get("evidence"), "strategy.traffic."),
            batch=(t.get("batch") or 0) + 1,
            at=t.get("at"),
            failure=t.get("failure"),
        )
        for t in record.get("traffic") or []
    ]
    back = record.get("trafficRollback")
    if back:
        traffic.append(
            dict(
                _traffic(back.get("evidence"), "strategy.traffic.rollback."),
                batch="rollback",
                at=back.get("at"),
                failure=back.get("failure"),
            )
        )
    targets = [
        _target_view(record, name, (deployments or {}).get(name), base, corrupt)
        for name in record.get("targetOrder") or sorted(record.get("targets") or {})
    ]
    files = [
        {
            "name": name,
            "sha256": entry.get("sha256"),
            "href": _href(entry.get("path") or name, base) or urllib.parse.quote(name),
            "corrupt": _corrupt(entry, corrupt),
        }
        for name, entry in sorted((evidence_files or {}).items())
    ]
    job_hashes = [("job evidenceDigest", job_evidence(record)["evidenceDigest"])]
    if (record.get("scriptGraphProof") or {}).get("proofDigest"):
        job_hashes.append(("scriptGraphProof proofDigest", record["scriptGraphProof"]["proofDigest"]))
    if rollback:
        job_hashes += [
            ("rollback proofDigest", rollback.get("proofDigest")),
            ("rollback orderProofDigest", rollback.get("orderProofDigest")),
        ]
    job_hashes += [
        ("image %s" % ref, (info or {}).get("digest")) for ref, info in sorted((record.get("resolution") or {}).items())
    ]
    job_hashes += [("%s sha256" % f["name"], f["sha256"]) for f in files]
    status = record.get("status")
    return {
        "job": record.get("jobId"),
        "status": status,
        "statusClass": "st-" + (status if status in STATUS_COLOURS else "other").lower(),
        "promotion": record.get("promotion"),
        "reason": record.get("reason"),
        "code": record.get("code"),
        "kind": record.get("kind"),
        "strategy": record.get("strategy"),
        "sourceJob": record.get("sourceJobId"),
        "summary": [
            ("Release id", release.get("id")),
            ("Release", " ".join(str(release[k]) for k in ("name", "version") if release.get(k))),
            ("Tenant", record.get("tenant")),
            ("Environment", record.get("environment")),
            ("Application", record.get("application")),
            ("Strategy", record.get("strategy")),
            ("Job kind", record.get("kind")),
            ("Job id source", record.get("jobIdSource")),
            ("Created", record.get("createdAt")),
            ("Started", record.get("startedAt")),
            ("Completed", record.get("completedAt")),
            ("Record revision", record.get("revision")),
        ],
        "config": _flat(masked(record.get("strategyConfig") or {})),
        "options": _flat(masked(record.get("options") or {})),
        "batches": batches,
        "targets": targets,
        "traffic": traffic,
        "rollback": _rollback_view(record, rollback),
        "events": [
            (e.get("kind"), e.get("at"), ", ".join(e.get("targets") or []) or e.get("error"))
            for e in record.get("events") or []
        ],
        "files": files,
        "jobHashes": [(k, v) for k, v in job_hashes if v],
        "corrupt": sorted(corrupt),
        "colours": STATUS_COLOURS,
        "phaseColours": PHASE_COLOURS,
    }


TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Job {{ v.job }}: {{ v.status }}</title>
<style>
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:#1f2328;background:#f6f8fa}
header.banner{padding:22px 32px 18px;color:#fff;min-height:96px}
{% for s, c in v.colours.items() %}.st-{{ s|lower }}{background:{{ c }}}{% endfor %} .st-other{background:#57606a}
header.banner h1{margin:0;font-size:30px;letter-spacing:.5px}header.banner p{margin:4px 0 0;font-size:15px}
header.banner .reason{font-weight:600}
main{padding:16px 32px 40px;max-width:1240px}
section{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:12px 18px;margin:0 0 16px}
h2{font-size:18px;margin:2px 0 10px}h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;width:100%;margin:0 0 6px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{font-weight:600;color:#57606a;white-space:nowrap}
table.kv th{width:210px}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;word-break:break-all}
.when,.nowrap{white-space:nowrap;word-break:normal}
.badge{display:inline-block;padding:0 9px;border-radius:10px;color:#fff;font-size:12px;font-weight:600;line-height:20px}
.ok{background:#1a7f37}.bad{background:#b91c1c}.warn{background:#b45309}.info{background:#1d4ed8}
.muted{background:#6e7781}
.bar{display:flex;height:16px;background:#eaeef2;border-radius:3px;overflow:hidden;min-width:320px}
.bar span{display:block;height:100%;border-right:1px solid #fff}
.target{border-top:2px solid #d0d7de;padding-top:8px;margin-top:12px}.note{color:#57606a}
.legend span{display:inline-block;width:12px;height:12px;vertical-align:middle;margin:0 4px 0 12px}
</style></head>
<body>
{% macro badge(text, cls) %}{% if text is not none %}<span class="badge {{ cls }}">{{ text }}</span>{% endif %}
{% endmacro %}
{% macro kv(rows) %}<table class="kv">{% for k, val in rows %}{% if val is not none and val != "" %}
<tr><th>{{ k }}</th><td>{{ val }}</td></tr>{% endif %}{% endfor %}</table>{% endmacro %}
<header class="banner {{ v.statusClass }}" data-status="{{ v.status }}">
<h1 id="status">{{ v.status }}</h1>
<p>Deployment job <span class="mono" id="job-id">{{ v.job }}</span>
{% if v.kind == "rollback" %} (rollback of job {{ v.sourceJob }}){% endif %}
 &middot; promotion {{ v.promotion }}{% if v.code %} &middot; code {{ v.code }}{% endif %}</p>
{% if v.reason %}<p class="reason">{{ v.reason }}</p>{% endif %}
{% if v.corrupt %}<p class="reason" id="corrupt">Corrupt evidence (it does not hash to the SHA-256 recorded with it,
or is no JSON document; nothing of it is shown): {{ v.corrupt|join(", ") }}</p>{% endif %}
{% if v.rollback.status or v.rollback.proof %}<p>Rollback {{ v.rollback.status or "not finished" }}
{% if v.rollback.proof %} &middot; proofStatus {{ v.rollback.proof.proofStatus }}
 &middot; orderProofStatus {{ v.rollback.proof.orderProofStatus }}{% endif %}</p>{% endif %}
</header>
<main>
<section id="release"><h2>Release</h2>{{ kv(v.summary) }}
{% if v.config %}<h3>Strategy configuration</h3>{{ kv(v.config) }}{% endif %}
{% if v.options %}<h3>Job options</h3>{{ kv(v.options) }}{% endif %}</section>

<section id="batches"><h2>Batch plan</h2>
<table><tr><th>Batch</th><th>Targets</th><th>Gate</th><th>Reason</th><th>Decided</th></tr>
{% for b in v.batches %}<tr><td>{{ b.number }}</td><td class="nowrap">{{ b.targets|join(", ") }}</td>
<td>{{ badge(b.gate, b.badge) }}{% if b.failed %} failed: {{ b.failed }}{% endif %}</td><td>{{ b.reason }}</td>
<td class="mono when">{{ b.at }}</td></tr>{% endfor %}
</table></section>

<section id="timeline"><h2>Timeline per target</h2>
<p class="legend note">Bar widths are each phase's share of the target's recorded time.
{% for name, c in [("succeeded", v.phaseColours.ok), ("failed", v.phaseColours.bad), ("skipped", v.phaseColours.muted)] %}
<span style="background:{{ c }}"></span>{{ name }}{% endfor %}</p>
<table><tr><th>Target</th><th>Status</th><th>Deployment phases</th><th>Time</th><th>Rollback phases</th><th>Time</th></tr>
{% for t in v.targets %}<tr><td class="nowrap">{{ t.name }}</td><td>{{ badge(t.status, t.badge) }}</td>
{% for p in (t.phases, t.rollbackPhases) %}<td>{% if p.rows %}<div class="bar">{% for r in p.rows %}
<span style="width:{{ r.width }};background:{{ r.colour }}" title="{{ r.name }} {{ r.status }} {{ r.duration }}"></span>
{% endfor %}</div>{% else %}<span class="note">none</span>{% endif %}</td><td>{{ p.total }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% for t in v.targets %}<div class="target" id="target-{{ loop.index }}">
<h3>{{ t.name }} {{ badge(t.status, t.badge) }}
{% if t.before %} <span class="note">before the rollback: {{ t.before }}</span>{% endif %}</h3>
{{ kv([("Batch", t.batch), ("Target id", t.id), ("Type", t.type), ("Endpoint", t.endpoint), ("Project", t.project),
       ("Slot", t.slot), ("Reason", t.reason), ("Code", t.code), ("Rollback error", t.rollbackError),
       ("Not rolled back", t.rollbackSkipped), ("Retained revision", t.previous), ("Restored revision", t.restored),
       ("Applied by job", t.appliedBy)]) }}
{% for title, p in (("Deployment phases", t.phases), ("Rollback phases", t.rollbackPhases)) %}{% if p.rows %}
<table><tr><th>{{ title }}</th><th>Status</th><th>Duration</th><th>Completed</th></tr>
{% for r in p.rows %}<tr><td>{{ r.name }}</td><td>{{ badge(r.status, r.badge) }}</td><td>{{ r.duration }}</td>
<td class="mono when">{{ r.completedAt }}</td></tr>{% endfor %}</table>{% endif %}{% endfor %}
</div>{% endfor %}</section>

<section id="probes"><h2>Probe results</h2>
{% for t in v.targets %}<h3>{{ t.name }}{% if t.probe %} {{ badge(t.probe.status, t.probe.badge) }}{% endif %}</h3>
{% if t.probe %}{{ kv(t.probe.rows) }}{% elif t.verify %}<p>verify phase {{ badge(t.verify, t.verifyBadge) }}
 <span class="note">(no deployment evidence with the probe's details)</span></p>
{% else %}<p class="note">no probe ran</p>{% endif %}{% endfor %}</section>

<section id="traffic"><h2>Traffic evidence</h2>
{% if v.traffic %}<table><tr><th>Step</th><th>Mode</th><th>Status</th><th>Shifted</th><th>Adapter</th><th>Slot</th>
<th>Control / treatment</th><th>Reason</th><th>At</th></tr>
{% for s in v.traffic %}<tr><td>{{ "batch %s" % s.batch if s.batch != "rollback" else "rollback" }}</td>
<td>{{ s.mode }}</td><td>{{ badge(s.status, s.badge) }}</td><td>{{ s.shifted|tojson }}</td>
<td>{{ s.adapter or "none" }}</td><td>{{ s.slot }}</td>
<td>{% if s.control is not none %}{{ s.control }} / {{ s.treatment }}{% endif %}</td>
<td>{{ s.reason }}{% if s.failure %} <strong>{{ s.failure.code }}: {{ s.failure.reason }}</strong>{% endif %}
{% for k, x in s.extra %}<br><span class="note">{{ k }}: {{ x }}</span>{% endfor %}</td>
<td class="mono when">{{ s.at }}</td></tr>{% endfor %}</table>
{% else %}<p class="note">No traffic step was recorded (strategy {{ v.strategy }} moves no traffic).</p>{% endif %}
</section>

<section id="rollback"><h2>Rollback {% if v.rollback.status %}{{ badge(v.rollback.status, v.rollback.badge) }}{% endif %}
</h2>
{% if v.rollback.present %}{{ kv(v.rollback.rows) }}
{% if v.rollback.skipped %}<h3>Targets not rolled back</h3>{{ kv(v.rollback.skipped) }}{% endif %}
{% else %}<p class="note">No rollback was needed or decided.</p>{% endif %}
{% set p = v.rollback.proof %}{% if p %}<h3>Proof (release.rollback.evidence.v1)</h3>
<table class="kv"><tr><th>proofStatus</th><td id="proof-status">{{ badge(p.proofStatus, p.proofBadge) }}</td></tr>
<tr><th>proofDigest</th><td class="mono">{{ p.proofDigest }}</td></tr>
<tr><th>orderProofStatus</th><td id="order-proof-status">{{ badge(p.orderProofStatus, p.orderBadge) }}</td></tr>
<tr><th>orderProofDigest</th><td class="mono">{{ p.orderProofDigest }}</td></tr>
<tr><th>Digest check</th><td>{% if p.drift %}{{ badge("drift: " ~ p.drift, "bad") }}
{% else %}{{ badge("digests match the evidence", "ok") }}{% endif %}</td></tr>
{% if p.failure %}<tr><th>Failure</th><td>{{ p.failure }}</td></tr>{% endif %}</table>
<table><tr><th>Target</th><th>hasDigestProof</th><th>missingProofReason</th><th>currentDigest</th><th>rollbackDigest</th>
</tr>
{% for t in p.targets %}<tr><td>{{ t.name }}</td>
<td>{{ badge(t.hasDigestProof|tojson, "ok" if t.hasDigestProof else "bad") }}</td><td>{{ t.missing }}</td>
<td class="mono">{{ t.current }}</td><td class="mono">{{ t.rollback }}</td></tr>{% endfor %}</table>
{% for key, rows in p.orders %}<h3>{{ key }}</h3><table><tr><th>Batch</th><th>Target</th><th>Status</th></tr>
{% for b, n, s, c in rows %}<tr><td>{{ b + 1 }}</td><td>{{ n }}</td><td>{{ badge(s, c) }}</td></tr>{% endfor %}
</table>{% endfor %}
{% endif %}
{% if v.events %}<h3>Events</h3><table>{% for k, at, what in v.events %}
<tr><td>{{ k }}</td><td class="mono when">{{ at }}</td><td>{{ what }}</td></tr>{% endfor %}</table>{% endif %}
</section>

<section id="hashes"><h2>Artifact hashes</h2><table><tr><th>Of</th><th>What</th><th>Hash</th></tr>
{% for k, h in v.jobHashes %}<tr><td>job</td><td>{{ k }}</td><td class="mono">{{ h }}</td></tr>{% endfor %}
{% for t in v.targets %}{% for k, h in t.hashes %}
<tr><td>{{ t.name }}</td><td>{{ k }}</td><td class="mono">{{ h }}</td></tr>{% endfor %}{% for f in t.files %}
<tr><td>{{ t.name }}</td><td>{{ f.name }} sha256</td><td class="mono">{{ f.sha256 }}</td></tr>{% endfor %}{% endfor %}
</table></section>

<section id="evidence"><h2>Evidence files</h2><table><tr><th>File</th><th>SHA-256</th></tr>
{% for f in v.files %}<tr><td><a href="{{ f.href }}">{{ f.name }}</a>{% if f.corrupt %} {{ badge("corrupt", "bad") }}
{% endif %}</td><td class="mono">{{ f.sha256 }}</td></tr>
{% endfor %}
{% for t in v.targets %}{% for f in t.files %}<tr><td>{% if f.href %}<a href="{{ f.href }}">{{ t.name }}: {{ f.name }}</a>
{% else %}{{ t.name }}: {{ f.name }} <span class="note mono">{{ f.path }}</span>{% endif %}
{% if f.corrupt %} {{ badge("corrupt", "bad") }}{% endif %}</td>
<td class="mono">{{ f.sha256 }}</td></tr>{% endfor %}{% endfor %}
</table>{% if not v.files %}
<p class="note">The job's own evidence files were not given (stella report --evidence-dir DIR links them).</p>
{% endif %}</section>
</main></body></html>
"""


def render_report(record, evidence_files=None, rollback_evidence=None, deployments=None, base=None, corrupt=()):
    """The report page (str) of ``record``. ``evidence_files``: ``{name: {"path", "sha256"}}`` of the job's
    evidence (``job.json``, ``rollback-evidence.json``); ``rollback_evidence``: the parsed
    ``rollback-evidence.json`` (else derived from the record when its rollback ran); ``deployments``:
    ``{target: deployment.json}`` for probe details and lock / sticker hashes; ``base``: the directory
    the page will live in, so every link is relative to it; ``corrupt``: the paths or store names of
    evidence documents that failed their check (shown as corrupt; their contents are not given). Pure."""
    if rollback_evidence is None:
        rollback_evidence = _rollback_evidence(record)
    secrets = collect_secrets([record, deployments, rollback_evidence])

    def finalize(value):
        if value is None:
            return ""
        if isinstance(value, markupsafe.Markup):  # a macro's output: its values went through here already
            return value
        return redact_text(redact_url(value if isinstance(value, str) else str(value)), secrets)

    environment = jinja2.Environment(
        autoescape=True, finalize=finalize, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    view = _view(record, evidence_files, rollback_evidence, deployments, base, set(corrupt or ()))
    return environment.from_string(TEMPLATE).render(v=view)


def _read_json(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None, None
    try:
        return data, json.loads(data)
    except ValueError:
        return data, None


def _check(path, data, sha256, corrupt):
    """The JSON document of the evidence file ``path`` (``data``: its bytes) when it hashes to ``sha256``
    (``None``: not known) and is JSON, else ``None`` with its ``evidence_corrupt`` error in ``corrupt``."""
    if sha256 and sha256_bytes(data) != sha256:
        corrupt[path] = StellaError(
            CORRUPT, "the evidence file %s does not hash to the SHA-256 recorded with it (%s)" % (path, sha256)
        )
        return None
    try:
        return json.loads(data)
    except ValueError:
        corrupt[path] = StellaError(CORRUPT, "the evidence file %s is no JSON document" % path)
        return None


def load_evidence(record, directory, recorded=None, corrupt=None):
    """``(evidence_files, rollback evidence, deployments)`` read from the job's evidence ``directory``
    (``<evidence_dir>/jobs/<jobId>``; ``None``: none) and each target's ``deployment.json`` the record names.
    Each file is checked against the SHA-256 recorded with it (a ``deployment.json``'s in the record, the
    job's own files' in ``recorded``, ``{file name: sha256}``, when known) and must be JSON: one that is not
    is never read as evidence, its entry gets ``"corrupt": True`` and its ``evidence_corrupt`` error is added
    to ``corrupt`` (``{path: error}``) when given."""
    files, rollback, corrupt = {}, None, {} if corrupt is None else corrupt
    for name in JOB_FILES if directory else ():
        path = os.path.join(directory, name)
        data, _document = _read_json(path)
        if data is not None:
            files[name] = {"path": path, "sha256": sha256_bytes(data)}
            document = _check(path, data, (recorded or {}).get(name), corrupt)
            if path in corrupt:
                files[name]["corrupt"] = True
            elif name == ROLLBACK_EVIDENCE_FILE:
                rollback = document
    deployments = {}
    for name, target in (record.get("targets") or {}).items():
        entry = (target.get("evidence") or {}).get("deployment.json") or {}
        data, _document = _read_json(entry["path"]) if entry.get("path") else (None, None)
        document = None if data is None else _check(entry["path"], data, entry.get("sha256"), corrupt)
        if isinstance(document, dict):
            deployments[name] = document
    return files, rollback, deployments


def write_report(record, directory, recorded=None, corrupt=None):
    """Write ``<directory>/report.html`` atomically (``directory``: the job's evidence directory, where
    ``job.json`` is); returns ``{"path", "sha256"}``. ``recorded``, ``corrupt``: as :func:`load_evidence`'s."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    corrupt = {} if corrupt is None else corrupt
    files, rollback, deployments = load_evidence(record, directory, recorded, corrupt)
    data = render_report(record, files, rollback, deployments, base=os.path.abspath(directory), corrupt=corrupt).encode(
        "utf-8"
    )
    path = os.path.join(directory, REPORT_FILE)
    atomic_write(path, data, mode=0o640)
    return {"path": path, "sha256": sha256_bytes(data)}
