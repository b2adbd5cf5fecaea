# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Every stable failure code of the collection, and what an operator does next about it.

``CODES`` is the one list of stable codes (docs/faults.md has one line for each, tested) and the one home
of the ``next`` hints: one line naming the option or command to use. A failure result, a job record's
failed target and the ``stella`` command's error line carry the hint of their code as ``next``
(:func:`next_step`, :func:`with_next`). ``None``: nothing an operator changes fixes it (a bug to
report, or a state that is the answer itself). Pure and standard library only: both sides import it.
"""

from __future__ import annotations

_REPORT = "a bug in the collection: report it with the task's output at -vvv"
_RELEASE = "fix the release file and run the job again (docs/release-input.md)"
_REGISTRY_AUTH = (
    "give the registry's credentials: registry_credentials (stella_registry_credentials / "
    "deploy_registry_credentials), or docker login REGISTRY on the controller"
)
_SHOW = "stella show JOB names the target and its phases; run the job again once the cause is fixed"

CODES = {
    # ------------------------------------------------------------------ preflight (the contract's codes)
    "runtime_missing": "install Docker on the target (stellaops.runtime.runtime_install, docs/runtime-install.md)",
    "runtime_daemon_unavailable": "start the Docker daemon on the target (systemctl start docker) or fix DOCKER_HOST",
    "runtime_version_too_old": "upgrade Docker Engine / the Compose plugin on the target, or lower "
    "min_engine_version / min_compose_version (stella_min_engine_version)",
    "compose_missing": "install the Docker Compose v2 plugin on the target (docker compose version must answer)",
    "registry_unreachable": "check the registry address, network and certificate from the target; a plain-HTTP "
    "registry goes in insecure_registries",
    "registry_auth_failed": _REGISTRY_AUTH,
    "platform_unsupported": "build or pick an image with a linux platform of the target's architecture "
    "(docker manifest inspect IMAGE)",
    "workdir_not_writable": "connect as a user that may write the work directory (root, or become: true), or "
    "choose another: workDirectory in the release, work_directory of the module",
    "disk_space_low": "free space in the work directory's file system, or lower minimum_free_disk_bytes "
    "(preflight_minimum_free_disk_bytes)",
    # ------------------------------------------------------------------ task input and artifacts
    "invalid_payload": "fix the task's payload or options named in the message (module docs: ansible-doc MODULE)",
    "invalid_request": "fix the option named in the message (ansible-doc stellaops.runtime.stella_preflight)",
    "invalid_image_reference": "write the image as [registry/]repository[:tag][@sha256:digest]",
    "invalid_hook": _RELEASE,
    "invalid_manifest_hash": "pass the plan's manifest hash (sha256 and 64 hex digits) or leave it out",
    "artifact_missing": "plan the release again (stellaops.runtime.stella_plan) and pass every artifact it wrote",
    "artifact_invalid": "plan the release again (stellaops.runtime.stella_plan); do not edit the planned artifacts",
    "artifact_hash_mismatch": "plan the release again (stellaops.runtime.stella_plan); do not edit the planned artifacts",
    "artifact_unknown": "plan the release again (stellaops.runtime.stella_plan); do not edit the planned artifacts",
    "lock_invalid": "plan the release again (stellaops.runtime.stella_plan); do not edit compose.stella.lock.yml",
    "image_not_pinned": "plan the release again: stella_plan pins every image to a digest",
    "label_missing": "deploy through stella_plan's payload: it sets every Stella label",
    "wrong_host": "point the inventory host at the target the release names (its Target id and endpoint)",
    "target_type_unsupported": "use a target of type ComposeHost or DockerHost",
    # ------------------------------------------------------------------ planning
    "release_invalid": _RELEASE,
    "image_unresolved": "check the registry and tag (docker manifest inspect IMAGE), give credentials, or pin "
    "the digest in the release",
    "registry_rate_limited": "wait, log in (docker login REGISTRY) for a higher limit, or use a mirror",
    "requests_missing": "python3 -m pip install -r requirements.txt in the controller's Python (docs/install.md)",
    "graph_proof_failed": "fix the release's scripts and dependencies named in the proof's issues",
    "graph_proof_input_invalid": _REPORT,
    "missing_dependency": "add the missing script, or drop it from dependsOn in the release",
    "dependency_version_mismatch": "make the dependency's version in the release match the script it names",
    "duplicate_node": "give each script of the release its own id",
    "cycle_detected": "break the dependency cycle between the release's scripts",
    "start_depends_on_update": "remove the start script's dependency on an update script",
    "probe_runner_invalid": _REPORT,
    "health_probe_config_invalid": "fix the component's healthProbe in the release (docs/probes.md)",
    "traffic_config_invalid": "fix strategyConfig.trafficAdapter in the release; credentials go in "
    "stella_traffic_adapter_options (docs/traffic.md)",
    # ------------------------------------------------------------------ apply and verify on the target
    "image_pull_failed": "check that the target reaches the registry (docker pull IMAGE on the target), then re-run",
    "image_missing": "re-run with pull_images: true, or load the image on the target",
    "digest_mismatch": "plan the release again: the tag moved since it was resolved",
    "compose_up_failed": "read the Compose error in msg, fix the release's compose file, then re-run",
    "docker_command_failed": "read the Docker error in msg on the target, then re-run",
    "inspect_failed": "check the Docker daemon on the target (docker ps), then re-run",
    "container_start_failed": "read the container's error (docker logs NAME on the target), fix it, then re-run",
    "container_stop_failed": "check the Docker daemon on the target (docker ps), then re-run",
    "container_remove_failed": "check the Docker daemon on the target (docker ps), then re-run",
    "container_rename_failed": "check the Docker daemon on the target (docker ps), then re-run",
    "service_not_running": "docker logs CONTAINER on the target says why it exited; roll back with "
    "stellaops.runtime.rollback",
    "service_unhealthy": "docker inspect CONTAINER on the target shows the failing healthcheck; roll back with "
    "stellaops.runtime.rollback",
    "health_probe_failed": "check the endpoint in the probe evidence; the job rolled back, stella show JOB says so",
    "hook_failed": "read hookResults (exit code, output) and fix the hook or its FailurePolicy in the release",
    "disk_full": "free space in the work directory's file system, then re-run",
    "io_error": "read the error in msg (a file in the project directory), fix it, then re-run",
    "deploy_failed": _SHOW,
    "preflight_failed": "read the preflight's failures: each has its own code and next step",
    # ------------------------------------------------------------------ rollback
    "no_revision": "no retained revision to restore: deploy the release to restore instead",
    "revision_tampered": "restore another revision (revision_path), or deploy the release again",
    "revision_path_rejected": "give a revision_path under the project's revisions/ directory",
    "rollback_already_done": "nothing to roll back: stella show JOB shows the rollback that ran (or runs); deploy again",
    "rollback_no_eligible_target": "no target of the job kept a previous revision: deploy the release to restore instead",
    "rollback_superseded": "nothing to undo: a newer deployment runs; stella list --project PROJECT shows it",
    "rollback_failed": "stella show JOB names the target; run stellaops.runtime.rollback -e stella_job_id=JOB",
    "rollback_unverified": "check the target's containers (docker ps), then run stellaops.runtime.rollback again",
    "both_digests_missing": _REPORT,
    "current_digest_missing": _REPORT,
    "rollback_digest_missing": _REPORT,
    "current_digest_invalid": _REPORT,
    "rollback_digest_invalid": _REPORT,
    "rollback_evidence_input_invalid": _REPORT,
    # ------------------------------------------------------------------ jobs and the job store
    "project_busy": "stella show JOB (the job named) to see it; stella interrupt JOB if its run is gone, or wait",
    "claim_superseded": "stella show JOB of the job that holds the project now; re-run only if its release "
    "should be replaced",
    "claim_lost": "restore the project's .stella-claim.json from its backup, or run a new job of the project "
    "once no older job of it can still be running (docs/job-store.md)",
    "target_unreachable": "check SSH to the target (ansible HOST -m ping), then run the job again",
    "strategy_gate_closed": _SHOW,
    "controller_step_failed": _SHOW,
    "job_not_planned": "the planning task's own code and next say what to fix; then run the job again",
    "job_interrupted": "stella show JOB shows where it stopped; run the job again to converge",
    "job_invalid": "fix the job's variables named in the message (docs/jobs.md)",
    "job_exists": "start the job with a new stella_job_id, or leave it out",
    "job_not_found": "stella list shows the jobs of this store; --store or --compose-project choose another",
    "job_running": "wait for it (stella show JOB --follow); interrupt only a run that is gone",
    "job_run_gone": "stella interrupt JOB records it interrupted and releases its projects",
    "job_state_invalid": "stella show JOB shows its status; only an unfinished job takes this step",
    "job_check_mode_unsupported": "run without --check, or use the job playbook's --check preview",
    "job_store_missing": "name the store: --store LOCATION, --compose-project PROJECT or $STELLA_JOB_STORE "
    "(playbooks: stella_job_store)",
    "job_store_ambiguous": "add --service SERVICE to say which service's store",
    "job_store_failed": "check the job store (its path or PostgreSQL server) named in the message, then re-run",
    "job_store_unsupported": "use a path, sqlite:///PATH or postgresql://... (docs/job-store.md)",
    "psutil_missing": "python3 -m pip install -r requirements.txt in the controller's Python (docs/install.md)",
    "evidence_remove_failed": "fix the directory's permissions, then run stella prune again",
    "evidence_immutable": "evidence is written once: run the job again (a new job) rather than re-recording this one",
    "evidence_conflict": "use an empty evidence directory (stella_evidence_dir, or the export's) or another job "
    "id: the file named is another job's evidence",
    "evidence_corrupt": "restore the job store from a backup: the document no longer matches its SHA-256",
    "evidence_invalid": "check what else writes to this job store: its document names must be relative paths",
    "evidence_write_failed": "fix the output directory's permissions or free space, then run stella evidence again",
    # ------------------------------------------------------------------ trust: signatures, signed evidence, drift
    "image_unsigned": "sign the image (cosign sign --key K IMAGE@DIGEST, or stella sign), or drop it from the "
    "image policy (docs/trust.md)",
    "image_signature_invalid": "sign this digest with a key the image policy trusts, or fix the policy's keys and "
    "identity (docs/trust.md)",
    "image_policy_invalid": "fix the image policy named in the message: readable PEM public keys (docs/trust.md)",
    "signing_key_invalid": "give the signing key's passphrase (STELLA_SIGNING_PASSPHRASE or its file) or another "
    "key (docs/trust.md)",
    "signature_push_failed": "check the registry and its credentials (docker login REGISTRY), then stella sign again",
    "evidence_signature_invalid": "the evidence is not what the controller signed: keep it as found and report it "
    "(docs/trust.md)",
    "trust_dependency_missing": "python3 -m pip install -r requirements/trust.txt in the controller's Python "
    "(docs/install.md)",
    "drift_check_failed": "read the failed task named in the message (ansible-playbook stellaops.runtime.verify -vvv), "
    "fix it, then run the check again",
    "runtime_drift": "stella verify --live names what differs: run the job again, or find who changed the host",
    # ------------------------------------------------------------------ traffic
    "traffic_adapter_missing": "configure strategyConfig.trafficAdapter, or set requireTrafficAdapter: false",
    "traffic_adapter_executor_missing": "use an adapter type the collection registers, and enable it (docs/traffic.md)",
    "traffic_adapter_failed": "check the adapter's endpoint in the job's traffic evidence (stella show JOB)",
    "traffic_adapter_rollback_failed": "put traffic back by hand; stella show JOB names the adapter and its error",
    # ------------------------------------------------------------------ relay
    "relay_address_invalid": "give a listen_address that an interface of the target has (docs/stella_relay.md)",
    "relay_bind_refused": "give the relay-link gateway's address as listen_address, not 0.0.0.0",
    "relay_pin_refused": "run the relay as root (become: true), or on a kernel 5.7 or newer",
    "relay_port_in_use": "choose another listen_port, or stop what holds it (ss -ltnp on the target)",
    "relay_start_failed": "read the relay's error in msg on the target, then re-run",
    # ------------------------------------------------------------------ managed runtime install
    "runtime_install_source_missing": "give a signed apt repository or an offline bundle (docs/runtime-install.md)",
    "runtime_install_source_not_allowed": "use a source the install's policy allows: offline takes a bundle only "
    "(docs/runtime-install.md)",
    "runtime_install_source_invalid": "fix the repository or bundle named in the message",
    "runtime_install_source_unreachable": "check that the target reaches the repository, or use an offline bundle",
    "runtime_install_failed": "read apt's error in msg on the target, then re-run",
    "runtime_install_unverified": "docker version and docker compose version on the target say what is missing",
    # ------------------------------------------------------------------ the Compose provider
    "collection_missing": "ansible-galaxy collection install stellaops.runtime (docs/install.md)",
    "collection_incompatible": "install the collection and the pip package of one version: pip install "
    "stellaops-runtime==VERSION, VERSION the collection's (docs/install.md)",
    "provider_dependency_missing": "run the pip install line in the message (docs/install.md)",
    "provider_option_missing": "add the option named to the service's provider.options in the compose file",
    "provider_run_failed": "stella show JOB --compose-project PROJECT shows the job the provider ran",
    "compose_unsupported": "upgrade the Docker Compose plugin, or drop the option that needs what it did not "
    "announce (docs/provider.md)",
    "local_image_missing": "docker compose pull (or docker compose up --build), then up again",
    "image_stream_invalid": _REPORT,
    "image_stream_refused": "docker compose pull, then up again",
    "image_load_failed": "check the target's Docker daemon and disk, then up again",
    "image_inspect_failed": "check the local Docker daemon (docker image ls), then up again",
    "relay_failed": "read the relay's error in the message, then up again",
    "teardown_failed": "check the target's Docker daemon, then down again",
    "image_stream_truncated": "docker compose pull (or docker compose up --build) again: nothing of the cut stream "
    "was loaded",
    "compose_protocol": "upgrade the Docker Compose plugin: its answer to the provider was not the JSON line "
    "expected (docs/provider.md)",
    "invalid_arguments": "call the provider as Compose does: stella compose --project-name=NAME COMMAND SERVICE "
    "(stella compose --help)",
    "invalid_option": "fix the service's provider.options named in the message in the compose file (docs/provider.md)",
    # ------------------------------------------------------------------ the stella command
    "report_write_failed": "give stella report an --output path in a writable directory with free space, or --output -",
    "version_unknown": "reinstall the collection (docs/install.md): its MANIFEST.json or galaxy.yml has no version",
    # ------------------------------------------------------------------ anything else
    "cancelled": None,
    "unsupported": None,
    "internal_error": _REPORT,
}


def next_step(code):
    """The ``next`` hint of ``code``: one line, or ``None`` (an unknown code, or one without a hint)."""
    return CODES.get(code) if isinstance(code, str) else None


def with_next(failure, key="code"):
    """``failure`` (a dict) with ``next`` set from its ``key`` when that code has a hint and ``next`` is not
    set yet; the same dict."""
    hint = next_step(failure.get(key))
    if hint and not failure.get("next"):
        failure["next"] = hint
    return failure


def error_line(code, reason):
    """``CODE: REASON; next: HINT`` (``; next`` only when ``code`` has a hint): how a command line prints a
    failure, on one line."""
    hint = next_step(code)
    return "%s: %s%s" % (code, " ".join(str(reason).split()), "; next: %s" % hint if hint else "")
