# stellaops.runtime: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3.11
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLL_ROOT := $(CURDIR)/.build/collections
COLL_DIR := $(COLL_ROOT)/ansible_collections/stellaops/runtime
export ANSIBLE_COLLECTIONS_PATH := $(COLL_ROOT)
export PATH := $(BIN):$(PATH)

.PHONY: demo demo-down test venv collection lab lab-down unit integration sanity lint format typecheck changelog-lint docsite docs-check bench build ee molecule molecule-run clean

$(BIN)/.stamp: requirements/dev.txt
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found (Python 3.11 is required)"; exit 1; }
	@$(PY) -c 'import ensurepip, venv' 2>/dev/null || { echo "installing python3-venv (Debian's $(PY) lacks ensurepip)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/dev.txt
	touch $@

venv: $(BIN)/.stamp

collection:
	@mkdir -p $(dir $(COLL_DIR))
	@test -L $(COLL_DIR) || ln -sfn $(CURDIR) $(COLL_DIR)

lab: venv collection
	lab/lab.sh up

lab-down:
	lab/runtime_sources.sh down
	lab/lab.sh down

demo: lab
	$(BIN)/ansible-playbook -i localhost, -c local -e ansible_python_interpreter=$(BIN)/python \
	  -e stella_evidence_dir=$(CURDIR)/.build/demo/evidence \
	  $(if $(filter 1 true yes,$(STELLA_DEMO_SIGNED)),-e stella_demo_signed=true -e stella_demo_keys=$(CURDIR)/.build/demo/keys) \
	  stellaops.runtime.demo

demo-down: lab
	$(BIN)/ansible-playbook -i localhost, -c local -e ansible_python_interpreter=$(BIN)/python \
	  -e stella_demo_state=absent stellaops.runtime.demo

unit: venv collection
	$(BIN)/pytest -q tests/unit

integration: lab
	$(BIN)/pytest -q tests/integration

sanity: venv
	tests/sanity/run.sh

# ansible-lint (production profile), and the Python tree as the formatter lays it out (ruff.toml).
FORMATTED := plugins scripts python bench tests
lint: venv collection
	$(BIN)/ansible-lint --profile production --offline
	$(BIN)/ruff format --check $(FORMATTED)

format: venv
	$(BIN)/ruff format $(FORMATTED)

# mypy over the collection's plugins, as Ansible imports them (mypy.ini: the job core and the runner strictly).
typecheck: venv collection
	cd $(COLL_ROOT) && $(BIN)/mypy --config-file $(CURDIR)/mypy.ini -p ansible_collections.stellaops.runtime.plugins

# The changelog fragments and changelogs/changelog.yaml (antsibull-changelog, docs/development.md).
changelog-lint: venv
	$(BIN)/antsibull-changelog lint

# The collection's pages for its documentation site: docs/docsite/rst rendered from the Markdown pages
# docs/docsite/extra-docs.yml lists (tests/unit/test_docsite.py fails while they are stale).
docsite: venv
	$(BIN)/python docs/docsite/render.py

# Molecule scenarios (extensions/molecule, docs/molecule.md) in their own venv: molecule, the Docker driver
# of molecule-plugins, and community.docker from the PyPI `ansible` bundle; none of it is a runtime
# requirement of the collection.
MOLECULE_VENV := $(CURDIR)/.build/molecule-venv

$(MOLECULE_VENV)/.stamp: requirements/molecule.txt requirements.txt
	test -x $(MOLECULE_VENV)/bin/python || $(PY) -m venv $(MOLECULE_VENV)
	$(MOLECULE_VENV)/bin/pip install -q --disable-pip-version-check -r requirements/molecule.txt
	touch $@

molecule: lab
	$(MAKE) --no-print-directory molecule-run

# The instance image from the collection's recipe (extensions/molecule/image), built on the lab's Debian 13
# target image instead of a base image from a registry; apt uses the lab's Debian mirror.
.PHONY: molecule-image
molecule-image:
	docker build -q -t stella-molecule:trixie --build-arg BASE=stella-target:trixie extensions/molecule/image

# `molecule test --all` from the collection root with the lab's settings on top of the portable config
# (extensions/molecule/lab.yml). Molecule installs the collection from the checkout into its Ansible home
# first, kept under .build here. make test runs this after `make lab`, while other tests use the lab: it
# does not touch the lab.
molecule-run: $(MOLECULE_VENV)/.stamp molecule-image
	PATH=$(MOLECULE_VENV)/bin:$$PATH STELLA_LAB_JSON=$(CURDIR)/.lab/lab.json ANSIBLE_HOME=$(CURDIR)/.build/molecule-home \
	  $(MOLECULE_VENV)/bin/molecule -c extensions/molecule/config.yml -c extensions/molecule/lab.yml test --all

# The integration tests mostly wait on containers, so they run as two pytest sessions at once: the fault
# matrix, the provider tests and the fleet scenarios (each on both job store backends) with the report
# and per-target sequence tests (they share one fleet) in one, everything else in the other. Each session starts its own lab
# targets (named after its pid). The molecule scenarios run after both (three nested engines starting at
# once on two cores timed out once). All must pass.
INTEGRATION_SPLIT := tests/integration/test_faults.py tests/integration/test_provider.py tests/integration/test_job_sequence.py \
  tests/integration/test_provider_protocol.py tests/integration/test_job_fleet.py tests/integration/test_report.py

# The lab (then the molecule venv and the execution environment image) is set up in the background while the
# unit tests, sanity and lint run:
# they need neither, and on a fresh machine the lab spends most of its minutes downloading.
test: venv collection
	@mkdir -p .build
	@echo "lab set-up in the background (.build/lab-setup.log) while unit, sanity and lint run"
	@( $(MAKE) --no-print-directory lab && $(MAKE) --no-print-directory $(MOLECULE_VENV)/.stamp \
	  && $(MAKE) --no-print-directory ee ) \
	  > .build/lab-setup.log 2>&1 & lab=$$!; \
	  $(MAKE) --no-print-directory unit sanity lint typecheck changelog-lint; checks=$$?; \
	  wait $$lab; labrc=$$?; echo "--- lab set-up:"; cat .build/lab-setup.log; \
	  echo "unit, sanity, lint, typecheck, changelog-lint rc=$$checks; lab set-up rc=$$labrc"; test $$checks -eq 0 -a $$labrc -eq 0
	@echo "integration: two sessions ($(INTEGRATION_SPLIT) | the rest)"
	@$(BIN)/pytest -q -p no:cacheprovider --durations=10 $(INTEGRATION_SPLIT) > .build/integration-split.log 2>&1 & split=$$!; \
	  $(BIN)/pytest -q --durations=10 tests/integration $(addprefix --ignore=,$(INTEGRATION_SPLIT)); rest=$$?; \
	  wait $$split; first=$$?; echo "--- $(INTEGRATION_SPLIT):"; cat .build/integration-split.log; \
	  echo "integration: rest rc=$$rest, split rc=$$first"; \
	  $(MAKE) --no-print-directory molecule-run; mol=$$?; echo "molecule rc=$$mol"; \
	  test $$rest -eq 0 -a $$first -eq 0 -a $$mol -eq 0

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path .build/dist .

# The execution environment (execution-environment.yml, docs/execution-environment.md): the collection
# tarball, the lab's Debian base image (lab/images/ee-base), ansible-builder create, then the image build.
ee: lab build
	cp .build/dist/stellaops-runtime-$$($(BIN)/python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])').tar.gz \
	  .build/dist/stellaops-runtime.tar.gz
	rm -rf .build/ee-base && mkdir -p .build/ee-base && cp lab/images/ee-base/Dockerfile /etc/ssl/certs/ca-certificates.crt .build/ee-base/
	docker build -q -t stella-ee-base:bookworm .build/ee-base
	rm -rf .build/ee-context
	$(BIN)/ansible-builder build -f execution-environment.yml -c .build/ee-context --container-runtime docker
	docker run --rm stellaops-runtime-ee:latest ansible-doc stellaops.runtime.stella_plan | head -3
	docker run --rm stellaops-runtime-ee:latest stella --version

# role_bench.py creates .build/bench-venv (the PyPI `ansible` bundle, for community.docker) on first use.
bench: lab
	$(BIN)/python bench/role_bench.py
	$(BIN)/python bench/plan_bench.py
	$(BIN)/python bench/deploy_bench.py
	$(BIN)/python bench/rollback_bench.py
	$(BIN)/python bench/fleet_bench.py
	$(BIN)/python bench/scale_bench.py
	$(BIN)/python bench/provider_bench.py
	$(BIN)/python bench/trust_bench.py

clean:
	rm -rf .build
