"""``python -m benchmarks``: the layer benchmark suite (benchmarks/run.py)."""

from benchmarks.run import main

main()
