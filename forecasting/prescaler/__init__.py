"""prescaler's own forecaster (`model`), split by job: its knobs (`config`), the
features its regressions read (`features`), the rolling holdout inside the
history (`holdout`), the weighting of the combined members (`members`) and the
band (`band`). The registry names it ``prescaler`` (`forecasting.registry`).
"""
