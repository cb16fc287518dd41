"""Code only the benchmarks use (the engine's calibration points, the quantile
blends a backtest row is compared with), kept out of the product packages so
nothing shipped depends on it. It sits above every package in `.importlinter`:
it may import them all, none may import it.
"""
