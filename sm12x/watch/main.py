"""`sm12x watch URL`: a live terminal view of a running server, read from its
own /metrics (no Prometheus): output tok/s, acceptance length against the
recipe's floor (its trend, and by context length as far as sglang's metrics
allow), running and queued requests and KV usage per DP rank, recent error
responses, and the shipped alert rules evaluated locally (sm12x.watch.rules).

A server that stops answering gets one line (on stderr, and in the view's
head) and is read again every interval until it comes back. `--once` reads
twice, --interval apart (a rate needs two readings), prints JSON and exits:
0 when the server answered, 1 when it did not.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from urllib.parse import urlsplit

from rich.console import Console
from rich.live import Live

from sm12x import settings
from sm12x.cli import Command
from sm12x.deploy import monitoring
from sm12x.errors import UserError
from sm12x.fields import PositiveFloat, option_type
from sm12x.http import redact
from sm12x.watch import scrape, view
from sm12x.watch.state import Watch

NAME = "watch"


def _url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(
            f"{redact.url(text)!r} is not a server URL: give its base, e.g. http://127.0.0.1:30000"
        )
    return text.strip().rstrip("/")


def thresholds(recipe: str) -> monitoring.Thresholds:
    """The rules' thresholds for the rig: the recipe's (SM12X_RECIPE), or the
    auto rule file's (the lowest floor of every recipe, no max)."""
    from sm12x.recipe import load_all, load_recipe

    if recipe == "auto":
        return monitoring.auto_thresholds(load_all())
    return monitoring.thresholds(load_recipe(recipe))


def _clock() -> str:
    return datetime.datetime.now().strftime("%H:%M:%S")


def once(
    url: str, key: str | None, t: monitoring.Thresholds, interval: float, timeout: float
) -> dict:
    """Two readings, `interval` apart: the snapshot, with the readings' times
    (Unix seconds) as `read_at`."""
    watch = Watch(t)
    read_at = []
    with scrape.client(timeout) as http:
        for n in range(2):
            if n:
                time.sleep(interval)
            read_at.append(time.time())
            watch.add(scrape.scrape(http, url, key), _clock())
            if not watch.points[-1].up:
                break
    return {**watch.snapshot(), "read_at": read_at}


def live(
    url: str, key: str | None, t: monitoring.Thresholds, interval: float, timeout: float
) -> int:
    watch = Watch(t)
    console = Console(width=min(view.WIDTH, Console().width))
    err = Console(stderr=True, soft_wrap=True)  # one line each, whatever the width
    down = False
    with scrape.client(timeout) as http, Live(console=console, auto_refresh=False) as screen:
        while True:
            point = scrape.scrape(http, url, key)
            watch.add(point, _clock())
            if not point.up and not down:
                err.print(
                    f"sm12x watch: {url} does not answer ({point.error}); "
                    f"retrying every {interval:g} s",
                    markup=False,
                    highlight=False,
                )
            elif point.up and down:
                err.print(f"sm12x watch: {url} answers again", markup=False, highlight=False)
            down = not point.up
            screen.update(view.render(watch.snapshot(), url), refresh=True)
            time.sleep(max(0.0, interval - (time.monotonic() - point.at)))


def run(args: argparse.Namespace) -> int:
    loaded = settings.from_args(args, NAME)
    if args.explain:
        sys.stdout.write(settings.explain(loaded, NAME))
        return 0
    if args.url is None:
        raise UserError("give the server's URL: sm12x watch http://127.0.0.1:30000")
    url = _url(args.url)
    key = loaded.settings.key()
    t = thresholds(loaded.settings.recipe)
    if args.once:
        snap = once(url, key, t, args.interval, args.timeout)
        print(json.dumps(snap, indent=2))
        if not snap["up"]:
            print(f"sm12x watch: {url} does not answer ({snap['error']})", file=sys.stderr)
        return 0 if snap["up"] else 1
    try:
        return live(url, key, t, args.interval, args.timeout)
    except KeyboardInterrupt:
        return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", nargs="?", metavar="URL", help="the server, e.g. http://127.0.0.1:30000"
    )
    parser.add_argument(
        "--once", action="store_true", help="read twice, --interval apart, print JSON and exit"
    )
    parser.add_argument(
        "--interval",
        type=option_type(PositiveFloat),
        default=2.0,
        help="seconds between readings (default 2)",
    )
    parser.add_argument(
        "--timeout",
        type=option_type(PositiveFloat),
        default=5.0,
        help="seconds one reading of /metrics may take, every byte (default 5)",
    )
    settings.add_arguments(parser, NAME)


COMMAND = Command(
    name=NAME,
    help="a live terminal view of a server from its /metrics: tok/s, acceptance, ranks, alerts",
    add_arguments=add_arguments,
    run=run,
)
