# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stella`` command line (docs/stella-command.md): ``main`` reads the command's name and hands
its arguments on, ``stella --help`` and ``stella --version`` (the collection's own metadata), the
Docker CLI plugin's metadata, and ``stella install`` (the launchers, after checking the provider's
Python dependencies); the commands that read the job store, with what they share (store): ``stella
report`` (report, with the report's files: report_files), ``health`` (health), ``interrupt`` and
``close`` (close), ``prune`` (prune), ``stella list`` and ``show`` (jobs), ``stella evidence``
(evidence). ``stella compose ...`` lives in ``provider``. Importing this package needs the standard
library only, so a missing dependency is reported, never a traceback.
"""
