"""The training loop: data -> ACT steps -> optimizers, with evaluation, checkpoints and resume.

One optimizer step (as published HRM trains):
  1. every rank runs one ACT segment on its slice of the global batch (rows that halted last step
     take fresh examples, the others keep going), loss summed over rows, divided by the global
     batch size; backward through the last L and H calls only;
  2. dense gradients are summed over ranks (so they are the global-batch mean); the puzzle
     embedding's sign-SGD all-gathers its rows itself;
  3. a non-finite loss or gradient stops the run (nothing is saved over the last good checkpoint);
  4. AdamATan2 on the dense weights, sign-SGD on the puzzle rows, both at the scheduled lr.
Every `eval_interval` epochs: metrics on the test split, the predictions for voting and their pass@K.
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from arc_data.dataset import EvalBatches, TrainBatches, load_split
from arc_data.manifest import build_identity
from hrm.compiled import compile_fixed_shapes
from hrm.diagnostics import visit_alignment
from hrm.distributed import DistInfo, agree_on_outcome, all_reduce_grads_, all_reduce_sum_, broadcast_module_, switch_on
from hrm.evaluation import (EvaluationStopped, compiled_segment, evaluate, score_predictions, to_device,
                            write_predictions)
from hrm.loss import ACTLossHead
from hrm.model import HRM, Carry
from hrm.optim import AdamATan2
from hrm.pretrain_config import PretrainConfig
from hrm.puzzle_embedding import PuzzleSignSGD
from hrm.run_lock import RunLock
from hrm.run_log import RunLog, error_text, new_wandb_run_id, progress_bar, resolve_wandb_mode, wandb_run_id
from hrm.run_checks import build_fingerprint, check_one_build, check_same_arch, check_same_data, check_splits_agree
from hrm.run_folders import list_checkpoints, resolve_resume
from hrm.run_naming import continues_its_run, run_names
from hrm.scaling import describe_scaling
from hrm.schedule import check_some_steps, estimated_total_steps, lr_at
from hrm.sigterm import StopOnSigterm, TrainingStopped
from hrm.train_checkpoint import (check_run_folder_shared, check_run_folder_usable, check_run_folder_writable,
                                  checkpoint_step, finish_unrenamed_saves, load_checkpoint, remove_unfinished_saves,
                                  save_checkpoint, unwritable_run_folder)


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the run folder holds `diverged.json` with the details."""


@dataclass
class Trainer:
    config: PretrainConfig
    info: DistInfo
    progress: bool = True
    history: list = field(default_factory=list)  # (step, loss) on rank 0, for tests and scripts
    run_tag: str = ""                            # a sweep job's run name suffix (see run_names)

    def __post_init__(self):
        cfg, info = self.config, self.info
        # the one collective before the checks (rank 0's clock names a default run); nothing before it can fail
        self.project, self.run_name, self.run_dir = run_names(cfg, info, self.run_tag)
        # Every start-up check, as one stage whose outcome the ranks exchange: a refusal on any rank
        # (a checkpoint missing on one node, another build, a folder already in use) is raised by
        # every rank with the same message, before any of them waits in a collective.
        self.run_lock = None    # rank 0's hold on the run folder (hrm/run_lock.py), taken by _prepare
        self.sigterm = None     # fit's StopOnSigterm; train_step sums its flag over the ranks
        self.stop_after_step = False   # a SIGTERM on some rank: stop after this step (train_step)
        # the last step's (finite) loss and gradient norm: the record of a divergence the weights show
        self.last_loss_and_grad_norm = (math.nan, math.nan)
        self.sigterm_at_end = False    # one after the run's last step: its last evaluation's last batch, its save
        try:
            resumed_from = agree_on_outcome(self._prepare, info)
            check_one_build(build_fingerprint(self.data_identity, self.train_split, self.test_split),
                            cfg.data_path, info)
            # after _prepare: rank 0 holds the run folder by now, which every rank must see
            check_run_folder_shared(self.run_dir, info)
        except BaseException:   # refused (here or on another rank): the folder is left as it was found
            self.release_run_lock(cleanup=True)
            raise
        try:
            self._start(resumed_from)
        except BaseException:   # the folder is freed for whoever tries next in this process
            self.release_run_lock()
            raise

    def _start(self, resumed_from: Path | None) -> None:
        """Once every rank's checks have passed: the same weights everywhere, then rank 0 says where
        the run starts, writes its config and opens its log."""
        cfg, info = self.config, self.info
        broadcast_module_(self.model, info)   # every rank from rank 0's weights (a checkpoint's too), to be sure
        # The run's newest checkpoint, continued in its folder, already holds this state: the loop
        # need not write it again (a finished run resumed, a stop during the evaluation it runs first)
        self.saved_step = self.step if self.resumed_newest else None
        self.resolved_config = cfg.model_dump(mode="json", by_alias=True)  # logged, saved in checkpoints
        self.log = None

        def open_run() -> None:
            if not info.is_main:
                return
            self._tell_start(resumed_from)
            if not self.continues_own_run:   # a fresh start (resume=auto with nothing to resume too), a branch
                self._keep_earlier_log()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "all_config.yaml").write_text(yaml.safe_dump(self.resolved_config, sort_keys=False))
            try:
                self.log = RunLog(self.run_dir, project=self.project, run_name=self.run_name,
                                  config=self.resolved_config, entity=cfg.wandb.entity,
                                  # the mode as given, not as auto resolved it ('online'): RunLog tells
                                  # auto (offline when the server cannot be reached) from an online asked
                                  # for by name (refused then)
                                  wandb_mode="disabled" if self.wandb_mode == "disabled" else cfg.wandb.mode,
                                  append=self.continues_own_run, wandb_id=self.wandb_id,
                                  continue_wandb_run=self.continues_own_run)
            except (ValueError, OSError):
                raise
            except Exception as e:
                # wandb's own errors (its service not starting, in offline mode too) are neither: as
                # they were, rank 0 alone stopped, and the other ranks waited for the agreement
                raise ValueError(f"W&B could not start ({error_text(e)}); wandb.mode=disabled (WANDB_MODE, if "
                                 f"set) logs to {self.run_dir / 'log.jsonl'} only") from e
            n_params = sum(p.numel() for p in self.model.parameters())
            self.log.log({"num_params": n_params, **{f"scaling/{m}/{k}": v for m, s in self.model.scaling.items()
                                                      if isinstance(s, dict) for k, v in s.items()
                                                      if isinstance(v, (int, float))}}, step=self.step)
        # Rank 0's alone, and it can fail there alone (W&B 'online' with no route to its server, a
        # write refused): agreed, as the checks were, or the other ranks would wait in the first
        # step's all-reduce until its timeout
        agree_on_outcome(open_run, info, refusals=(ValueError, OSError))

    def _prepare(self) -> Path | None:
        """Each rank's own start-up, every check included: data, model, then the checkpoint resumed
        (its folder is returned) or the fresh run's folder checked (None), the optimizers built once
        those checks pass (_build_optimizers). Holds no collective: agree_on_outcome runs it."""
        cfg, info = self.config, self.info
        cfg.check_world_size(info.world_size)
        # W&B settings are checked before any work (a missing wandb package is named here).
        self.wandb_mode = resolve_wandb_mode(cfg.wandb.mode) if info.is_main else "disabled"
        self.train_split = load_split(cfg.data_path, "train")
        self.test_split = load_split(cfg.data_path, "test")
        check_splits_agree(self.train_split, self.test_split)
        self.data_identity = build_identity(cfg.data_path)   # saved with checkpoints, checked on resume
        meta = self.train_split.metadata
        self.reader = TrainBatches(self.train_split, global_batch_size=cfg.global_batch_size, seed=cfg.seed,
                                   rank=info.rank, world_size=info.world_size,
                                   epochs_per_iteration=cfg.epochs_per_iteration)
        self.total_iterations = cfg.epochs // cfg.epochs_per_iteration
        self.total_steps = estimated_total_steps(cfg, self.train_split)
        check_some_steps(cfg, self.train_split, self.total_steps)
        self.stop_step = min(self.total_steps, cfg.max_steps or self.total_steps)

        torch.manual_seed(cfg.seed)  # identical initial weights everywhere (then broadcast, to be sure)
        # the derived scaling is said in _tell_start, once the start is known to go ahead: said here,
        # a resume refused for another arch printed the scaling of the model it refused
        self.model = HRM(cfg.arch, meta.vocab_size, meta.seq_len, meta.num_puzzle_identifiers,
                         verbose=False).to(info.device)
        self.loss_head = ACTLossHead(self.model)
        self.optimizers = None   # _build_optimizers, once the folder checks (and a checkpoint's) pass

        self.step = 0
        self.carry = None
        self.evaluated_iterations = 0   # reader iterations whose evaluation has run
        self.final_evaluation_pending = False   # stopped by SIGTERM on the last step, before its evaluation
        self._vote_split = None         # the build's test tasks and answers, for pass@K (rank 0; False:
                                        # voting cannot read the build)
        self.diagnostics_failed = False  # rank 0's visit alignment failed once: not tried again
        # A log and a W&B run of its own (a fresh run, a branch), unless _resume continues the run's
        self.wandb_id, self.continues_own_run = new_wandb_run_id(self.run_name), False
        self.resumed_newest = False     # resumed from the checkpoint `latest` names in the run's own folder
        if cfg.resume:
            return self._resume()
        self._check_fresh_folder()
        self._build_optimizers()
        return None

    def _build_optimizers(self) -> dict:
        """The optimizers and the compiled step, built after the run's folder and checkpoint checks:
        the first optimizer imports torch._dynamo (seconds), which a refused start need not wait for.
        Refuses nothing (PretrainConfig checked the settings the optimizers check), so the refusals
        and their order are those of building it first. Returns the optimizers."""
        cfg, info = self.config, self.info
        self.optimizers = {"dense": AdamATan2(self.model.parameters(), lr=0.0, betas=(cfg.beta1, cfg.beta2),
                                              weight_decay=cfg.weight_decay)}
        self.base_lrs = {"dense": cfg.lr}
        if cfg.arch.puzzle_emb_ndim > 0:
            self.optimizers["puzzle_emb"] = PuzzleSignSGD(self.model.puzzle_embedding, lr=0.0,
                                                          weight_decay=cfg.puzzle_emb_weight_decay)
            self.base_lrs["puzzle_emb"] = cfg.puzzle_emb_lr
        self.step_fn = self.loss_head
        compiled = switch_on(cfg.compile, auto=info.device.type == "cuda")
        if compiled:
            self.step_fn = compile_fixed_shapes(self.loss_head)
        # Evaluation compiles one segment on its own (no grad, its own graph; see compiled_segment).
        self.eval_segment = None
        if switch_on(cfg.compile_eval, auto=compiled):
            self.eval_segment = compiled_segment(self.model)
        return self.optimizers

    def _hold_run_folder(self) -> None:
        """Rank 0 takes the run folder (hrm/run_lock.py) before anything in it is read or written:
        a second start of a run in progress is refused as such, before it loads a checkpoint the
        live run may be pruning. Creates the folder; a refused start removes what it created. Every
        rank first refuses a folder a file blocks (`checkpoint_path=` pointed at a file); rank 0 then
        one it cannot write into (which would otherwise fail at the first save, hours in)."""
        check_run_folder_usable(self.run_dir)
        if self.info.is_main:
            try:
                self.run_lock = RunLock.acquire(self.run_dir)
            except OSError as e:    # a read-only folder, or one that cannot be made where it would go
                raise unwritable_run_folder(self.run_dir, e) from None
            check_run_folder_writable(self.run_dir)

    def release_run_lock(self, cleanup: bool = False) -> None:
        """Let another process train into the run folder (at the end of fit; `cleanup` after a
        refused start, which also removes what taking the lock created)."""
        if self.run_lock is not None:
            self.run_lock.release(cleanup=cleanup)
            self.run_lock = None

    def _resume(self) -> Path:
        """Continue from the checkpoint `resume` names, once it is known to be this run's to
        continue (architecture, build, batch order, folder): model, optimizers, reader position,
        carry and random state. Returns the checkpoint's folder."""
        cfg, info = self.config, self.info
        named = bool(cfg.checkpoint_path or cfg.run_name)
        # A named run's folder is known now: taken before its `latest` is read, so that a live run
        # that has not saved yet is refused as in use (not as 'no checkpoint').
        if named:
            self._hold_run_folder()
        ckpt = resolve_resume(cfg.resume, self.run_dir if named else None, other_projects=not cfg.checkpoint_path)
        if not named:
            self.run_dir = ckpt.parent  # keep writing into the run we continue
            self._hold_run_folder()
        if ckpt.parent.resolve() != self.run_dir.resolve() and list_checkpoints(self.run_dir):
            # a fork (another run's checkpoint, this run's name) must not mix into a third run
            raise ValueError(f"resume={cfg.resume}: this run's folder {self.run_dir} already holds checkpoints "
                             f"of its own; pass resume=latest to continue it, or another run_name / "
                             f"checkpoint_path to start a new branch from {ckpt}")

        def check_resumable(saved_config: dict, saved_data: dict | None) -> None:
            check_same_arch(saved_config, cfg, ckpt)
            check_same_data(saved_config, saved_data, cfg, self.data_identity, ckpt)
        state = load_checkpoint(ckpt, model=self.model, optimizers=self._build_optimizers, info=info,
                                check_config=check_resumable)
        self.step, self.carry = state["step"], state["carry"]
        if state["world_size"] != info.world_size:
            # the saved random states are another world's ranks' (not restored): seed each rank as
            # a fresh run does, or every rank would draw the same exploration (model init's leftover)
            torch.manual_seed(cfg.seed + info.rank)
        if continues_its_run(cfg.run_name, self.run_dir, ckpt) and state["run_name"]:
            # a run continued without run_name (checkpoint_path=, or resume=<its folder>) keeps the
            # name it started with, not a new `<arch>-<now>` (W&B's name for it; its id, for a
            # checkpoint that predates the recorded one)
            self.run_name = state["run_name"]
        if ckpt.parent.resolve() == self.run_dir.resolve():
            # the run's own checkpoint (resume=latest or auto, its folder or a step of it, a requeue):
            # its log and W&B run go on; a checkpoint that predates the recorded id keeps the id of the
            # name it started with (this start may give another run_name)
            self.wandb_id = state["wandb_id"] or wandb_run_id(state["run_name"] or self.run_name)
            self.continues_own_run = True
            # resume=latest, its folder or that step named: the save resumed is the run's newest,
            # which the end need not write again; an older step continued is saved anew, so that
            # `latest` names where the run now stands
            self.resumed_newest = ckpt.resolve() == resolve_resume("latest", self.run_dir).resolve()
        # torch's load_state_dict brings back the saved groups' settings too; this run's config
        # says what they are now (the lr comes from the schedule at every step)
        settings = {"dense": dict(betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay),
                    "puzzle_emb": dict(weight_decay=cfg.puzzle_emb_weight_decay)}
        for name, opt in self.optimizers.items():
            for group in opt.param_groups:
                group.update(settings[name])
        self.reader.load_state_dict(state["reader"])
        saved = state["evaluated_iterations"]
        self.evaluated_iterations = self.reader.iteration if saved is None else saved
        self.final_evaluation_pending = state["final_evaluation_pending"]
        return ckpt

    def _check_fresh_folder(self) -> None:
        """A fresh run never mixes into an old one's checkpoints and log."""
        self._hold_run_folder()
        existing = list_checkpoints(self.run_dir)
        if existing:
            raise ValueError(f"{self.run_dir} already holds checkpoints ({existing[-1].name}); pass resume=latest "
                             f"to continue that run, or choose another run_name / checkpoint_path")
        # exploration draws differ per rank, as rows do (HRM seeds seed + rank)
        torch.manual_seed(self.config.seed + self.info.rank)

    def _note_decay_cut_short(self) -> None:
        """The cosine decay spans the run's estimated length, not max_steps (a run continued with a
        larger max_steps keeps its schedule): `lr_min_ratio=0.1 max_steps=300` on a build whose
        epochs last longer stopped part way down the cosine, far above lr * lr_min_ratio, unsaid."""
        cfg, last = self.config, self.stop_step
        if cfg.lr_min_ratio >= 1 or not self.step < last < self.total_steps or last <= cfg.lr_warmup_steps:
            return
        reached = lr_at(last, cfg.lr, cfg.lr_warmup_steps, self.total_steps, cfg.lr_min_ratio)
        print(f"note: lr_min_ratio={cfg.lr_min_ratio:g}: the cosine decay spans the run's estimated length "
              f"({self.total_steps} steps from epochs={cfg.epochs}), not max_steps={cfg.max_steps}: lr={cfg.lr:g} "
              f"reaches {reached:.3g} at step {last}, not {cfg.lr * cfg.lr_min_ratio:.3g}; lower epochs for a decay "
              f"that ends with the run", file=sys.stderr, flush=True)

    def _note_decay_ended_early(self) -> None:
        """Rank 0, at the run's end: its epochs drew fewer batches than HRM's estimate of the run's
        length (one random puzzle of each group per epoch; the estimate goes by the mean), so a
        cosine decay spanning that estimate stopped part way down, above lr * lr_min_ratio. Known
        only now: how many batches an epoch draws is random."""
        cfg, end = self.config, self.step
        if (not self.info.is_main or cfg.lr_min_ratio >= 1 or self.reader.iteration < self.total_iterations
                or not cfg.lr_warmup_steps < end < self.stop_step):
            return
        reached = lr_at(end, cfg.lr, cfg.lr_warmup_steps, self.total_steps, cfg.lr_min_ratio)
        print(f"note: lr_min_ratio={cfg.lr_min_ratio:g}: the epochs' batches ran out at step {end}, before the "
              f"{self.total_steps} steps the cosine decay spans (the estimated length, from epochs={cfg.epochs}): "
              f"lr={cfg.lr:g} ended at {reached:.3g}, not {cfg.lr * cfg.lr_min_ratio:.3g}", file=sys.stderr, flush=True)

    def _tell_start(self, resumed_from: Path | None) -> None:
        """Rank 0, once every rank's checks have passed (nothing is said or moved for a refused
        start): a useless test split, where the run resumes, an earlier divergence archived (a
        fresh start where an earlier attempt diverged before any checkpoint, or a resumed one), the
        unfinished saves of a run killed while saving removed."""
        print(describe_scaling(self.model.scaling), flush=True)
        if self.test_split.num_examples == 0:
            print(f"warning: {self.config.data_path} has an empty test split (its sources had no `evaluation` "
                  f"subset), so the evaluations measure nothing", file=sys.stderr, flush=True)
        # HRM's warmup of 2000 steps in a short run (max_steps=300) trains at a fraction of lr
        # throughout: step k uses lr * k / warmup (lr_at), so the run never reaches the lr it names
        warmup, last = self.config.lr_warmup_steps, self.stop_step
        if warmup > last > self.step:
            puzzle = " and puzzle_emb_lr" if self.config.arch.puzzle_emb_ndim > 0 else ""
            print(f"warning: lr_warmup_steps={warmup} is longer than the run ({last} steps): the learning rates "
                  f"rise only to {last}/{warmup} of lr{puzzle} (lr={self.config.lr:g} reaches "
                  f"{lr_at(last, self.config.lr, warmup, self.total_steps, self.config.lr_min_ratio):.3g} at its last "
                  f"step); lower lr_warmup_steps to train at lr", file=sys.stderr, flush=True)
        self._note_decay_cut_short()
        # max_steps only shortens a run: one given beyond the epochs' length (to train longer on a
        # small build) ended at the epochs' end, its reason unsaid
        if self.config.max_steps is not None and self.config.max_steps > self.total_steps > self.step:
            meta = self.train_split.metadata
            per_epoch = meta.total_groups * meta.mean_puzzle_examples / self.config.global_batch_size
            print(f"note: max_steps={self.config.max_steps} is beyond the run's epochs: epochs={self.config.epochs} "
                  f"end it at about step {self.total_steps} (an epoch: {meta.total_groups} puzzle groups x "
                  f"{meta.mean_puzzle_examples:g} mean examples per puzzle / global_batch_size="
                  f"{self.config.global_batch_size} = {per_epoch:.3g} steps); raise epochs to train longer",
                  file=sys.stderr, flush=True)
        # A save killed between its renames is the newest checkpoint (it may be the one resumed,
        # which every rank has loaded by now): put in place, never removed with the leftovers
        finished = finish_unrenamed_saves(self.run_dir)
        for tmp, final in finished.items():
            print(f"renamed {tmp.name} to {final.name} in {self.run_dir}: a save of step {checkpoint_step(final)} "
                  f"that a killed run left complete but not in place", flush=True)
        if resumed_from is not None:
            branch = "" if resumed_from.parent.resolve() == self.run_dir.resolve() else f", writing to {self.run_dir}"
            print(f"resumed from {finished.get(resumed_from, resumed_from)} at step {self.step}{branch}", flush=True)
        self._archive_divergence()
        leftovers = remove_unfinished_saves(self.run_dir)
        if leftovers:
            print(f"removed {', '.join(leftovers)} from {self.run_dir}: left by a save or a pruning that did not "
                  f"finish", flush=True)

    def _keep_earlier_log(self) -> None:
        """A run that starts its log afresh in a folder holding an earlier start's log (one that
        crashed or diverged before its first checkpoint, so nothing resumes it; its log is then the
        only record of why): that log and its config are renamed to log.earlier-<k>.jsonl and
        all_config.earlier-<k>.yaml, k the first number free, rather than overwritten. Rank 0,
        holding the folder."""
        log = self.run_dir / "log.jsonl"
        if not log.is_file() or log.stat().st_size == 0:   # nothing recorded: nothing to keep
            return
        k = 1
        while any((self.run_dir / f"{name}.earlier-{k}.{ext}").exists() for name, ext in (("log", "jsonl"),
                                                                                            ("all_config", "yaml"))):
            k += 1
        kept = [f"log.earlier-{k}.jsonl"]
        log.rename(self.run_dir / kept[0])   # the log first: the record that matters most
        config = self.run_dir / "all_config.yaml"
        if config.is_file():
            config.rename(self.run_dir / f"all_config.earlier-{k}.yaml")
            kept.append(f"all_config.earlier-{k}.yaml")
        print(f"{self.run_dir} holds the log of an earlier start with no checkpoint to continue: kept as "
              f"{' and '.join(kept)}; this run writes a new log.jsonl", flush=True)

    # ------------------------------------------------------------------------------------ steps
    def train_step(self, batch: dict) -> dict:
        cfg, info = self.config, self.info
        batch = to_device(batch, info.device)
        if self.carry is None:
            self.carry = self.loss_head.initial_carry(batch)
        # Gradient accumulation: the rank's rows in grad_accum_steps contiguous micro-batches, each
        # with its slice of the carry; gradients (dense and puzzle rows) add up, then one update.
        # Micro-batch j of rank r holds exactly the rows rank r*k + j of a k-times larger world
        # would, so the update is that of world_size * grad_accum_steps ranks.
        parts = cfg.grad_accum_steps
        micro = batch["inputs"].shape[0] // parts
        carries, loss, metrics = [], 0.0, {}
        puzzle = getattr(self.model, "puzzle_embedding", None)
        for j in range(parts):
            rows = slice(j * micro, (j + 1) * micro)
            if puzzle is not None:
                puzzle.prepare_lookup(micro)  # its gradient leaf, made outside the compiled step
            part_carry, part_loss, part_metrics, _, _ = self.step_fn(
                self.carry.rows(rows), {k: v[rows] for k, v in batch.items()})
            (part_loss / cfg.global_batch_size).backward()
            carries.append(part_carry)
            # summed in float64, as the all-reduce over ranks sums them: the log of 2 micro-batches is
            # then that of 2 ranks bit for bit, as the weights are (float32 sums round otherwise)
            loss = loss + part_loss.detach().double()
            metrics = {k: metrics.get(k, 0.0) + v.double() for k, v in part_metrics.items()}
        self.carry = Carry.concat(carries)
        all_reduce_grads_(self.model.parameters(), info)
        # The global gradient norm (logged, and checked for divergence); with grad_clip null the
        # infinite bound scales by exactly 1. (clip_grad_norm_ rather than get_total_norm: torch 2.4.)
        max_norm = cfg.grad_clip if cfg.grad_clip is not None else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

        keys = sorted(metrics)
        # a SIGTERM on any rank stops every rank after this step
        reduced = torch.stack([loss.detach().double()] + [metrics[k].double() for k in keys]
                              + [self._sigterm_flag(loss.device)])
        values = all_reduce_sum_(reduced, info).tolist()  # the step's host sync (sign-SGD's unique adds one
                                                          # more, after the queue has drained)
        self.stop_after_step = values.pop() > 0
        grad_norm = float(grad_norm)
        loss_value = values[0] / cfg.global_batch_size
        if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
            self._diverged(loss_value, grad_norm)
        self.last_loss_and_grad_norm = (loss_value, grad_norm)

        self.step += 1
        lrs = {}
        for name, opt in self.optimizers.items():
            lrs[name] = lr_at(self.step, self.base_lrs[name], cfg.lr_warmup_steps, self.total_steps, cfg.lr_min_ratio)
            for group in opt.param_groups:
                group["lr"] = lrs[name]
            opt.step()
            opt.zero_grad(set_to_none=True)

        named = dict(zip(keys, values[1:]))
        count = max(named.pop("count"), 1.0)
        # losses per example of the global batch, the rest per halted row (as HRM logs them)
        record = {f"train/{k}": v / (cfg.global_batch_size if k.endswith("loss") else count) for k, v in named.items()}
        record.update({"train/loss": loss_value, "train/grad_norm": grad_norm, "train/lr": lrs["dense"]})
        if "puzzle_emb" in lrs:   # the puzzle rows' sign-SGD: its own base lr (puzzle_emb_lr), same schedule
            record["train/puzzle_emb_lr"] = lrs["puzzle_emb"]
        return record

    def _archive_divergence(self) -> None:
        """A run resumed after diverging (say with a lower lr) is no longer diverged: its
        diverged.json (which scripts/run_status.py and the p-sweep read) becomes diverged.<step>.json."""
        marker = self.run_dir / "diverged.json"
        if marker.is_file():
            try:
                step = int(json.loads(marker.read_text())["step"])
            except (ValueError, KeyError, TypeError):
                step = self.step
            marker.rename(self.run_dir / f"diverged.{step}.json")
            print(f"this run diverged at step {step} before; its record is now diverged.{step}.json", flush=True)

    def _diverged(self, loss: float, grad_norm: float, reason: str | None = None, step: int | None = None) -> None:
        step = self.step + 1 if step is None else step
        reason = reason or (f"non-finite {'loss' if not math.isfinite(loss) else 'gradient norm'} at step {step} "
                            f"(loss {loss}, grad norm {grad_norm})")
        if self.info.is_main:
            marker = self.run_dir / "diverged.json"
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                marker.write_text(json.dumps({"step": step, "loss": str(loss), "grad_norm": str(grad_norm),
                                              "reason": reason}) + "\n")
            except OSError as e:   # rank 0 alone: raised, it would replace the divergence every rank stops on
                with contextlib.suppress(OSError):
                    marker.unlink(missing_ok=True)   # a cut-short record would read as a damaged one
                print(f"warning: cannot write {marker} ({e.strerror or e}), the record of this divergence that "
                      f"scripts/run_status.py and p_sweep.py read", file=sys.stderr, flush=True)
            self.log.log({"diverged": 1}, step=step)
        kept = list_checkpoints(self.run_dir)
        raise TrainingDiverged(f"training diverged: {reason}; " + (
            f"the last good checkpoint, {kept[-1]}, is untouched" if kept else
            f"no checkpoint was written before it ({self.run_dir})"))

    def alignment_record(self, batch: dict) -> dict:
        """Visit alignment (hrm/diagnostics.py) on the first `diagnostics_rows` rows of this rank's
        batch and the current carry, with the weights just updated; nothing in the training state
        changes (weights, grads, carry, puzzle rows, random streams), so a run with diagnostics
        trains exactly as one without. Always the eager model: it needs the hooks."""
        report = visit_alignment(self.loss_head, to_device(batch, self.info.device), carry=self.carry,
                                 max_rows=self.config.diagnostics_rows)
        summary = report.pop("summary")
        record = {"alignment/mean": summary["mean_alignment"], "alignment/min": summary["min_alignment"],
                  "alignment_cosine/mean": summary["mean_cosine"]}
        for name, r in report.items():
            record[f"alignment/{name}"] = r["alignment"]
            record[f"alignment_cosine/{name}"] = r["mean_cosine"]
        return record

    def log_alignment(self, batch: dict) -> None:
        """Rank 0: log alignment_record, or, when it fails (out of memory on its full-graph step,
        whose memory grows with diagnostics_rows), warn once and train on without diagnostics. It
        runs between the step's collectives on rank 0 alone: raised, it stopped rank 0 alone, while
        the other ranks waited in the next all-reduce; and it is a metric, not worth the run. Not
        tried again: it would fail alike at every interval, at the cost of a full-graph step."""
        if self.diagnostics_failed:
            return
        try:
            record = self.alignment_record(batch)
        except Exception as e:
            self.diagnostics_failed = True
            print(f"warning: the visit-alignment diagnostics failed at step {self.step} ({error_text(e)}); "
                  f"training goes on without them for the rest of this run (a smaller diagnostics_rows needs "
                  f"less memory)", file=sys.stderr, flush=True)
            return
        self.log.log(record, step=self.step)

    # ------------------------------------------------------------------------- eval, checkpoints
    def run_evaluation(self) -> dict:
        cfg, info = self.config, self.info
        batches = EvalBatches(self.test_split, global_batch_size=cfg.eval_batch_size or cfg.global_batch_size,
                              rank=info.rank, world_size=info.world_size)
        # under fit, a SIGTERM stops the pass after the batch it comes in (EvaluationStopped); one
        # process reads its flag without a device sync
        stop = None
        if self.sigterm is not None:
            stop = self.sigterm_on_any_rank if info.world_size > 1 else (lambda: self.sigterm.requested)
        metrics, arrays = evaluate(self.loss_head, batches, info, keep_predictions=cfg.eval_save_predictions,
                                   progress=self.progress, segment=self.eval_segment, stop=stop)
        self.evaluated_iterations = self.reader.iteration
        self.final_evaluation_pending = False
        if arrays is not None:
            folder = write_predictions(self.run_dir / "predictions" / f"step_{self.step}", arrays, info,
                                       data_path=cfg.data_path, step=self.step, checkpoint=None)
            if info.is_main and metrics and cfg.eval_pass_k:
                metrics = {**metrics, **self.pass_at_k(folder)}
        if info.is_main and metrics:
            self.log.log({f"eval/{k}": v for k, v in metrics.items()}, step=self.step)
            shown = ", ".join(f"{k} {metrics[k]:.4f}" for k in ("exact_accuracy", "accuracy", "lm_loss", "pass@1", "pass@2")
                              if k in metrics)
            print(f"eval at step {self.step}: {shown}", flush=True)
        return metrics

    def pass_at_k(self, folder: Path) -> dict:
        """pass@K of this evaluation's predictions (rank 0; seconds even for a full build). A build
        that voting cannot score (no test tasks) logs none, and any voting error (a damaged or
        unreadable predictions file, memory short) is a warning, never fatal to the run: it runs on
        rank 0 alone between collectives, where an error stopped rank 0 alone while the others
        waited for it, and pass@K is a metric that evaluate/vote.py can compute later. The
        evaluation's other metrics are logged either way."""
        from evaluate.build_reader import load_test_split
        from evaluate.errors import EvaluationInputError
        if self._vote_split is None:
            try:
                self._vote_split = load_test_split(Path(self.config.data_path))
            except EvaluationInputError as e:   # the build: said once, not re-read at every evaluation
                print(f"warning: no pass@K in this run: voting cannot read the build: {e}", flush=True)
                self._vote_split = False
            except Exception as e:   # an I/O error or memory short may pass: read again next time
                print(f"warning: no pass@K for {folder}: cannot read the build's test tasks ({error_text(e)})",
                      flush=True)
                return {}
        if not self._vote_split or not self._vote_split.tasks:
            return {}
        try:
            return score_predictions(folder, self._vote_split, self.config.eval_pass_k)
        except EvaluationInputError as e:
            print(f"warning: no pass@K for {folder}: {e}", flush=True)
            return {}
        except Exception as e:
            print(f"warning: no pass@K for {folder} ({error_text(e)}); training goes on, and "
                  f"`python evaluate/vote.py --predictions {folder}` can score it later", flush=True)
            return {}

    def _check_weights_finite(self) -> None:
        """Before a save: an update can overflow the weights while the step's loss and gradient were
        finite (an lr far too large), and the checkpoint would then be "the last good" one a
        divergence names and a resume continues from. Collective: each rank checks its own copy and
        the outcome is summed, so every rank stops at the same save; one host sync per save."""
        bad = torch.zeros((), dtype=torch.float64, device=self.info.device)
        for tensor in self.model.state_dict().values():
            if tensor.is_floating_point():
                bad += (~torch.isfinite(tensor)).any().double()
        if all_reduce_sum_(bad, self.info).item() > 0:
            self._diverged(*self.last_loss_and_grad_norm, step=self.step,
                           reason=f"non-finite weights after the update of step {self.step} (its loss and gradient "
                                  f"were finite: an update too large for float32, lr={self.config.lr:g})")

    def save(self) -> Path:
        self._check_weights_finite()
        return save_checkpoint(self.run_dir, step=self.step, model=self.model, optimizers=self.optimizers,
                               reader_state=self.reader.state_dict(), carry=self.carry,
                               config=self.resolved_config, info=self.info,
                               keep=self.config.keep_checkpoints, evaluated_iterations=self.evaluated_iterations,
                               final_evaluation_pending=self.final_evaluation_pending, data=self.data_identity,
                               run_name=self.run_name, wandb_id=self.wandb_id)

    # ------------------------------------------------------------------------------------- loop
    def fit(self) -> dict:
        bar = progress_bar(total=self.stop_step, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (self.progress and self.info.is_main))
        self.loss_head.train()
        started, first_step = time.perf_counter(), self.step
        try:
            with StopOnSigterm() as self.sigterm:
                last_eval = self._train(bar)
        finally:
            self.sigterm = None
            bar.close()
            try:
                if self.log is not None:
                    self.log.close()
            finally:    # even when closing the log (W&B) fails
                self.release_run_lock()
        seconds = time.perf_counter() - started
        return {"step": self.step, "eval": last_eval, "seconds": seconds, "steps_run": self.step - first_step,
                "steps_per_second": (self.step - first_step) / seconds if seconds > 0 else 0.0,
                "sigterm": self.sigterm_at_end}

    def _train(self, bar) -> dict:
        """The loop: steps, evaluations and checkpoints until the run's end, or until a SIGTERM
        stops it after a step or an evaluation's batch (saved, then TrainingStopped). Returns the
        last evaluation's metrics."""
        cfg, info = self.config, self.info
        last_eval: dict = {}
        evaluated_at = None           # the step of the last evaluation (the same on every rank)
        if 0 < self.evaluated_iterations == self.reader.iteration and self.reader.batch_in_iteration == 0:
            # resumed at an iteration's start, its previous iteration evaluated: no step since, so
            # the model is the one evaluated then, in the run before (an empty iteration next
            # must not evaluate it again)
            evaluated_at = self.step
        saved_at = self.saved_step    # the step whose checkpoint holds the state as it is now

        def evaluation() -> dict:
            nonlocal saved_at
            try:
                metrics = self.run_evaluation()
            except EvaluationStopped:   # SIGTERM: this step is saved with its evaluation still to run
                self.stop_for_sigterm(saved_at)
            if saved_at == self.step:
                # that save (checkpoint_interval's) recorded this evaluation as still to run: it no
                # longer is, so the run's end saves again rather than leave a finished run that a
                # resume would evaluate a second time
                saved_at = None
            return metrics

        if self.evaluated_iterations < self.reader.iteration or (self.final_evaluation_pending
                                                                 and self.step >= self.stop_step):
            # resumed from a checkpoint taken on an iteration's last batch, or a SIGTERM's on the
            # run's last step or during an evaluation, before that evaluation: run it now, where
            # the uninterrupted run did
            last_eval = evaluation()
            evaluated_at = self.step
            if cfg.checkpoint_every_eval:
                self.save()
                saved_at = self.step
        while self.reader.iteration < self.total_iterations and self.step < self.stop_step:
            trained = False
            for batch in self.reader.iteration_batches():
                trained = True
                record = self.train_step(batch)
                # the run's last step: by max_steps (or the estimated total), or by its epochs when
                # they draw fewer batches than estimated (the reader has then moved past the last
                # iteration's last batch)
                last_step = self.step >= self.stop_step or self.reader.iteration >= self.total_iterations
                if info.is_main:
                    self.history.append((self.step, record["train/loss"]))
                    if self.step % cfg.log_interval == 0 or last_step:
                        self.log.log(record, step=self.step)
                        bar.set_postfix(loss=f"{record['train/loss']:.4f}", refresh=False)
                    bar.update(1)
                    if cfg.diagnostics_interval and self.step % cfg.diagnostics_interval == 0:
                        self.log_alignment(batch)
                if cfg.checkpoint_interval and self.step % cfg.checkpoint_interval == 0:
                    # the run's last step saved before its evaluation: one resumed from it (after a
                    # SIGKILL during that evaluation) runs it
                    self.final_evaluation_pending = self.step >= self.stop_step
                    self.save()
                    saved_at = self.step
                if self.stop_after_step:
                    # on an iteration's or the run's last batch too, before the evaluation (the whole
                    # test split can outlast the scheduler's grace period): resuming runs it
                    self.stop_for_sigterm(saved_at)
                if self.step >= self.stop_step:
                    break
            if not trained and evaluated_at == self.step:
                # an iteration that drew no full batch (one random puzzle per group fell short of a
                # global batch, where check_some_steps goes by the mean): the model evaluated at
                # this step already, unchanged; the same evaluation again would be logged twice
                self.evaluated_iterations = self.reader.iteration
                saved_at = None      # the reader's position moved on: a save at the run's end keeps it
                continue
            last_eval = evaluation()
            evaluated_at = self.step
            if cfg.checkpoint_every_eval:
                self.save()
                saved_at = self.step
        if saved_at != self.step:  # the end of a run is always resumable and predictable
            self.save()
        self._note_decay_ended_early()
        # a SIGTERM during the last batch of the last evaluation, or the last save: the run is
        # complete, but a sweep must not start its next job (pretrain.py reads this); agreed, as
        # every rank decides that alike
        self.sigterm_at_end = self.sigterm_on_any_rank()
        return last_eval

    def stop_for_sigterm(self, saved_at: int | None) -> None:
        """Save this step (unless `saved_at` it already is) and raise TrainingStopped: after a step,
        or during an evaluation, which resuming runs again (evaluated_iterations is not advanced;
        on the run's last step, final_evaluation_pending says so)."""
        self.final_evaluation_pending = self.step >= self.stop_step
        saved = self.save() if saved_at != self.step else self.run_dir / f"step_{self.step}"
        if self.info.is_main:    # for scripts/run_status.py: a stopped run, not one still going
            self.log.log({"stopped": 1}, step=self.step)
        raise TrainingStopped(self.step, saved, self.run_dir)

    def sigterm_on_any_rank(self) -> bool:
        """Whether fit's SIGTERM handler was called on some rank (collective)."""
        return all_reduce_sum_(self._sigterm_flag(self.info.device), self.info).item() > 0

    def _sigterm_flag(self, device: torch.device) -> torch.Tensor:
        """1.0 when fit's SIGTERM handler was called on this rank, else 0.0, as a float64 scalar on
        `device` for summing over ranks (torch.full: a fill, not a host-to-device copy)."""
        return torch.full((), float(self.sigterm is not None and self.sigterm.requested), dtype=torch.float64,
                          device=device)
