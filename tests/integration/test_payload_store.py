"""The target-side modules' payload store under real ``ansible-playbook`` runs: a collection upgraded while
a run is going (its module_utils changed between two tasks of the run) never gets the run's old payload
filed under the new sources' key; the next run builds and keeps the new one."""

from __future__ import annotations

import base64
import io
import os
import pickle
import shutil
import subprocess
import zipfile

import ansible_run as ar

ERRORS_PY = "plugins/module_utils/contract/errors.py"
MODULE_ENTRY = "ansible_collections.stellaops.runtime.plugins.modules.stella_compose_deploy-"
MARK = "# upgraded while a run was going"

PLAYBOOK = """
- name: A run during which the collection is upgraded
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run a target-side module (its payload is built, whatever its result)
      stellaops.runtime.stella_compose_deploy: {task: docker.run, payload: {}}
      ignore_errors: true
    - name: Upgrade the collection under the run
      ansible.builtin.lineinfile: {path: "%(errors)s", line: "%(mark)s"}
      when: upgrade | bool
    - name: Run it again in the same run (Ansible reuses the payload it built)
      stellaops.runtime.stella_compose_deploy: {task: docker.run, payload: {}}
      ignore_errors: true
"""


def copy_collection(root):
    """The collection's runtime parts in ``root/ansible_collections/stellaops/runtime``."""
    target = os.path.join(root, "ansible_collections", "stellaops", "runtime")
    for part in ("plugins", "meta"):
        shutil.copytree(
            os.path.join(ar.ROOT, part), os.path.join(target, part), ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(os.path.join(ar.ROOT, "galaxy.yml"), target)
    return target


def stored(store):
    """``{key: errors.py as the key's stella_compose_deploy payload holds it}`` of every key in the store."""
    found = {}
    for key in sorted(os.listdir(store)):
        names = [n for n in os.listdir(os.path.join(store, key)) if n.startswith(MODULE_ENTRY)]
        found[key] = None
        for name in names:
            with open(os.path.join(store, key, name), "rb") as handle:
                entry = pickle.load(handle)  # Ansible's own cache format (a pickle of its _CachedModule)
            with zipfile.ZipFile(io.BytesIO(base64.b64decode(entry.zip_data))) as payload:
                found[key] = payload.read("ansible_collections/stellaops/runtime/" + ERRORS_PY).decode()
    return found


def test_an_upgrade_during_a_run_never_files_the_runs_payload_under_the_new_key(tmp_path):
    collection = copy_collection(str(tmp_path / "collections"))
    local_temp = tmp_path / "local"
    local_temp.mkdir()
    playbook = tmp_path / "run.yml"
    playbook.write_text(PLAYBOOK % {"errors": os.path.join(collection, ERRORS_PY), "mark": MARK})
    env = ar.ansible_env(
        {"ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"), "ANSIBLE_LOCAL_TEMP": str(local_temp)}
    )

    def run(upgrade):
        proc = subprocess.run(
            [
                os.path.join(ar.VENV_BIN, "ansible-playbook"),
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                "ansible_python_interpreter=" + os.path.join(ar.VENV_BIN, "python"),
                "-e",
                "upgrade=%s" % upgrade,
                str(playbook),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    store = str(local_temp / "stellaops-runtime-payloads")
    run(upgrade=True)
    first = stored(store)
    # one key, the sources the run started with; nothing filed under the upgraded sources' key
    assert len(first) == 1 and MARK not in list(first.values())[0], first.keys()
    run(upgrade=False)
    second = stored(store)
    [new_key] = set(second) - set(first)
    assert MARK in second[new_key], "the upgraded sources' key holds a payload of the old sources"
