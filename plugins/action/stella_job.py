# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment job on the controller (documentation: plugins/modules/stella_job.py).

The action validates the task's options and hands them to the runner (``plugin_utils/run/runner.py``),
which looks the step up in its declared table (``plugin_utils/run/steps.py``). Nothing runs on the play's
host.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_KEEP_REVISIONS,
    DEFAULT_WAIT_TIMEOUT,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.steps import STEPS

# The PostgreSQL driver is loaded here, not when a step opens a PostgreSQL store: ansible-core's linear
# and free strategies import a task's action plugin in the controller's main process before they fork
# the task's workers, so the driver (``psycopg``, about 0.2 s of CPU to import) is loaded once per run
# and shared by every target's worker, which would otherwise each load it again. Without ``psycopg`` on
# the controller this loads nothing more (docs/jobs.md, sizing).
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import postgres as _postgres  # noqa: F401  # pylint: disable=unused-import

ARGUMENT_SPEC = {
    "step": {"type": "str", "required": True, "choices": list(STEPS)},
    "store": {"type": "str"},
    "job_id": {"type": "str"},
    "release": {"type": "dict"},
    "targets": {"type": "list", "elements": "str", "default": []},
    "readiness": {"type": "dict", "default": {}},
    "registry_credentials": {"type": "dict", "no_log": True, "default": {}},
    "insecure_registries": {"type": "list", "elements": "str", "default": []},
    "image_policy": {"type": "dict", "default": {}},
    "signing_key": {"type": "path"},
    "signing_passphrase": {"type": "str", "no_log": True},
    "timeout": {"type": "float", "default": 15.0},
    "auto_rollback_on_failure": {"type": "bool"},
    "wait_for_health_check": {"type": "bool"},
    "target": {"type": "str"},
    "result": {"type": "dict"},
    "probe": {"type": "dict"},
    "failure": {"type": "dict"},
    "plan": {"type": "dict"},
    "reason": {"type": "str"},
    "batch": {"type": "int"},
    "evidence_dir": {"type": "path"},
    "report": {"type": "bool", "default": False},
    "revision_paths": {"type": "dict", "default": {}},
    "traffic_options": {"type": "dict", "no_log": True, "default": {}},
    "claim_lease": {"type": "int", "default": 0},
    "keep_revisions": {"type": "int", "default": DEFAULT_KEEP_REVISIONS},
    "wait_timeout": {"type": "int", "default": DEFAULT_WAIT_TIMEOUT},
    "task_timeout": {"type": "int", "default": 0},
    "target_identities": {"type": "dict", "default": {}},
    "caller_job_id": {"type": "bool", "default": True},
    "started": {"type": "dict"},
    "min_engine_version": {"type": "str", "default": DEFAULT_MIN_ENGINE},
    "min_compose_version": {"type": "str", "default": DEFAULT_MIN_COMPOSE},
    "observed": {"type": "dict"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True  # every step reads or previews in check mode (run/step.py)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        args: StepArgs  # every option of ARGUMENT_SPEC, as validated
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        runner = JobRunner(task_vars, self._task.check_mode)
        try:
            outcome = runner.run(args)
        except StellaError as exc:
            result.update(
                with_next(dict(failed=True, msg=redact_text(redact_url(exc.reason), runner.secrets), code=exc.code))
            )
            if exc.phase:
                result["failurePhase"] = exc.phase
            return result
        result.update(outcome)
        result["changed"] = False
        return result
