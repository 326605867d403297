.PHONY: setup test demo docs bench export clean-nbs
setup:            ## install torch (CPU or CUDA build), dptoolkit and its dev tools
	bash tools/setup.sh
test:             ## notebooks in step + nbdev_test + pytest
	bash tools/test.sh
demo:
	dpt demo
docs:             ## static docs site in _site/ (Quarto-free); `nbdev_docs` where Quarto exists
	python3 tools/build_docs.py
export:           ## notebooks -> library, and clean notebooks
	nbdev_export && nbdev_clean
bench:
	python3 bench/merge.py && python3 bench/dataset.py && python3 bench/overhead.py && python3 bench/optimizer.py && python3 bench/launch.py
