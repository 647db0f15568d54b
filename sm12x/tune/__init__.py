"""`sm12x tune`: profile DSPARK's SPS cost table on the user's own rig.

probe: whether a server answers in the mode sglang's profiler needs;
profiler: driving sglang's own `sglang.benchmark.dspark_sps_profiler`;
main: the command. Where tables live and which one a launch may use is
sm12x.sps.tables, below both the launcher and tune (tune boots through the
launcher, so the store cannot live here).
"""
