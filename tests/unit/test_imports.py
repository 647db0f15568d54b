"""Which module may import which, checked by import-linter against the
contracts in pyproject.toml ([tool.importlinter]): no cycle between the
modules of a package, recipes below every command that uses them, settings
below every command, verify's boot mode knowing nothing of the launcher."""

from __future__ import annotations

import textwrap

from importlinter.cli import lint_imports

from tests.support.cli import ROOT


def lint(config: str, capsys) -> tuple[int, str]:
    status = lint_imports(config_filename=config, no_cache=True, no_logo=True)
    return status, capsys.readouterr().out


def test_the_projects_import_contracts_hold(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, out = lint(str(ROOT / "pyproject.toml"), capsys)
    assert status == 0, out
    assert "BROKEN" not in out and "0 broken" in out


def test_a_cycle_breaks_the_contract(tmp_path, capsys, monkeypatch):
    # The same kind of contract on a package with the cycle the recipe model
    # had (model -> launcher -> model): the check can fail.
    pkg = tmp_path / "tangled"
    (pkg / "recipe").mkdir(parents=True)
    (pkg / "launch").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "recipe" / "__init__.py").write_text("")
    (pkg / "launch" / "__init__.py").write_text("")
    (pkg / "recipe" / "model.py").write_text(
        "def argv():\n    from tangled.launch.render import build\n    return build()\n"
    )
    (pkg / "launch" / "render.py").write_text("from tangled.recipe import model\n")
    config = tmp_path / "contracts.ini"
    config.write_text(
        textwrap.dedent(
            """\
            [importlinter]
            root_package = tangled

            [importlinter:contract:acyclic]
            name = no cycles
            type = acyclic_siblings
            ancestors =
                tangled
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    status, out = lint(str(config), capsys)
    assert status != 0
    assert "no cycles BROKEN" in out
    assert ".recipe -> .launch" in out or ".launch -> .recipe" in out
