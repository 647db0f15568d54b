"""The checks, in the order they run. Each is a function (ctx, ev) that
returns normally on pass, or raises CheckFailure / CheckSkipped."""
