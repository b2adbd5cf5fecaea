# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of stellaops.runtime (private: may change without notice). Each subpackage owns
one concept, in layers, bottom to top (docs/architecture.md): execution, evidence, probe and traffic,
release, job, store, run, provider, command.
"""
