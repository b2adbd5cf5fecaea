# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""From a release input to a plan: the input's schema (schema) and its semantic checks (checks), the
inputs every planning step shares (inputs), digest resolution over the registry API (registry) with the
registries' credentials (credentials), the image signature policy (policy) and its check of each pinned
digest's signatures (signatures), Compose project names and slots (naming), the lock (lock), the
agents' payloads (payloads) and the whole plan (plan).
"""
