"""The HTTP both verify and bench speak: one bounded transport (`transport`:
timeouts, size and depth caps, the auth hint) and the redaction of keys from
anything printed or written (`redact`)."""
