"""Discovery of log files: the same file reached twice (through a link inside the folder, a
folder given through a link, or a file given on its own besides its folder) is read once."""

from __future__ import annotations

from pathlib import Path

from rankwatch.inputs import discover


def make_logs(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text(f"{name}: NCCL INFO hello\n")
    return folder


def read_names(paths: list[Path | str], **kw: str) -> list[str]:
    files, _ = discover(paths, **kw)
    return sorted(f.path.name for f in files)


def test_a_link_to_a_file_of_the_same_folder_is_read_once(tmp_path: Path) -> None:
    logs = make_logs(tmp_path / "logs", ["rank-0.log", "rank-1.log"])
    (logs / "rank-9.log").symlink_to(logs / "rank-1.log")
    assert read_names([logs]) == ["rank-0.log", "rank-1.log"]


def test_a_file_given_besides_its_folder_is_read_once(tmp_path: Path) -> None:
    logs = make_logs(tmp_path / "logs", ["rank-0.log", "rank-1.log"])
    notes: list[str] = []
    files, _ = discover([logs, logs / "rank-1.log"], job="j", note=notes.append)
    assert sorted(f.path.name for f in files) == ["rank-0.log", "rank-1.log"]
    assert any("already read" in n for n in notes)


def test_a_folder_given_through_a_link_meets_its_real_files(tmp_path: Path) -> None:
    logs = make_logs(tmp_path / "real" / "logs", ["rank-0.log", "rank-1.log"])
    alias = tmp_path / "alias"
    alias.symlink_to(logs)
    # The folder by its link, then one of its files by the real path (and the reverse).
    assert read_names([alias, logs / "rank-0.log"], job="j") == ["rank-0.log", "rank-1.log"]
    assert read_names([logs / "rank-1.log", alias], job="j") == ["rank-0.log", "rank-1.log"]


def test_nested_folders_under_a_linked_parent_meet_their_real_files(tmp_path: Path) -> None:
    root = tmp_path / "real"
    make_logs(root / "attempt_0" / "0", ["stdout.log"])
    make_logs(root / "attempt_0" / "1", ["stdout.log"])
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    real_file = root / "attempt_0" / "1" / "stdout.log"
    files, _ = discover([alias, real_file], job="j")
    assert len(files) == 2
