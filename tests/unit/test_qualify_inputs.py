"""`sm12x qualify`'s refusals of flags that cannot go together: one clear line,
a non-zero exit, before anything boots or is measured."""

from __future__ import annotations

from tests.support.cli import assert_one_clear_error, run_sm12x


def test_ssh_with_url_on_a_single_node_recipe_is_refused(tmp_path):
    """With --url on a pair, --ssh reads node 1's GPUs (test_qualify_nodes); on a
    single-node recipe there is no node 1: refused before the server is asked."""
    result = run_sm12x(
        "qualify", "rtx-pro-6000-tp2", "--url", "http://127.0.0.1:9", "--ssh", "spark-b",
        "--out", str(tmp_path / "bundle"), cwd=tmp_path,
    )  # fmt: skip
    line = assert_one_clear_error(result, "--ssh", "rtx-pro-6000-tp2 runs on one node")
    assert "spark-b" not in line and "127.0.0.1:9" not in line
    assert not (tmp_path / "bundle").exists()


def test_ssh_on_a_single_node_recipe_is_refused(tmp_path):
    result = run_sm12x(
        "qualify", "rtx-pro-6000-tp2", "--ssh", "spark-b", "--no-doctor",
        "--boot-command", "false", "--out", str(tmp_path / "bundle"), cwd=tmp_path,
    )  # fmt: skip
    assert_one_clear_error(result, "--ssh", "rtx-pro-6000-tp2 runs on one node", "drop --ssh")
    assert "booting" not in result.stderr
    assert not (tmp_path / "bundle").exists()
