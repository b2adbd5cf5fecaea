# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What both sides do on the host they run on: crash-safe file writes and the per-project lock
(files), the project's claim fence (claim), and what Linux's ``/proc`` says of a process (procfs).
Standard library only.
"""
