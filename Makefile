.PHONY: setup test nbtest demo docs bench export clean-nbs
# every tool is called through the interpreter the set-up installed into (`make setup PYTHON=/path/to/python`), never
# by a name a shell may not find yet
PYTHON ?= python3
export PYTHON
setup:            ## install torch (CPU or CUDA build), dptoolkit and its dev tools
	bash tools/setup.sh
test:             ## notebooks in step + every notebook executed (docs build) + pytest
	bash tools/test.sh
nbtest:           ## nbdev_test alone
	$(PYTHON) -c 'from nbdev.test import nbdev_test; nbdev_test(n_workers=2, timing=True)'
demo:
	$(PYTHON) -m dptoolkit.cli demo
docs:             ## static docs site in _site/ (Quarto-free); `nbdev_docs` where Quarto exists
	$(PYTHON) tools/build_docs.py
export:           ## notebooks -> library, and clean notebooks
	$(PYTHON) -c 'from nbdev.doclinks import nbdev_export; nbdev_export()' \
	  && $(PYTHON) -c 'from nbdev.clean import nbdev_clean; nbdev_clean()'
bench:
	$(PYTHON) bench/merge.py && $(PYTHON) bench/data_share.py && $(PYTHON) bench/dataset.py && $(PYTHON) bench/overhead.py && $(PYTHON) bench/optimizer.py && $(PYTHON) bench/launch.py && $(PYTHON) bench/policy.py
