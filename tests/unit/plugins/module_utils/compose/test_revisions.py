"""compose/revisions.py: layout, names, records, retention, validation and path containment."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import revisions as rv
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

MH = "sha256:" + "ab" * 32
FILES = {rv.LOCK_FILE: b"lock\n", rv.STICKER_FILE: b'{"s": 1}\n', rv.MANIFEST_FILE: b'{"m": 1}\n'}


@pytest.fixture
def layout(tmp_path):
    lay = rv.Layout(str(tmp_path), "proj_a-1")
    os.makedirs(lay.project_dir)
    return lay


def test_layout_paths(tmp_path):
    lay = rv.Layout(str(tmp_path) + "/", "p")
    assert lay.project_dir == os.path.join(str(tmp_path), "p")
    assert lay.as_dict() == {
        "projectDirectory": lay.project_dir,
        "composePath": os.path.join(lay.project_dir, "compose.stella.lock.yml"),
        "versionStickerPath": os.path.join(lay.project_dir, "stella.version.json"),
        "applyManifestPath": os.path.join(lay.project_dir, "apply-manifest.json"),
        "revisionsDirectory": os.path.join(lay.project_dir, "revisions"),
    }


@pytest.mark.parametrize("work,project", [("relative/dir", "p"), ("/w", "../etc"), ("/w", "Upper"), ("/w", "")])
def test_layout_rejects(work, project):
    with pytest.raises(StellaError):
        rv.Layout(work, project)


def test_names_and_ordering():
    assert rv.hash12(MH) == "ab" * 6
    assert rv.revision_name(7, MH) == "000007-abababababab"
    assert rv.parse_revision_name("000007-abababababab") == (7, "abababababab")
    for bad in ("7-abababababab", "000007-ABABABABABAB", ".stella-tmp-rev-x", "000007-abab"):
        assert rv.parse_revision_name(bad) is None
    names = ["000010-aaaaaaaaaaaa", "junk", "000002-bbbbbbbbbbbb", "000009-cccccccccccc"]
    assert rv.sort_revision_names(names) == ["000002-bbbbbbbbbbbb", "000009-cccccccccccc", "000010-aaaaaaaaaaaa"]
    assert rv.next_sequence(names) == 11 and rv.next_sequence([]) == 1
    with pytest.raises(StellaError):
        rv.hash12("md5:xyz")


def test_record_and_check():
    record = rv.build_revision_record("p", 1, MH, FILES)
    assert record["files"][rv.LOCK_FILE] == rv.sha256_bytes(b"lock\n")
    assert rv.check_revision_files(record, FILES) == []
    tampered = dict(FILES, **{rv.LOCK_FILE: b"evil\n"})
    assert "compose.stella.lock.yml has hash" in rv.check_revision_files(record, tampered)[0]
    missing = {k: v for k, v in FILES.items() if k != rv.STICKER_FILE}
    assert rv.check_revision_files(record, missing) == ["stella.version.json is missing"]
    assert rv.check_revision_files({"schema": "other"}, FILES)
    odd = dict(record, files=dict(record["files"], **{"../x": "sha256:00"}))
    assert "unexpected file ../x" in " ".join(rv.check_revision_files(odd, FILES))


def test_path_within(tmp_path):
    root = tmp_path / "revisions"
    (root / "a").mkdir(parents=True)
    os.symlink(str(tmp_path), str(root / "escape"))
    assert rv.path_within(str(root / "a"), str(root))
    assert not rv.path_within(str(root), str(root))
    assert not rv.path_within(str(root / ".." / "x"), str(root))
    assert not rv.path_within(str(root / "escape"), str(root))
    assert not rv.path_within(str(tmp_path / "revisions-other"), str(root))


def test_retain_load_find_prune(layout):
    first = rv.retain_revision(layout, FILES, MH)
    assert os.path.basename(first) == "000001-abababababab"
    record, files = rv.load_revision(first)
    assert files == FILES and record["sequence"] == 1 and record["projectName"] == "proj_a-1"
    assert rv.find_identical(layout, FILES) == first
    assert rv.find_identical(layout, dict(FILES, **{rv.LOCK_FILE: b"other"})) is None
    second = rv.retain_revision(layout, dict(FILES, **{rv.LOCK_FILE: b"v2"}), MH, keep=10)
    assert rv.list_revisions(layout) == [first, second]
    rv.retain_revision(layout, dict(FILES, **{rv.LOCK_FILE: b"v3"}), MH, keep=2)
    assert [os.path.basename(p) for p in rv.list_revisions(layout)] == ["000002-abababababab", "000003-abababababab"]
    assert not [n for n in os.listdir(layout.revisions_dir) if n.startswith(".stella-tmp-")]


def test_load_revision_detects_tampering(layout):
    path = rv.retain_revision(layout, FILES, MH)
    with open(os.path.join(path, rv.STICKER_FILE), "wb") as handle:
        handle.write(b"{}")
    with pytest.raises(StellaError) as err:
        rv.load_revision(path)
    assert err.value.code == "revision_tampered" and err.value.phase == "validate_revision"
    os.unlink(os.path.join(path, rv.REVISION_RECORD))
    with pytest.raises(StellaError):
        rv.load_revision(path)


def test_remove_stale_revision_temps(layout):
    os.makedirs(os.path.join(layout.revisions_dir, ".stella-tmp-rev-abc", "inner"))
    open(os.path.join(layout.revisions_dir, ".stella-tmp-file"), "w").close()
    assert rv.remove_stale_revision_temps(layout) == ["revisions/.stella-tmp-file", "revisions/.stella-tmp-rev-abc"]
    assert os.listdir(layout.revisions_dir) == []


def test_resolve_revision(layout, tmp_path):
    with pytest.raises(StellaError) as err:
        rv.resolve_revision(layout)
    assert err.value.code == "no_revision" and err.value.phase == "resolve_revision"
    first = rv.retain_revision(layout, FILES, MH)
    second = rv.retain_revision(layout, dict(FILES, **{rv.LOCK_FILE: b"2"}), MH)
    assert rv.resolve_revision(layout) == second
    assert rv.resolve_revision(layout, first) == first
    assert rv.resolve_revision(layout, os.path.basename(first)) == first
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), os.path.join(layout.revisions_dir, "000099-aaaaaaaaaaaa"))
    for bad in (
        "../../..",
        "/etc",
        str(outside),
        "000099-aaaaaaaaaaaa",
        "../revisions/../..",
        first + "/..",
        os.path.join(first, rv.LOCK_FILE),
    ):
        with pytest.raises(StellaError) as err:
            rv.resolve_revision(layout, bad)
        assert err.value.code == "revision_path_rejected" and err.value.phase == "resolve_revision", bad
    with pytest.raises(StellaError) as err:
        rv.resolve_revision(layout, "000050-cccccccccccc")
    assert err.value.code == "no_revision"


def test_read_current(layout):
    assert rv.read_current(layout) == dict.fromkeys(rv.REVISION_FILES)
    with open(layout.lock_path, "wb") as handle:
        handle.write(b"x")
    assert rv.read_current(layout)[rv.LOCK_FILE] == b"x"
    assert json.loads(json.dumps(rv.build_revision_record("p", 2, MH, FILES)))["sequence"] == 2


def test_a_symlink_under_revisions_is_never_a_revision(layout, tmp_path):
    """The implicit latest-revision lookup never follows a symlinked directory out of revisions/."""
    first = rv.retain_revision(layout, FILES, MH)
    outside = tmp_path / "outside" / "000009-abababababab"
    outside.mkdir(parents=True)
    os.symlink(str(outside), os.path.join(layout.revisions_dir, "000009-abababababab"))
    assert rv.list_revisions(layout) == [first]
    assert rv.resolve_revision(layout) == os.path.realpath(first)
    with pytest.raises(StellaError) as err:
        rv.resolve_revision(layout, "000009-abababababab")
    assert err.value.code == "revision_path_rejected"


def test_a_rollback_whose_deployment_outcome_is_unknown_restores_the_newest_revision_of_another_release(layout):
    """A target lost during its apply may or may not have retained a revision: its rollback asks for the
    newest revision that is not the release being rolled back."""
    other = "sha256:" + "c" * 64
    previous = rv.retain_revision(layout, dict(FILES, **{rv.LOCK_FILE: b"previous"}), other)
    failed = rv.retain_revision(layout, dict(FILES, **{rv.LOCK_FILE: b"failed"}), MH)
    assert rv.revision_manifest_hash(failed) == MH and rv.revision_manifest_hash(previous) == other
    assert rv.resolve_revision(layout) == failed
    assert rv.resolve_revision(layout, other_than=MH) == previous
    assert rv.resolve_revision(layout, other_than=other) == failed
    os.rename(previous, os.path.join(os.path.dirname(previous), ".stella-tmp-gone"))
    with pytest.raises(StellaError) as err:
        rv.resolve_revision(layout, other_than=MH)
    assert err.value.code == "no_revision" and "other than release %s" % MH in err.value.reason
