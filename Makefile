.PHONY: setup test nbtest demo docs bench export clean-nbs
setup:            ## install torch (CPU or CUDA build), dptoolkit and its dev tools
	bash tools/setup.sh
test:             ## notebooks in step + every notebook executed (docs build) + pytest
	bash tools/test.sh
nbtest:           ## nbdev_test alone
	nbdev_test --n_workers 2 --timing
demo:
	dpt demo
docs:             ## static docs site in _site/ (Quarto-free); `nbdev_docs` where Quarto exists
	python3 tools/build_docs.py
export:           ## notebooks -> library, and clean notebooks
	nbdev_export && nbdev_clean
bench:
	python3 bench/merge.py && python3 bench/data_share.py && python3 bench/dataset.py && python3 bench/overhead.py && python3 bench/optimizer.py && python3 bench/launch.py && python3 bench/policy.py
