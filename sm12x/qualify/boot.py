"""Starting and stopping each configuration's server, as `sm12x tune` boots its
profiling server: the recipe's compose service (compose up -d, its log
followed, compose down) or `--boot-command` (any command; its output is the
log), waited on through verify's boot (sm12x.deploy.compose and verify.boot,
the code tune uses). One server at a time: the one before is taken down
before the next configuration boots (launch hands the process to sglang and
never returns, so qualify cannot relaunch in place)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from sm12x.errors import UserError
from sm12x.recipe import Recipe
from sm12x.settings import Loaded


@dataclass
class Booter:
    loaded: Loaded
    base_url: str
    deadline_at: float
    boot_timeout: float
    err: Console
    say: Callable[[str], None]
    compose_file: str | None = None
    # Per configuration ("baseline", "throughput"): a command; None: compose.
    commands: dict[str, str | None] = field(default_factory=dict)
    server: Any = None  # verify.boot.Server (imported when a boot runs)
    # Multi-node: run the other node's command over ssh there (None: print it).
    ssh_host: str | None = None
    others: Any = None  # sm12x.qualify.nodes.Others of the running boot

    def how(self, configuration: str, recipe: Recipe) -> str:
        command = self.commands.get(configuration)
        return f"`{command}`" if command else f"compose profile {self._service(recipe).profile}"

    def _service(self, recipe: Recipe):
        from sm12x.deploy import compose

        return compose.service(None, recipe.name, self.loaded, self.compose_file)

    def start(self, configuration: str, recipe: Recipe) -> None:
        """Take down what runs, boot `recipe` and return once /health answers 200."""
        from verify.boot import BootFailure, Server
        from verify.boot import boot as verify_boot

        self.stop()
        left = self.deadline_at - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the {configuration} boot")
        from sm12x.tune.main import answers

        if answers(self.base_url):
            raise UserError(
                f"a server already answers at {self.base_url}: qualify boots its own there; "
                "stop that one (docker compose down), or qualify it with --url"
            )
        command = self.commands.get(configuration)
        if command:
            server = Server.command(command)
        else:
            service = self._service(recipe)
            for note in service.notes:
                self.say(note)
            server = Server.launched_by(service)
        self.say(f"booting {recipe.name} ({configuration}): {self.how(configuration, recipe)}")
        self.server = server
        waited = min(self.boot_timeout, left)
        if recipe.is_multinode:
            self._start_others(configuration, recipe, command, waited)
        try:
            for line in verify_boot(server, self.base_url, waited, self.err):
                self.say(f"boot: {line}")
        except BootFailure as exc:
            others = self.others.why_not_joined() if self.others is not None else None
            self.stop()
            if others is not None and waited < self.boot_timeout:
                raise TimeoutError(
                    f"the {configuration} boot: the head's /health never answered, so "
                    f"not every node joined ({others})"
                ) from None
            tail = "; ".join(exc.log_tail[-3:])
            if others is not None:
                tail = f"{others}; {tail}"
            raise UserError(
                f"{recipe.name} did not boot: {exc.problem} ({exc.cause}); {exc.fix}"
                + (f"; log tail: {tail}" if tail else "")
            ) from None

    def _start_others(self, configuration: str, recipe: Recipe, command, waited: float) -> None:
        from sm12x.qualify.nodes import Others

        head = self.loaded.settings.head_addr
        if not head:
            raise UserError(
                f"{recipe.name} runs on {recipe.hardware.nodes} nodes: set SM12X_HEAD_ADDR "
                "(this head's address on the RoCE link) in .env: the other node joins there"
            )
        self.others = Others(
            recipe=recipe, loaded=self.loaded, head_addr=str(head),
            compose_file=self.compose_file, compose_boot=not command,
            ssh_host=self.ssh_host, say=self.say,
        )  # fmt: skip
        self.others.start()
        self.say(
            f"waiting up to {waited:.0f} s for every node to join ({configuration}): "
            "the head's /health answers only once all ranks have"
        )

    def stop(self) -> None:
        if self.others is not None:
            others, self.others = self.others, None
            others.stop()
        if self.server is not None:
            server, self.server = self.server, None
            server.teardown()
            self.say("the server qualify booted is stopped")
