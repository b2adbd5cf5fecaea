# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller-side evidence records (documentation: plugins/modules/stella_evidence.py)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.deployment import (
    deployment_record,
    rollback_records,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    clean as _clean,
    write_target_documents,
)

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "kind": {"type": "str", "choices": ["deployment", "rollback"], "default": "deployment"},
    "plan": {"type": "dict", "required": True},
    "preflight": {"type": "dict"},
    "apply": {"type": "dict"},
    "probe": {"type": "dict"},
    "rollback": {"type": "dict"},
    "created_at": {"type": "str"},
    "timestamps": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        created_at = args["created_at"] or utc_timestamp()
        plan = _clean(args["plan"])
        records = {}
        try:
            if args["kind"] == "deployment":
                records["deployment.json"] = deployment_record(
                    plan,
                    _clean(args["apply"]),
                    created_at,
                    preflight=_clean(args["preflight"]),
                    probe=_clean(args["probe"]),
                )
            else:
                evidence, recovery = rollback_records(
                    plan,
                    _clean(args["apply"]),
                    _clean(args["rollback"]),
                    created_at,
                    failed_probe=_clean(args["probe"]),
                    preflight=_clean(args["preflight"]),
                    timestamps=args["timestamps"],
                )
                if evidence is not None:
                    records["rollback-evidence.json"] = evidence
                records["recovery.json"] = recovery
        except StellaError as exc:
            result.update(with_next(dict(failed=True, msg=exc.reason, code=exc.code)))
            return result

        directory, written = write_target_documents(args["dest"], plan, records, check_mode=self._task.check_mode)
        result.update(
            changed=False,
            evidenceDirectory=directory,
            files=written,
            records=records,
        )
        return result
