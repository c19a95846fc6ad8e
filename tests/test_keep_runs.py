"""Run folders kept across machines: a consistent store snapshot, no locks or checkpoints, and a
restore that neither overwrites a machine's own work nor writes outside its folder."""

import io
import sqlite3
import tarfile
from pathlib import Path

import pytest

from _scripts import load_script

kr = load_script("keep_runs")
main, restore, save = kr.main, kr.restore, kr.save


def _run_folder(root: Path) -> tuple[Path, sqlite3.Connection]:
    run = root / "runs" / "exp" / "evolution_s0"
    (run / "ckpt").mkdir(parents=True)
    db = sqlite3.connect(run / "store.sqlite")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE c (id INTEGER)")
    with db:
        db.executemany("INSERT INTO c VALUES (?)", [(i,) for i in range(5)])
    (run / "lock").write_text("123 host\n")
    (run / "ckpt" / "trial.pt").write_bytes(b"weights")
    (run.parent / "fresh_s0.jsonl").write_text('{"seed": 1000}\n')
    return run, db


def test_save_then_restore_on_a_fresh_machine(tmp_path):
    root, kept = tmp_path / "a", tmp_path / "kept"
    run, db = _run_folder(root)  # the writer still open: its rows sit in the WAL file
    out = save(root / "runs" / "exp", root=root, kept=kept)
    db.close()
    assert out.name == "runs+exp.tar.gz"
    fresh = tmp_path / "b"
    assert restore(root=fresh, kept=kept) == [fresh / "runs" / "exp"]
    back = fresh / "runs" / "exp"
    assert (back / "fresh_s0.jsonl").read_text() == '{"seed": 1000}\n'
    rows = sqlite3.connect(back / "evolution_s0" / "store.sqlite").execute(
        "SELECT count(*) FROM c").fetchone()
    assert rows == (5,)
    assert not (back / "evolution_s0" / "lock").exists()
    assert not (back / "evolution_s0" / "ckpt").exists()
    # a folder this machine has is its own, newer work: left alone
    (back / "fresh_s0.jsonl").write_text("newer\n")
    assert restore(root=fresh, kept=kept) == []
    assert (back / "fresh_s0.jsonl").read_text() == "newer\n"


@pytest.mark.parametrize("folder,name", [("runs/exp", "runs/exp/../../evil"),
                                         ("runs/exp", "/tmp/evil-abs"),
                                         ("/tmp/exp", "/tmp/exp/evil")])
def test_an_archive_that_writes_outside_its_folder_is_refused(tmp_path, folder, name):
    kept = tmp_path / "kept"
    kept.mkdir()
    with tarfile.open(kept / "runs+exp.tar.gz", "w:gz") as tar:
        d = tarfile.TarInfo(folder)
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        data = b"x"
        f = tarfile.TarInfo(name)
        f.size = len(data)
        tar.addfile(f, io.BytesIO(data))
    with pytest.raises(ValueError, match="not an archive of one run folder"):
        restore(root=tmp_path / "root", kept=kept)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "root").exists()


def test_a_link_out_of_the_folder_is_refused(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    with tarfile.open(kept / "runs+exp.tar.gz", "w:gz") as tar:
        d = tarfile.TarInfo("runs/exp")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
        link = tarfile.TarInfo("runs/exp/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(tarfile.TarError):
        restore(root=tmp_path / "root", kept=kept)
    assert list((tmp_path / "root" / "runs").iterdir()) == []  # nothing half-unpacked


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        main(["save", str(tmp_path / "absent")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "is not a folder" in lines[0]


def test_a_ckpt_folder_above_the_run_folder_keeps_its_files(tmp_path):
    root = tmp_path / "ckpt"  # only a ckpt/ inside the folder holds checkpoints
    _run_folder(root)[1].close()
    with tarfile.open(save(root / "runs" / "exp", root=root, kept=tmp_path / "kept")) as tar:
        names = tar.getnames()
    assert "runs/exp/fresh_s0.jsonl" in names and "runs/exp/evolution_s0/store.sqlite" in names
    assert not any("/ckpt/" in n for n in names)


def test_a_failed_save_leaves_no_partial_archive(tmp_path):
    root, kept = tmp_path / "a", tmp_path / "kept"
    _run_folder(root)[1].close()
    (root / "runs" / "exp" / "z_broken.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(sqlite3.Error):
        save(root / "runs" / "exp", root=root, kept=kept)
    assert list(kept.iterdir()) == []
