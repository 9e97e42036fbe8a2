"""Report folders (pfd.attacks.report_folder): pfd's own or new, one audit at a time (issue 20)."""

from __future__ import annotations

import json
import os

import pytest

from pfd.attacks.report_folder import LOCK_NAME, check_apart, report_folder
from pfd.errors import PfdError


def test_new_empty_and_earlier_pfd_report_folders_are_used(tmp_path):
    with report_folder(tmp_path / "new") as f:
        assert f.is_dir()
    (tmp_path / "empty").mkdir()
    with report_folder(tmp_path / "empty"):
        pass
    old = tmp_path / "old"
    old.mkdir()
    (old / "report.json").write_text(json.dumps({"summary": []}))
    (old / "report.md").write_text("# an earlier pfd report\n")
    with report_folder(old):  # rerunning an audit replaces its own report
        pass


@pytest.mark.parametrize("foreign", ["notes.txt", "report.md", "report.html"])
def test_a_folder_with_files_pfd_did_not_write_is_refused_untouched(tmp_path, foreign):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / foreign).write_text("my own work\n")
    with pytest.raises(PfdError, match=f"holds files pfd attack did not write \\({foreign}\\).*--report"):
        with report_folder(folder):
            pass
    assert sorted(p.name for p in folder.iterdir()) == [foreign] and (folder / foreign).read_text() == "my own work\n"


def test_a_second_audit_on_the_same_folder_is_refused_naming_the_first(tmp_path):
    with report_folder(tmp_path / "r"):
        with pytest.raises(PfdError, match=f"another pfd attack \\(pid {os.getpid()}\\) is writing"):
            with report_folder(tmp_path / "r"):
                pass
    with report_folder(tmp_path / "r"):  # released: the next audit may go
        pass
    assert (tmp_path / "r" / LOCK_NAME).exists()


def test_an_existing_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(PfdError, match="is an existing file"):
        with report_folder(tmp_path / "f"):
            pass


def test_pfd_attack_refuses_a_foreign_report_folder_before_any_work(tmp_path):
    from click.testing import CliRunner

    from pfd.cli import main

    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / "report.md").write_text("someone else's report\n")
    res = CliRunner().invoke(main, ["attack", "--release", str(tmp_path / "no-release"), "--state-dir",
                                    str(tmp_path / "no-state"), "--report", str(folder)])
    assert res.exit_code == 2 and "holds files pfd attack did not write" in res.output
    assert (folder / "report.md").read_text() == "someone else's report\n"


def test_a_run_that_fails_in_a_new_folder_leaves_no_folder_and_an_old_folder_stays(tmp_path):
    with pytest.raises(RuntimeError):
        with report_folder(tmp_path / "new"):
            raise RuntimeError("stopped before writing anything")
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    with pytest.raises(RuntimeError):
        with report_folder(tmp_path / "old"):
            raise RuntimeError("stopped")
    assert (tmp_path / "old").is_dir()
    with pytest.raises(RuntimeError):  # what a run wrote before it stopped is kept (a resumable card's models)
        with report_folder(tmp_path / "partial") as folder:
            (folder / "report.json").write_text("{}")
            raise RuntimeError("stopped")
    assert (tmp_path / "partial" / "report.json").is_file()


def test_a_bad_attack_setting_leaves_no_report_folder(tmp_path):
    from click.testing import CliRunner

    from pfd.cli import main

    res = CliRunner().invoke(main, ["attack", "--release", str(tmp_path / "r"), "--state-dir", str(tmp_path / "s"),
                                    "--report", str(tmp_path / "rep"), "--csls-k", "0"])
    assert res.exit_code == 2 and "--csls-k (attack.hubness.k) = 0: must be at least 1" in res.output
    assert not (tmp_path / "rep").exists()


def test_check_apart_refuses_inside_and_around_every_input_and_skips_absent_ones(tmp_path):
    rel, data = tmp_path / "rel", tmp_path / "pub" / "data"
    rel.mkdir()
    data.mkdir(parents=True)
    places = [("the release", str(rel)), ("--public", str(data)), ("--holdout", str(tmp_path / "absent")), ("--test", "")]
    with pytest.raises(PfdError, match=r"--out .*card: the card would lie inside the release"):
        check_apart(rel / "card", places, option="--out", what="card")
    with pytest.raises(PfdError, match=r"the report would lie around --public"):
        check_apart(tmp_path / "pub", places)
    check_apart(tmp_path / "elsewhere", places)  # apart from both; the absent folder and the empty spec are skipped
    check_apart(tmp_path / "absent" / "r", places)  # not a folder yet: nothing to lie inside
