"""Every file generated from code, in one registry: write them, or check them.

    python -m tools.regen                 rewrite every generated file (then review `git diff`)
    python -m tools.regen --check         exit 1 naming each stale file; writes nothing
    python -m tools.regen --only NAME     one entry (repeatable); --list names them

An entry owns whole files (a JSON Schema), a block inside a file (README's
support matrix) or a folder (tests/golden/*.sh, deploy/k8s/*.yaml: a file
there that the code no longer makes is stale too). Each says what making it
needs: `fast` entries need this checkout only, `wheels` ones the real sglang
wheels from PyPI (the parser descriptions). tests/unit/test_generated.py runs
`--check`'s own function over every entry, in the tier its needs put it in;
no other test compares a generated file with its generator.

The generators stay beside what they describe (the recipe schema in
sm12x.recipe, the bad-input table beside its cases in tests/support); this
module only knows, for each generated file, who makes it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/regen.py` as well as `-m tools.regen`
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Entry:
    name: str
    what: str
    # What making it needs: "fast" (this checkout) or "wheels" (sglang from PyPI).
    needs: str
    # The full text of every file it owns, by path under ROOT.
    render: Callable[[], dict[Path, str]]
    # Folders it owns whole, with the glob of its files there: an extra file is stale.
    folders: tuple[tuple[str, str], ...] = ()
    # Binary files drawn from what `render` owns (pictures): written with it, and
    # checked only for being there, never byte for byte (render's text is compared).
    drawn: Callable[[], dict[Path, bytes]] | None = None
    drawn_paths: Callable[[], list[Path]] | None = None


# --- the generators, each imported only when its entry runs


def _recipe_schema() -> dict[Path, str]:
    from sm12x.recipe import schema

    return {schema.schema_path(): schema.generate()}


def _bench_schema() -> dict[Path, str]:
    from sm12x.bench import result

    return {result.SCHEMA_FILE: result.generate_schema()}


def _qualify_schema() -> dict[Path, str]:
    from sm12x.qualify import bundle

    return {bundle.SCHEMA_FILE: bundle.generate_schema()}


def _goldens() -> dict[Path, str]:
    from tools import golden

    return golden.goldens()


def _k8s() -> dict[Path, str]:
    # The pinned defaults only: not the developer's SM12X_IMAGE or .env.
    from sm12x.deploy import k8s

    return {
        ROOT / "deploy" / "k8s" / name: text for name, text in k8s.tree(k8s.K8sOptions()).items()
    }


def _compose_text() -> tuple[list, str]:
    from sm12x.deploy import compose_yaml
    from sm12x.recipe import load_all

    recipes = load_all()
    return recipes, compose_yaml.render(recipes)


def _compose() -> dict[Path, str]:
    return {ROOT / "compose.yaml": _compose_text()[1]}


def _env_example() -> dict[Path, str]:
    from sm12x.deploy import env_example

    recipes, text = _compose_text()
    return {ROOT / ".env.example": env_example.render(recipes, text)}


def _readme_block(replace: Callable[[str], str]) -> dict[Path, str]:
    path = ROOT / "README.md"
    return {path: replace(path.read_text(encoding="utf-8"))}


def _support_matrix() -> dict[Path, str]:
    from sm12x.qualify import status
    from sm12x.recipe import load_all, matrix

    recipes = load_all()
    out = _readme_block(lambda text: matrix.replace_block(text, recipes, status.evidence))
    doc = ROOT / "docs" / "recipes.md"
    text = doc.read_text(encoding="utf-8")
    out[doc] = matrix.replace_status_block(text, recipes, status.evidence, "../")
    return out


def _settings_table() -> dict[Path, str]:
    from sm12x.settings import table

    return _readme_block(table.replace_block)


def _patch_table() -> dict[Path, str]:
    from sm12x.patches import table

    return {table.DOC: table.replace_block(table.DOC.read_text(encoding="utf-8"))}


def _full_rank_table() -> dict[Path, str]:
    import importlib.util

    path = ROOT / "benchmarks/dsv4_full_rank_check.py"
    spec = importlib.util.spec_from_file_location("dsv4_full_rank_check", path)
    check = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = check  # its dataclass looks its module up
    spec.loader.exec_module(check)
    return {check.DOC: check.replace_doc_block(check.DOC.read_text(encoding="utf-8"))}


def _bad_inputs() -> dict[Path, str]:
    from tools import bad_inputs

    return {bad_inputs.DOC: bad_inputs.render_doc()}


def _policy_exceptions() -> dict[Path, str]:
    from tools import policy

    return {policy.DOC: policy.render_doc()}


def _listeners() -> dict[Path, str]:
    from tests.support import sglang_surface

    return {sglang_surface.DOC: sglang_surface.render_doc()}


def _sglang_routes() -> dict[Path, str]:
    from tests.support import sglang_routes

    return sglang_routes.render()


def _sglang_env_reads() -> dict[Path, str]:
    from tests.support import sglang_env_reads

    return sglang_env_reads.render()


def _parser_descriptions() -> dict[Path, str]:
    from tools import sglang_cli

    return sglang_cli.descriptions()


def _monitoring() -> dict[Path, str]:
    from sm12x.deploy import dashboards, monitoring
    from sm12x.recipe import load_all

    return {**monitoring.tree(load_all()), **dashboards.tree()}


def _dashboard_series() -> dict[Path, str]:
    from tools import dashboard_pictures

    return {dashboard_pictures.SERIES: dashboard_pictures.series_text()}


def _dashboard_pictures() -> dict[Path, bytes]:
    from tools import dashboard_pictures

    return dashboard_pictures.pictures()


def _dashboard_picture_paths() -> list[Path]:
    from tools import dashboard_pictures

    return dashboard_pictures.picture_paths()


def _metric_names() -> dict[Path, str]:
    from tools import metric_names

    return metric_names.render()


def _test_count() -> dict[Path, str]:
    from tools import collected

    return _readme_block(collected.replace_block)


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "recipe-schema",
        "recipes/recipe.schema.json: the recipe model's JSON Schema",
        "fast",
        _recipe_schema,
    ),
    Entry(
        "goldens",
        "tests/golden/*.sh: each recipe's launch command as its compose service renders it",
        "fast",
        _goldens,
        (("tests/golden", "*.sh"),),
    ),
    Entry(
        "k8s",
        "deploy/k8s/*.yaml: `sm12x render --k8s all`: each recipe on its own track's image",
        "fast",
        _k8s,
        (("deploy/k8s", "*.yaml"),),
    ),
    Entry(
        "compose",
        "compose.yaml: a service per recipe profile (sm12x/deploy/compose_yaml.py) in the "
        "shared template sm12x/deploy/compose.template.yaml",
        "fast",
        _compose,
    ),
    Entry(
        "env-example",
        ".env.example: every variable compose.yaml reads, from the settings model and the "
        "recipes' site variables (sm12x/deploy/env_example.py)",
        "fast",
        _env_example,
    ),
    Entry(
        "bench-schema",
        "sm12x/bench/result.schema.json: bench's result format",
        "fast",
        _bench_schema,
    ),
    Entry(
        "qualify-schema",
        "sm12x/qualify/result.schema.json: qualify's bundle format (embeds bench's)",
        "fast",
        _qualify_schema,
    ),
    Entry(
        "support-matrix",
        "README.md's support matrix and docs/recipes.md's status table, from the recipes "
        "and the qualify bundles in results/",
        "fast",
        _support_matrix,
    ),
    Entry(
        "settings-table",
        "README.md's settings table, from sm12x/settings/model.py",
        "fast",
        _settings_table,
    ),
    Entry(
        "patch-table",
        "docs/patch.md's table of patches, from patches/sglang/patches.toml",
        "fast",
        _patch_table,
    ),
    Entry(
        "full-rank-table",
        "docs/benchmarks.md's compact-verify-at-a-full-rank counts and table, from the "
        "recorded run's JSON (benchmarks/dsv4_full_rank_check.py doc_block)",
        "fast",
        _full_rank_table,
    ),
    Entry(
        "bad-inputs",
        "docs/security.md's bad-input table: every case run through the CLI",
        "fast",
        _bad_inputs,
    ),
    Entry(
        "policy-exceptions",
        "docs/security.md's Kubernetes policy exceptions",
        "fast",
        _policy_exceptions,
    ),
    Entry(
        "monitoring",
        "deploy/monitoring/: Prometheus's configuration, each rig's alert rules and the "
        "Grafana dashboards",
        "fast",
        _monitoring,
        (("deploy/monitoring/rules", "*.yml"), ("deploy/monitoring/grafana/dashboards", "*.json")),
    ),
    Entry(
        "dashboard-pictures",
        "docs/monitoring/series.json (the recorded run, per panel query) and a PNG of each "
        "dashboard drawn from it",
        "fast",
        _dashboard_series,
        (("docs/monitoring", "*.png"),),
        drawn=_dashboard_pictures,
        drawn_paths=_dashboard_picture_paths,
    ),
    Entry(
        "metric-names",
        "deploy/monitoring/metrics.json: the metrics sglang (each track) and sglang-router export",
        "wheels",
        _metric_names,
    ),
    Entry(
        "sglang-parsers",
        "sm12x/sglang_parsers/*.json: each track's real sglang parser, from its wheel",
        "wheels",
        _parser_descriptions,
    ),
    Entry(
        "test-count",
        "README.md's count of the suite's tests, from `pytest --collect-only`",
        "wheels",
        _test_count,
    ),
    Entry(
        "sglang-env-reads",
        "sm12x/launch/sglang_env.json: every environment variable each track's sglang reads, "
        "found in its whole tree (what sm12x launch refuses from a caller)",
        "wheels",
        _sglang_env_reads,
    ),
    Entry(
        "sglang-routes",
        "sm12x/launch/sglang_routes.json: each track's routes whose path a variable sets and "
        "the prefixes sglang's own auth middleware serves without the key",
        "wheels",
        _sglang_routes,
    ),
    Entry(
        "listeners",
        "docs/listeners.md: every listener and secret of the pinned sglang and sglang-router, "
        "found in their source, and how sm12x judges each",
        "wheels",
        _listeners,
    ),
)


def named(names: Iterable[str]) -> list[Entry]:
    by_name = {entry.name: entry for entry in ENTRIES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(
            f"python -m tools.regen: error: no entry {', '.join(map(repr, unknown))} "
            f"(the entries: {', '.join(by_name)})"
        )
    return [by_name[n] for n in names] if names else list(ENTRIES)


def _extra_files(entry: Entry, wanted: dict[Path, str], root: Path) -> list[Path]:
    extra = []
    made = set(wanted) | set(entry.drawn_paths() if entry.drawn_paths else [])
    for folder, pattern in entry.folders:
        for path in sorted((root / folder).glob(pattern)):
            if ROOT / path.relative_to(root) not in made:
                extra.append(path)
    return extra


def stale(entry: Entry, root: Path = ROOT) -> list[str]:
    """What is out of date under `root` (a checkout), each as 'path: why'."""
    wanted = entry.render()
    found = []
    for path, text in wanted.items():
        on_disk = root / path.relative_to(ROOT)
        if not on_disk.is_file():
            found.append(f"{on_disk.relative_to(root)}: missing")
        elif on_disk.read_text(encoding="utf-8") != text:
            found.append(f"{on_disk.relative_to(root)}: differs from what {entry.name} makes")
    for path in _extra_files(entry, wanted, root):
        found.append(f"{path.relative_to(root)}: no longer made by {entry.name}")
    for path in entry.drawn_paths() if entry.drawn_paths else []:
        if not (root / path.relative_to(ROOT)).is_file():
            found.append(f"{path.relative_to(ROOT)}: missing")
    return found


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.regen")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # never a half-written file
    finally:
        tmp.unlink(missing_ok=True)


def write(entries: Iterable[Entry]) -> list[str]:
    """Rewrite what changed and remove what is no longer made, for every entry:
    all of it or none. Entries run in turn (two may own blocks of one file, and
    the second renders from what the first wrote); what each file held before
    is kept, and any failure puts every file back as it was."""
    before: dict[Path, str | None] = {}
    said: list[str] = []
    try:
        for entry in entries:
            wanted = entry.render()
            for path in _extra_files(entry, wanted, ROOT):
                before.setdefault(path, path.read_text(encoding="utf-8"))
                path.unlink()
                said.append(f"removed {path.relative_to(ROOT)}")
            for path, text in wanted.items():
                old = path.read_text(encoding="utf-8") if path.is_file() else None
                if old != text:
                    before.setdefault(path, old)
                    _replace(path, text)
                    said.append(f"wrote {path.relative_to(ROOT)}")
            for path, data in (entry.drawn() if entry.drawn else {}).items():
                if not path.is_file() or path.read_bytes() != data:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    said.append(f"drew {path.relative_to(ROOT)}")
    except BaseException:
        for path, text in before.items():
            if text is None:
                path.unlink(missing_ok=True)
            else:
                _replace(path, text)
        raise
    return list(dict.fromkeys(said))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.regen", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--list", action="store_true", help="name each entry and what it owns")
    args = parser.parse_args(argv)
    entries = named(args.only)
    if args.list:
        for entry in entries:
            print(f"{entry.name:18} [{entry.needs}] {entry.what}")
        return 0
    if args.check:
        found = [line for entry in entries for line in stale(entry)]
        for line in found:
            print(f"stale: {line}", file=sys.stderr)
        if found:
            print(
                "run `python -m tools.regen` (or `make regen`) and review the diff", file=sys.stderr
            )
            return 1
        print(f"{len(entries)} generated entries up to date")
        return 0
    try:
        said = write(entries)
    except OSError as exc:
        print(f"python -m tools.regen: error: {exc}; nothing was written", file=sys.stderr)
        return 1
    for line in said:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
