"""What GPU code the sm_12x path loads, and whether it runs there (the image's
check-kernels; `check`, standard library only, copied into the image)."""
