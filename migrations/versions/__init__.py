"""Migration scripts, one per schema change, applied in revision order."""
