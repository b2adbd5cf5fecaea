# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Evidence: the deployment record (deployment), rollback evidence and the recovery record (rollback),
the release script graph proof (graph_proof), the masking of secret values (masking), and the one writer
of every evidence file (writer), and the signed statements kept beside each document and checked offline
(signing). The HTML report of a job is the job core's (job/report.py).
"""
