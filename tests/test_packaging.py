"""pyproject.toml declares what the code imports, and the code imports what pyproject.toml declares:
a module reached only through another package's requirements (omegaconf through hydra-core) would
break the day that package drops it, and an unused requirement is installed for nothing."""
import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = {"arc_data", "hrm", "evaluate", "scripts", "tests", "build_arc", "pretrain"}
# the import name of each requirement whose distribution is named otherwise
IMPORT_NAME = {"pyyaml": "yaml", "hydra-core": "hydra", "adam-atan2": "adam_atan2_backend",
               "flash-attn": "flash_attn"}
# imported but never installed by pip from pyproject: FlashAttention 3 (built from source) and the
# original HRM checkout that scripts/bench_vs_original.py puts on the path
NOT_INSTALLED = {"flash_attn_interface", "models"}


def imported(paths) -> set[str]:
    """The top-level modules the files import, the standard library's and the project's left out."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - PROJECT - NOT_INSTALLED


def declared(requirements: list[str]) -> set[str]:
    names = {re.match(r"[A-Za-z0-9_.\-]+", r).group(0).lower() for r in requirements}
    return {IMPORT_NAME.get(n, n.replace("-", "_")) for n in names}


def code_files():
    return [*ROOT.glob("*.py"), *(p for d in ("arc_data", "hrm", "evaluate", "scripts") for p in (ROOT / d).glob("*.py"))]


def test_every_module_the_code_imports_is_declared_and_every_declared_one_is_imported():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = declared(project["dependencies"])
    extras = {name: declared(reqs) for name, reqs in project["optional-dependencies"].items()}
    code = imported(code_files())
    assert code - runtime - extras["cuda"] == set(), "imported by the code, not in pyproject.toml's dependencies"
    assert runtime - code == set(), "in pyproject.toml's dependencies, imported by no code"
    assert extras["cuda"] - code == set(), "in the cuda extra, imported by no code"
    tests = imported((ROOT / "tests").glob("*.py")) - {p.stem for p in (ROOT / "tests").glob("*.py")}
    assert tests - runtime - extras["cuda"] - extras["dev"] == set(), "imported by the tests, declared nowhere"


def test_the_check_sees_an_undeclared_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nimport numpy.linalg\nfrom omegaconf import OmegaConf\nfrom . import x\n")
    assert imported([module]) == {"numpy", "omegaconf"}
    assert declared(["hydra-core>=1.3", "PyYAML>=6", "numpy"]) == {"hydra", "yaml", "numpy"}
