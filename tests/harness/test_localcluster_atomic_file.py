"""localcluster/atomic_file.py: a file rewritten while another process may read it (pid files, kubeconfigs)."""

from __future__ import annotations

import stat

from localcluster import atomic_file


def test_a_rewrite_replaces_the_file_whole_so_a_reader_of_the_old_one_keeps_it(tmp_path):
    dest = tmp_path / "ctl.pid"
    dest.write_text("1234")
    with open(dest) as reader:  # opened before the rewrite: an in-place rewrite would truncate what it reads
        atomic_file.write_text(dest, "5678", mode=0o644)
        assert reader.read() == "1234"
    assert dest.read_text() == "5678"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["ctl.pid"]  # no partial file left beside it
