"""The collection as Galaxy and pip users get it: one version in every place that states it, the action
group holding every module, requires_ansible at what is tested, the requirement sets and the pip package
that agree with them, and the pip package's ``stella`` finding an installed collection (or saying how to
install one)."""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
COLLECTIONS = os.path.join(ROOT, ".build", "collections")


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def galaxy():
    return yaml.safe_load(read("galaxy.yml"))


def pyproject():
    return tomllib.loads(read("python", "pyproject.toml"))


def requirement_lines(*parts):
    return [line.strip() for line in read(*parts).splitlines() if line.strip() and not line.startswith("#")]


# ------------------------------------------------------------------------------------------- version

# How a page states the collection's version: the tarball's name, the EE image tag, `stella --version`'s
# line, "Version X" in the README.
VERSION_PATTERNS = (
    re.compile(r"stellaops-runtime-(\d+\.\d+\.\d+)\.tar\.gz"),
    re.compile(r"stellaops-runtime-ee:(\d+\.\d+\.\d+)"),
    re.compile(r"stella \(stellaops\.runtime\) (\d+\.\d+\.\d+)"),
    re.compile(r"^Version (\d+\.\d+\.\d+)\.", re.M),
)


def test_one_version_in_every_place_that_states_it():
    version = galaxy()["version"]
    assert re.match(r"^\d+\.\d+\.\d+$", version)
    assert pyproject()["project"]["version"] == version
    changelog = yaml.safe_load(read("changelogs", "changelog.yaml"))
    assert max(changelog["releases"], key=lambda v: tuple(int(p) for p in v.split("."))) == version
    assert re.search(r"^v%s\n=+$" % re.escape(version), read("CHANGELOG.rst"), re.M)
    stated = {}
    pages = ["README.md", os.path.join("python", "README.md")] + sorted(
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    )
    pages += [
        os.path.join("extensions", "awx", "prepare_import.py"),
        os.path.join("extensions", "awx", "project", "collections", "requirements.yml"),
    ]
    for page in pages:
        text = read(page)
        for pattern in VERSION_PATTERNS:
            for found in pattern.findall(text):
                stated.setdefault(found, []).append(page)
    assert "README.md" in stated.get(version, []) and os.path.join("docs", "install.md") in stated.get(version, [])
    assert set(stated) == {version}, "pages that state another version than galaxy.yml's %s: %s" % (
        version,
        {v: p for v, p in stated.items() if v != version},
    )


# ------------------------------------------------------------------------------------------- meta/runtime.yml


def module_docs(path):
    tree = ast.parse(read(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % path)


def test_the_stella_action_group_is_every_module_of_the_collection():
    runtime = yaml.safe_load(read("meta", "runtime.yml"))
    group = runtime["action_groups"]["stella"]
    modules = sorted(
        os.path.basename(p)[:-3]
        for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
        if not os.path.basename(p).startswith("_")
    )
    assert "stella_job" in modules and len(modules) >= 9
    assert sorted(group) == modules and len(group) == len(set(group))
    for name in modules:
        fragments = module_docs(os.path.join("plugins", "modules", name + ".py")).get("extends_documentation_fragment")
        # the fragment that documents the group membership (attributes.action_group)
        assert "stellaops.runtime.attributes" in fragments, name


def test_requires_ansible_is_the_tested_ansible_core():
    runtime = yaml.safe_load(read("meta", "runtime.yml"))
    floor = re.match(r"^>=(\d+)\.(\d+)\.\d+$", runtime["requires_ansible"])
    assert floor, runtime["requires_ansible"]
    pinned = next(line for line in requirement_lines("requirements", "dev.txt") if line.startswith("ansible-core=="))
    tested = tuple(int(p) for p in pinned.split("==")[1].split(".")[:2])
    assert tuple(int(p) for p in floor.groups()) == tested
    import ansible  # pylint: disable=import-outside-toplevel
    from ansible.release import __version__  # pylint: disable=import-outside-toplevel

    assert ansible and tuple(int(p) for p in __version__.split(".")[:2]) == tested
    minor = "%d.%d" % tested
    assert "ansible-core>=%s" % minor in read("execution-environment.yml")
    assert "ansible-core>=%s,<" % minor in " ".join(pyproject()["project"]["dependencies"])


def test_galaxy_names_the_repository_and_keeps_the_pip_package_and_dev_files_out():
    info = galaxy()
    assert info["repository"] == "https://github.com/stellaops/runtime"
    assert info["issues"] == "https://github.com/stellaops/runtime/issues"
    assert info["documentation"].startswith("https://github.com/stellaops/runtime")
    assert not any("example.invalid" in str(value) for value in info.values())
    ignored = info["build_ignore"]
    assert {"python", "requirements/dev.txt", "requirements/molecule.txt", "Makefile"} <= set(ignored)
    assert "requirements" not in ignored  # requirements/postgres.txt, provider.txt ship with the collection


def test_the_readme_is_for_users_with_absolute_links():
    readme = read("README.md")
    assert (
        readme.index("pip install stellaops-runtime")
        < readme.index("ansible-galaxy collection install stellaops.runtime")
        < readme.index("stellaops.runtime.job")
    )
    for step in (
        "pip install",
        "stella_targets:",
        "stella_release:",
        "stellaops.runtime.job -e @release.yml",
        "stella list",
        "stella show JOB",
        "stellaops.runtime.rollback -e stella_job_id=JOB",
        "stella report JOB",
    ):
        assert step in readme, step
    assert "make demo" not in readme and "make test" not in readme
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links and all(link.startswith("https://github.com/stellaops/runtime/") for link in links), links
    for link in links:
        path = link.split("/blob/main/", 1)[1].split("#")[0] if "/blob/main/" in link else None
        assert path is None or os.path.exists(os.path.join(ROOT, path)), link
    assert "make demo" in read("docs", "development.md")


def test_extra_docs_list_pages_that_exist():
    extra = yaml.safe_load(read("docs", "docsite", "extra-docs.yml"))
    pages = [page for section in extra["sections"] for page in section["toctree"]]
    assert {"install", "jobs", "stella-command", "faults"} <= set(pages)
    assert all(os.path.isfile(os.path.join(ROOT, "docs", page + ".md")) for page in pages), pages


# ------------------------------------------------------------------------------------------- requirement sets


def test_the_pip_package_depends_on_the_requirement_sets():
    project = pyproject()["project"]
    core = requirement_lines("requirements.txt")
    assert {line.split(">")[0].split("=")[0] for line in core} == {"requests", "docker", "psutil"}
    assert project["dependencies"] == [d for d in project["dependencies"] if d.startswith("ansible-core")] + core
    assert project["optional-dependencies"] == {
        "postgres": requirement_lines("requirements", "postgres.txt"),
        "provider": requirement_lines("requirements", "provider.txt"),
        "trust": requirement_lines("requirements", "trust.txt"),
    }
    assert project["scripts"] == {"stella": "stellaops_runtime:main"}
    assert requirement_lines("requirements", "execution-environment.txt") == [
        "-r ../requirements.txt",
        "-r postgres.txt",
        "-r trust.txt",
    ]
    assert "requirements/execution-environment.txt" in read("meta", "execution-environment.yml")


def test_pip_install_puts_stella_on_path_and_it_runs_the_installed_collection(tmp_path):
    """A wheel built from python/, installed into a new virtualenv (the dependencies come from the test
    venv: nothing is downloaded), then its ``stella`` console script."""
    source = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    wheel = glob.glob(str(tmp_path / "dist" / "stellaops_runtime-*.whl"))
    assert len(wheel) == 1 and galaxy()["version"] in wheel[0]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            wheel[0],
        ],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site, "test-venv.pth"), "w", encoding="utf-8") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")  # ansible-core, requests... of the test venv
    stella = str(venv / "bin" / "stella")
    assert os.access(stella, os.X_OK)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(
        os.environ, HOME=str(home), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, PATH=str(venv / "bin") + ":/usr/bin:/bin"
    )
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run(
        ["stella", "--version"], env=env, capture_output=True, text=True, cwd=str(tmp_path), check=False
    )
    assert (done.returncode, done.stdout) == (0, "stella (stellaops.runtime) %s\n" % galaxy()["version"]), done.stderr
    done = subprocess.run(["stella", "list"], env=env, capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert done.returncode == 1 and done.stderr.startswith("stella list: job_store_missing:")  # the collection's own
    # the same collection installed where ansible-galaxy puts it by default: found without the variable
    default = home / ".ansible" / "collections" / "ansible_collections" / "stellaops"
    default.mkdir(parents=True)
    os.symlink(ROOT, default / "runtime")
    env.pop("ANSIBLE_COLLECTIONS_PATH")
    done = subprocess.run(
        ["stella", "--version"], env=env, capture_output=True, text=True, cwd=str(tmp_path), check=False
    )
    assert done.returncode == 0 and galaxy()["version"] in done.stdout, done.stderr
    # no collection anywhere: one line with the command to run, exit 1
    os.unlink(default / "runtime")
    env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path / "nowhere")
    done = subprocess.run(["stella", "list"], env=env, capture_output=True, text=True, cwd=str(tmp_path), check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("stella: collection_missing: ") and done.stderr.count("\n") == 1
    assert done.stderr.rstrip().endswith("run ansible-galaxy collection install stellaops.runtime")
