"""The SPS tables `sm12x tune` measures and `sm12x launch` may use (`tables`):
below both the launcher and tune, so neither imports the other for them."""
