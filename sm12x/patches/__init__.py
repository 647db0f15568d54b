"""The patch series the image applies to sglang: applying it all or nothing
(`apply`, with `swap` and `unified`; standard library only, run by
scripts/apply-patches in the image before sm12x is installed), what it makes
safe (`series`), which patches a release needs and when each retires
(`rules`), docs/patch.md's table (`table`); all read from
patches/sglang/patches.toml."""
