"""vega_denoise: a model of one's own for Vega (the task is in vega_denoise.task)."""
