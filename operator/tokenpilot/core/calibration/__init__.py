"""Calibration: measure an engine's step times over a grid and fit the step model to them.

Pure parts only (no I/O, no clock): `grid` plans the points and the steps each burst occupies,
`fit` fits the step model's rates to measured step times, `derive` turns a fit into thresholds,
refusals and a GPU profile. The protocol client that takes the measurements is
`tokenpilot.adapters.interference`; the command is `tokenpilot calibrate`.
"""
