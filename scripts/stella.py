# stella: the stellaops.runtime command and Compose provider, run from a checkout or an installed
# collection, with a Python that has ansible-core, ansible-runner and requests:
#   python3 scripts/stella.py install
# writes `stella` (in /usr/local/bin for root, ~/.local/bin otherwise; --bin-dir DIR) and `docker-stella`
# (a Docker CLI plugin) launchers that keep that Python and this collection. See docs/provider.md.
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(HERE)
for candidate in (os.path.join(ROOT, ".build", "collections"), os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))):
    if os.path.isdir(os.path.join(candidate, "ansible_collections", "stellaops", "runtime")):
        sys.path.insert(0, candidate)
        break
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.main import main  # noqa: E402

sys.exit(main(sys.argv))
