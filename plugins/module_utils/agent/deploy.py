# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What both apply tasks of module ``stella_compose_deploy`` (``compose.up``, ``docker.run``) take from
its options: the env artifact, the secrets kept out of the output and the runtime preflight to run;
each task's ``from_options`` builds its manager with them. Standard library only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import (
    env_artifact_values,
    render_env_artifact,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import mask_credentials


def deploy_settings(module):
    """``{"env_bytes", "secrets", "preflight"}`` of the module's options. The preflight's
    registry credentials are masked in the module's output first."""
    params = module.params
    if params["preflight"]:
        mask_credentials(
            module.no_log_values,
            params["preflight"]["registry_credentials"],
            [params[name] for name, spec in module.argument_spec.items() if spec.get("no_log")],
        )
    if params["secret_env"] is not None:
        env_bytes = render_env_artifact({str(k): str(v) for k, v in params["secret_env"].items()})
    else:
        env_bytes = params["env_artifact"].encode("utf-8") if params["env_artifact"] is not None else None
    return {
        "env_bytes": env_bytes,
        "secrets": list(params["secrets"]) + env_artifact_values(env_bytes),
        # the preflight asks the daemon the task uses
        "preflight": dict(params["preflight"], docker_host=params["docker_host"]) if params["preflight"] else None,
    }
