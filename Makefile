# Set-up for a fresh machine: `make demo` (the main job) and `make test`.
# Everything installs into ./.venv.  The venv sees system site-packages, so a
# torch that is already installed (CUDA or CPU) is kept; otherwise the local
# CPU build torch==2.13.0 is installed and the CUDA build is never pulled.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m daydream.demo -o demo_out

test: $(STAMP)
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) build *.egg-info demo_out
