"""`sm12x tune`: profile DSPARK's SPS cost table on the user's own rig.

store: where tables live in the cache volume and which one a launch may use;
probe: whether a server answers in the mode sglang's profiler needs;
profiler: driving sglang's own `sglang.benchmark.dspark_sps_profiler`;
main: the command.
"""
