# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The evidence report of a deployment job: one self-contained HTML page for people (docs/report.md).

:func:`render_report` is pure: the job record (and, when known, the evidence files written for it, the
job's ``release.rollback.evidence.v1`` and each target's ``deployment.json``) in, HTML out; what the page
shows comes from :func:`.report_view.report_view`, the page itself is :data:`TEMPLATE`. The page has
inline CSS only, no script and no external address; every value is escaped, links are relative, and
values under secret-bearing keys (``secretEnv``, registry credentials, passwords, tokens, headers) are
never shown: they are collected first and masked wherever they would appear. :func:`evidence_from` checks
the job's evidence files, as their reader hands them over (command/report_files.py reads the job's
evidence directory and writes ``report.html`` beside ``job.json``): an evidence document that does not
hash to the SHA-256 recorded with it, or is no JSON document, is shown as corrupt and its contents are
never used (``evidence_corrupt``). Pure, no I/O.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jinja2
import markupsafe

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import collect_secrets
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    JOB_EVIDENCE_FILE,
    ROLLBACK_EVIDENCE_FILE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.report_view import report_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import rollback_evidence as _rollback_evidence

REPORT_FILE = "report.html"
JOB_FILES = (JOB_EVIDENCE_FILE, ROLLBACK_EVIDENCE_FILE)
CORRUPT = "evidence_corrupt"


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
{% if v.options %}<h3>Job options</h3>{{ kv(v.options) }}{% endif %}
{% if v.signatures %}<h3 id="signatures">Image signatures</h3>
<table><tr><th>Image</th><th>Verdict</th><th>Key (fingerprint, path)</th><th>Found</th><th>Signature</th></tr>
{% for s in v.signatures %}<tr><td class="mono">{{ s.image or s.reference }}</td><td>{{ badge(s.status, s.badge) }}</td>
<td class="mono">{{ s.key }}</td><td>{{ s.source }}{% if s.identity %} ({{ s.identity }}){% endif %}</td>
<td class="mono">{{ s.signatureDigest }}</td></tr>{% endfor %}</table>{% endif %}</section>

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


def render_report(
    record: JobRecord,
    evidence_files: Mapping[str, Mapping[str, Any]] | None = None,
    rollback_evidence: Mapping[str, Any] | None = None,
    deployments: Mapping[str, Mapping[str, Any]] | None = None,
    base: str | None = None,
    corrupt: Iterable[str] = (),
) -> str:
    """The report page (str) of ``record``. ``evidence_files``: ``{name: {"path", "sha256"}}`` of the job's
    evidence (``job.json``, ``rollback-evidence.json``); ``rollback_evidence``: the parsed
    ``rollback-evidence.json`` (else derived from the record when its rollback ran); ``deployments``:
    ``{target: deployment.json}`` for probe details and lock / sticker hashes; ``base``: the directory
    the page will live in, so every link is relative to it; ``corrupt``: the paths or store names of
    evidence documents that failed their check (shown as corrupt; their contents are not given). Pure."""
    if rollback_evidence is None:
        rollback_evidence = _rollback_evidence(record)
    secrets = collect_secrets([record, deployments, rollback_evidence])

    def finalize(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, markupsafe.Markup):  # a macro's output: its values went through here already
            return value
        shown: str = redact_text(redact_url(value if isinstance(value, str) else str(value)), secrets)
        return shown

    environment = jinja2.Environment(
        autoescape=True, finalize=finalize, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    view = report_view(record, evidence_files, rollback_evidence, deployments, base, set(corrupt or ()))
    page: str = environment.from_string(TEMPLATE).render(v=view)
    return page


def checked_evidence(path: str, data: bytes, sha256: str | None, corrupt: dict[str, StellaError]) -> Any:
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


def evidence_from(
    record: JobRecord,
    directory: str | None,
    read: Callable[[str], bytes | None],
    recorded: Mapping[str, str] | None = None,
    corrupt: dict[str, StellaError] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """``(evidence_files, rollback evidence, deployments)`` of the job's evidence ``directory``
    (``<evidence_dir>/jobs/<jobId>``; ``None``: none) and each target's ``deployment.json`` the record names,
    their bytes as ``read`` returns them (``None``: the file cannot be read). Each file is checked against the
    SHA-256 recorded with it (a ``deployment.json``'s in the record, the job's own files' in ``recorded``,
    ``{file name: sha256}``, when known) and must be JSON: one that is not is never read as evidence, its
    entry gets ``"corrupt": True`` and its ``evidence_corrupt`` error is added to ``corrupt`` (``{path:
    error}``) when given."""
    files: dict[str, dict[str, Any]] = {}
    rollback: dict[str, Any] | None = None
    corrupt = {} if corrupt is None else corrupt
    job_files = [(name, posixpath.join(directory, name)) for name in JOB_FILES] if directory else []
    for name, path in job_files:
        data = read(path)
        if data is not None:
            files[name] = {"path": path, "sha256": sha256_bytes(data)}
            document = checked_evidence(path, data, (recorded or {}).get(name), corrupt)
            if path in corrupt:
                files[name]["corrupt"] = True
            elif name == ROLLBACK_EVIDENCE_FILE:
                rollback = document
    deployments: dict[str, dict[str, Any]] = {}
    for name, target in (record.get("targets") or {}).items():
        entry = (target.get("evidence") or {}).get("deployment.json") or {}
        data = read(entry["path"]) if entry.get("path") else None
        document = None if data is None else checked_evidence(entry["path"], data, entry.get("sha256"), corrupt)
        if isinstance(document, dict):
            deployments[name] = document
    return files, rollback, deployments
