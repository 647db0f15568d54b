"""The patch series the image applies to sglang: what it makes safe (`series`),
which patches a release needs and when each retires (`rules`), docs/patch.md's
table (`table`); all read from patches/sglang/patches.toml."""
