"""What the benchmarks share: the machine's parallel speed-up, the measured cost model on a scratch cache, a commit's code."""
