"""scripts/quickstart.sh's own command line (the script end to end is the README's main job, run by hand)."""
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_usage_and_runs_nothing(flag, tmp_path):
    """--help once rebuilt data/quickstart, deleted the last quickstart run and failed on its missing
    checkpoint; PYTHON=false makes any step the script would run fail the test."""
    done = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh"), "max_steps=5", flag], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": "false"}, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "bash scripts/quickstart.sh [extra pretrain.py overrides" in done.stdout
    assert done.stdout.startswith("The whole pipeline on a laptop CPU")
