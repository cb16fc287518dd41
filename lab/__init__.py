"""The lab: experiments on the product (regime sweeps, ablations, the fit
window) and the regime generator they run on, kept out of the product so
nothing shipped depends on it. `.importlinter` forbids every product package
to import it; it may import them all. Its sweeps read a YAML config
(lab/configs/, :mod:`lab.config`).
"""
