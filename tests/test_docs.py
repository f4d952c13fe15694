"""The README and docs/ name files, links, options and config keys that exist: a renamed script, a
removed option or a mistyped key in a documented command fails here rather than in a reader's shell.
Reads text only (no subprocess, no torch), so it costs nothing."""
import fnmatch
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP_DIRS = ("arc_data", "hrm", "evaluate", "scripts", "configs", "tests", "docs")


def doc_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def command_lines(text: str) -> list[str]:
    """The lines of the ```bash blocks, a trailing backslash joined with the next line, comments cut."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s#\s.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def script_of(line: str) -> tuple[Path, list[str]] | None:
    """The project script a command runs (`python scripts/x.py ...`, `torchrun ... pretrain.py ...`)
    and the arguments after it; None for other commands (pip, git, a for loop's header)."""
    words = line.split()
    for i, word in enumerate(words):
        if re.fullmatch(r"[\w/]+\.(py|sh)", word) and (ROOT / word).is_file():
            return ROOT / word, words[i + 1:]
    return None


def project_sources(script: Path) -> str:
    """A script's text and that of the project modules it imports (one level: where its options
    may be declared, as build_arc.py's are in arc_data)."""
    text = script.read_text()
    sources = [text]
    for module in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, flags=re.M):
        for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / "scripts" / (module + ".py")):
            if candidate.is_file() and candidate != script:
                sources.append(candidate.read_text())
    return "\n".join(sources)


def composed_keys() -> set[str]:
    """Every key of cfg_pretrain.yaml with an arch preset under `arch`, dotted (`arch.scaling.H.p`)."""
    config = yaml.safe_load((ROOT / "configs/cfg_pretrain.yaml").read_text())
    config.pop("hydra")
    config.pop("defaults")
    config["arch"] = yaml.safe_load((ROOT / "configs/arch/hrm_v1.yaml").read_text())
    keys = set()

    def walk(node, prefix):
        for key, value in node.items():
            keys.add(prefix + key)
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
    walk(config, "")
    return keys


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_link_leads_to_a_file_and_heading_that_exist(doc):
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue    # a web address
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        assert linked.exists(), f"{doc_id(doc)} links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.M)
            assert anchor in {slug(h) for h in headings}, f"{doc_id(doc)} links to {target}: no such heading"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_project_path_named_exists(doc):
    text = doc.read_text()
    named = set(re.findall(r"`([^`\s]+)`", text))
    for line in command_lines(text):
        named.update(line.split())
    for name in named:
        if name.split("/")[0] in TOP_DIRS and not re.search(r"[<>*{}$]", name) and "/" in name:
            assert (ROOT / name.rstrip("/")).exists(), f"{doc_id(doc)} names {name}, which does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_option_of_a_documented_command_exists(doc):
    for line in command_lines(doc.read_text()):
        found = script_of(line)
        if found is None or found[0].suffix != ".py":
            continue    # gpu_check.sh and quickstart.sh take environment variables
        script, args = found
        sources = project_sources(script)
        for option in (a.split("=")[0] for a in args if a.startswith("--")):
            assert re.search(rf"""["']{re.escape(option)}["']""", sources), \
                f"{doc_id(doc)}: `{line}` gives {option}, which {script.name} does not declare"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_config_key_of_a_documented_training_command_exists(doc):
    keys = composed_keys()
    presets = {p.stem for p in (ROOT / "configs/arch").glob("*.yaml")}
    for line in command_lines(doc.read_text()):
        found = script_of(line)
        if found is None or found[0].name != "pretrain.py":
            continue
        for arg in found[1]:
            key, sep, value = arg.strip("'\"").partition("=")
            if not sep or key.startswith(("-", "+", "hydra")):
                continue
            assert key in keys, f"{doc_id(doc)}: `{line}` sets {key}, which the config does not have"
            if key == "arch":
                assert value in presets, f"{doc_id(doc)}: `{line}` picks arch preset {value}, not one of {presets}"


def test_the_checks_above_catch_what_they_are_for(tmp_path):
    """The helpers find a broken link, a missing path, an unknown option and an unknown key."""
    assert slug("Full scale on GPUs (the HRM ARC-AGI-1 recipe)") == "full-scale-on-gpus-the-hrm-arc-agi-1-recipe"
    text = "```bash\npython pretrain.py arch=hrm_tiny \\\n    arch.hidden_sz=3   # a typo\n```\n"
    [line] = command_lines(text)
    script, args = script_of(line)
    assert script.name == "pretrain.py" and args == ["arch=hrm_tiny", "arch.hidden_sz=3"]
    assert "arch.hidden_size" in composed_keys() and "arch.hidden_sz" not in composed_keys()
    assert "arch.scaling.H.p" in composed_keys()
    assert not re.search(r"""["']--no-such-option["']""", project_sources(ROOT / "build_arc.py"))
    assert re.search(r"""["']--limit-tasks["']""", project_sources(ROOT / "build_arc.py"))


def layout_entries() -> dict[str, str]:
    """The README's Layout block: each entry's first word (`hrm/`, `.ci/run`) and its text,
    continuation lines (indented) joined to the entry above."""
    block = re.search(r"## Layout\n+```\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    entries, name = {}, None
    for line in block.splitlines():
        if line[:1].strip():
            name = line.split()[0]
            entries[name] = line
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


def git_ignored(name: str) -> bool:
    """A top-level name that .gitignore keeps out of the repository (its plain and root patterns)."""
    patterns = [p.strip().strip("/") for p in (ROOT / ".gitignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    return name == ".git" or any(fnmatch.fnmatch(name, p) for p in patterns)


def braces(text: str) -> set[str]:
    """The words of a text with `a_{b,c}.py` expanded to `a_b.py` and `a_c.py`."""
    words = set()
    for word in re.findall(r"[\w./{},]+", text):
        match = re.search(r"\{([^}]*)\}", word)
        parts = match.group(1).split(",") if match else [""]
        words.update(word[:match.start()] + p + word[match.end():] if match else word for p in parts)
    return {word.rstrip(",") for word in words}


def test_the_readme_layout_names_every_folder_and_module():
    """Every top-level folder and script of the repository has its line in the README's Layout, and
    every module of hrm/ and arc_data/ and every script of scripts/ is named on its folder's line (a
    module by its name, its name with spaces, or a word it begins: `optim` in `optimizers`)."""
    entries = layout_entries()
    named = {word.rstrip("/,") for text in entries.values() for word in text.split()}
    for path in ROOT.iterdir():
        if (path.is_dir() or path.suffix == ".py") and not git_ignored(path.name):
            assert path.name in named or any(n.startswith(path.name + "/") for n in named), \
                f"README.md's Layout does not name {path.name}"
    for folder in ("hrm", "arc_data"):
        words = re.findall(r"\w+", entries[f"{folder}/"].lower())
        text = " ".join(words)
        for module in sorted((ROOT / folder).glob("*.py")):
            stem = module.stem
            if stem == "__init__":
                continue
            assert stem in words or re.search(rf"\b{stem.replace('_', ' ')}", text) \
                or any(w.startswith(stem) for w in words), f"README.md's Layout does not name {folder}/{module.name}"
    scripts = braces(entries["scripts/"])
    for script in sorted((ROOT / "scripts").iterdir()):
        if script.suffix in (".py", ".sh"):
            assert script.name in scripts, f"README.md's Layout does not name scripts/{script.name}"
