"""W&B never prompts or waits: auto mode goes online only with credentials, offline works with no network."""
import json
import os
import re
import subprocess
import sys
import types

import pytest

from conftest import ROOT
from hrm.run_log import resolve_wandb_mode


def test_auto_mode_needs_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert resolve_wandb_mode("auto") == "disabled"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    assert resolve_wandb_mode("auto") == "online"
    (tmp_path / "netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online"
    assert resolve_wandb_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")  # the environment wins, as wandb itself does
    assert resolve_wandb_mode("auto") == "offline"


def test_a_wandb_mode_in_the_environment_that_is_none_is_refused_naming_it(monkeypatch, tmp_path):
    """WANDB_MODE=ofline was ignored without a word: with credentials, auto then went online."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ValueError, match="WANDB_MODE='ofline' in the environment is not a W&B mode: one of online, "
                                         "offline, disabled"):
        resolve_wandb_mode("auto")
    for value, mode in (("dryrun", "offline"), ("DISABLED", "disabled"), ("", "online")):   # wandb's old name, any case
        monkeypatch.setenv("WANDB_MODE", value)
        assert resolve_wandb_mode("auto") == mode, value


def test_offline_run_logs_without_prompting_or_network(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), NETRC=str(tmp_path / "none"))
    code = ("from pathlib import Path; from hrm.run_log import RunLog\n"
            f"log = RunLog(Path({str(tmp_path / 'run')!r}), project='p', run_name='r', config={{'lr': 1}}, wandb_mode='offline')\n"
            "log.log({'train/loss': 1.5, 'bad': float('nan')}, step=3); log.close()\n")
    subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, timeout=120, check=True,
                   capture_output=True)
    assert (tmp_path / "run" / "wandb").is_dir()
    record = json.loads((tmp_path / "run" / "log.jsonl").read_text())
    assert record == {"step": 3, "train/loss": 1.5, "bad": "nan"}


def test_a_sweep_run_name_makes_a_run_id_wandb_accepts(tmp_path):
    """A sweep of two keys names its runs `<run>-a=1,b=2`: W&B refuses ',' (and `:;#?/'`) in a run id.
    A new run's id is that and a random suffix (resume="never"); a resumed run's continues its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), NETRC=str(tmp_path / "none"))
    code = ("from pathlib import Path; from hrm.run_log import RunLog\n"
            f"log = RunLog(Path({str(tmp_path / 'run')!r}), project='p', run_name=\"x-arch.scaling.p=0.3,lr=0.001\", "
            "config={}, wandb_mode='offline')\n"
            "print(log.wandb.id); log.close()\n"
            f"log = RunLog(Path({str(tmp_path / 'run')!r}), project='p', run_name=\"x-arch.scaling.p=0.3,lr=0.001\", "
            "config={}, wandb_mode='offline', append=True, wandb_id=log.wandb_id, continue_wandb_run=True)\n"
            "print(log.wandb.id); log.close()\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, timeout=120,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    new, resumed = out.stdout.strip().splitlines()[-2:]
    assert re.fullmatch(r"x-arch\.scaling\.p=0\.3-lr=0\.001-[0-9a-f]{8}", new) and resumed == new


def test_a_new_run_never_joins_the_wandb_run_of_an_earlier_one_of_its_name(monkeypatch, tmp_path):
    """Two fresh runs of one name (a run folder deleted and the run started again) were one W&B run,
    with resume="allow": the second's history was appended to the first's. A new run gets an id of
    its own and refuses an existing W&B run; a given id (a resumed run's) is continued."""
    import wandb
    from hrm.run_log import RunLog
    monkeypatch.delenv("WANDB_MODE", raising=False)
    asked = []

    def init(**kwargs):
        asked.append((kwargs["id"], kwargs["resume"], kwargs["name"]))
        return types.SimpleNamespace(define_metric=lambda *args, **kw: None, finish=lambda: None)
    monkeypatch.setattr(wandb, "init", init)
    for folder in ("a", "b", "c"):
        RunLog(tmp_path / folder, project="p", run_name="ablation/x", config={}, wandb_mode="offline").close()
    RunLog(tmp_path / "a", project="p", run_name="ablation/x", config={}, wandb_mode="offline", append=True,
           wandb_id=asked[0][0], continue_wandb_run=True).close()
    ids = [run_id for run_id, _, _ in asked]
    assert all(re.fullmatch(r"ablation-x-[0-9a-f]{8}", run_id) for run_id in ids) and len(set(ids[:3])) == 3
    assert [resume for _, resume, _ in asked] == ["never"] * 3 + ["allow"] and ids[3] == ids[0]
    assert {name for _, _, name in asked} == {"ablation/x"}   # the name W&B shows is still the run's


def test_a_log_that_cannot_be_opened_after_wandb_started_finishes_the_wandb_run(monkeypatch, tmp_path):
    """W&B starts before log.jsonl is opened: a log that cannot be opened (here a folder in its
    place) refused the start but left the W&B run unfinished, "running" on the server for good."""
    import wandb
    from hrm.run_log import RunLog
    monkeypatch.delenv("WANDB_MODE", raising=False)
    finished = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: types.SimpleNamespace(
        define_metric=lambda *args, **kw: None, finish=lambda exit_code=None: finished.append(exit_code)))
    (tmp_path / "run" / "log.jsonl").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        RunLog(tmp_path / "run", project="p", run_name="r", config={}, wandb_mode="offline")
    assert finished == [1]   # ended, as failed


def test_a_resumed_run_keeps_the_records_it_logs_below_its_wandb_runs_last_step(tmp_path):
    """A resumed run logs from its checkpoint's step, while its W&B run stands at the last step the
    stopped run logged: a SIGTERM during the evaluation of step 6 logged step 6's training record
    (and `stopped`), and the resumed run evaluates step 6 again; a kill after step 8 with a
    checkpoint at 6 logs 7, 8 again. W&B drops a row logged at a step below its run's last (a
    warning WANDB_SILENT hides): charts go by the logged `step` instead."""
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), NETRC=str(tmp_path / "none"))
    code = ("import json; from pathlib import Path; from hrm.run_log import RunLog\n"
            f"log = RunLog(Path({str(tmp_path / 'run')!r}), project='p', run_name='r', config={{}}, wandb_mode='offline')\n"
            "log.log({'train/loss': 2.5}, step=8)\n"          # where the W&B run stands
            "log.log({'eval/exact_accuracy': 0.25}, step=6)\n"  # the resumed run's first record
            "print(json.dumps(dict(log.wandb.summary))); log.close()\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, timeout=120,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert (summary.get("eval/exact_accuracy"), summary["train/loss"], summary["step"]) == (0.25, 2.5, 6)


def test_auto_goes_on_offline_after_a_real_failed_online_start(tmp_path):
    """wandb's own failure, not a stand-in: a server that answers 404 fails the online start at once
    (as no route fails it after 30 s), and the offline start that follows must not be refused for
    the run id the failed one left in wandb's service."""
    pytest.importorskip("wandb")
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        do_GET = do_POST

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), NETRC=str(tmp_path / "none"), WANDB_API_KEY="k" * 40,
               WANDB_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}")
    code = ("from pathlib import Path; from hrm.run_log import RunLog\n"
            f"log = RunLog(Path({str(tmp_path / 'run')!r}), project='p', run_name='r', config={{}}, wandb_mode='auto')\n"
            "log.log({'train/loss': 2.5}, step=1); print(log.mode); log.close()\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, timeout=120,
                             capture_output=True, text=True)
    finally:
        server.shutdown()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "offline"
    assert "[hrm] W&B could not reach its server (CommError: " in out.stderr
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*/*.wandb"))


def test_without_the_wandb_package_auto_disables_and_explicit_modes_say_why(monkeypatch):
    import hrm.run_log as run_log
    monkeypatch.setattr(run_log, "_wandb_installed", lambda: False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "disabled"
    assert resolve_wandb_mode("disabled") == "disabled"
    for mode in ("online", "offline"):
        with pytest.raises(ValueError, match=f"'{mode}'.*pip install wandb"):
            resolve_wandb_mode(mode)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(ValueError, match="WANDB_MODE"):
        resolve_wandb_mode("disabled")


def test_online_without_credentials_is_refused_and_a_self_hosted_login_counts(monkeypatch, tmp_path):
    import hrm.run_log as run_log
    monkeypatch.setattr(run_log, "_wandb_installed", lambda: True)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(ValueError, match="'online'.*needs credentials.*wandb login"):
        resolve_wandb_mode("online")
    assert resolve_wandb_mode("offline") == "offline"        # offline needs no key
    (tmp_path / "netrc").write_text("machine wandb.example.org\n  login user\n  password abc\n")
    assert resolve_wandb_mode("auto") == "disabled"          # a key for another server
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert resolve_wandb_mode("online") == "online" and resolve_wandb_mode("auto") == "online"


def test_a_resumed_log_drops_the_record_a_kill_cut_short(tmp_path):
    from hrm.run_log import RunLog
    from scripts.experiment_tools import read_run_log
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text('{"step": 1, "train/loss": 2.0}\n{"step": 2, "train/lo')   # killed mid-write
    assert read_run_log(run) == [{"step": 1, "train/loss": 2.0}]      # readers skip the cut record
    log = RunLog(run, project="p", run_name="r", config={}, wandb_mode="disabled", append=True)
    log.log({"train/loss": 1.5}, step=2)
    log.close()
    assert (run / "log.jsonl").read_text() == '{"step": 1, "train/loss": 2.0}\n{"step": 2, "train/loss": 1.5}\n'
    (run / "log.jsonl").write_text('{"step": 1}\n{"ste\n{"step": 3}\n')  # a bad line inside is an error
    with pytest.raises(ValueError, match=f"{run / 'log.jsonl'}: line 2 is not a JSON object"):
        read_run_log(run)


def test_a_key_that_a_recent_wandb_login_wrote_counts(monkeypatch, tmp_path):
    """`wandb login` of recent wandb (0.31) writes `machine api.forge.coreweave.com`, its default
    cloud server: auto goes online with it, and online is not refused as without credentials."""
    import hrm.run_log as run_log
    monkeypatch.setattr(run_log, "_wandb_installed", lambda: True)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    (tmp_path / "netrc").write_text("machine api.forge.coreweave.com\n  login user\n  password abc\n")
    assert resolve_wandb_mode("auto") == "online" and resolve_wandb_mode("online") == "online"
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")    # a key for the cloud, not this server
    assert resolve_wandb_mode("auto") == "disabled"


def test_the_wandb_requirement_accepts_the_settings_run_log_passes():
    """RunLog passes wandb.Settings(x_disable_stats=...), which wandb < 0.19 refuses
    (SettingsUnexpectedArgsError, once every start-up check has passed): pyproject must not allow those."""
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [wandb] = [d for d in deps if d.startswith("wandb")]
    floor = tuple(int(x) for x in wandb.removeprefix("wandb>=").split("."))
    assert floor >= (0, 19), wandb


def test_a_server_out_of_reach_logs_offline_under_auto_and_is_one_line_when_online_was_asked(monkeypatch, tmp_path,
                                                                                            capsys):
    """A key copied from a login node, on a compute node with no route out: wandb.init gives up (a
    CommError after its 30 s). `auto` goes on offline, saying so; an explicit `online` is refused in
    one line; either way no log file is left open half-made."""
    import wandb
    import hrm.run_log as run_log
    from hrm.run_log import RunLog
    for name in ("WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setattr(run_log, "_wandb_installed", lambda: True)
    modes = []
    offline_run = types.SimpleNamespace(define_metric=lambda *args, **kwargs: None)

    def init(*, mode, **kwargs):   # the server out of reach: only an offline start succeeds
        modes.append(mode)
        if mode == "online":
            raise wandb.errors.CommError("Run initialization has timed out after 30.0 sec.\nPlease try again.")
        return offline_run
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda: modes.append("teardown"))
    log = RunLog(tmp_path / "a", project="p", run_name="r", config={}, wandb_mode="auto")
    assert (log.mode, log.wandb, modes) == ("offline", offline_run, ["online", "teardown", "offline"])
    assert ("[hrm] W&B could not reach its server (CommError: Run initialization has timed out after 30.0 sec.): "
            f"logging offline under {tmp_path / 'a' / 'wandb'}") in capsys.readouterr().err
    log.file.close()
    modes.clear()
    with pytest.raises(ValueError, match=r"^W&B mode 'online' could not start \(CommError: Run initialization "
                                         r"has timed out after 30.0 sec.\); wandb.mode=offline logs"):
        RunLog(tmp_path / "b", project="p", run_name="r", config={}, wandb_mode="online")
    assert modes == ["online"] and not (tmp_path / "b" / "log.jsonl").exists()
    monkeypatch.setenv("WANDB_MODE", "online")     # forced by the environment: asked for by name too
    with pytest.raises(ValueError, match=r"could not start .*; WANDB_MODE=offline logs"):   # wandb.mode would lose
        RunLog(tmp_path / "c", project="p", run_name="r", config={}, wandb_mode="auto")


class FillsUp:
    """A log file on a disk that fills up: each write stores a few bytes, the next raises ENOSPC."""

    def __init__(self, file):
        self.file, self.stored_some = file, False

    def write(self, data):
        import errno
        if not self.stored_some:
            self.stored_some = True
            return self.file.write(data[:5])
        self.stored_some = False
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.file, name)


class BrokenWandb:
    """A W&B run whose service has gone away: every call raises."""

    def __init__(self):
        self.calls = 0

    def log(self, record):
        self.calls += 1
        raise BrokenPipeError(32, "Broken pipe")

    def finish(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_record_that_cannot_be_written_is_a_warning_said_once_and_leaves_no_partial_line(tmp_path, capsys):
    """Rank 0 alone logs between the step's collectives: an OSError (a full disk, an NFS hiccup) or a
    W&B error raised there stopped rank 0 alone while the other ranks waited in the next all-reduce
    until its timeout. Now each is a warning said once, and the log holds whole records only (a
    record cut short by the full disk, with the next glued onto it, made readers refuse the log)."""
    from hrm.run_log import RunLog
    from scripts.experiment_tools import read_run_log
    run = tmp_path / "run"
    log = RunLog(run, project="p", run_name="r", config={}, wandb_mode="disabled")
    log.wandb = wandb = BrokenWandb()
    log.log({"train/loss": 3.0}, step=1)
    real, log.file = log.file, FillsUp(log.file)
    log.log({"train/loss": 2.0}, step=2)
    log.log({"train/loss": 1.5}, step=3)
    log.file = real   # room again
    log.log({"train/loss": 1.0}, step=4)
    log.close()
    assert read_run_log(run) == [{"step": 1, "train/loss": 3.0}, {"step": 4, "train/loss": 1.0}]
    err = capsys.readouterr().err
    assert err.count("warning:") == 2, err
    assert (f"warning: cannot write the record of step 2 to {run / 'log.jsonl'} (No space left on device); "
            f"training goes on") in err
    assert f"warning: W&B stopped logging at step 1 (BrokenPipeError: [Errno 32] Broken pipe); training goes on, " \
           f"logged to {run / 'log.jsonl'} only" in err
    assert wandb.calls == 1    # not tried again: each try could fail slowly


def test_a_bar_into_a_file_is_not_forced_to_redraw_sooner_than_its_interval(monkeypatch):
    """stderr into a file: mininterval alone left tqdm's monitor thread, which redraws any bar
    quiet for `maxinterval` (10 s by default), to redraw it every 10-20 s rather than the 30 s the
    README gives. On a terminal the bar stays live."""
    import io

    from hrm.run_log import FILE_BAR_INTERVAL_S, progress_bar
    monkeypatch.setattr(sys, "stderr", io.StringIO())   # not a terminal
    bar = progress_bar([], file=io.StringIO())
    assert bar.mininterval == FILE_BAR_INTERVAL_S and bar.maxinterval >= FILE_BAR_INTERVAL_S
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress_bar([], file=io.StringIO()).mininterval == 0.1


def test_readers_drop_what_a_resume_from_an_earlier_step_replaced(tmp_path):
    """Each start logs num_params at its step: records an earlier attempt logged after it are not the
    run's (twice here: resumed from 3, then again from 2); those at that step, and before, are."""
    from scripts.experiment_tools import read_run_log
    steps = [(0, "num_params"), (1, "t"), (2, "t"), (3, "t"), (4, "t"), (4, "eval/lm_loss"),
             (3, "num_params"), (4, "t"), (2, "num_params"), (2, "eval/lm_loss"), (3, "t")]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps({"step": s, k: 1}) + "\n" for s, k in steps))
    kept = [(r["step"], next(k for k in r if k != "step")) for r in read_run_log(tmp_path)]
    assert kept == [(0, "num_params"), (1, "t"), (2, "t"), (2, "num_params"), (2, "eval/lm_loss"), (3, "t")]
