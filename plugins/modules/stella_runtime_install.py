#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_runtime_install
short_description: Install Docker Engine and the Compose v2 plugin from a configured package source
version_added: 0.2.0
description:
  - Opt-in managed runtime install on a Debian-family target. Installs Docker Engine and the Docker
    Compose v2 plugin from the configured source only, starts the engine and verifies that
    C(docker info) and C(docker compose version) answer with versions that pass the gates.
  - O(source_type=apt) installs from one apt repository. Only that repository is visible to apt during the
    update and the install, so nothing comes from the host's other repositories. Credentials (in
    O(apt_url) or O(apt_username)/O(apt_password)) are written to
    C(/etc/apt/auth.conf.d/stella-<source_name>.conf) with mode 0600, never into the sources list.
  - O(source_type=bundle) installs the C(.deb) files of an offline bundle directory on the target
    (the C(runtime_install) role copies it there from the controller) with no apt repository at all.
  - A missing or empty source fails with V(runtime_install_source_missing) in every mode, before anything
    on the host changes. The host's default repositories are never a fallback.
  - When the engine and the plugin already pass the gates, nothing is done (C(changed=false)).
  - After an install, the evidence document is written atomically to O(evidence_path) and returned.
    It holds the mode, the source type, the source URL without credentials, the bundle's file names
    and SHA-256, the package versions (dpkg-query), the Engine and Compose versions and timestamps.
    A credential never reaches the result, the evidence or the host's logs.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be installed or started (RV(runtimeInstall.plan)) and changes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  mode:
    description:
      - V(production) accepts an apt repository with a signing key, or a bundle.
      - V(offline) accepts only a bundle (no network repository at all).
      - V(lab) and V(development) also accept an unsigned apt repository (O(apt_trusted=true)).
      - No mode falls back to the host's own repositories when no source is configured.
    type: str
    choices: [production, offline, lab, development]
    default: production
  source_type:
    description:
      - V(apt) (an apt repository) or V(bundle) (a directory of C(.deb) files on the target).
      - Unset means no source is configured, which fails with V(runtime_install_source_missing).
    type: str
    choices: [apt, bundle]
  source_name:
    description:
      - Names the files the apt source writes, C(stella-<source_name>.list), C(.conf) and C(.asc).
    type: str
    default: runtime
  apt_url:
    description:
      - The repository URL, C(http://) or C(https://). It may embed credentials
        (C(http://user:password@host:port/path)); they are moved to the apt auth file and removed from
        everything the module records.
    type: str
  apt_suite:
    description:
      - The suite, or a path ending in C(/) for a flat repository (the default, C(./)).
    type: str
    default: ./
  apt_components:
    description:
      - The components of the suite (for example V(main), V(stable)). A flat repository has none.
    type: list
    elements: str
    default: []
  apt_username:
    description:
      - User name for the repository, when it is not in O(apt_url).
    type: str
  apt_password:
    description:
      - Password for the repository, when it is not in O(apt_url). Never logged or recorded.
    type: str
  apt_signing_key:
    description:
      - ASCII-armored OpenPGP public key the repository is signed with. It is written to
        C(/etc/apt/keyrings/stella-<source_name>.asc) and named in the source's C(signed-by).
    type: str
  apt_signed_by:
    description:
      - A keyring already on the target for the source's C(signed-by), instead of O(apt_signing_key).
    type: path
  apt_trusted:
    description:
      - Accept an unsigned repository (C(trusted=yes)). Refused in V(production) mode
        (V(runtime_install_source_not_allowed)).
    type: bool
    default: false
  bundle_path:
    description:
      - The bundle directory on the target.
    type: path
    default: /var/lib/stella/runtime-bundle
  bundle_files:
    description:
      - The C(.deb) file names of the bundle to install. Default, every C(*.deb) in O(bundle_path).
        An empty list is an empty bundle (V(runtime_install_source_missing)).
    type: list
    elements: str
  bundle_checksums:
    description:
      - Expected SHA-256 (hex) per bundle file name. A file with another digest fails with
        V(runtime_install_source_invalid) before anything is installed.
    type: dict
  engine_packages:
    description:
      - Packages that provide the engine and the CLI, installed from an apt source when the engine is
        missing or older than O(min_engine_version). For Docker's own repository,
        C([docker-ce, docker-ce-cli, containerd.io]).
    type: list
    elements: str
    default: [docker.io, docker-cli]
  compose_packages:
    description:
      - Packages that provide the Compose v2 CLI plugin, installed from an apt source when the plugin is
        missing or older than O(min_compose_version).
    type: list
    elements: str
    default: [docker-compose-plugin]
  install_recommends:
    description:
      - Install the packages' recommended packages too.
    type: bool
    default: false
  min_engine_version:
    description:
      - Oldest acceptable Docker Engine, before (to decide) and after (to verify) the install.
    type: str
    default: 24.0.0
  min_compose_version:
    description:
      - Oldest acceptable Docker Compose plugin.
    type: str
    default: 2.20.0
  engine_start:
    description:
      - How the engine is started when it does not answer after the install.
      - V(auto) uses systemd when it runs the host, else the package's init script
        (C(/etc/init.d/docker start)) and, when that fails, a daemonised C(dockerd)
        (C(start-stop-daemon --background), log C(/var/log/docker.log)).
      - V(none) starts nothing. The engine must then answer already.
    type: str
    choices: [auto, systemd, init-script, daemon, none]
    default: auto
  start_timeout:
    description:
      - Seconds the engine may take to answer C(docker info) after it was started.
    type: int
    default: 60
  install_timeout:
    description:
      - Seconds each C(apt-get) command may take.
    type: int
    default: 900
  evidence_path:
    description:
      - Where the evidence document is written on the target.
    type: path
    default: /var/lib/stella/runtime-install.json
notes:
  - Failure codes are V(runtime_install_source_missing), V(runtime_install_source_not_allowed),
    V(runtime_install_source_invalid), V(runtime_install_source_unreachable), V(runtime_install_failed)
    and V(runtime_install_unverified). See C(docs/runtime-install.md).
  - A source is required even on a host that already passes the gates. The configuration is checked
    the same way on every host.
seealso:
  - module: stellaops.runtime.stella_preflight
"""

EXAMPLES = r"""
- name: Install Engine and Compose from the company's signed apt mirror
  stellaops.runtime.stella_runtime_install:
    mode: production
    source_type: apt
    apt_url: "https://apt.example.com/docker"
    apt_suite: trixie
    apt_components: [stable]
    apt_username: deploy
    apt_password: "{{ vault_apt_password }}"
    apt_signing_key: "{{ lookup('ansible.builtin.file', 'files/apt-mirror.asc') }}"
    engine_packages: [docker-ce, docker-ce-cli, containerd.io]

- name: Install from an offline bundle already copied to the target
  stellaops.runtime.stella_runtime_install:
    mode: offline
    source_type: bundle
    bundle_path: /var/lib/stella/runtime-bundle
"""

RETURN = r"""
runtimeInstall:
  description: The evidence document (schema C(stella.runtime-install.v1)).
  returned: always
  type: dict
  contains:
    status:
      description: V(installed), V(satisfied) (nothing to do), V(planned) (check mode) or V(failed).
      type: str
    mode:
      description: The mode.
      type: str
    source:
      description: The source type, the URL without credentials, whether credentials were configured, the
        signing key's path, or the bundle's files with SHA-256, package and version.
      type: dict
    plan:
      description: C(installEngine), C(installCompose), C(startEngine) and the apt C(packages).
      type: dict
    packages:
      description: Installed version (dpkg-query) of each package of the runtime.
      type: dict
    packageChanges:
      description: Every package the install added or changed, with its version before and after.
      type: dict
    engineVersion:
      description: The engine's version after the install.
      type: str
    composeVersion:
      description: The Compose plugin's version after the install.
      type: str
    engineStart:
      description: How the engine was started (method and attempts), or null.
      type: dict
  sample:
    status: installed
    mode: production
    source: {type: apt, url: "http://172.17.0.1:5010/debian", credentials: true}
    engineVersion: 26.1.5+dfsg1
    composeVersion: 2.40.3
evidencePath:
  description: Where the evidence was written on the target (null when nothing was written).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import install_request as ri
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.install import RuntimeInstaller
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import command_runner, run_task

ARGUMENT_SPEC = dict(
    mode=dict(type="str", choices=list(ri.MODES), default="production"),
    source_type=dict(type="str", choices=list(ri.SOURCE_TYPES)),
    source_name=dict(type="str", default="runtime"),
    apt_url=dict(type="str"),
    apt_suite=dict(type="str", default="./"),
    apt_components=dict(type="list", elements="str", default=[]),
    apt_username=dict(type="str"),
    apt_password=dict(type="str", no_log=True),
    apt_signing_key=dict(type="str", no_log=False),
    apt_signed_by=dict(type="path"),
    apt_trusted=dict(type="bool", default=False),
    bundle_path=dict(type="path", default=ri.BUNDLE_TARGET_DIR),
    bundle_files=dict(type="list", elements="str"),
    bundle_checksums=dict(type="dict"),
    engine_packages=dict(type="list", elements="str", default=list(ri.DEFAULT_ENGINE_PACKAGES)),
    compose_packages=dict(type="list", elements="str", default=list(ri.DEFAULT_COMPOSE_PACKAGES)),
    install_recommends=dict(type="bool", default=False),
    min_engine_version=dict(type="str", default=ri.DEFAULT_MIN_ENGINE),
    min_compose_version=dict(type="str", default=ri.DEFAULT_MIN_COMPOSE),
    engine_start=dict(type="str", choices=list(ri.ENGINE_STARTS), default="auto"),
    start_timeout=dict(type="int", default=ri.DEFAULT_START_TIMEOUT),
    install_timeout=dict(type="int", default=ri.DEFAULT_INSTALL_TIMEOUT),
    evidence_path=dict(type="path", default=ri.EVIDENCE_PATH),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    # A password embedded in apt_url is masked in everything the module returns, as no_log options are.
    module.no_log_values.update(ri.split_credentials(module.params.get("apt_url"))[3])

    def task():
        request = ri.parse_request(module.params)
        installer = RuntimeInstaller(command_runner(module), module.get_bin_path, module.warn)
        return installer.execute(request, check_mode=module.check_mode)

    run_task(module, task)


if __name__ == "__main__":
    main()
