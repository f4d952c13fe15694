"""scripts/bench_build.py: a build that fails is said in one line, with build_arc.py's reason."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_bad_extra_dir_is_one_line_naming_it_and_leaves_nothing(tmp_path):
    # relative paths mean what they say from where it is started (the builds run from the repository root)
    ran = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_build.py"), "--extra-dir",
                          "no_such_corpus", "--num-aug", "1", "--output-dir", "bench/arc-aug"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines() == [f"bench_build.py: build_arc.py: error: {tmp_path / 'no_such_corpus'}: "
                                               f"no such folder"]
    assert not (tmp_path / "bench").exists()     # no warm-up build beside --output-dir


def test_an_existing_output_dir_is_refused_and_left_alone(tmp_path):
    """The benchmark replaces its folder and removes it afterwards: an existing one (someone's
    build) is refused before anything runs."""
    kept = tmp_path / "arc-aug-1000"
    kept.mkdir()
    (kept / "manifest.json").write_text("{}")
    ran = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_build.py"), "--num-aug", "1",
                          "--output-dir", str(kept)], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 2 and f"--output-dir {kept} exists" in ran.stderr, ran.stderr
    assert (kept / "manifest.json").read_text() == "{}"


def test_keep_without_an_output_dir_is_refused(tmp_path):
    """--keep alone kept the build in a temporary folder of a random name, said nowhere."""
    ran = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_build.py"), "--num-aug", "1", "--keep"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 2 and "--keep needs --output-dir" in ran.stderr, ran.stderr
