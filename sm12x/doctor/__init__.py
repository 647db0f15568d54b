"""`sm12x doctor`: preflight checks of the host before a boot.

Public API:

    checks.Doctor(host, options).run() -> list[Check]  every check, in display order
    core.Check(id, title, verdict, required, detail, fix, data)
    core.Options(recipe=, model_dir=, env_file=, peer=, peer_report=, image=, ...)
    gpu, container, storage, pair                 the checks, by what they look at
    Host(environ=, root=, timeout=)               commands with timeouts, files under root
    model_dir.check_shards(path) / read_header()  the checkpoint checks on their own
    rdma.parse_ibv_devinfo(text)
    main.COMMAND                                  the CLI (`sm12x doctor`, `--json`)
"""
