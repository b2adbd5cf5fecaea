"""The job evidence report (docs/report.md) of a REAL rolled-back job, read back in headless Chromium.

Two lab targets of the shared fleet (Debian 13): v1 through the real job playbook, then a v2 whose
post-deploy hook fails on the second target, so the job rolls back both targets automatically. v2's
release name carries markup and its ``secretEnv`` a planted secret. ``stella report`` renders the job's
page next to its evidence; Chromium (``/usr/bin/chromium``, headless, no network, a fresh profile) dumps
its DOM, which must show the status, every target, the rollback proof and every hash of the evidence,
and takes a screenshot, which must not be blank and must show the RolledBack banner colour at the top.

Fails (never skips) when the lab is not running or Chromium is missing.
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import secrets
import subprocess
import sys

from PIL import Image

import ansible_run as ar
import fleetkit as fl
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.report_view import STATUS_COLOURS

CHROMIUM = "/usr/bin/chromium"
STELLA = os.path.join(ar.ROOT, "scripts", "stella.py")
HASH = re.compile(r"sha256:[0-9a-f]{64}")
MARKUP_NAME = 'shop <script>document.title="pwned"</script>'


def chromium(profile, *args, timeout=180):
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--user-data-dir=%s" % profile,
    ] + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, "chromium failed (rc %d): %s" % (proc.returncode, proc.stderr[-2000:])
    return proc.stdout


def stella(*args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS)
    return subprocess.run(
        [sys.executable, STELLA, "report"] + list(args),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


class Dom(html.parser.HTMLParser):
    """What Chromium's serialized DOM holds: elements, attributes, the visible text."""

    def __init__(self, source):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.chunks, self.banner, self.title, self._in = [], [], [], None, "", None
        self.feed(source)
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v or "") for k, v in attrs)
        self._in = tag if tag in ("style", "title") else None
        if tag == "header":
            self.banner = dict(attrs)

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._in is None:
            self.chunks.append(data)


def rgb(colour):
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def near(pixel, colour, tolerance=10):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel[:3], colour))


def test_report_of_a_rolled_back_job_in_headless_chromium(lab, fleet, tmp_path):
    assert os.access(CHROMIUM, os.X_OK), "Chromium is missing: the lab installs Debian's chromium package"
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "report", free_port())
    t1, t2 = fj.names
    secret = "pl4nted-" + secrets.token_hex(8)
    try:
        v1 = fj.run(fj.release(strategy_config={"batchSize": 1}))
        assert v1.rc == 0, v1.output[-4000:]
        hook = {
            "name": "check-host",
            "phase": "post-deploy",
            "command": 'test "$(hostname)" != %s' % fleet[1]["hostname"],
        }
        release = fj.release("app_v2", "2.0.0", strategy_config={"batchSize": 1}, hooks=[hook])
        release["release"]["name"] = MARKUP_NAME
        release["secretEnv"] = {"REPORT_TOKEN": secret}
        v2 = fj.run(release, extra={"stella_job_report": True})
        assert v2.rc != 0, v2.output[-4000:]
        record = fj.job(v2.job_id)
        assert (record["status"], record["rollback"]["batches"]) == ("RolledBack", [[t2], [t1]]), record["reason"]
        job_dir = os.path.join(fj.evidence_dir, "jobs", v2.job_id)
        # the job playbook's own report (stella_job_report: true), written when the job closed
        with open(os.path.join(job_dir, "report.html"), encoding="utf-8") as handle:
            closed_page = handle.read()
        assert "RolledBack" in closed_page and secret not in closed_page
        os.remove(os.path.join(job_dir, "report.html"))
        with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as handle:
            job_doc = json.load(handle)
        with open(os.path.join(job_dir, "rollback-evidence.json"), encoding="utf-8") as handle:
            rollback = json.load(handle)
        deployments = {}
        for name in fj.names:
            with open(record["targets"][name]["evidence"]["deployment.json"]["path"], encoding="utf-8") as handle:
                deployments[name] = json.load(handle)

        # ---- stella report: a one-line error for an unknown job, the page next to the job's evidence
        missing = stella("no-such-job", "--store", fj.store_path, "--evidence-dir", fj.evidence_dir)
        assert missing.returncode == 1 and missing.stdout == "", missing
        assert (
            missing.stderr.startswith("stella report: job_not_found: no job no-such-job")
            and missing.stderr.count("\n") == 1
        ), missing.stderr
        made = stella(v2.job_id, "--store", fj.store_path, "--evidence-dir", fj.evidence_dir)
        page = os.path.join(job_dir, "report.html")
        assert (made.returncode, made.stdout, made.stderr) == (0, "report: %s\n" % page, ""), made
        with open(page, encoding="utf-8") as handle:
            source = handle.read()
        assert secret not in source and secret not in json.dumps(job_doc)

        # ---- the DOM as Chromium built it
        dom = Dom(chromium(str(tmp_path / "profile-dom"), "--dump-dom", "file://" + page))
        assert dom.banner["data-status"] == "RolledBack" and dom.text.startswith(
            "RolledBack Deployment job " + v2.job_id
        )
        assert dom.title.startswith("Job %s: RolledBack" % v2.job_id), dom.title  # the name's script never ran
        assert "script" not in dom.tags and MARKUP_NAME in dom.text, dom.tags
        assert not [a for a in dom.attrs if a[1] in ("src", "srcset") or a[1].startswith("on")]
        assert secret not in dom.text
        for text in (
            "Release %s 2.0.0" % MARKUP_NAME,
            "Tenant acme",
            "Application " + fj.application,
            "Strategy rolling",
            "1 %s proceed" % t1,
            "2 %s stop failed: %s" % (t2, t2),
            "proofStatus " + rollback["proofStatus"],
            "proofDigest " + rollback["proofDigest"],
            "orderProofStatus " + rollback["orderProofStatus"],
            "orderProofDigest " + rollback["orderProofDigest"],
            "digests match the evidence",
            "Order (reverse batch order) %s → %s" % (t2, t1),
            record["targets"][t2]["reason"],
        ):
            assert text in dom.text, text
        assert (rollback["proofStatus"], rollback["orderProofStatus"]) == ("complete", "complete")
        for entry in rollback["targets"]:
            assert "%s %s" % (entry["targetName"], json.dumps(entry["hasDigestProof"])) in dom.text, entry
        for name in fj.names:
            target = record["targets"][name]
            assert (
                "%s RolledBack" % name in dom.text
                and "before the rollback: %s" % target["statusBeforeRollback"] in dom.text
            ), name
            for phase in target["phases"] + target["rollbackPhases"]:
                assert re.search(r"\b%s %s \d" % (re.escape(phase["name"]), phase["status"]), dom.text), phase
            probe = deployments[name]["health"]["probe"] or {}  # none when the hook failed before the probe
            if probe.get("healthProbe.web.endpoint"):
                assert "healthProbe.web.endpoint " + probe["healthProbe.web.endpoint"] in dom.text
            artifacts = deployments[name]["artifacts"]
            for key in ("manifestHash", "composeLockHash", "versionStickerHash"):
                assert artifacts.get(key), (name, key, artifacts)
                assert "%s %s %s" % (name, key, artifacts[key]) in dom.text, (name, key)
            assert "%s manifestHash %s" % (name, target["manifestHash"]) in dom.text
        # every hash of the job's evidence and of every target's artifacts, and the files' own SHA-256
        expected = set(HASH.findall(json.dumps(rollback)))
        for name in fj.names:
            target = job_doc["targets"][name]
            expected |= {
                target["manifestHash"],
                target["currentDigest"],
                target["rollback"]["rollbackDigest"],
                target["evidence"]["deployment.json"]["sha256"],
            }
            expected |= set(HASH.findall(json.dumps(deployments[name]["artifacts"])))
        for name in ("job.json", "rollback-evidence.json"):
            with open(os.path.join(job_dir, name), "rb") as handle:
                expected.add(sha256_bytes(handle.read()))
        expected.add(job_doc["evidenceDigest"])
        assert len(expected) >= 12, expected
        assert sorted(h for h in expected if h not in dom.text) == []
        # relative links to the evidence, each of which exists
        hrefs = [v for tag, k, v in dom.attrs if tag == "a" and k == "href"]
        assert {"job.json", "rollback-evidence.json"} <= set(hrefs), hrefs
        for href in hrefs:
            assert not re.match(r"^([a-z][a-z0-9+.-]*:|/)", href, re.I), href
            assert os.path.isfile(os.path.normpath(os.path.join(job_dir, href))), href

        # ---- the screenshot: not blank, the RolledBack banner colour across the top
        shot = str(tmp_path / "report.png")
        chromium(
            str(tmp_path / "profile-shot"),
            "--screenshot=" + shot,
            "--window-size=1280,2000",
            "--hide-scrollbars",
            "file://" + page,
        )
        with Image.open(shot) as image:
            image = image.convert("RGB")
            width, height = image.size
            assert (width, height) == (1280, 2000), image.size
            pixels = image.load()
            top = [pixels[x, y] for y in range(4, 40, 2) for x in range(0, width, 4)]
            body = [pixels[x, y] for y in range(300, height, 7) for x in range(0, width, 7)]
        banner = rgb(STATUS_COLOURS["RolledBack"])
        share = sum(near(p, banner) for p in top) / len(top)
        assert share > 0.6, "RolledBack banner colour %s covers %.0f%% of the top rows" % (banner, share * 100)
        for other in ("Succeeded", "Failed"):
            assert sum(near(p, rgb(STATUS_COLOURS[other])) for p in top) / len(top) < 0.05, other
        assert len(set(body)) > 20, "the page body is blank (%d colours)" % len(set(body))
        assert sum(p != (255, 255, 255) and p != (246, 248, 250) for p in body) / len(body) > 0.02
    finally:
        fj.cleanup()
