"""Vega's VITS: the end-to-end voice Piper ships, written here; Piper checkpoints load into it.

`config` says the shape, `synthesizer` is the generator (text encoder, posterior encoder, flow,
duration predictor, HiFi-GAN decoder), `discriminator` the multi-period discriminator, `model`
holds both; `piper_checkpoint` reads a Piper (Lightning) checkpoint into them. Module attribute
names follow Piper's so that its state dicts load strictly, tensor for tensor; the code is Vega's.
"""
