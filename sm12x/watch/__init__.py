"""`sm12x watch`: a live terminal view of a server from its own /metrics."""
