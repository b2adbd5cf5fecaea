#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_preflight
short_description: Check that a target host can run a Stella Docker or Compose deployment
version_added: 0.1.0
description:
  - Runs on the target host before any image pull, Compose write or hook with side effects, and records
    the runtime contract's preflight evidence. OS and architecture, Docker client and server versions,
    daemon status, Compose plugin version, registry reachability, requested image platform compatibility,
    work directory write access and available disk space.
  - Every check runs even when an earlier one fails. The result always carries the full evidence in
    RV(preflight) and the list of failures in RV(failures), each a stable code with a one-line
    reason. The task fails when that list is not empty.
  - Read-only apart from the work directory write probe (a temporary file created, synced and deleted).
    It never installs anything.
  - Options are the contract's C(compose.preflight) payload keys in snake_case. The payload can also be
    given verbatim, with the contract's exact key names, in O(payload).
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
attributes:
  check_mode:
    support: full
    details: Preflight is read-only, so it runs unchanged in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  payload:
    description:
      - A C(compose.preflight) task payload with the contract's key names C(WorkDirectory),
        C(ImageReference), C(MinimumFreeDiskBytes), C(RegistryReachabilityMode) and C(RequireCompose).
      - An unknown key, or a key that contradicts the matching snake_case option, is an error.
    type: dict
  target_type:
    description:
      - Kind of target. Decides the default of O(require_compose).
    type: str
    choices: [DockerHost, ComposeHost]
    default: ComposeHost
  work_directory:
    description:
      - Stella-owned deployment work directory. When it does not exist yet, its nearest existing parent
        is probed instead (nothing is created).
      - Defaults to C(/var/lib/stella/projects) unless O(payload) has C(WorkDirectory).
    type: path
  image_reference:
    description:
      - Image the deployment will run. Its registry is checked for reachability, its repository for pull
        access and its manifest for a platform matching this host (C(linux/<arch>)).
      - Pull access is asked for the repository's pull scope (C(repository:<repository>:pull)) anonymously
        first; only when that is refused are the registry's credentials (O(registry_credentials),
        O(registry_username)) used. The platform check reuses the access negotiated.
      - Images of V(docker.io) are read from C(registry-1.docker.io).
      - When omitted, the registry access and platform checks are recorded as skipped.
    type: str
  minimum_free_disk_bytes:
    description:
      - Free space required in the work directory's file system.
      - Defaults to 1073741824 (1 GiB) unless O(payload) has C(MinimumFreeDiskBytes).
    type: int
  registry_reachability_mode:
    description:
      - V(http) calls the registry's C(/v2/) API. A registry that answers V(200), V(401) with a well-formed
        challenge (Basic, or Bearer with a realm) or V(429) (rate limit) is reachable. When it asks for
        auth and credentials for it were given, they are tried on C(/v2/) (Basic, or the Bearer token
        flow) and refused credentials fail with V(registry_auth_failed).
      - V(registry_unreachable) means nothing answered (connection refused, DNS, timeout, TLS) or what
        answered is not a registry API (another status, a 401 without a usable challenge).
      - V(tcp) only opens a TCP connection to the registry.
      - V(skip) records the check as skipped.
      - Defaults to V(http) unless O(payload) has C(RegistryReachabilityMode).
    type: str
    choices: [http, tcp, skip]
  require_compose:
    description:
      - Require the Docker Compose v2 plugin (C(docker compose)). A standalone v1 C(docker-compose) does
        not count. Defaults to V(true) for V(ComposeHost) and V(false) for V(DockerHost).
    type: bool
  min_engine_version:
    description:
      - Oldest acceptable Docker Engine (server) version.
    type: str
    default: 24.0.0
  min_compose_version:
    description:
      - Oldest acceptable Docker Compose plugin version.
    type: str
    default: 2.20.0
  registry_url:
    description:
      - URL of the registry to check instead of the registry of O(image_reference), for example a
        mirror. C(http://) URLs are reached over plain HTTP.
      - Credentials in the URL (C(https://user:password@host/)) are used for authentication when
        O(registry_username) is not set, and are removed from everything the module records.
    type: str
  registry_username:
    description:
      - User name for registries that require authentication.
    type: str
  registry_password:
    description:
      - Password or token for registries that require authentication. Never logged or recorded.
      - O(registry_username) and O(registry_password) (or the userinfo of O(registry_url)) are the
        credentials of one registry, the one of O(registry_url), else the one of O(image_reference); for
        it they win over O(registry_credentials).
    type: str
  registry_credentials:
    description:
      - Credentials per registry, keyed by the registry host as image references name it (for example
        V(registry.example.com), V(127.0.0.1:5002), V(docker.io)). Docker Hub may also be keyed
        V(index.docker.io) or V(https://index.docker.io/v1/), as Docker's client config does; keys are
        normalised (scheme and path dropped, host lower-cased, Docker Hub's names are V(docker.io)).
      - Each value is C({username, password}) or C({identitytoken}) (an OAuth2 refresh token as Docker's
        client config keeps it; the token is then asked with C(POST <realm>) and
        C(grant_type=refresh_token)), plus an optional C(source), a non-secret label of where the
        credentials came from (for example V(docker-config:credHelpers:ecr-login)); it is returned as
        C(credentialSource) when the credentials were used. Without it the label is V(registry_credentials).
      - Each registry is offered only its own entry, on C(/v2/) when the registry asks for auth there, and
        for the pull only after anonymous access was refused.
      - Passwords, identity tokens and every token obtained with them are never logged or returned; user
        names and C(source) labels are not secret and are not masked.
    type: dict
  insecure_registries:
    description:
      - Registries reached over plain HTTP. Loopback registries always are.
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds to wait for the daemon and the registry to answer.
    type: float
    default: 10
notes:
  - Registry credentials in O(image_reference) or URLs are removed from everything the module returns.
  - Failure codes are the contract's preflight codes and V(registry_auth_failed), meaning the registry
    answers but refuses the pull, anonymously when no credentials were given for it, or with the
    credentials given. A rate-limited registry (HTTP 429) is reachable; the access and platform checks it
    answered with 429 are recorded as skipped with the reason, and C(retryAfter) in RV(preflight).
seealso:
  - module: stellaops.runtime.stella_compose_deploy
"""

EXAMPLES = r"""
- name: Preflight a Compose host for the release image
  stellaops.runtime.stella_preflight:
    target_type: ComposeHost
    image_reference: registry.example.com/shop/api:1.4.2
    minimum_free_disk_bytes: 2147483648

- name: Preflight with the contract payload verbatim and explicit version gates
  stellaops.runtime.stella_preflight:
    payload:
      WorkDirectory: /var/lib/stella/projects
      ImageReference: registry.example.com/shop/api:1.4.2
      MinimumFreeDiskBytes: 1073741824
      RegistryReachabilityMode: http
      RequireCompose: true
    min_engine_version: 20.10.0
    registry_username: deploy
    registry_password: "{{ vault_registry_password }}"

- name: Preflight a Docker Hub image with credentials for two registries
  stellaops.runtime.stella_preflight:
    image_reference: docker.io/acme/api:2.0
    registry_credentials:
      docker.io:
        username: acme-deploy
        password: "{{ vault_hub_token }}"
        source: vault:hub
      123456789012.dkr.ecr.eu-west-1.amazonaws.com:
        identitytoken: "{{ ecr_identity_token }}"
        source: docker-config:credHelpers:ecr-login
"""

RETURN = r"""
preflight:
  description: Full preflight evidence, present whether the checks passed or not.
  returned: always
  type: dict
  contains:
    os:
      description: Operating system facts (system, kernel, distribution, version, hostname).
      type: dict
    architecture:
      description: OCI architecture of the host (for example V(amd64)).
      type: str
    docker:
      description: Docker CLI path, daemon address, client and server versions, daemon status (V(running), V(unavailable), V(missing)).
      type: dict
    compose:
      description: Compose v2 plugin availability and version, and any standalone v1 binary seen.
      type: dict
    registry:
      description:
        - Registry reachability and pull access, never a credential or token.
        - C(registry), C(url), C(mode), C(reachable), C(httpStatus), C(reason) (when unreachable),
          C(credentialsSupplied).
        - C(authRequired) and C(challenge) (C(scheme), C(realm), C(service), C(scope) of the C(/v2/)
          challenge); C(authenticated) when credentials for the registry were tried on C(/v2/) (C(authError)
          when refused).
        - C(rateLimited) and C(retryAfter) when the registry answered HTTP 429; C(rateLimit) (the
          registry's C(RateLimit-Limit) and C(RateLimit-Remaining)) when it sends them.
        - C(pullAccess) (V(anonymous), V(credentials), or V(null) when refused), C(pullScope)
          (C(repository:<repository>:pull)), C(credentialSource) (the C(source) label of the credentials
          used), C(pullRegistry) (when the image's registry is not the one checked, for example with
          O(registry_url)).
      type: dict
      sample:
        registry: docker.io
        url: https://registry-1.docker.io/v2/
        mode: http
        reachable: true
        httpStatus: 401
        authRequired: true
        challenge:
          scheme: bearer
          realm: https://auth.docker.io/token
          service: registry.docker.io
        credentialsSupplied: true
        pullAccess: credentials
        pullScope: repository:acme/api:pull
        credentialSource: vault:hub
    platform:
      description: Requested platform, platforms the image offers, compatibility.
      type: dict
    workDirectory:
      description: Work directory write probe result.
      type: dict
    disk:
      description: Free and required bytes in the work directory's file system.
      type: dict
    gates:
      description: The version gates and options the checks used.
      type: dict
    checks:
      description: One entry per check with V(passed), V(failed) or V(skipped) (C(runtime), C(daemon),
        C(engine_version), C(compose), C(compose_version), C(registry), C(registry_access), C(platform),
        C(workdir), C(disk)).
      type: list
      elements: dict
    status:
      description: V(passed) or V(failed).
      type: str
  sample:
    architecture: amd64
    status: passed
failures:
  description: Failed checks, each with a stable C(code) and a one-line C(reason).
  returned: always
  type: list
  elements: dict
  sample:
    - code: runtime_version_too_old
      reason: Docker Engine 20.10.24 is older than the required 24.0.0
    - code: registry_auth_failed
      reason: "registry docker.io refused anonymous pull of acme/private (the registry refused an anonymous token
        (HTTP 401)): give credentials for docker.io (registry_credentials)"
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import argument_spec, engine_client
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import (
    ARGUMENT_SPEC as PREFLIGHT_OPTIONS,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import preflight_with
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import mask_credentials

ARGUMENT_SPEC = argument_spec(PREFLIGHT_OPTIONS)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    mask_credentials(
        module.no_log_values,
        params["registry_credentials"],
        [params[name] for name, spec in ARGUMENT_SPEC.items() if spec.get("no_log") and name != "registry_credentials"],
    )
    try:
        cli = engine_client(module)
        cli.timeout = max(1, int(min(params["timeout"], params["command_timeout"])))
        evidence, failures = preflight_with(cli, dict(params), get_bin_path=module.get_bin_path)
    except StellaError as exc:
        module.fail_json(
            msg=exc.reason, failurePhase="preflight", failures=[exc.as_dict()], **with_next({"code": exc.code})
        )
    except Exception as exc:  # pylint: disable=broad-exception-caught
        module.fail_json(
            msg="unexpected error: %s" % exc,
            code="internal_error",
            failurePhase="preflight",
            exception=traceback.format_exc(),
        )
    if failures:
        module.fail_json(
            msg="preflight failed: %s" % "; ".join("%s: %s" % (f["code"], f["reason"]) for f in failures),
            failurePhase="preflight",
            changed=False,
            preflight=evidence,
            failures=failures,
            **with_next({"code": failures[0]["code"]}),
        )
    module.exit_json(changed=False, preflight=evidence, failures=[])


if __name__ == "__main__":
    main()
